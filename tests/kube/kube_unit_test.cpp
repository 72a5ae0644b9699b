// The Kubernetes API client's pure parts (issue #27): kubeconfig and in-cluster configuration,
// HTTP/1.1 response framing, and the node-label merge patch. The e2e suite talks to a real API
// server (KubeE2E.NodeLabelsWithoutNfd).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "kube/client.h"
#include "kube/node_labels.h"

namespace fs = std::filesystem;
using namespace kgpu;
using nlohmann::json;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        char tmpl[] = "/tmp/kgpu-kube-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { fs::remove_all(path); }
    std::string write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name) << text;
        return (path / name).string();
    }
};

const char* kCa = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

}  // namespace

TEST(KubeConfig, TokenAndCaFileRelativeToTheKubeconfig) {
    TempDir d;
    d.write("ca.crt", kCa);
    const auto path = d.write("config", R"(apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {server: "https://10.0.0.1"}
- name: kube-mini
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "ca.crt"}
users:
- name: admin
  user: {token: "abc123"}
contexts:
- name: kube-mini
  context: {cluster: kube-mini, user: admin}
current-context: kube-mini
)");
    auto c = kube::load_kubeconfig(path);
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->host, "127.0.0.1");
    EXPECT_EQ(c->port, 6443);
    EXPECT_EQ(c->token, "abc123");
    EXPECT_EQ(c->tls.ca_pem, kCa);
    EXPECT_EQ(c->tls.ca_source, (d.path / "ca.crt").string());
    EXPECT_EQ(c->tls.host, "127.0.0.1");
    EXPECT_FALSE(c->tls.insecure);
}

TEST(KubeConfig, InlineDataClientCertificateAndDefaultPort) {
    TempDir d;
    // base64 of "CA", "CERT", "KEY".
    const auto path = d.write("config", R"(current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://api.example.com", certificate-authority-data: "Q0E=", tls-server-name: kubernetes}}]
users: [{name: u, user: {client-certificate-data: "Q0VSVA==", client-key-data: "S0VZ", tokenFile: tok}}]
)");
    auto c = kube::load_kubeconfig(path);
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->host, "api.example.com");
    EXPECT_EQ(c->port, 443);
    EXPECT_EQ(c->tls.ca_pem, "CA");
    EXPECT_EQ(c->tls.cert_pem, "CERT");
    EXPECT_EQ(c->tls.key_pem, "KEY");
    EXPECT_EQ(c->tls.host, "kubernetes");
    EXPECT_EQ(c->token_file, (d.path / "tok").string());
}

TEST(KubeConfig, ErrorsNameTheFileAndTheField) {
    TempDir d;
    auto expect_error = [&](const std::string& text, const std::string& part) {
        const auto path = d.write("config", text);
        auto c = kube::load_kubeconfig(path);
        ASSERT_FALSE(c.has_value()) << text;
        EXPECT_NE(c.error().message.find(path), std::string::npos) << c.error().message;
        EXPECT_NE(c.error().message.find(part), std::string::npos) << c.error().message;
    };
    expect_error("kind: Config\n", "no current-context");
    expect_error("current-context: x\ncontexts: []\n", "'x' is not in contexts");
    expect_error("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n", "cluster 'k' is not in clusters");
    expect_error("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: "
                 "\"http://1.2.3.4\"}}]\n",
                 "expected https://");
    expect_error("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: "
                 "\"https://h:99999\"}}]\n",
                 "port '99999'");
    expect_error("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: "
                 "\"https://h\", certificate-authority-data: \"!!\"}}]\n",
                 "not base64");
    expect_error("current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: "
                 "{server: \"https://h\"}}]\nusers: [{name: u, user: {exec: {command: aws}}}]\n",
                 "exec and auth-provider");
    expect_error("[unclosed", "not YAML");
    expect_error("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: "
                 "\"https://h\\r\\nX: y\"}}]\n",
                 "characters a host name cannot have");
    EXPECT_FALSE(kube::load_kubeconfig((d.path / "absent").string()).has_value());
}

