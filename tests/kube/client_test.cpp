// The API client on the wire (issue #27): HTTPS to a fake API server on loopback that checks the
// bearer token, as a real one does. A service account token rotated the kubelet's way (a projected
// volume: token -> ..data/token, ..data swapped atomically to a new directory) is used by the next
// request after a 401, for a plain request and for the node watch; every request is counted in
// ApiStats by code or failure kind, and the status file it keeps is what the exporter reads.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "exporter/kube_status.h"
#include "kube/api_stats.h"
#include "kube/client.h"
#include "kube/node_watch.h"
#include "support/expect.h"
#include "support/process.h"
#include "tls_client.h"

using namespace kgpu;
namespace fs = std::filesystem;

namespace {

// An HTTPS server answering one request per connection with what `answer` makes of the request
// head (the raw response bytes), recording every head.
class FakeApiServer {
public:
    FakeApiServer(const test::TestPki& pki, std::function<std::string(const std::string& head)> answer)
        : answer_(std::move(answer)) {
        ctx_ = SSL_CTX_new(TLS_server_method());
        if (SSL_CTX_use_certificate_chain_file(ctx_, pki.server_cert.c_str()) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx_, pki.server_key.c_str(), SSL_FILETYPE_PEM) != 1)
            ADD_FAILURE() << "server certificate does not load";
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
            ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
            ADD_FAILURE() << "listen: " << std::strerror(errno);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeApiServer() {
        stop_ = true;
        thread_.join();
        ::close(fd_);
        SSL_CTX_free(ctx_);
    }
    int port() const { return port_; }
    std::vector<std::string> heads() {
        std::lock_guard lk(mu_);
        return heads_;
    }

private:
    void serve() {
        // A client that hung up must not end the test process (SSL_write / SSL_shutdown to it).
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
        while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            timeval tv{5, 0};
            ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            SSL* ssl = SSL_new(ctx_);
            SSL_set_fd(ssl, c);
            if (SSL_accept(ssl) == 1) {
                std::string in;
                char buf[4096];
                while (in.find("\r\n\r\n") == std::string::npos) {
                    const int n = SSL_read(ssl, buf, sizeof buf);
                    if (n <= 0) break;
                    in.append(buf, static_cast<std::size_t>(n));
                }
                const std::string head = in.substr(0, in.find("\r\n\r\n"));
                {
                    std::lock_guard lk(mu_);
                    heads_.push_back(head);
                }
                const std::string out = answer_(head);
                SSL_write(ssl, out.data(), static_cast<int>(out.size()));
                SSL_shutdown(ssl);
            }
            SSL_free(ssl);
            ::close(c);
        }
    }

    std::function<std::string(const std::string&)> answer_;
    SSL_CTX* ctx_ = nullptr;
    int fd_ = -1, port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread thread_;
    std::mutex mu_;
    std::vector<std::string> heads_;
};

std::string http(int status, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string unauthorized() {
    return http(401, R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})");
}

std::string bearer(const std::string& head) {
    const auto at = head.find("Authorization: Bearer ");
    if (at == std::string::npos) return "";
    const auto start = at + 22;
    return head.substr(start, head.find("\r\n", start) - start);
}

// A service account volume as the kubelet projects it: the files are links into ..data, itself a
// link to a timestamped directory that rotation replaces in one rename.
class ProjectedAccount {
public:
    ProjectedAccount(const std::string& dir, const std::string& ca_file) : dir_(dir) {
        fs::create_directories(dir_);
        ca_ = files::read(ca_file).value_or("");
        rotate("token-0");
        fs::create_symlink("..data/token", dir_ + "/token");
        fs::create_symlink("..data/ca.crt", dir_ + "/ca.crt");
    }
    void rotate(const std::string& token) {
        const std::string gen = "..gen_" + std::to_string(++n_);
        fs::create_directories(dir_ + "/" + gen);
        std::ofstream(dir_ + "/" + gen + "/token") << token;
        std::ofstream(dir_ + "/" + gen + "/ca.crt") << ca_;
        fs::create_symlink(gen, dir_ + "/..data_tmp");
        fs::rename(dir_ + "/..data_tmp", dir_ + "/..data");
        if (n_ > 1) fs::remove_all(dir_ + "/..gen_" + std::to_string(n_ - 1));
    }
    const std::string& dir() const { return dir_; }

private:
    std::string dir_, ca_;
    int n_ = 0;
};

struct Fixture {
    test::TempDir tmp;
    std::optional<test::TestPki> pki;
    std::string error;
    Fixture() { pki = test::make_pki(tmp.path(), error); }
};

