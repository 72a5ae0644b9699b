// TlsContext and TlsStream (tls.h): OpenSSL 3 through one table of entry points filled by dlopen.
#include "exporter/tls.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "common/memory.h"

namespace kgpu::exporter {
namespace {

// Every OpenSSL function used, once. Only these are called, through the table: nothing from the
// headers that is a macro or an inline function calling into OpenSSL (the binary does not link it).
#define KGPU_OPENSSL_FUNCTIONS(X) \
    X(OPENSSL_init_ssl)           \
    X(TLS_server_method)          \
    X(TLS_client_method)          \
    X(SSL_connect)                \
    X(SSL_ctrl)                   \
    X(SSL_set1_host)              \
    X(SSL_get0_param)             \
    X(X509_VERIFY_PARAM_set1_ip_asc) \
    X(SSL_CTX_new)                \
    X(SSL_CTX_free)               \
    X(SSL_CTX_ctrl)               \
    X(SSL_CTX_set_options)        \
    X(SSL_CTX_use_certificate)    \
    X(SSL_CTX_use_PrivateKey)     \
    X(SSL_CTX_check_private_key)  \
    X(SSL_CTX_set_verify)         \
    X(SSL_CTX_get_cert_store)     \
    X(SSL_CTX_add_client_CA)      \
    X(SSL_CTX_set_cipher_list)    \
    X(SSL_new)                    \
    X(SSL_free)                   \
    X(SSL_set_fd)                 \
    X(SSL_accept)                 \
    X(SSL_read_ex)                \
    X(SSL_write_ex)               \
    X(SSL_get_error)              \
    X(SSL_shutdown)               \
    X(SSL_get1_peer_certificate)  \
    X(SSL_get_verify_result)      \
    X(ERR_get_error)              \
    X(ERR_error_string_n)         \
    X(ERR_clear_error)            \
    X(BIO_new_mem_buf)            \
    X(BIO_free)                   \
    X(PEM_read_bio_X509)          \
    X(PEM_read_bio_PrivateKey)    \
    X(X509_free)                  \
    X(EVP_PKEY_free)              \
    X(X509_STORE_add_cert)        \
    X(X509_get_ext_d2i)           \
    X(GENERAL_NAMES_free)         \
    X(OPENSSL_sk_num)             \
    X(OPENSSL_sk_value)           \
    X(ASN1_STRING_get0_data)      \
    X(ASN1_STRING_length)         \
    X(X509_verify_cert_error_string)

struct OpenSsl {
#define KGPU_DECLARE(name) decltype(&::name) name = nullptr;
    KGPU_OPENSSL_FUNCTIONS(KGPU_DECLARE)
#undef KGPU_DECLARE
};

std::atomic<bool> g_loaded{false};  // openssl() succeeded

// Loads libssl.so.3 (and through it libcrypto.so.3) once per process. The handle is kept for the
// process's life: sessions may outlive any one context.
Result<const OpenSsl*> openssl() {
    static std::once_flag once;
    static OpenSsl table;
    static std::string error;
    std::call_once(once, [] {
        void* h = ::dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            error = fmt::format("TLS needs OpenSSL 3: libssl.so.3 (Debian package libssl3) does not load: {}",
                                ::dlerror());
            return;
        }
        std::vector<std::string> missing;
#define KGPU_RESOLVE(name)                                                    \
    table.name = reinterpret_cast<decltype(table.name)>(::dlsym(h, #name)); \
    if (!table.name) missing.emplace_back(#name);
        KGPU_OPENSSL_FUNCTIONS(KGPU_RESOLVE)
#undef KGPU_RESOLVE
        if (!missing.empty()) {
            error = fmt::format("libssl.so.3 lacks {}: is it OpenSSL 3?", fmt::join(missing, ", "));
            return;
        }
        table.OPENSSL_init_ssl(0, nullptr);
        g_loaded = true;
    });
    if (!error.empty()) return fail(Code::not_found, "{}", error);
    return &table;
}

const OpenSsl& ssl() { return **openssl(); }  // only after openssl() succeeded

// OpenSSL's error queue as one line (and emptied).
std::string ssl_errors() {
    std::string out;
    char buf[256];
    for (unsigned long e; (e = ssl().ERR_get_error()) != 0;) {
        ssl().ERR_error_string_n(e, buf, sizeof buf);
        if (!out.empty()) out += "; ";
        out += buf;
    }
    return out.empty() ? "no reason given" : out;
}

struct Bio {
    BIO* b;
    explicit Bio(const std::string& pem) : b(ssl().BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))) {}
    ~Bio() {
        if (b) ssl().BIO_free(b);
    }
};

// Every certificate in a PEM text, in order.
std::vector<X509*> certificates(const std::string& pem) {
    std::vector<X509*> out;
    Bio bio(pem);
    if (!bio.b) return out;
    while (X509* x = ssl().PEM_read_bio_X509(bio.b, nullptr, nullptr, nullptr)) out.push_back(x);
    ssl().ERR_clear_error();  // the end of the text reads as "no start line"
    return out;
}

int accept_any_certificate(int, X509_STORE_CTX*) { return 1; }

std::string where(const std::string& file, std::string_view inline_key) {
    return file.empty() ? fmt::format("tls_server_config.{}", inline_key) : file;
}

// The SAN values of a certificate as Go's VerifyPeerCertificate in the toolkit lists them: DNS
// names, e-mail addresses, IP addresses (in Go's text form) and URIs.
std::vector<std::string> subject_alt_names(X509* cert) {
    std::vector<std::string> out;
    auto* names = static_cast<GENERAL_NAMES*>(ssl().X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
    if (!names) return out;
    const auto* stack = reinterpret_cast<const OPENSSL_STACK*>(names);
    const int n = ssl().OPENSSL_sk_num(stack);
    for (int i = 0; i < n; ++i) {
        const auto* g = static_cast<const GENERAL_NAME*>(ssl().OPENSSL_sk_value(stack, i));
        if (!g) continue;
        const ASN1_STRING* s = nullptr;
        if (g->type == GEN_DNS || g->type == GEN_EMAIL || g->type == GEN_URI || g->type == GEN_IPADD) s = g->d.ia5;
        if (!s) continue;
        const auto* data = ssl().ASN1_STRING_get0_data(s);
        const int len = ssl().ASN1_STRING_length(s);
        if (!data || len < 0) continue;
        if (g->type == GEN_IPADD) {
            char text[INET6_ADDRSTRLEN] = {};
            if (len == 4) ::inet_ntop(AF_INET, data, text, sizeof text);
            else if (len == 16) ::inet_ntop(AF_INET6, data, text, sizeof text);
            if (text[0]) out.emplace_back(text);
        } else {
            out.emplace_back(reinterpret_cast<const char*>(data), static_cast<std::size_t>(len));
        }
    }
    ssl().GENERAL_NAMES_free(names);
    return out;
}

}  // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::create(const TlsServerConfig& config) {
    auto lib = openssl();
    if (!lib) return std::unexpected(lib.error());
    const OpenSsl& f = **lib;
    std::shared_ptr<TlsContext> out(new TlsContext());
    out->config_ = std::make_shared<const TlsServerConfig>(config);
    auto* ctx = f.SSL_CTX_new(f.TLS_server_method());
    if (!ctx) return fail(Code::internal, "TLS: SSL_CTX_new: {}", ssl_errors());
    out->ctx_ = ctx;

