// --web-config-file: the exporter-toolkit format (web_config.h), and the HTTP server with it:
// TLS (OpenSSL loaded on demand), client certificates, basic auth with bcrypt, headers, rate limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "exporter/http.h"
#include "exporter/web_config.h"
#include "exporter/web_reload.h"
#include "support/expect.h"
#include "support/process.h"
#include "tls_client.h"

namespace kgpu::exporter {
namespace {

using testing::HasSubstr;

// When the web config is re-read (web_reload.h), without a server or a clock that runs.
TEST(WebReload, ReReadsAtMostOnceASecondWhenAFileChangedAndAFailureWaitsForTheNextChange) {
    test::TempDir dir;
    const std::vector<std::string> files = {dir.write("web.yml", "basic_auth_users: {}\n"), dir.write("cert.pem", "A")};
    const WebReload::Clock::time_point t0{std::chrono::hours(1)};
    WebReload w;
    w.loaded(files);
    EXPECT_FALSE(w.due(files, t0)) << "nothing changed";
    dir.write("cert.pem", "AB");  // a rotated certificate
    EXPECT_FALSE(w.due(files, t0 + std::chrono::milliseconds(500))) << "looked less than a second ago";
    EXPECT_TRUE(w.due(files, t0 + std::chrono::milliseconds(1100)));
    // The new version does not load: reported once, not retried while the files stay as they are.
    EXPECT_TRUE(w.failed(files, "cert.pem: not a certificate"));
    EXPECT_FALSE(w.due(files, t0 + std::chrono::seconds(3)));
    dir.write("cert.pem", "ABC");
    EXPECT_TRUE(w.due(files, t0 + std::chrono::seconds(5)));
    EXPECT_FALSE(w.failed(files, "cert.pem: not a certificate")) << "the same error is not logged again";
    EXPECT_TRUE(w.failed(files, "cert.pem: expired"));
    w.succeeded();
    EXPECT_TRUE(w.failed(files, "cert.pem: expired")) << "after a good reload every failure is reported";
}

TEST(WebConfig, AnEmptyFileOrAnEmptyTlsSectionIsPlainHttp) {
    test::TempDir dir;
    for (const char* text : {"", "tls_server_config: {}\n", "tls_server_config:\nhttp_server_config:\n  http2: false\n"}) {
        auto c = load_web_config(dir.write("web.yml", text));
        ASSERT_TRUE(c) << text << ": " << c.error().message;
        EXPECT_FALSE(c->tls);
        EXPECT_TRUE(c->users.empty());
    }
}

TEST(WebConfig, ReadsEverySectionTheToolkitHas) {
    test::TempDir dir;
    dir.write("certs/tls.crt", "CERT");
    dir.write("certs/tls.key", "KEY");
    const std::string hash = "$2y$10$" + std::string(53, 'a');
    auto c = load_web_config(dir.write("web.yml",
                                       "tls_server_config:\n"
                                       "  cert_file: certs/tls.crt\n"  // relative to the config's directory
                                       "  key_file: " + dir.path() + "/certs/tls.key\n"
                                       "  client_auth_type: RequireAndVerifyClientCert\n"
                                       "  client_ca: INLINE-CA\n"
                                       "  client_allowed_sans: [a.example, spiffe://x]\n"
                                       "  min_version: TLS13\n"
                                       "  max_version: TLS13\n"
                                       "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
                                       "  curve_preferences: [X25519, CurveP256]\n"
                                       "  prefer_server_cipher_suites: false\n"
                                       "http_server_config:\n"
                                       "  http2: false\n"
                                       "  headers:\n"
                                       "    X-Frame-Options: deny\n"
                                       "    Strict-Transport-Security: max-age=31536000\n"
                                       "rate_limit:\n"
                                       "  interval: 1m30s\n"
                                       "  burst: 5\n"
                                       "basic_auth_users:\n"
                                       "  alice: " + hash + "\n"));
    ASSERT_TRUE(c) << c.error().message;
    ASSERT_TRUE(c->tls);
    EXPECT_EQ(c->tls->cert_pem, "CERT");
    EXPECT_EQ(c->tls->key_pem, "KEY");
    EXPECT_EQ(c->tls->cert_file, dir.path() + "/certs/tls.crt");
    EXPECT_EQ(c->tls->client_ca_pem, "INLINE-CA");
    EXPECT_EQ(c->tls->client_auth, ClientAuth::require_and_verify);
    EXPECT_EQ(c->tls->client_allowed_sans, (std::vector<std::string>{"a.example", "spiffe://x"}));
    EXPECT_EQ(c->tls->min_version, 0x0304);
    EXPECT_EQ(c->tls->cipher_suites, (std::vector<std::string>{"ECDHE-RSA-AES128-GCM-SHA256"}));
    EXPECT_EQ(c->tls->curves, (std::vector<std::string>{"X25519", "P-256"}));
    EXPECT_FALSE(c->tls->prefer_server_cipher_suites);
    EXPECT_FALSE(c->http2);
    EXPECT_EQ(c->headers.size(), 2u);
    EXPECT_EQ(c->rate_interval, std::chrono::seconds(90));
    EXPECT_EQ(c->rate_burst, 5u);
    EXPECT_EQ(c->users.at("alice"), hash);
    EXPECT_EQ(c->files.size(), 3u) << "the config, the cert and the key are watched";
}

TEST(WebConfig, MistakesNameTheFileLineAndKey) {
    test::TempDir dir;
    dir.write("c.crt", "C");
    dir.write("c.key", "K");
    struct Case {
        std::string text;
        std::string want;
    };
    for (const auto& c : std::vector<Case>{
             {"tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n  certfile: x\n", ":4: key 'tls_server_config.certfile': unknown key"},
             {"tsl_server_config: {}\n", ":1: key 'tsl_server_config': unknown key"},
             {"tls_server_config:\n  key_file: c.key\n", "missing one of cert or cert_file"},
             {"tls_server_config:\n  cert_file: c.crt\n", "missing one of key or key_file"},
             {"tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n  min_version: TLS14\n", ":4: key 'tls_server_config.min_version': unknown TLS version 'TLS14'"},
             {"tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n  client_auth_type: Maybe\n", "invalid ClientAuth 'Maybe'"},
             {"tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n  client_ca_file: c.crt\n", "without a Client Auth Policy"},
             {"tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n  cipher_suites: [RC4]\n", "unknown cipher 'RC4'"},
             {"tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n  curve_preferences: [P256]\n", "unknown curve 'P256'"},
             {"tls_server_config:\n  cert_file: nope.crt\n  key_file: c.key\n", "nope.crt"},
             {"http_server_config:\n  headers:\n    X-Powered-By: kgpu\n", "HTTP header \"X-Powered-By\" can not be configured"},
             {"http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "Expected one of: deny, sameorigin"},
             {"basic_auth_users:\n  alice: password\n", ":2: key 'basic_auth_users.alice': expected a bcrypt hash"},
             {"rate_limit:\n  interval: soon\n", "expected a duration"},
             {"tls_server_config: [1]\n", "expected a map"},
             {"basic_auth_users: {a: [1]}\n", "expected a string"},
             {"x: [\n", "not YAML"},
         }) {
        const std::string path = dir.write("web.yml", c.text);
        auto r = load_web_config(path);
        ASSERT_FALSE(r) << c.text;
        EXPECT_THAT(r.error().message, HasSubstr(c.want)) << c.text;
        EXPECT_THAT(r.error().message, HasSubstr("web.yml")) << r.error().message;
    }
    auto missing = load_web_config(dir.path() + "/none.yml");
    ASSERT_FALSE(missing);
    EXPECT_THAT(missing.error().message, HasSubstr("none.yml"));
}

TEST(WebConfig, GoDurationsAndBcryptShapes) {
    EXPECT_EQ(parse_go_duration("0"), std::chrono::nanoseconds(0));
    EXPECT_EQ(parse_go_duration("250ms"), std::chrono::milliseconds(250));
    EXPECT_EQ(parse_go_duration("1h2m3s"), std::chrono::seconds(3723));
    EXPECT_EQ(parse_go_duration("1.5s"), std::chrono::milliseconds(1500));
    for (const char* bad : {"", "1", "s", "1x", "-1s", "1s2"}) EXPECT_FALSE(parse_go_duration(bad)) << bad;
    const std::string tail(53, 'A');
    EXPECT_TRUE(is_bcrypt_hash("$2y$10$" + tail));
    EXPECT_TRUE(is_bcrypt_hash("$2a$04$" + tail));
    EXPECT_TRUE(is_bcrypt_hash("$2b$31$" + tail));
    EXPECT_FALSE(is_bcrypt_hash("$2y$03$" + tail));
    EXPECT_FALSE(is_bcrypt_hash("$2y$10$" + tail.substr(1)));
    EXPECT_FALSE(is_bcrypt_hash("$1$10$" + tail));
    EXPECT_FALSE(is_bcrypt_hash("$2y$10$" + tail.substr(1) + "!"));
}

TEST(WebConfig, BcryptMatchesWhatLibcryptAndHtpasswdMake) {
    const std::string h = test::bcrypt_hash("s3cret");
    ASSERT_TRUE(is_bcrypt_hash(h)) << h;
    EXPECT_EQ(bcrypt_matches("s3cret", h), true);
    EXPECT_EQ(bcrypt_matches("s3cre", h), false);
    EXPECT_EQ(bcrypt_matches("", h), false);
    // htpasswd -B and the toolkit's docs write $2y$: the same algorithm.
    const std::string y = "$2y$" + h.substr(4);
    EXPECT_EQ(bcrypt_matches("s3cret", y), true);
}

// ---- The server with a web config ---------------------------------------------------------------

class WebServerTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "/usr/bin/openssl is missing (Debian package openssl)";
        std::string err;
        auto p = test::make_pki(dir.path(), err);
        ASSERT_TRUE(p) << err;
        pki = *p;
    }
    void start(const std::string& config) {
        HttpOptions o;
        o.address = "127.0.0.1:0";
        o.web_config_file = dir.write("web.yml", config);
        ASSERT_TRUE(check_web_config(o.web_config_file)) << check_web_config(o.web_config_file).error().message;
        auto s = HttpServer::start(o, [](const HttpRequest& r) {
            if (r.path == "/big") return HttpResponse::text(200, std::string(4 << 20, 'b'));
            return HttpResponse::text(200, "hello " + std::string(r.path));
        });
        ASSERT_TRUE(s) << s.error().message;
        server = std::move(*s);
    }
    std::string tls_section(const std::string& extra = "") const {
        return "tls_server_config:\n  cert_file: " + pki.server_cert + "\n  key_file: " + pki.server_key + "\n" + extra;
    }
    test::TempDir dir;
    test::TestPki pki;
    std::unique_ptr<HttpServer> server;
};

TEST_F(WebServerTest, TlsWithBasicAuthAsDcgmExportersTestChecksIt) {
    const std::string hash = test::bcrypt_hash("password");
    start(tls_section() + "basic_auth_users:\n  alice: " + hash + "\n" +
          "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n");
    ASSERT_TRUE(server->tls());
    const int port = server->port();
    // Plain HTTP on the TLS port: 400, as Go's server answers it.
    auto plain = test::http_request(port, "GET", "/metrics", {}, 5000);
    EXPECT_EQ(plain.status, 400);
    EXPECT_THAT(plain.body, HasSubstr("HTTP request to an HTTPS server"));

    test::TlsClientOptions o;
    o.ca_file = pki.ca_cert;  // the server's certificate verifies for 127.0.0.1
    auto r = test::https_request(port, "GET", "/metrics", o);
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.http.status, 401);
    EXPECT_EQ(r.http.headers["www-authenticate"], "Basic");
    EXPECT_EQ(r.http.headers["x-content-type-options"], "nosniff");