kube::ApiConfig in_cluster(const ProjectedAccount& account, int port) {
    const std::string p = std::to_string(port);
    auto c = kube::in_cluster_config(
        [&](const char* n) -> const char* {
            if (std::string_view(n) == "KUBERNETES_SERVICE_HOST") return "127.0.0.1";
            if (std::string_view(n) == "KUBERNETES_SERVICE_PORT") return p.c_str();
            return nullptr;
        },
        account.dir());
    EXPECT_TRUE(c) << c.error().message;
    return *c;
}

const nlohmann::json* find_entry(const nlohmann::json& list, const std::string& key, const std::string& value,
                                 const std::string& key2 = "", const std::string& value2 = "") {
    for (const auto& e : list)
        if (e.value(key, "") == value && (key2.empty() || e.value(key2, "") == value2)) return &e;
    return nullptr;
}

// The entry's count, or null when there is no such entry (a failed expectation, not a crash).
nlohmann::json count_of(const nlohmann::json& list, const std::string& key, const std::string& value,
                        const std::string& key2 = "", const std::string& value2 = "") {
    const nlohmann::json* e = find_entry(list, key, value, key2, value2);
    return e ? (*e)["count"] : nlohmann::json();
}

}  // namespace

TEST(KubeClient, ARotatedServiceAccountTokenIsUsedByTheNextRequestAfterA401) {
    Fixture f;
    ASSERT_TRUE(f.pki) << f.error;
    std::atomic<bool> rotated{false};
    FakeApiServer server(*f.pki, [&](const std::string& head) {
        // The API server takes only the current token: the old one is refused once rotated.
        const std::string want = rotated ? "token-1" : "token-0";
        if (bearer(head) != want) return unauthorized();
        return http(200, R"({"kind":"Node","metadata":{"name":"n1","labels":{"nvidia.com/device-plugin.config":"ts4"}}})");
    });
    ProjectedAccount account(f.tmp.path() + "/sa", f.pki->ca_cert);
    kube::ApiStats::global().reset();
    kube::ApiStats::global().publish(f.tmp.path() + "/device-plugin.json", "device-plugin");
    kube::Client client(in_cluster(account, server.port()), std::chrono::seconds(5));

    auto r = client.request("GET", "/api/v1/nodes/n1");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200);

    rotated = true;  // the API server moved on; the kubelet has not rotated the file yet
    r = client.request("GET", "/api/v1/nodes/n1");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 401);

    account.rotate("token-1");
    auto label = kube::read_node_label(client, "n1", "nvidia.com/device-plugin.config");
    ASSERT_TRUE(label) << label.error().message;
    EXPECT_EQ(*label, "ts4");
    const auto heads = server.heads();
    ASSERT_EQ(heads.size(), 3u);
    EXPECT_EQ(bearer(heads[1]), "token-0");
    EXPECT_EQ(bearer(heads[2]), "token-1");
    EXPECT_EQ(heads[2].rfind("GET /api/v1/nodes/n1 HTTP/1.1\r\n", 0), 0u) << heads[2];

    // Counted: two answers 200, one 401 (kind unauthorized); and the status file says the same,
    // in the form the exporter reads.
    auto j = kube::ApiStats::global().to_json();
    ASSERT_TRUE(find_entry(j["requests"], "method", "GET", "code", "200"));
    EXPECT_EQ(count_of(j["requests"], "method", "GET", "code", "200"), 2);
    EXPECT_EQ(count_of(j["requests"], "method", "GET", "code", "401"), 1);
    EXPECT_EQ(count_of(j["errors"], "kind", "unauthorized"), 1);
    // Another process's temporary file beside it (a second writer given the same path by
    // mistake): this process writes through a temporary file of its own and leaves none behind.
    std::ofstream(f.tmp.path() + "/device-plugin.json.tmp") << "another writer's\n";
    kube::ApiStats::global().flush();  // the writer thread's next write, now
    auto text = files::read(f.tmp.path() + "/device-plugin.json");
    ASSERT_TRUE(text);
    EXPECT_EQ(files::read(f.tmp.path() + "/device-plugin.json.tmp").value_or(""), "another writer's\n");
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(f.tmp.path()))
        if (e.path().filename().string().starts_with("device-plugin")) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"device-plugin.json", "device-plugin.json.tmp"}));
    auto parsed = exporter::parse_kube_api_status(*text);
    ASSERT_TRUE(parsed) << parsed.error().message << "\n" << *text;
    EXPECT_EQ(parsed->component, "device-plugin");
    EXPECT_EQ(parsed->requests.size(), 2u);
    ASSERT_TRUE(parsed->last_success);
    kube::ApiStats::global().reset();  // and no file any more
}