    // Certificate chain and key, from memory (the toolkit reads the files itself too).
    auto chain = certificates(config.cert_pem);
    if (chain.empty())
        return fail(Code::parse, "TLS: {}: no PEM certificate in it", where(config.cert_file, "cert"));
    bool ok = f.SSL_CTX_use_certificate(ctx, chain[0]) == 1;
    f.X509_free(chain[0]);
    for (std::size_t i = 1; i < chain.size(); ++i)
        if (f.SSL_CTX_ctrl(ctx, SSL_CTRL_CHAIN_CERT, 0, chain[i]) != 1) f.X509_free(chain[i]);  // add0: owned on success
    if (!ok) return fail(Code::parse, "TLS: {}: the certificate does not load: {}", where(config.cert_file, "cert"), ssl_errors());
    {
        Bio bio(config.key_pem);
        EVP_PKEY* key = bio.b ? f.PEM_read_bio_PrivateKey(bio.b, nullptr, nullptr, nullptr) : nullptr;
        if (!key) return fail(Code::parse, "TLS: {}: no PEM private key in it: {}", where(config.key_file, "key"), ssl_errors());
        ok = f.SSL_CTX_use_PrivateKey(ctx, key) == 1;
        f.EVP_PKEY_free(key);
        if (!ok)
            return fail(Code::parse, "TLS: {}: the key does not load or does not match the certificate ({}): {}",
                        where(config.key_file, "key"), where(config.cert_file, "cert"), ssl_errors());
    }
    if (f.SSL_CTX_check_private_key(ctx) != 1)
        return fail(Code::parse, "TLS: the key ({}) does not match the certificate ({}): {}", where(config.key_file, "key"),
                    where(config.cert_file, "cert"), ssl_errors());