    o.headers = {"Authorization: " + test::basic_auth("alice", "password")};
    // Pipelined over TLS: every one answered, in one connection (the first waits for the password check, the rest follow).
    o.pipelined = 50;
    r = test::https_request(port, "GET", "/metrics", o);
    EXPECT_EQ(r.error, "");
    size_t answers = 0;
    for (size_t p = r.http.body.find("hello /metrics"); p != std::string::npos; p = r.http.body.find("hello /metrics", p + 1)) ++answers;
    EXPECT_EQ(answers, 50u);
    o.pipelined = 1;
    r = test::https_request(port, "GET", "/metrics", o);
    EXPECT_EQ(r.http.status, 200) << r.error;
    EXPECT_EQ(r.http.body, "hello /metrics");
    // Cached now: the same again, and a wrong password and an unknown user are refused.
    EXPECT_EQ(test::https_request(port, "GET", "/health", o).http.status, 200);
    o.headers = {"Authorization: " + test::basic_auth("alice", "bad password")};
    EXPECT_EQ(test::https_request(port, "GET", "/metrics", o).http.status, 401);
    o.headers = {"Authorization: " + test::basic_auth("bob", "password")};
    EXPECT_EQ(test::https_request(port, "GET", "/metrics", o).http.status, 401);
    o.headers = {"Authorization: Basic not-base64!"};
    EXPECT_EQ(test::https_request(port, "GET", "/metrics", o).http.status, 401);
    EXPECT_GE(server->stats().tls, 1u) << "the plain HTTP request counts as a TLS failure";
}

