#include "tls_client.h"

#include <crypt.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "support/process.h"

namespace kgpu::test {

namespace {

std::string ssl_error() {
    std::string out;
    char buf[256];
    for (unsigned long e; (e = ERR_get_error()) != 0;) {
        ERR_error_string_n(e, buf, sizeof buf);
        out += buf;
        out += "; ";
    }
    return out;
}

}  // namespace

TlsResult https_request(int port, const std::string& method, const std::string& path, const TlsClientOptions& o) {
    TlsResult out;
    // This thread only: a SIGPIPE raised by the server's thread must still show.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
    if (!o.ca_file.empty()) {
        if (SSL_CTX_load_verify_locations(ctx.get(), o.ca_file.c_str(), nullptr) != 1) {
            out.error = "CA: " + ssl_error();
            return out;
        }
        SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    }
    if (!o.cert_file.empty() && (SSL_CTX_use_certificate_chain_file(ctx.get(), o.cert_file.c_str()) != 1 ||
                                 SSL_CTX_use_PrivateKey_file(ctx.get(), o.key_file.c_str(), SSL_FILETYPE_PEM) != 1)) {
        out.error = "client cert: " + ssl_error();
        return out;
    }
    const int fd = connect_loopback(port);
    if (fd < 0) {
        out.error = "connect failed";
        return out;
    }
    timeval tv{o.timeout_ms / 1000, (o.timeout_ms % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
    SSL_set_fd(ssl.get(), fd);
    SSL_set_tlsext_host_name(ssl.get(), "localhost");
    if (!o.ca_file.empty()) X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), "127.0.0.1");
    if (SSL_connect(ssl.get()) != 1) {
        out.error = "handshake: " + ssl_error();
        ::close(fd);
        return out;
    }
    std::string req;
    for (int i = 0; i < o.pipelined; ++i) {
        req += method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n";
        if (i + 1 == o.pipelined) req += "Connection: close\r\n";
        for (const auto& h : o.headers) req += h + "\r\n";
        req += "\r\n";
    }
    if (SSL_write(ssl.get(), req.data(), static_cast<int>(req.size())) <= 0) {
        out.error = "write: " + ssl_error();
        ::close(fd);
        return out;
    }
    std::string data;
    char buf[16384];
    if (!o.read_answer) {
        ::close(fd);
        return out;
    }
    for (;;) {
        const int n = SSL_read(ssl.get(), buf, sizeof buf);
        if (n <= 0) {
            // TLS 1.3: a refused client certificate shows up here, as an alert on the first read.
            if (data.empty()) out.error = "read: " + ssl_error();
            break;
        }
        data.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    out.http = split_http_answer(data);
    return out;
}

std::optional<TestPki> make_pki(const std::string& dir, std::string& error) {
    TestPki p{dir + "/ca.crt", dir + "/ca.key", dir + "/server.crt", dir + "/server.key", dir + "/client.crt",
              dir + "/client.key"};
    auto run = [&](const std::string& cmd) {
        auto r = run_process({"/bin/sh", "-c", cmd});
        if (r.exit_code != 0) error += cmd + ": " + r.err;
        return r.exit_code == 0;
    };
    {
        std::ofstream(dir + "/server.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
        std::ofstream(dir + "/client.ext") << "subjectAltName=DNS:client.example,URI:spiffe://test/client\n";
    }
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    if (!run("openssl req -x509 " + ec + " -days 2 -subj /CN=test-ca -keyout " + p.ca_key + " -out " + p.ca_cert +
             " 2>&1"))
        return std::nullopt;
    for (const auto& [name, crt, key] : {std::tuple{std::string("server"), p.server_cert, p.server_key},
                                         std::tuple{std::string("client"), p.client_cert, p.client_key}}) {
        if (!run("openssl req " + ec + " -subj /CN=" + name + " -keyout " + key + " -out " + dir + "/" + name + ".csr 2>&1") ||
            !run("openssl x509 -req -days 2 -in " + dir + "/" + name + ".csr -CA " + p.ca_cert + " -CAkey " + p.ca_key +
                 " -CAcreateserial -extfile " + dir + "/" + name + ".ext -out " + crt + " 2>&1"))
            return std::nullopt;
    }
    return p;
}

std::string basic_auth(const std::string& user, const std::string& password) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const std::string in = user + ":" + password;
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                           static_cast<unsigned char>(in[i + 2]);
        for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
    }
    if (i + 1 == in.size()) {
        const unsigned v = static_cast<unsigned char>(in[i]) << 16;
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += kAlphabet[(v >> 6) & 63];
        out += '=';
    }
    return "Basic " + out;
}

std::string bcrypt_hash(const std::string& password, int cost) {
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    if (!crypt_gensalt_rn("$2b$", static_cast<unsigned long>(cost), nullptr, 0, salt, sizeof salt)) return "";
    crypt_data data{};
    const char* h = crypt_r(password.c_str(), salt, &data);
    return h && h[0] == '$' ? std::string(h) : std::string();
}

}  // namespace kgpu::test