    f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, config.min_version, nullptr);
    f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, config.max_version, nullptr);
    // Partial writes and a buffer that moves between retries: the server writes from its own
    // queue, non-blocking. Idle connections give their buffers back.
    f.SSL_CTX_ctrl(ctx, SSL_CTRL_MODE,
                   SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS, nullptr);
    f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_SESS_CACHE_MODE, SSL_SESS_CACHE_OFF, nullptr);
    std::uint64_t options = SSL_OP_NO_RENEGOTIATION;
    if (config.prefer_server_cipher_suites) options |= SSL_OP_CIPHER_SERVER_PREFERENCE;
    f.SSL_CTX_set_options(ctx, options);
    if (!config.cipher_suites.empty()) {
        const std::string list = fmt::format("{}", fmt::join(config.cipher_suites, ":"));
        if (f.SSL_CTX_set_cipher_list(ctx, list.c_str()) != 1)
            return fail(Code::parse, "TLS: cipher_suites: OpenSSL accepts none of {}: {}", list, ssl_errors());
    }
    if (!config.curves.empty()) {
        std::string list = fmt::format("{}", fmt::join(config.curves, ":"));
        if (f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_GROUPS_LIST, 0, list.data()) != 1)
            return fail(Code::parse, "TLS: curve_preferences: OpenSSL refuses {}: {}", list, ssl_errors());
    }

    if (!config.client_ca_pem.empty()) {
        auto cas = certificates(config.client_ca_pem);
        if (cas.empty())
            return fail(Code::parse, "TLS: {}: no PEM certificate in it", where(config.client_ca_file, "client_ca"));
        X509_STORE* store = f.SSL_CTX_get_cert_store(ctx);
        for (X509* ca : cas) {
            f.X509_STORE_add_cert(store, ca);  // takes its own reference
            f.SSL_CTX_add_client_CA(ctx, ca);  // copies the subject
            f.X509_free(ca);
        }
    }
    switch (config.client_auth) {
    case ClientAuth::none: f.SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr); break;
    case ClientAuth::request: f.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, &accept_any_certificate); break;
    case ClientAuth::require_any:
        f.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, &accept_any_certificate);
        break;
    case ClientAuth::verify_if_given: f.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr); break;
    case ClientAuth::require_and_verify:
        f.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
        break;
    }
    return out;
}

TlsContext::~TlsContext() {
    if (ctx_) ssl().SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
}

std::unique_ptr<TlsStream> TlsContext::accept(int fd) const {
    std::unique_ptr<TlsStream> s(new TlsStream());
    s->config_ = config_;
    SSL* session = ssl().SSL_new(static_cast<SSL_CTX*>(ctx_));
    if (!session) return nullptr;
    s->ssl_ = session;
    if (ssl().SSL_set_fd(session, fd) != 1) return nullptr;
    return s;
}

void tls_release_pages() {
    if (!g_loaded) return;
    memory::release_readonly_pages(false, {"/libssl.so.3", "/libcrypto.so.3"});
    memory::trim_heap();
}

