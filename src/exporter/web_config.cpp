// load_web_config and bcrypt (web_config.h).
#include "exporter/web_config.h"

#include <crypt.h>
#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <mutex>

#include <yaml-cpp/yaml.h>

#include "common/files.h"
#include "common/yaml_walker.h"

namespace kgpu::exporter {
namespace {

using yaml::ParseError;
using yaml::Walker;

// Go's crypto/tls names (tls.CipherSuites(), which the toolkit accepts) -> OpenSSL's. The TLS 1.3
// suites are accepted and, as in Go, not configurable.
constexpr std::pair<std::string_view, std::string_view> kCiphers[] = {
    {"TLS_AES_128_GCM_SHA256", ""},
    {"TLS_AES_256_GCM_SHA384", ""},
    {"TLS_CHACHA20_POLY1305_SHA256", ""},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
    // RSA key exchange: in tls.CipherSuites() of the Go releases dcgm-exporter 4.x was built with.
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
};

constexpr std::pair<std::string_view, std::string_view> kCurves[] = {
    {"CurveP256", "P-256"}, {"CurveP384", "P-384"}, {"CurveP521", "P-521"}, {"X25519", "X25519"}};

constexpr std::pair<std::string_view, int> kVersions[] = {
    {"TLS10", 0x0301}, {"TLS11", 0x0302}, {"TLS12", 0x0303}, {"TLS13", 0x0304}};

constexpr std::pair<std::string_view, ClientAuth> kClientAuth[] = {
    {"NoClientCert", ClientAuth::none},
    {"RequestClientCert", ClientAuth::request},
    {"RequireAnyClientCert", ClientAuth::require_any},
    {"RequireClientCert", ClientAuth::require_any},  // the toolkit's older spelling
    {"VerifyClientCertIfGiven", ClientAuth::verify_if_given},
    {"RequireAndVerifyClientCert", ClientAuth::require_and_verify},
};

// The response headers the toolkit lets a config set, with their allowed values (none: any).
struct AllowedHeader {
    std::string_view name;
    std::vector<std::string_view> values;
};
const std::vector<AllowedHeader>& allowed_headers() {
    static const std::vector<AllowedHeader> h = {
        {"Strict-Transport-Security", {}},
        {"X-Content-Type-Options", {"nosniff"}},
        {"X-Frame-Options", {"deny", "sameorigin"}},
        {"X-XSS-Protection", {}},
        {"Content-Security-Policy", {}},
    };
    return h;
}

template <class T, std::size_t N>
std::string names_of(const std::pair<std::string_view, T> (&table)[N]) {
    std::vector<std::string_view> n;
    for (const auto& [k, v] : table) n.push_back(k);
    return fmt::format("{}", fmt::join(n, ", "));
}

std::string resolve(const std::filesystem::path& dir, const std::string& file) {
    if (file.empty() || std::filesystem::path(file).is_absolute()) return file;
    return (dir / file).string();
}

// tls_server_config's versions, cipher suites and curves, by Go crypto/tls's names.
void parse_tls_algorithms(const Walker& w, const YAML::Node& n, const std::string& k, TlsServerConfig& t) {
    auto version = [&](const char* key, int& v) {
        if (!n[key]) return;
        const std::string s = w.scalar(n[key], Walker::join(k, key));
        auto it = std::ranges::find(kVersions, std::string_view(s), &std::pair<std::string_view, int>::first);
        if (it == std::end(kVersions))
            w.error(n[key], Walker::join(k, key),
                    fmt::format("unknown TLS version '{}' (expected one of {})", s, names_of(kVersions)));
        v = it->second;
    };
    version("min_version", t.min_version);
    version("max_version", t.max_version);
    if (t.min_version > t.max_version)
        w.error(n["min_version"], k + ".min_version", "is above max_version");
    if (n["cipher_suites"]) {
        for (const auto& name : w.strings(n["cipher_suites"], k + ".cipher_suites")) {
            auto it = std::ranges::find(kCiphers, std::string_view(name), &std::pair<std::string_view, std::string_view>::first);
            if (it == std::end(kCiphers))
                w.error(n["cipher_suites"], k + ".cipher_suites",
                        fmt::format("unknown cipher '{}' (expected Go crypto/tls names: {})", name, names_of(kCiphers)));
            if (!it->second.empty()) t.cipher_suites.emplace_back(it->second);
        }
    }
    if (n["curve_preferences"]) {
        for (const auto& name : w.strings(n["curve_preferences"], k + ".curve_preferences")) {
            auto it = std::ranges::find(kCurves, std::string_view(name), &std::pair<std::string_view, std::string_view>::first);
            if (it == std::end(kCurves))
                w.error(n["curve_preferences"], k + ".curve_preferences",
                        fmt::format("unknown curve '{}' (expected one of {})", name, names_of(kCurves)));
            t.curves.emplace_back(it->second);
        }
    }
}

void parse_tls(const Walker& w, const YAML::Node& n, const std::filesystem::path& dir, WebConfig& out) {
    const std::string k = "tls_server_config";
    w.expect_map(n, k,
                 {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
                  "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
                  "curve_preferences"});
    if (n.IsNull()) return;
    TlsServerConfig t;
    auto str = [&](const char* key) { return n[key] ? w.scalar(n[key], Walker::join(k, key)) : std::string(); };
    t.cert_pem = str("cert");
    t.key_pem = str("key");
    t.client_ca_pem = str("client_ca");
    t.cert_file = resolve(dir, str("cert_file"));
    t.key_file = resolve(dir, str("key_file"));
    t.client_ca_file = resolve(dir, str("client_ca_file"));
    const std::string auth = str("client_auth_type");
    if (!auth.empty()) {
        auto it = std::ranges::find(kClientAuth, std::string_view(auth), &std::pair<std::string_view, ClientAuth>::first);
        if (it == std::end(kClientAuth))
            w.error(n["client_auth_type"], k + ".client_auth_type",
                    fmt::format("invalid ClientAuth '{}' (expected one of {})", auth, names_of(kClientAuth)));
        t.client_auth = it->second;
    }
    // Nothing set at all: the toolkit serves plain HTTP.
    if (t.cert_pem.empty() && t.key_pem.empty() && t.client_ca_pem.empty() && t.cert_file.empty() &&
        t.key_file.empty() && t.client_ca_file.empty() && auth.empty())
        return;
    if (n["client_allowed_sans"]) t.client_allowed_sans = w.strings(n["client_allowed_sans"], k + ".client_allowed_sans");
    parse_tls_algorithms(w, n, k, t);
    if (n["prefer_server_cipher_suites"])
        t.prefer_server_cipher_suites = w.boolean(n["prefer_server_cipher_suites"], k + ".prefer_server_cipher_suites");

    // The same checks and messages as the toolkit's ConfigToTLSConfig.
    const YAML::Node& at = n;
    if (t.cert_pem.empty() && t.cert_file.empty()) w.error(at, k, "missing one of cert or cert_file");
    if (t.key_pem.empty() && t.key_file.empty()) w.error(at, k, "missing one of key or key_file");
    if (!t.cert_pem.empty() && !t.cert_file.empty()) w.error(at, k, "cert and cert_file are both set: use one");
    if (!t.key_pem.empty() && !t.key_file.empty()) w.error(at, k, "key and key_file are both set: use one");
    if (!t.client_ca_pem.empty() && !t.client_ca_file.empty())
        w.error(at, k, "client_ca and client_ca_file are both set: use one");
    if ((!t.client_ca_pem.empty() || !t.client_ca_file.empty()) && t.client_auth == ClientAuth::none)
        w.error(at, k, "client CA's have been configured without a Client Auth Policy (client_auth_type)");
    auto read = [&](const std::string& file, std::string& pem, const char* key) {
        if (file.empty()) return;
        auto text = files::read_regular(file);
        if (!text) throw ParseError{Error::make(text.error().code, "{}: {}: {}", out.path, key, text.error().message)};
        pem = std::move(*text);
        out.files.push_back(file);
    };
    read(t.cert_file, t.cert_pem, "tls_server_config.cert_file");
    read(t.key_file, t.key_pem, "tls_server_config.key_file");
    read(t.client_ca_file, t.client_ca_pem, "tls_server_config.client_ca_file");
    out.tls = std::move(t);
}

}  // namespace

Result<std::chrono::nanoseconds> parse_go_duration(std::string_view text) {
    auto bad = [&] {
        return fail(Code::invalid_argument, "expected a duration like 1s, 250ms or 1m30s, got '{}'", text);
    };
    if (text == "0") return std::chrono::nanoseconds(0);
    if (text.empty()) return bad();
    static constexpr std::pair<std::string_view, double> units[] = {
        {"ns", 1}, {"us", 1e3}, {"µs", 1e3}, {"μs", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
    double total = 0;
    std::string_view s = text;
    while (!s.empty()) {
        std::size_t n = 0;
        while (n < s.size() && ((s[n] >= '0' && s[n] <= '9') || s[n] == '.')) ++n;
        if (n == 0) return bad();
        double v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + n, v);
        if (ec != std::errc() || p != s.data() + n) return bad();
        s.remove_prefix(n);
        std::size_t u = 0;
        while (u < s.size() && !((s[u] >= '0' && s[u] <= '9') || s[u] == '.')) ++u;
        const std::string_view unit = s.substr(0, u);
        auto it = std::ranges::find(units, unit, &std::pair<std::string_view, double>::first);
        if (it == std::end(units)) return bad();
        total += v * it->second;
        s.remove_prefix(u);
    }
    if (total > 9.2e18) return bad();
    return std::chrono::nanoseconds(static_cast<std::int64_t>(total));
}

bool is_bcrypt_hash(std::string_view h) {
    // $2a$10$ + 22 characters of salt + 31 of hash.
    if (h.size() != 60 || h[0] != '$' || h[1] != '2' || (h[2] != 'a' && h[2] != 'b' && h[2] != 'y') || h[3] != '$' ||
        h[6] != '$')
        return false;
    if (h[4] < '0' || h[4] > '3' || h[5] < '0' || h[5] > '9') return false;
    const int cost = (h[4] - '0') * 10 + (h[5] - '0');
    if (cost < 4 || cost > 31) return false;
    return std::ranges::all_of(h.substr(7), [](char c) {
        return c == '.' || c == '/' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    });
}

namespace {
// libcrypt is loaded only for basic auth: processes that never check a password never map it.
using CryptRn = decltype(&::crypt_rn);
Result<CryptRn> crypt_library() {
    static std::once_flag once;
    static CryptRn fn = nullptr;
    static std::string error;
    std::call_once(once, [] {
        void* h = ::dlopen("libcrypt.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            error = ::dlerror();
            return;
        }
        fn = reinterpret_cast<CryptRn>(::dlsym(h, "crypt_rn"));
        if (!fn) error = "libcrypt.so.1 has no crypt_rn";
    });
    if (!fn) return fail(Code::not_found, "basic auth needs libcrypt.so.1 (Debian package libcrypt1) for bcrypt: {}", error);
    return fn;
}
}  // namespace

Status load_bcrypt() {
    auto f = crypt_library();
    if (!f) return std::unexpected(f.error());
    return {};
}

Result<bool> bcrypt_matches(std::string_view password, const std::string& hash) {
    auto crypt_rn_fn = crypt_library();
    if (!crypt_rn_fn) return std::unexpected(crypt_rn_fn.error());
    if (password.find('\0') != std::string_view::npos) return false;
    thread_local std::unique_ptr<crypt_data> work = std::make_unique<crypt_data>();
    const std::string pw(password);
    const char* out = (*crypt_rn_fn)(pw.c_str(), hash.c_str(), work.get(), static_cast<int>(sizeof(crypt_data)));
    if (!out || out[0] == '*') return false;
    const std::string_view got(out);
    if (got.size() != hash.size()) return false;
    unsigned char diff = 0;  // constant time over the hash
    for (std::size_t i = 0; i < got.size(); ++i) diff |= static_cast<unsigned char>(got[i] ^ hash[i]);
    return diff == 0;
}

Result<WebConfig> load_web_config(const std::string& path) {
    WebConfig out;
    out.path = path;
    auto text = files::read_regular(path);  // a FIFO is refused, not waited on
    if (!text) return fail(text.error().code, "--web-config-file: {}", text.error().message);
    out.files.push_back(path);
    YAML::Node root;
    try {
        root = YAML::Load(*text);
    } catch (const YAML::Exception& e) {
        return fail(Code::parse, "{}:{}: not YAML: {}", path, e.mark.line + 1, e.msg);
    }
    const Walker w(path);
    const auto dir = std::filesystem::path(path).parent_path();
    try {
        w.expect_map(root, "", {"tls_server_config", "http_server_config", "rate_limit", "basic_auth_users"});
        if (root.IsNull()) return out;  // an empty file: plain HTTP, no auth (as the toolkit)
        if (root["tls_server_config"]) parse_tls(w, root["tls_server_config"], dir, out);
        if (const auto h = root["http_server_config"]) {
            w.expect_map(h, "http_server_config", {"http2", "headers"});
            if (h["http2"]) out.http2 = w.boolean(h["http2"], "http_server_config.http2");
            if (const auto hs = h["headers"]; hs && !hs.IsNull()) {
                if (!hs.IsMap()) w.error(hs, "http_server_config.headers", "expected a map of header: value");
                for (const auto& kv : hs) {
                    const std::string name = kv.first.Scalar();
                    const std::string key = "http_server_config.headers." + name;
                    const std::string value = w.scalar(kv.second, key);
                    auto it = std::ranges::find(allowed_headers(), std::string_view(name), &AllowedHeader::name);
                    if (it == allowed_headers().end()) w.error(kv.first, key, fmt::format("HTTP header \"{}\" can not be configured", name));
                    if (!it->values.empty() && std::ranges::find(it->values, std::string_view(value)) == it->values.end())
                        w.error(kv.second, key,
                                fmt::format("invalid value for {}. Expected one of: {}, but got: \"{}\"", name,
                                            fmt::join(it->values, ", "), value));
                    if (value.find_first_of("\r\n") != std::string::npos) w.error(kv.second, key, "a header value is one line");
                    if (!value.empty()) out.headers.emplace_back(name, value);
                }
            }
        }
        if (const auto r = root["rate_limit"]) {
            w.expect_map(r, "rate_limit", {"interval", "burst"});
            if (r["interval"]) {
                auto d = parse_go_duration(w.scalar(r["interval"], "rate_limit.interval"));
                if (!d) w.error(r["interval"], "rate_limit.interval", d.error().message);
                out.rate_interval = *d;
            }
            if (r["burst"]) {
                const std::string b = w.scalar(r["burst"], "rate_limit.burst");
                unsigned v = 0;
                auto [p, ec] = std::from_chars(b.data(), b.data() + b.size(), v);
                if (b.empty() || ec != std::errc() || p != b.data() + b.size())
                    w.error(r["burst"], "rate_limit.burst", fmt::format("expected a whole number, got '{}'", b));
                out.rate_burst = v;
            }
        }
        if (const auto u = root["basic_auth_users"]; u && !u.IsNull()) {
            if (!u.IsMap()) w.error(u, "basic_auth_users", "expected a map of user: bcrypt hash");
            for (const auto& kv : u) {
                const std::string user = kv.first.Scalar();
                const std::string key = "basic_auth_users." + user;
                const std::string hash = w.scalar(kv.second, key);
                if (!is_bcrypt_hash(hash))
                    w.error(kv.second, key,
                            "expected a bcrypt hash ($2y$10$ followed by 53 characters, e.g. from "
                            "`htpasswd -nBC 10 \"\" | tr -d ':\\n'`)");
                if (user.find(':') != std::string::npos) w.error(kv.first, key, "a user name cannot hold ':'");
                out.users.emplace(user, hash);
            }
        }
    } catch (const ParseError& e) {
        return std::unexpected(e.error);
    } catch (const YAML::Exception& e) {
        return fail(Code::parse, "{}:{}: {}", path, e.mark.line + 1, e.msg);
    }
    return out;
}

}  // namespace kgpu::exporter
