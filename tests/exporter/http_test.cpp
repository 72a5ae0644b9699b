// The HTTP server alone (a handler that answers from memory): address parsing, Accept-Encoding,
// idle and slow clients, many connections at once.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "exporter/http.h"
#include "metrics_text.h"
#include "support/expect.h"

namespace kgpu::exporter {
namespace {

TEST(ListenAddress, AcceptsTheFormsDcgmExporterTakes) {
    auto a = parse_listen_address(":9400");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->host, "");
    EXPECT_EQ(a->port, 9400);
    a = parse_listen_address("127.0.0.1:0");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->host, "127.0.0.1");
    EXPECT_EQ(a->port, 0);
    a = parse_listen_address("[::1]:80");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->host, "::1");
    a = parse_listen_address("localhost:65535");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->host, "localhost");
}

TEST(ListenAddress, RejectsMalformedOnesSayingWhatIsExpected) {
    for (const char* bad : {"9400", "", ":", ":65536", ":-1", ":94x", "::1:80", "[::1]80", "[]:80", "host:"}) {
        auto a = parse_listen_address(bad);
        ASSERT_FALSE(a) << bad;
        EXPECT_EQ(a.error().code, Code::invalid_argument);
        EXPECT_NE(a.error().message.find("expected host:port"), std::string::npos) << a.error().message;
    }
}

TEST(AcceptEncoding, GzipWhenNamedOrStarWithNonZeroQ) {
    EXPECT_TRUE(accepts_gzip("gzip"));
    EXPECT_TRUE(accepts_gzip("deflate, GZIP"));
    EXPECT_TRUE(accepts_gzip("gzip;q=0.5, identity"));
    EXPECT_TRUE(accepts_gzip("*"));
    EXPECT_FALSE(accepts_gzip(""));
    EXPECT_FALSE(accepts_gzip("identity"));
    EXPECT_FALSE(accepts_gzip("gzip;q=0"));
    EXPECT_FALSE(accepts_gzip("gzip; q=0.0"));
    EXPECT_FALSE(accepts_gzip("x-gzip2"));
}

TEST(RequestHead, TakenFromTheBytesAsTheServerDoes) {
    using State = HeadScan::State;
    const std::string in = "\r\n\nGET /a%20b?q=1 HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip\r\n\r\nGET /next";
    auto s = take_request_head(in);
    ASSERT_EQ(s.state, State::complete);
    EXPECT_EQ(s.skip, 3u) << "empty lines before the request line are skipped";
    EXPECT_EQ(in.substr(s.skip + s.length), "GET /next");
    EXPECT_EQ(s.head.status, 0u) << s.head.why;
    EXPECT_EQ(s.head.method, "GET");
    EXPECT_EQ(s.head.path, "/a b");
    EXPECT_TRUE(s.head.accepts_gzip);
    EXPECT_TRUE(s.head.keep_alive);

    s = take_request_head("GET /a HTTP/1.1\r\nHo");
    EXPECT_EQ(s.state, State::incomplete);
    EXPECT_EQ(s.scanned, 19u);
    s = take_request_head("GET /a HTTP/1.1\r\nHost: h\r\n\r\n", 19);  // the same, more arrived
    EXPECT_EQ(s.state, State::complete);
    s = take_request_head("\r");  // perhaps the start of an empty line
    EXPECT_EQ(s.state, State::incomplete);
    EXPECT_EQ(s.skip, 0u);
    EXPECT_EQ(take_request_head(std::string(kMaxRequestHead + 1, 'a')).state, State::incomplete)
        << "a CRLF can still end it within the limit";
    EXPECT_EQ(take_request_head(std::string(kMaxRequestHead + 2, 'a')).state, State::too_large);
    EXPECT_EQ(take_request_head("GET / HTTP/1.1\r\nX: " + std::string(kMaxRequestHead, 'a') + "\r\n\r\n").state,
              State::too_large);
}