Result<std::unique_ptr<TlsStream>> tls_connect(int fd, const TlsClientConfig& config) {
    auto lib = openssl();
    if (!lib) return std::unexpected(lib.error());
    const OpenSsl& f = **lib;
    f.ERR_clear_error();
    std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx(f.SSL_CTX_new(f.TLS_client_method()), f.SSL_CTX_free);
    if (!ctx) return fail(Code::internal, "TLS: SSL_CTX_new: {}", ssl_errors());
    f.SSL_CTX_ctrl(ctx.get(), SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
    if (!config.ca_pem.empty()) {
        auto cas = certificates(config.ca_pem);
        if (cas.empty()) return fail(Code::parse, "TLS: {}: no PEM certificate in it", config.ca_source);
        X509_STORE* store = f.SSL_CTX_get_cert_store(ctx.get());
        for (X509* ca : cas) {
            f.X509_STORE_add_cert(store, ca);
            f.X509_free(ca);
        }
    }
    if (!config.cert_pem.empty()) {
        auto chain = certificates(config.cert_pem);
        if (chain.empty()) return fail(Code::parse, "TLS: {}: no PEM certificate in it", config.cert_source);
        const bool ok = f.SSL_CTX_use_certificate(ctx.get(), chain[0]) == 1;
        for (X509* x : chain) f.X509_free(x);
        if (!ok) return fail(Code::parse, "TLS: {}: the certificate does not load: {}", config.cert_source, ssl_errors());
        Bio bio(config.key_pem);
        EVP_PKEY* key = bio.b ? f.PEM_read_bio_PrivateKey(bio.b, nullptr, nullptr, nullptr) : nullptr;
        if (!key) return fail(Code::parse, "TLS: {}: no PEM private key in it: {}", config.key_source, ssl_errors());
        const bool key_ok = f.SSL_CTX_use_PrivateKey(ctx.get(), key) == 1 && f.SSL_CTX_check_private_key(ctx.get()) == 1;
        f.EVP_PKEY_free(key);
        if (!key_ok)
            return fail(Code::parse, "TLS: the key ({}) does not match the certificate ({}): {}", config.key_source,
                        config.cert_source, ssl_errors());
    }
    f.SSL_CTX_set_verify(ctx.get(), config.insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);

    std::unique_ptr<TlsStream> s(new TlsStream());
    SSL* session = f.SSL_new(ctx.get());  // holds its own reference to the context
    if (!session) return fail(Code::internal, "TLS: SSL_new: {}", ssl_errors());
    s->ssl_ = session;
    if (f.SSL_set_fd(session, fd) != 1) return fail(Code::internal, "TLS: SSL_set_fd: {}", ssl_errors());
    if (!config.host.empty()) {
        in6_addr any{};
        const bool ip = ::inet_pton(AF_INET, config.host.c_str(), &any) == 1 || ::inet_pton(AF_INET6, config.host.c_str(), &any) == 1;
        if (ip) {
            if (!config.insecure && f.X509_VERIFY_PARAM_set1_ip_asc(f.SSL_get0_param(session), config.host.c_str()) != 1)
                return fail(Code::invalid_argument, "TLS: {}: not an IP address OpenSSL accepts", config.host);
        } else {
            f.SSL_ctrl(session, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, const_cast<char*>(config.host.c_str()));
            if (!config.insecure && f.SSL_set1_host(session, config.host.c_str()) != 1)
                return fail(Code::invalid_argument, "TLS: {}: not a host name OpenSSL accepts", config.host);
        }
    }
    const int r = f.SSL_connect(session);
    if (r != 1) {
        const long v = f.SSL_get_verify_result(session);
        std::string why = ssl_errors();
        if (v != X509_V_OK) why += fmt::format(" (server certificate: {})", f.X509_verify_cert_error_string(v));
        return fail(Code::unavailable, "TLS handshake with {}: {}", config.host, why);
    }
    return s;
}

TlsStream::~TlsStream() {
    if (ssl_) ssl().SSL_free(static_cast<SSL*>(ssl_));
}

TlsStream::Io TlsStream::result(int ret, const char* what) {
    const int e = ssl().SSL_get_error(static_cast<SSL*>(ssl_), ret);
    switch (e) {
    case SSL_ERROR_WANT_READ: return Io::want_read;
    case SSL_ERROR_WANT_WRITE: return Io::want_write;
    case SSL_ERROR_ZERO_RETURN: return Io::closed;
    case SSL_ERROR_SYSCALL: {
        const std::string q = ssl_errors();
        error_ = fmt::format("{}: connection closed or failed ({})", what, q);
        return Io::closed;
    }
    default: {
        error_ = fmt::format("{}: {}", what, ssl_errors());
        const long v = ssl().SSL_get_verify_result(static_cast<SSL*>(ssl_));
        if (v != X509_V_OK) error_ += fmt::format(" (client certificate: {})", ssl().X509_verify_cert_error_string(v));
        return Io::error;
    }
    }
}

TlsStream::Io TlsStream::handshake() {
    auto* s = static_cast<SSL*>(ssl_);
    ssl().ERR_clear_error();
    const int r = ssl().SSL_accept(s);
    if (r != 1) return result(r, "TLS handshake");
    if (config_->client_allowed_sans) {
        X509* cert = ssl().SSL_get1_peer_certificate(s);
        if (!cert) {
            error_ = "TLS handshake: client_allowed_sans is set and the client sent no certificate";
            return Io::error;
        }
        const auto sans = subject_alt_names(cert);
        ssl().X509_free(cert);
        for (const auto& san : sans)
            for (const auto& allowed : *config_->client_allowed_sans)
                if (san == allowed) return Io::ok;
        error_ = fmt::format("TLS handshake: the client certificate has none of the allowed SANs ({}); it has: {}",
                             fmt::join(*config_->client_allowed_sans, ", "), fmt::join(sans, ", "));
        return Io::error;
    }
    return Io::ok;
}

TlsStream::Io TlsStream::read(char* buf, std::size_t cap, std::size_t& n) {
    ssl().ERR_clear_error();
    const int r = ssl().SSL_read_ex(static_cast<SSL*>(ssl_), buf, cap, &n);
    if (r == 1) return Io::ok;
    return result(r, "TLS read");
}

TlsStream::Io TlsStream::write(const char* buf, std::size_t len, std::size_t& n) {
    ssl().ERR_clear_error();
    const int r = ssl().SSL_write_ex(static_cast<SSL*>(ssl_), buf, len, &n);
    if (r == 1) return Io::ok;
    return result(r, "TLS write");
}

void TlsStream::shutdown() {
    ssl().ERR_clear_error();
    ssl().SSL_shutdown(static_cast<SSL*>(ssl_));
    ssl().ERR_clear_error();
}

}  // namespace kgpu::exporter