TEST(KubeConfig, InClusterNeedsTheServiceVariablesTokenAndCa) {
    TempDir d;
    std::map<std::string, std::string> env;
    auto getenv = [&](const char* n) -> const char* {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    auto none = kube::in_cluster_config(getenv, d.path.string());
    ASSERT_FALSE(none.has_value());
    EXPECT_NE(none.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
    env = {{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "443"}};
    auto no_ca = kube::in_cluster_config(getenv, d.path.string());
    ASSERT_FALSE(no_ca.has_value());
    EXPECT_NE(no_ca.error().message.find("ca.crt"), std::string::npos);
    d.write("ca.crt", kCa);
    d.write("token", "t0\n");
    auto c = kube::in_cluster_config(getenv, d.path.string());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->host, "fd00::1");
    EXPECT_EQ(c->port, 443);
    EXPECT_EQ(c->token_file, (d.path / "token").string());
    // A flag wins over KUBECONFIG, which wins over in-cluster.
    env["KUBECONFIG"] = (d.path / "absent-kubeconfig").string();
    auto r = kube::resolve_config(std::nullopt, getenv);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().message.find("absent-kubeconfig"), std::string::npos);
}

TEST(KubeHttp, ContentLengthBodyAndIncompleteInput) {
    const std::string full = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
    for (std::size_t cut = 0; cut < full.size(); ++cut) {
        bool complete = true;
        auto r = kube::parse_response(std::string_view(full).substr(0, cut), false, complete);
        ASSERT_TRUE(r.has_value()) << cut << ": " << r.error().message;
        EXPECT_FALSE(complete) << cut;
        // The same cut at the end of the connection is an error, never a short body.
        bool eof_complete = false;
        EXPECT_FALSE(kube::parse_response(std::string_view(full).substr(0, cut), true, eof_complete).has_value()) << cut;
    }
    bool complete = false;
    auto r = kube::parse_response(full, false, complete);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(complete);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->headers.at("content-type"), "application/json");
    EXPECT_EQ(r->body, "{\"a\":1}");
}

TEST(KubeHttp, ChunkedBodyWithExtensionsAndTrailers) {
    const std::string full =
        "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\n{\"me\r\n"
        "E\r\nssage\":\"no\"}  \r\n0\r\nX-Trailer: 1\r\n\r\n";
    for (std::size_t cut = 0; cut < full.size(); ++cut) {
        bool complete = true;
        auto r = kube::parse_response(std::string_view(full).substr(0, cut), false, complete);
        ASSERT_TRUE(r.has_value()) << cut << ": " << r.error().message;
        EXPECT_FALSE(complete) << cut;
    }
    bool complete = false;
    auto r = kube::parse_response(full, false, complete);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_TRUE(complete);
    EXPECT_EQ(r->status, 403);
    EXPECT_EQ(r->body, "{\"message\":\"no\"}  ");
    EXPECT_EQ(kube::describe_failure("GET", "/api/v1/nodes/n", *r), "GET /api/v1/nodes/n: 403 Forbidden: no");
}