TEST(KubeClient, TheWatchBacksOffOnA401AndResumesWithTheRotatedToken) {
    Fixture f;
    ASSERT_TRUE(f.pki) << f.error;
    std::atomic<bool> rotated{false};
    std::atomic<int> refused{0};
    FakeApiServer server(*f.pki, [&](const std::string& head) -> std::string {
        if (bearer(head) != (rotated ? "token-1" : "token-0")) {
            ++refused;
            return unauthorized();
        }
        const nlohmann::json n = {{"kind", "Node"},
                                  {"metadata", {{"name", "n1"}, {"resourceVersion", "7"}, {"labels", {{"nvidia.com/device-plugin.config", "ts4"}}}}}};
        if (head.find("watch=true") == std::string::npos)
            return http(200, nlohmann::json{{"kind", "NodeList"}, {"metadata", {{"resourceVersion", "7"}}}, {"items", {n}}}.dump());
        // A watch: one chunked event, then the end of the stream (as timeoutSeconds ends it).
        const std::string event = nlohmann::json{{"type", "MODIFIED"}, {"object", n}}.dump() + "\n";
        char size[16];
        std::snprintf(size, sizeof size, "%zx", event.size());
        return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(size) +
               "\r\n" + event + "\r\n0\r\n\r\n";
    });
    ProjectedAccount account(f.tmp.path() + "/sa", f.pki->ca_cert);
    kube::ApiStats::global().reset();
    rotated = true;  // the file still holds token-0
    kube::Client client(in_cluster(account, server.port()), std::chrono::seconds(5));
    std::vector<std::string> seen;
    std::mutex mu;
    kube::NodeWatch::Options o;
    o.node = "n1";
    o.min_backoff = std::chrono::milliseconds(20);
    o.max_backoff = std::chrono::milliseconds(100);
    kube::NodeWatch watch([&](std::string_view p) { return client.request("GET", p); },
                          [&](std::string_view p, const std::function<bool(std::string_view)>& on_body,
                              const std::atomic<bool>& stop) { return client.stream(p, on_body, stop, std::chrono::seconds(5)); },
                          o, [&](const nlohmann::json& n) {
                              std::lock_guard lk(mu);
                              seen.push_back(kube::label_of(n, "nvidia.com/device-plugin.config").value_or("?"));
                          });
    // In the caller's thread first: the list is refused, named.
    auto st = watch.step();
    ASSERT_FALSE(st);
    EXPECT_NE(st.error().message.find("401"), std::string::npos) << st.error().message;

    watch.start();  // backs off and retries: 401 each time until the kubelet rotates the file
    ASSERT_TRUE(kgpu::test::eventually([&] { return refused >= 3; })) << "no retry after the first 401: " << refused;
    account.rotate("token-1");
    bool resumed = false;
    for (int i = 0; i < 200 && !resumed; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
        std::lock_guard lk(mu);
        resumed = seen.size() >= 2;  // the list's node and the watch's event
    }
    watch.stop();
    EXPECT_TRUE(resumed);
    EXPECT_GE(watch.lists(), 1u);
    auto j = kube::ApiStats::global().to_json();
    ASSERT_TRUE(find_entry(j["requests"], "method", "WATCH", "code", "200")) << j.dump();
    EXPECT_GE(count_of(j["errors"], "kind", "unauthorized"), 2) << j.dump();
    kube::ApiStats::global().reset();
}

// An API server that answers before reading the whole request and hangs up (as one does with a
// 413 for a body over its limit): the client's write fails (or the answer wins the race), and that
// is this request's failure, counted, nothing more.
TEST(KubeClient, AServerThatHangsUpMidRequestIsJustAFailedRequest) {
    ::signal(SIGPIPE, SIG_DFL);  // as kgpu runs: a SIGPIPE that got through would end this test
    Fixture f;
    ASSERT_TRUE(f.pki) << f.error;
    FakeApiServer server(*f.pki, [](const std::string&) {
        return http(413, R"({"kind":"Status","status":"Failure","message":"Request entity too large","code":413})");
    });
    ProjectedAccount account(f.tmp.path() + "/sa", f.pki->ca_cert);
    kube::ApiStats::global().reset();
    kube::Client client(in_cluster(account, server.port()), std::chrono::seconds(5));
    const std::string body(8u << 20, 'x');
    for (int i = 0; i < 5; ++i) {
        auto r = client.request("PATCH", "/api/v1/nodes/n1", body, "application/merge-patch+json");
        if (r) {
            EXPECT_EQ(r->status, 413);  // the answer can win the race; usually the write fails
        }
    }
    auto j = kube::ApiStats::global().to_json();
    double n = 0;
    for (const auto& e : j["requests"]) n += e["count"].get<double>();
    EXPECT_EQ(n, 5.0) << j.dump();
    kube::ApiStats::global().reset();
}