TEST(RequestHead, RefusedAsGosServerRefusesThem) {
    struct Case {
        std::string head;
        unsigned status;
        std::string why;
    };
    for (const auto& c : std::vector<Case>{
             {"GET / HTTP/1.1\r\n", 400, "missing required Host header"},
             {"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n", 400, "too many Host headers"},
             {std::string("GET / HTTP/1.1\r\nHost: a\r\nX: 1\0\r\n", 32), 400, "invalid header value"},
             {"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r2\r\n", 400, "invalid header value"},
             {"GET / HTTP/1.1\r\nHost: a\r\nX: \x7f\r\n", 400, "invalid header value"},
             {"GET / HTTP/2.0\r\n", 505, "only HTTP/1.0 and HTTP/1.1 are served"},
             {"\r\n", 400, "empty request"},
         }) {
        const auto h = parse_head(c.head);
        EXPECT_EQ(h.status, c.status) << c.head;
        EXPECT_EQ(h.why, c.why) << c.head;
    }
    // HTTP/1.0 needs no Host; a tab in a value is fine; the absolute form names the host itself
    // but HTTP/1.1 still needs the header (as Go).
    EXPECT_EQ(parse_head("GET / HTTP/1.0\r\n").status, 0u);
    EXPECT_EQ(parse_head("GET / HTTP/1.1\r\nHost: a\r\nX: a\tb\r\n").status, 0u);
    EXPECT_EQ(parse_head("GET http://h/metrics HTTP/1.1\r\nHost: h\r\n").path, "/metrics");
    EXPECT_EQ(parse_head("GET http://h/metrics HTTP/1.1\r\n").status, 400u);
}

class ServerTest : public ::testing::Test {
protected:
    void start(std::chrono::seconds idle_timeout = std::chrono::seconds(60),
               const std::function<void(HttpOptions&)>& more = {}) {
        HttpOptions o;
        o.address = "127.0.0.1:0";
        o.idle_timeout = idle_timeout;
        o.request_timeout = idle_timeout;
        if (more) more(o);
        auto body = std::make_shared<const std::string>(std::string(100000, 'x'));
        auto s = HttpServer::start(o, [this, body](const HttpRequest& r) {
            ++requests_;
            if (r.path == "/echo") return HttpResponse::text(200, fmt::format("{} {} gzip={}", r.method, r.path, r.accepts_gzip));
            if (r.path != "/data") return HttpResponse::text(404, "no\n");
            HttpResponse resp;
            resp.body = body;
            return resp;
        });
        ASSERT_TRUE(s) << s.error().message;
        server_ = std::move(*s);
        port_ = server_->port();
        ASSERT_NE(port_, 0);
        EXPECT_EQ(server_->bound_address(), "127.0.0.1:" + std::to_string(port_));
    }
    // The server's clock for tests of ages and grace periods (HttpOptions::clock): it moves only
    // when told. Declared before the server, which reads it until it stops.
    struct ManualClock {
        const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
        std::atomic<std::int64_t> elapsed_ms{0};
        void advance(std::chrono::milliseconds d) { elapsed_ms += d.count(); }
        std::function<std::chrono::steady_clock::time_point()> fn() {
            return [this] { return start + std::chrono::milliseconds(elapsed_ms.load()); };
        }
    } clock_;
    // Connects from `source` and waits until the server holds `open` connections; the manual
    // clock then moves 1 ms, so that each connection is older than the next.
    int connect_counted(const char* source, std::uint64_t open) {
        const int fd = test::connect_loopback(port_, source);
        EXPECT_GE(fd, 0);
        EXPECT_TRUE(test::eventually([&] { return server_->stats().open == open; })) << "open " << server_->stats().open;
        clock_.advance(std::chrono::milliseconds(1));
        return fd;
    }
    std::unique_ptr<HttpServer> server_;
    int port_ = 0;
    std::atomic<int> requests_{0};
};

TEST_F(ServerTest, AnswersAndStops) {
    start();
    auto r = test::http_request(port_, "GET", "/data?x=1");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), 100000u);
    EXPECT_EQ(test::http_request(port_, "GET", "/other").status, 404);
    server_.reset();
    EXPECT_EQ(test::connect_loopback(port_), -1) << "the listening socket is closed with the server";
}

TEST_F(ServerTest, BindingATakenPortFailsNamingTheAddress) {
    start();
    HttpOptions o;
    o.address = "127.0.0.1:" + std::to_string(port_);
    auto s = HttpServer::start(o, [](const HttpRequest&) { return HttpResponse::text(200, ""); });
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().message.find(o.address), std::string::npos) << s.error().message;
}

TEST_F(ServerTest, SixtyFourIdleConnectionsDoNotDelayARequest) {
    // The server's idle timeout (60 s) is longer than the client's (20 s): a server that gave
    // each connection a worker would not answer in time.
    start(std::chrono::seconds(60));
    std::vector<int> idle;
    for (int i = 0; i < 64; ++i) {
        int fd = test::connect_loopback(port_);
        ASSERT_GE(fd, 0);
        idle.push_back(fd);
    }
    // Half of them send half a request and stall (slow clients).
    for (size_t i = 0; i < idle.size(); i += 2) ASSERT_GT(::send(idle[i], "GET /da", 7, MSG_NOSIGNAL), 0);
    auto r = test::http_request(port_, "GET", "/data", {}, 20000);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), 100000u);
    for (int fd : idle) ::close(fd);
}

