// The HTTP server alone (a handler that answers from memory): address parsing, Accept-Encoding,
// idle and slow clients, many connections at once.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "exporter/http.h"
#include "metrics_text.h"

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

class ServerTest : public ::testing::Test {
protected:
    void start(std::chrono::seconds idle_timeout = std::chrono::seconds(60)) {
        HttpOptions o;
        o.address = "127.0.0.1:0";
        o.idle_timeout = idle_timeout;
        auto body = std::make_shared<const std::string>(std::string(100000, 'x'));
        auto s = HttpServer::start(o, [this, body](const HttpRequest& r) {
            ++requests_;
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
    start();
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

}  // namespace
}  // namespace kgpu::exporter