// kB resident in the executable mappings of libcrypto.so.3 (/proc/self/smaps).
long libcrypto_text_rss() {
    std::ifstream in("/proc/self/smaps");
    std::string line;
    bool in_text = false;
    long kb = 0;
    while (std::getline(in, line)) {
        if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos &&
            line.find(' ') != std::string::npos) {
            in_text = line.find("libcrypto.so.3") != std::string::npos && line.find(" r-xp ") != std::string::npos;
        } else if (in_text && line.rfind("Rss:", 0) == 0) {
            kb += std::stol(line.substr(4));
        }
    }
    return kb;
}

// After a request, the client gives OpenSSL's read-only pages back (exporter::tls_release_pages):
// the code a handshake brought in leaves the RSS, and the next request faults back what it runs
// and works as before.
TEST(KubeClient, OpenSslCodePagesAreGivenBackAfterARequestAndComeBackWhenNeeded) {
    Fixture f;
    ASSERT_TRUE(f.pki) << f.error;
    FakeApiServer server(*f.pki, [](const std::string&) { return http(200, R"({"major":"1","minor":"32"})"); });
    ProjectedAccount account(f.tmp.path() + "/sa", f.pki->ca_cert);
    kube::Client client(in_cluster(account, server.port()), std::chrono::seconds(5));
    auto r = client.request("GET", "/version");  // gives the pages back when done
    ASSERT_TRUE(r) << r.error().message;
    const long after_release = libcrypto_text_rss();
    // The same handshake again, without giving back: what it keeps resident.
    {
        test::TlsClientOptions o;
        o.ca_file = f.pki->ca_cert;
        auto direct = test::https_request(server.port(), "GET", "/version", o);  // the test's own OpenSSL, same library
        ASSERT_EQ(direct.http.status, 200) << direct.error;
    }
    const long used = libcrypto_text_rss();
    EXPECT_GT(used, 256) << "a handshake runs more than 256 kB of libcrypto's code, with the kernel's fault-around";
    EXPECT_LT(after_release * 4, used) << after_release << " kB kept after the release, " << used << " kB in use";
    r = client.request("GET", "/version");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200);
}

TEST(KubeClient, TransportFailuresAreCountedByKind) {
    Fixture f;
    ASSERT_TRUE(f.pki) << f.error;
    ProjectedAccount account(f.tmp.path() + "/sa", f.pki->ca_cert);
    kube::ApiStats::global().reset();
    int closed_port = 0;
    {
        FakeApiServer garbage(*f.pki, [](const std::string&) { return std::string("SSH-2.0-OpenSSH_9.2\r\n"); });
        kube::Client client(in_cluster(account, garbage.port()), std::chrono::seconds(5));
        auto r = client.request("GET", "/version");
        EXPECT_FALSE(r);
        closed_port = garbage.port();
    }
    {
        // An API server that takes the request and does not answer in time.
        FakeApiServer slow(*f.pki, [](const std::string&) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            return http(200, "{}");
        });
        kube::Client client(in_cluster(account, slow.port()), std::chrono::milliseconds(500));
        EXPECT_FALSE(client.request("GET", "/version"));
        // A certificate its CA did not sign (the server's own certificate taken as the CA).
        kube::ApiConfig wrong_ca = in_cluster(account, slow.port());
        wrong_ca.tls.ca_pem = files::read(f.pki->server_cert).value_or("");
        kube::Client untrusted(wrong_ca, std::chrono::seconds(5));
        auto r = untrusted.request("GET", "/version");
        EXPECT_FALSE(r);
    }
    // Nothing listens there any more.
    kube::Client gone(in_cluster(account, closed_port), std::chrono::seconds(2));
    EXPECT_FALSE(gone.request("PATCH", "/api/v1/nodes/n1", "{}", "application/merge-patch+json"));
    // The token file vanished (the volume unmounted).
    fs::remove(account.dir() + "/token");
    EXPECT_FALSE(gone.request("GET", "/version"));

    auto j = kube::ApiStats::global().to_json();
    EXPECT_EQ(count_of(j["errors"], "kind", "malformed"), 1) << j.dump();
    EXPECT_EQ(count_of(j["errors"], "kind", "unreachable"), 1) << j.dump();
    EXPECT_EQ(count_of(j["errors"], "kind", "token"), 1) << j.dump();
    ASSERT_TRUE(find_entry(j["errors"], "kind", "timeout")) << j.dump();
    EXPECT_EQ(count_of(j["errors"], "kind", "timeout"), 1) << j.dump();
    ASSERT_TRUE(find_entry(j["errors"], "kind", "tls")) << j.dump();
    EXPECT_EQ(count_of(j["errors"], "kind", "tls"), 1) << j.dump();
    EXPECT_EQ(count_of(j["requests"], "method", "GET", "code", "<error>"), 4) << j.dump();
    EXPECT_EQ(count_of(j["requests"], "method", "PATCH", "code", "<error>"), 1) << j.dump();
    EXPECT_FALSE(j.contains("last_success"));
    kube::ApiStats::global().reset();
}