TEST_F(ServerTest, IdleClientsAreClosedAfterTheTimeout) {
    start(std::chrono::seconds(1));
    int fd = test::connect_loopback(port_);
    ASSERT_GE(fd, 0);
    ASSERT_GT(::send(fd, "GET /data HTTP/1.1\r\n", 20, MSG_NOSIGNAL), 0);  // never finishes the request
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 30000), 1) << "the server never closed an idle connection";
    char buf[16];
    EXPECT_LE(::recv(fd, buf, sizeof buf, 0), 0);  // closed (0) or reset (-1), no answer
    ::close(fd);
    EXPECT_EQ(test::http_request(port_, "GET", "/data").status, 200);
}

TEST_F(ServerTest, ServesHundredsOfConcurrentRequests) {
    start(std::chrono::seconds(60), [](HttpOptions& o) { o.peer_connection_limit = 1000; });
    constexpr int kConns = 300;
    std::vector<int> fds;
    const std::string req = "GET /data HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    for (int i = 0; i < kConns; ++i) {
        int fd = test::connect_loopback(port_);
        ASSERT_GE(fd, 0) << "connection " << i;
        fds.push_back(fd);
    }
    for (int fd : fds) ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    int ok = 0;
    for (int fd : fds) {
        std::string data;
        char buf[65536];
        for (;;) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 30000) <= 0) break;
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) break;
            data.append(buf, static_cast<size_t>(n));
        }
        if (data.starts_with("HTTP/1.1 200") && data.size() > 100000) ++ok;
        ::close(fd);
    }
    EXPECT_EQ(ok, kConns);
}


// ---- Our own server: what libmicrohttpd could not do (issue #14) --------------------------------

// Sends `req` on a connection and reads until the server closes it or `timeout_ms` passes.
std::string talk(int fd, std::string_view req, int timeout_ms = 10000) {
    if (!req.empty()) {
        EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    }
    std::string data;
    char buf[65536];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        data.append(buf, static_cast<size_t>(n));
    }
    return data;
}

// Whether the server closed `fd` (EOF or reset) within `timeout_ms`, reading and dropping any data.
bool closed_by_server(int fd, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    static char buf[1 << 20];
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) return true;
    }
    return false;
}