// Connections from `sources` (one each) that send a request with a new wrong password for alice
// as soon as the previous one is answered, until destroyed.
class PasswordFlood {
public:
    PasswordFlood(int port, std::vector<std::string> sources)
        : port_(port), sources_(std::move(sources)), thread_([this] { run(); }) {}
    ~PasswordFlood() {
        stop_ = true;
        thread_.join();
    }
    long refused() const { return refused_; }  // 401 answers so far

private:
    struct Conn {
        int fd = -1;
        std::string source, buf;
    };
    void send_one(Conn& c) {
        const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " +
                                test::basic_auth("alice", "wrong-" + std::to_string(next_++)) + "\r\n\r\n";
        if (::send(c.fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
            ::close(c.fd);
            c.fd = -1;
        }
    }
    void run() {
        std::vector<Conn> conns;
        for (const auto& s : sources_) conns.push_back(Conn{-1, s, ""});
        while (!stop_) {
            std::vector<pollfd> polls;
            for (auto& c : conns) {
                if (c.fd < 0) {
                    c.fd = test::connect_loopback(port_, c.source.c_str());
                    c.buf.clear();
                    if (c.fd >= 0) send_one(c);
                }
                polls.push_back(pollfd{c.fd, POLLIN, 0});
            }
            if (::poll(polls.data(), polls.size(), 100) <= 0) continue;
            for (size_t i = 0; i < conns.size(); ++i) {
                Conn& c = conns[i];
                if (c.fd < 0 || !(polls[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                char buf[4096];
                const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
                if (n <= 0) {
                    ::close(c.fd);
                    c.fd = -1;
                    continue;
                }
                c.buf.append(buf, static_cast<size_t>(n));
                // Each answer has one head; its small body is dropped with the next one.
                for (auto end = c.buf.find("\r\n\r\n"); end != std::string::npos; end = c.buf.find("\r\n\r\n")) {
                    if (c.buf.find("HTTP/1.1 401") < end) ++refused_;
                    c.buf.erase(0, end + 4);
                    send_one(c);
                    if (c.fd < 0) break;
                }
            }
        }
        for (auto& c : conns)
            if (c.fd >= 0) ::close(c.fd);
    }
    int port_;
    std::vector<std::string> sources_;
    long next_ = 0;
    std::atomic<bool> stop_{false};
    std::atomic<long> refused_{0};
    std::thread thread_;  // last: starts after the members it uses
};

TEST_F(WebServerTest, AWrongPasswordFloodDoesNotLockOutTheRightPassword) {
    // bcrypt cost 7: a few ms a check, so 100 flooding clients keep the checks queued.
    start("basic_auth_users:\n  alice: " + test::bcrypt_hash("password", 7) + "\n  bob: " +
          test::bcrypt_hash("builder", 7) + "\n");
    const int port = server->port();
    const std::string alice = "Authorization: " + test::basic_auth("alice", "password");
    ASSERT_EQ(test::http_request(port, "GET", "/metrics", {alice}, 10000).status, 200);
    {
        // 100 clients (other addresses), each always with one wrong password waiting: failures
        // must not push the right password out of what the server remembers.
        std::vector<std::string> sources;
        for (int i = 1; i <= 100; ++i) sources.push_back("127.0.1." + std::to_string(i));
        PasswordFlood flood(port, sources);
        // Waited for by count, up to a minute: on a loaded machine the bcrypt worker gets a fraction
        // of a core (111 refusals in the 10 s this waited before, under two test suites at once).
        for (int i = 0; i < 1200 && flood.refused() < 300; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_GE(flood.refused(), 300) << "the flood did not get going";
        std::vector<int> statuses;
        for (int i = 0; i < 20; ++i) {
            statuses.push_back(test::http_request(port, "GET", "/metrics", {alice}, 5000).status);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        EXPECT_THAT(statuses, testing::Each(200)) << "the right password during a flood of wrong ones";
    }
    // The checks those clients left queued are still worked off (a hung-up client is seen when its
    // check is done): wait until a new wrong password is checked (401), not refused (503), so the
    // next part starts with an empty queue however slow the machine is.
    int drained = 0;
    for (int i = 0; i < 100 && drained != 401; ++i) {
        drained = test::http_request(port, "GET", "/metrics",
                                     {"Authorization: " + test::basic_auth("carol", "x" + std::to_string(i))}, 5000)
                      .status;
        if (drained != 401) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(drained, 401) << "the password checks of the first flood were never worked off";
    {
        // 100 connections from one address: it gets at most two checks queued, so a first check
        // for another client still has room.
        PasswordFlood flood(port, std::vector<std::string>(100, "127.0.0.2"));
        // Waited for by count, up to a minute: on a loaded machine the bcrypt worker gets a fraction
        // of a core (111 refusals in the 10 s this waited before, under two test suites at once).
        for (int i = 0; i < 1200 && flood.refused() < 300; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_GE(flood.refused(), 300) << "the flood did not get going";
        const auto r = test::http_request(port, "GET", "/metrics", {"Authorization: " + test::basic_auth("bob", "builder")}, 5000);
        EXPECT_EQ(r.status, 200) << r.body;
    }
}

TEST_F(WebServerTest, AClientHangingUpDuringATlsAnswerDoesNotStopTheServer) {
    start(tls_section());
    test::TlsClientOptions o;
    o.read_answer = false;
    for (int i = 0; i < 5; ++i) test::https_request(server->port(), "GET", "/big", o);
    // Each hang-up handled: its connection closed by the server, which still serves.
    ASSERT_TRUE(test::eventually([&] { return server->stats().open == 0; }))
        << server->stats().open << " connections of clients that hung up are still open";
    o.read_answer = true;
    auto r = test::https_request(server->port(), "GET", "/x", o);
    EXPECT_EQ(r.http.status, 200) << r.error;
}

TEST_F(WebServerTest, ClientCertificatesAndAllowedSans) {
    start(tls_section("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: " + pki.ca_cert +
                      "\n  client_allowed_sans: [spiffe://test/client]\n"));
    const int port = server->port();
    test::TlsClientOptions o;
    o.ca_file = pki.ca_cert;
    auto r = test::https_request(port, "GET", "/x", o);
    EXPECT_NE(r.http.status, 200) << "no client certificate";
    o.cert_file = pki.client_cert;
    o.key_file = pki.client_key;
    r = test::https_request(port, "GET", "/x", o);
    EXPECT_EQ(r.http.status, 200) << r.error;
    // The server's own certificate is signed by the same CA but has none of the allowed SANs.
    o.cert_file = pki.server_cert;
    o.key_file = pki.server_key;
    r = test::https_request(port, "GET", "/x", o);
    EXPECT_NE(r.http.status, 200);
    EXPECT_GE(server->stats().tls, 2u);
}

TEST_F(WebServerTest, RateLimitAnswers429) {
    start("rate_limit:\n  interval: 1h\n  burst: 2\n");
    EXPECT_FALSE(server->tls());
    const int port = server->port();
    EXPECT_EQ(test::http_request(port, "GET", "/a").status, 200);
    EXPECT_EQ(test::http_request(port, "GET", "/a").status, 200);
    EXPECT_EQ(test::http_request(port, "GET", "/a").status, 429);
}

TEST_F(WebServerTest, ACertificateThatDoesNotLoadIsRefusedAtStart) {
    dir.write("bad.crt", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
    const std::string path = dir.write("web.yml", "tls_server_config:\n  cert_file: bad.crt\n  key_file: " + pki.server_key + "\n");
    auto s = check_web_config(path);
    ASSERT_FALSE(s);
    EXPECT_THAT(s.error().message, HasSubstr("bad.crt"));
    // A key that is not the certificate's.
    const std::string mismatch = dir.write("web2.yml", "tls_server_config:\n  cert_file: " + pki.server_cert +
                                                           "\n  key_file: " + pki.client_key + "\n");
    s = check_web_config(mismatch);
    ASSERT_FALSE(s);
    EXPECT_THAT(s.error().message, HasSubstr("does not match"));
}

TEST_F(WebServerTest, ARotatedCertificateIsPickedUpWithoutARestart) {
    start(tls_section());
    const int port = server->port();
    test::TlsClientOptions o;
    o.ca_file = pki.ca_cert;
    EXPECT_EQ(test::https_request(port, "GET", "/x", o).http.status, 200);
    // Rotate to a certificate from another CA: clients trusting the old CA must now fail.
    test::TempDir other;
    std::string err;
    auto p2 = test::make_pki(other.path(), err);
    ASSERT_TRUE(p2) << err;
    {
        std::ifstream c(p2->server_cert), k(p2->server_key);
        std::ofstream(pki.server_cert) << c.rdbuf();
        std::ofstream(pki.server_key) << k.rdbuf();
    }
    // Same inode and likely the same size: the modification time must differ from the loaded
    // files' even when the rewrite lands in the same clock tick as their creation.
    for (const std::string& f : {pki.server_cert, pki.server_key}) {
        struct stat st {};
        ASSERT_EQ(::stat(f.c_str(), &st), 0) << f;
        timespec times[2] = {st.st_atim, st.st_mtim};
        times[1].tv_sec += 2;
        ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), times, 0), 0) << f;
    }
    bool rotated = false;
    for (int i = 0; i < 50 && !rotated; ++i) {
        test::TlsClientOptions n;
        n.ca_file = p2->ca_cert;
        rotated = test::https_request(port, "GET", "/x", n).http.status == 200;
        if (!rotated) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(rotated) << "the new certificate was never served";
}

}  // namespace
}  // namespace kgpu::exporter