TEST(KubeHttp, GarbageIsRefusedNamingWhatIsWrong) {
    auto error = [](std::string_view bytes) {
        bool complete = false;
        auto r = kube::parse_response(bytes, true, complete);
        return r ? std::string("accepted") : r.error().message;
    };
    EXPECT_NE(error("SSH-2.0-OpenSSH\r\n\r\n").find("not an HTTP/1.x status line"), std::string::npos);
    EXPECT_NE(error("HTTP/1.1 abc OK\r\n\r\n").find("no status code"), std::string::npos);
    EXPECT_NE(error("HTTP/1.1 200 OK\r\nbroken\r\n\r\n").find("has no name"), std::string::npos);
    EXPECT_NE(error("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").find("not a number"), std::string::npos);
    EXPECT_NE(error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").find("not hexadecimal"), std::string::npos);
    EXPECT_NE(error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd").find("not followed by CRLF"), std::string::npos);
    EXPECT_NE(error("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").find("not supported"), std::string::npos);
    bool complete = false;
    EXPECT_FALSE(kube::parse_response("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", false, complete, 10).has_value());
    EXPECT_FALSE(kube::parse_response(std::string(70 * 1024, 'a'), false, complete).has_value());
    // No framing: the body runs to the end of the connection.
    auto r = kube::parse_response("HTTP/1.0 200 OK\r\n\r\nabc", true, complete);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(complete);
    EXPECT_EQ(r->body, "abc");
}

TEST(NodeLabels, SetsWhatDiffersRemovesOnlyWhatKgpuSetAndRecordsTheSet) {
    const json node = json::parse(R"({"metadata":{"name":"n","labels":{
        "kubernetes.io/hostname":"n","nvidia.com/gpu.count":"8","nvidia.com/gpu.product":"OLD",
        "nvidia.com/mig.strategy":"single","nvidia.com/set-by-someone-else":"x"},
      "annotations":{"kgpu/node-labels":"nvidia.com/gpu.count,nvidia.com/gpu.product,nvidia.com/mig.strategy"}}})");
    const std::map<std::string, std::string> want = {{"nvidia.com/gpu.count", "8"}, {"nvidia.com/gpu.product", "NVIDIA-H100"},
                                                     {"nvidia.com/gpu.present", "true"}};
    const json patch = kube::node_labels_patch(node, want);
    EXPECT_EQ(patch, json::parse(R"({"metadata":{
        "labels":{"nvidia.com/gpu.product":"NVIDIA-H100","nvidia.com/gpu.present":"true","nvidia.com/mig.strategy":null},
        "annotations":{"kgpu/node-labels":"nvidia.com/gpu.count,nvidia.com/gpu.present,nvidia.com/gpu.product"}}})"))
        << patch.dump();
    // Applied (as a merge patch would be), the same labels again change nothing.
    json after = node;
    after.merge_patch(patch);
    EXPECT_EQ(kube::node_labels_patch(after, want), json::object());
    EXPECT_EQ(after["metadata"]["labels"]["nvidia.com/set-by-someone-else"], "x");
    EXPECT_EQ(after["metadata"]["labels"]["kubernetes.io/hostname"], "n");
    // A node without labels or annotations, and one that is not even an object.
    EXPECT_EQ(kube::node_labels_patch(json::parse(R"({"metadata":{"name":"n"}})"), {{"a", "1"}}),
              json::parse(R"({"metadata":{"labels":{"a":"1"},"annotations":{"kgpu/node-labels":"a"}}})"));
    EXPECT_EQ(kube::node_labels_patch(json(7), {}), json::parse(R"({"metadata":{"annotations":{"kgpu/node-labels":""}}})"));
}

TEST(NodeLabels, ANodeNameThatIsNotADnsSubdomainIsRefusedBeforeAnyRequest) {
    kube::ApiConfig config;
    config.server = "https://127.0.0.1:1";
    config.host = "127.0.0.1";
    config.port = 1;  // nothing listens: a request would fail differently
    kube::Client client(config, std::chrono::milliseconds(200));
    for (const char* bad : {"a/b", "n?watch=1", "N", "a b", "x\r\nHost: evil"}) {
        auto r = kube::write_node_labels(client, bad, {{"a", "1"}});
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_NE(r.error().message.find("expected a DNS subdomain"), std::string::npos) << r.error().message;
    }
    auto empty = kube::write_node_labels(client, "", {});
    ASSERT_FALSE(empty.has_value());
    EXPECT_NE(empty.error().message.find("NODE_NAME"), std::string::npos);
    // A valid name gets as far as the connection, which fails naming the server.
    auto refused = kube::write_node_labels(client, "node-1.example", {{"a", "1"}});
    ASSERT_FALSE(refused.has_value());
    EXPECT_NE(refused.error().message.find("https://127.0.0.1:1/api/v1/nodes/node-1.example"), std::string::npos)
        << refused.error().message;
}

// The client's rate limit (GFD's --kube-api-qps / --kube-api-burst): a burst at once, then one
// every 1/qps; the caller waits outside the limiter's lock for the token it reserved.
TEST(KubeRateLimit, ABurstThenOneEveryInterval) {
    using namespace std::chrono;
    kube::RateLimiter limiter({5, 10});
    const auto t0 = steady_clock::now();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(limiter.reserve(t0).count(), 0) << i;
    EXPECT_EQ(duration_cast<milliseconds>(limiter.reserve(t0)).count(), 200);
    EXPECT_EQ(duration_cast<milliseconds>(limiter.reserve(t0)).count(), 400);
    // 2 s later: the two owed tokens paid back, 8 more in the bucket.
    const auto t2 = t0 + seconds(2);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(limiter.reserve(t2).count(), 0) << i;
    EXPECT_GT(limiter.reserve(t2).count(), 0);
    kube::RateLimiter unlimited({0, 1});
    for (int i = 0; i < 100; ++i) EXPECT_EQ(unlimited.reserve(t0).count(), 0);
}