int count_of(const std::string& text, std::string_view what) {
    int n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

TEST_F(ServerTest, AtTheConnectionLimitTheOldestIdleConnectionMakesRoom) {
    start(std::chrono::seconds(60), [](HttpOptions& o) { o.connection_limit = 20; });
    std::vector<int> idle;
    for (int i = 0; i < 20; ++i) idle.push_back(test::connect_loopback(port_, "127.0.0.2"));
    for (int fd : idle) ASSERT_GE(fd, 0);
    // A request from another client is answered at once, and the oldest idle connection went.
    auto r = test::http_request(port_, "GET", "/data", {}, 5000);
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(closed_by_server(idle.front(), 5000)) << "the oldest idle connection should have been closed";
    EXPECT_FALSE(closed_by_server(idle.back(), 300)) << "the newest idle one stays";
    EXPECT_GE(server_->stats().evicted, 1u);
    for (int fd : idle) ::close(fd);
}

TEST_F(ServerTest, ConnectionsStillSendingTheirHeadGoAfterIdleOnes) {
    start(std::chrono::seconds(60), [this](HttpOptions& o) {
        o.connection_limit = 10;
        o.new_connection_grace = std::chrono::milliseconds(100);
        o.clock = clock_.fn();
    });
    std::vector<int> slow, idle;
    for (std::uint64_t i = 0; i < 5; ++i) {
        slow.push_back(connect_counted("127.0.0.2", i + 1));
        ASSERT_GT(::send(slow.back(), "GET /da", 7, MSG_NOSIGNAL), 0);
    }
    // One request through the loop after them: their bytes, there before it, have been read by
    // the time it is answered (until then a head in progress looks like an idle connection).
    EXPECT_EQ(test::http_request(port_, "GET", "/echo", {}, 5000).status, 200);
    ASSERT_TRUE(test::eventually([&] { return server_->stats().open == 5; }));
    clock_.advance(std::chrono::milliseconds(100));
    for (std::uint64_t i = 0; i < 5; ++i) idle.push_back(connect_counted("127.0.0.3", 6 + i));
    clock_.advance(std::chrono::milliseconds(400));  // past the new connections' grace
    EXPECT_EQ(test::http_request(port_, "GET", "/data", {}, 5000).status, 200);
    EXPECT_TRUE(closed_by_server(idle.front(), 5000)) << "an idle connection goes first, even a younger one";
    for (int fd : slow) EXPECT_FALSE(closed_by_server(fd, 50));
    for (int fd : slow) ::close(fd);
    for (int fd : idle) ::close(fd);
}

TEST_F(ServerTest, OneClientOverItsLimitLosesItsOwnOldestConnection) {
    start(std::chrono::seconds(60), [](HttpOptions& o) { o.peer_connection_limit = 5; });
    const int other = test::connect_loopback(port_, "127.0.0.3");
    std::vector<int> mine;
    for (int i = 0; i < 6; ++i) {
        mine.push_back(test::connect_loopback(port_, "127.0.0.2"));
        // Accepted before the next one, so their ages are in this order (the sixth is over the limit).
        if (i < 5) {
            ASSERT_TRUE(test::eventually([&] { return server_->stats().open == static_cast<unsigned>(i) + 2; }));
        }
    }
    EXPECT_TRUE(closed_by_server(mine.front(), 5000));
    EXPECT_FALSE(closed_by_server(other, 300)) << "another client's connection is never the one closed";
    EXPECT_NE(talk(mine.back(), "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").find("GET /echo"), std::string::npos);
    EXPECT_EQ(server_->stats().peer_limit, 1u);
    for (int fd : mine) ::close(fd);
    ::close(other);
}

TEST_F(ServerTest, TheRequestHeadHasAnAbsoluteDeadline) {
    // A byte every 100 ms would keep a per-read idle timer alive forever.
    start(std::chrono::seconds(60), [](HttpOptions& o) { o.request_timeout = std::chrono::seconds(1); });
    const int fd = test::connect_loopback(port_);
    const std::string head = "GET /data HTTP/1.1\r\nX-Padding: " + std::string(200, 'a');
    bool closed = false;
    for (char c : head) {
        if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) {
            closed = true;
            break;
        }
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) == 1) {
            char buf[64];
            if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) {
                closed = true;
                break;
            }
        }
    }
    EXPECT_TRUE(closed) << "a head trickling in for 20 s was not cut off by a 1 s deadline";
    EXPECT_GE(server_->stats().timeout, 1u);
    ::close(fd);
}

TEST_F(ServerTest, KeepAlivePipeliningHttp10AndHead) {
    start();
    int fd = test::connect_loopback(port_);
    // Two pipelined requests on one connection, then one that closes.
    std::string all = talk(fd,
                               "GET /echo HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
                               "HEAD /data HTTP/1.1\r\nHost: x\r\n\r\n"
                               "GET /%65cho?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    ::close(fd);
    EXPECT_EQ(count_of(all, "HTTP/1.1 200 OK"), 3) << all;
    EXPECT_NE(all.find("GET /echo gzip=true"), std::string::npos) << all;
    EXPECT_NE(all.find("Content-Length: 100000\r\n"), std::string::npos) << "HEAD says the length";
    EXPECT_EQ(all.find("xxxx"), std::string::npos) << "but sends no body";
    EXPECT_NE(all.find("GET /echo gzip=false"), std::string::npos) << "percent-decoded, query dropped";
    EXPECT_NE(all.find("Connection: close"), std::string::npos);
    // HTTP/1.0 closes unless asked to keep alive.
    fd = test::connect_loopback(port_);
    all = talk(fd, "GET /echo HTTP/1.0\r\n\r\nGET /echo HTTP/1.0\r\n\r\n");
    ::close(fd);
    EXPECT_EQ(count_of(all, "HTTP/1.1 200"), 1) << all;
    fd = test::connect_loopback(port_);
    all = talk(fd, "GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /echo HTTP/1.0\r\n\r\n");
    ::close(fd);
    EXPECT_EQ(count_of(all, "HTTP/1.1 200"), 2) << all;
    EXPECT_NE(all.find("Connection: keep-alive"), std::string::npos) << all;
    // A long pipeline on one connection is answered in order, without piling up stack frames.
    fd = test::connect_loopback(port_);
    std::string pipeline;
    for (int i = 0; i < 2000; ++i) pipeline += "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n";
    pipeline += "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    all = talk(fd, pipeline, 30000);
    ::close(fd);
    EXPECT_EQ(count_of(all, "HTTP/1.1 200 OK"), 2001);
    // LF-only line ends, as Go's server accepts.
    fd = test::connect_loopback(port_);
    all = talk(fd, "GET /echo HTTP/1.1\nHost: x\nConnection: close\n\n");
    ::close(fd);
    EXPECT_TRUE(all.starts_with("HTTP/1.1 200 OK")) << all;
}

TEST_F(ServerTest, BadRequestsGetTheirStatusAndTheConnectionCloses) {
    start();
    struct Case {
        std::string request;
        std::string status;
    };
    for (const auto& c : std::vector<Case>{
             {"GARBAGE\r\n\r\n", "400"},
             {"GET /echo HTTP/2.0\r\n\r\n", "505"},
             {"GET /echo SPDY/3\r\n\r\n", "400"},
             {"GET echo HTTP/1.1\r\n\r\n", "400"},
             {"GET /%zz HTTP/1.1\r\n\r\n", "400"},
             {"GET /echo HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n", "400"},
             {"GET /echo HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "400"},
             {"GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "400"},
             {"GET /echo HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n", "431"},
             // As Go's net/http: HTTP/1.1 needs exactly one Host, and no control character in a value.
             {"GET /echo HTTP/1.1\r\n\r\n", "400"},
             {"GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400"},
             {std::string("GET /echo HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n", 39), "400"},
             {"GET /echo HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", "400"},
         }) {
        const int fd = test::connect_loopback(port_);
        const std::string got = talk(fd, c.request);
        ::close(fd);
        EXPECT_TRUE(got.starts_with("HTTP/1.1 " + c.status)) << c.request.substr(0, 60) << " -> " << got.substr(0, 80);
        EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
    }
    // A body is not read as the next request: the answer closes the connection.
    const int fd = test::connect_loopback(port_);
    const std::string got =
        talk(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 31\r\n\r\nGET /data HTTP/1.1\r\nHost: x\r\n\r\n");
    ::close(fd);
    EXPECT_EQ(count_of(got, "HTTP/1.1 "), 1) << got;
    EXPECT_NE(got.find("POST /echo"), std::string::npos);
    EXPECT_GE(server_->stats().malformed, 12u);
    EXPECT_EQ(server_->stats().oversize, 1u);
    EXPECT_EQ(test::http_request(port_, "GET", "/data").status, 200) << "still serving";
}

TEST_F(ServerTest, EmptyLinesBeforeTheRequestLineAreSkipped) {
    start();
    // RFC 9112 2.2: a server should ignore empty lines received before the request line.
    for (const char* lead : {"\r\n", "\r\n\r\n", "\n", "\n\r\n\n"}) {
        const int fd = test::connect_loopback(port_);
        const std::string got = talk(fd, std::string(lead) + "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        ::close(fd);
        EXPECT_TRUE(got.starts_with("HTTP/1.1 200 OK")) << got.substr(0, 80);
        EXPECT_NE(got.find("GET /echo"), std::string::npos) << got;
    }
    // Also between pipelined requests, and when the empty lines arrive on their own first.
    const int fd = test::connect_loopback(port_);
    ASSERT_EQ(::send(fd, "\r\n\r", 3, MSG_NOSIGNAL), 3);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string got = talk(fd, "\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    ::close(fd);
    EXPECT_EQ(count_of(got, "HTTP/1.1 200 OK"), 2) << got;
}

TEST_F(ServerTest, OnePipeliningClientDoesNotHoldUpTheOthers) {
    // One connection sends batches of 2000 pipelined requests as fast as the server takes them,
    // and reads the answers; the server still answers everyone else.
    start(std::chrono::seconds(60));
    const int flood = test::connect_loopback(port_, "127.0.0.2");
    ASSERT_GE(flood, 0);
    std::string batch;
    for (int i = 0; i < 2000; ++i) batch += "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n";
    std::atomic<bool> stop{false};
    std::atomic<long> received{0};
    std::thread writer([&] {
        while (!stop) {
            for (size_t off = 0; off < batch.size() && !stop;) {
                const ssize_t n = ::send(flood, batch.data() + off, batch.size() - off, MSG_NOSIGNAL);
                if (n <= 0) return;
                off += static_cast<size_t>(n);
            }
        }
    });
    std::thread reader([&] {
        char buf[65536];
        while (!stop) {
            pollfd p{flood, POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            const ssize_t n = ::recv(flood, buf, sizeof buf, 0);
            if (n <= 0) return;
            received += n;
        }
    });
    for (int i = 0; i < 100 && received < (1 << 20); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_GE(received, 1 << 20) << "the flood did not get going";
    const long before = received;
    int ok = 0;
    long worst_ms = 0;
    for (int i = 0; i < 10; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        // A scrape that waits behind the flood takes as long as the flood lasts: 5 s means never.
        const auto r = test::http_request(port_, "GET", "/data", {}, 5000);
        worst_ms = std::max<long>(worst_ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::steady_clock::now() - t0).count());
        if (r.status == 200 && r.body.size() == 100000) ++ok;
    }
    for (int i = 0; i < 100 && received < before + (1 << 20); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_GE(received, before + (1 << 20)) << "the flooding client is served too";
    stop = true;
    ::shutdown(flood, SHUT_RDWR);
    writer.join();
    reader.join();
    ::close(flood);
    EXPECT_EQ(ok, 10) << "scrapes answered while one client pipelines (slowest " << worst_ms << " ms)";
}

TEST_F(ServerTest, ANewConnectionIsNotTheFirstToMakeRoom) {
    // At the limit, a connection accepted a moment ago, whose request is on its way, must not be
    // the one closed for the next newcomer: slow request heads that started earlier go first.
    start(std::chrono::seconds(60), [this](HttpOptions& o) {
        o.connection_limit = 10;
        o.clock = clock_.fn();
    });
    std::vector<int> slow;
    for (std::uint64_t i = 0; i < 10; ++i) {
        slow.push_back(connect_counted("127.0.0.2", i + 1));
        ASSERT_GT(::send(slow.back(), "GET /da", 7, MSG_NOSIGNAL), 0);
    }
    clock_.advance(std::chrono::milliseconds(100));
    const int scraper = test::connect_loopback(port_);  // its request is not sent yet
    ASSERT_GE(scraper, 0);
    ASSERT_TRUE(test::eventually([&] { return server_->stats().evicted == 1; })) << "room made for it";
    clock_.advance(std::chrono::milliseconds(50));  // still within the new connections' grace (1 s)
    const int other = test::connect_loopback(port_, "127.0.0.3");  // the next newcomer
    ASSERT_GE(other, 0);
    ASSERT_TRUE(test::eventually([&] { return server_->stats().evicted == 2; })) << "room made for it";
    clock_.advance(std::chrono::milliseconds(50));
    const std::string got = talk(scraper, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5000);
    EXPECT_TRUE(got.starts_with("HTTP/1.1 200 OK")) << "the new connection was closed: '" << got << "'";
    EXPECT_TRUE(closed_by_server(slow.front(), 2000)) << "the oldest slow head made room";
    EXPECT_GE(server_->stats().evicted, 2u);
    for (int fd : slow) ::close(fd);
    ::close(scraper);
    ::close(other);
}

TEST_F(ServerTest, StopsWithConnectionsInEveryPhase) {
    start();
    const int idle = test::connect_loopback(port_);
    const int half = test::connect_loopback(port_);
    ASSERT_GT(::send(half, "GET /da", 7, MSG_NOSIGNAL), 0);
    // A reader that does not read: 20 MB of answers do not fit in the socket buffers, so the
    // server is in the middle of writing.
    const int stuck = test::connect_loopback(port_);
    const std::string many = [] {
        std::string r;
        for (int i = 0; i < 200; ++i) r += "GET /data HTTP/1.1\r\nHost: x\r\n\r\n";
        return r;
    }();
    ASSERT_GT(::send(stuck, many.data(), many.size(), MSG_NOSIGNAL), 0);
    // All three accepted, and answers arriving on the stuck one: the server is writing to it (it
    // read the other two's bytes, sent earlier, in the same loop before).
    auto writing = [&] {
        int queued = 0;
        return server_->stats().open == 3 && ::ioctl(stuck, FIONREAD, &queued) == 0 && queued > 0;
    };
    ASSERT_TRUE(test::eventually(writing)) << server_->stats().open << " connections open";
    server_.reset();
    EXPECT_TRUE(closed_by_server(idle, 2000));
    EXPECT_TRUE(closed_by_server(half, 2000));
    EXPECT_TRUE(closed_by_server(stuck, 2000));
    ::close(idle);
    ::close(half);
    ::close(stuck);
}

}  // namespace
}  // namespace kgpu::exporter
