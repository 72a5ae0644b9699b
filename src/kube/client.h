// A small Kubernetes API client (issue #27): HTTPS with HTTP/1.1 and JSON, one connection per
// request, blocking with a deadline. Configuration from a kubeconfig (token, token file or
// client certificate; CA file or data; insecure-skip-tls-verify) or in-cluster (the service
// account's token, re-read before every request so a rotated one is used, and CA bundle).
// Every request is counted in ApiStats::global() (api_stats.h).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "exporter/tls.h"
#include "kube/http.h"

namespace kgpu::kube {

struct ApiConfig {
    std::string server;      // https://host:port, as configured (for messages)
    std::string host;        // host name or IP address
    int port = 443;
    exporter::TlsClientConfig tls;
    std::string token;       // a bearer token given inline
    std::string token_file;  // or read from this file before each request
    std::string source;      // where this came from: the kubeconfig's path or "in-cluster"
};

// A kubeconfig's current context. Errors: not_found (no file), parse (not YAML, no current
// context, a missing cluster or user, an https-less server, bad base64), each naming the file and
// the field.
Result<ApiConfig> load_kubeconfig(const std::string& path);

// In-cluster: KUBERNETES_SERVICE_HOST and _PORT, and `<account_dir>/token` and `ca.crt`.
// Errors: not_found naming what is missing.
Result<ApiConfig> in_cluster_config(const std::function<const char*(const char*)>& getenv,
                                    const std::string& account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// `kubeconfig` (a flag) when set, else $KUBECONFIG, else in-cluster, as client-go's
// BuildConfigFromFlags with an empty master does.
Result<ApiConfig> resolve_config(const std::optional<std::string>& kubeconfig,
                                 const std::function<const char*(const char*)>& getenv);
// The same from this process's environment: what the subcommands use.
Result<ApiConfig> resolve_config(const std::optional<std::string>& kubeconfig);

// A Node's name is a DNS subdomain (lower-case letters, digits, '-', '.'; at most 253): nothing
// else may reach a request line. Errors: invalid_argument naming the name and what is expected.
Status check_node_name(std::string_view name);

// Client-side rate limit, as client-go's: a token bucket of `burst` refilled at `qps` per second;
// a request beyond it waits for its token (GFD's --kube-api-qps / --kube-api-burst). qps <= 0:
// no limit.
struct RateLimit {
    double qps = 5;
    int burst = 10;
};

// The token bucket itself; thread-safe, and the wait happens outside its lock. `now` is
// injectable for tests.
class RateLimiter {
public:
    explicit RateLimiter(RateLimit limit) : limit_(limit), tokens_(limit.burst) {}
    // How long the caller must wait for its token (reserved now); zero when one is there.
    std::chrono::nanoseconds reserve(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
    void wait() {
        auto d = reserve();
        if (d.count() > 0) std::this_thread::sleep_for(d);
    }

private:
    RateLimit limit_;
    std::mutex mu_;
    double tokens_;
    std::optional<std::chrono::steady_clock::time_point> last_;
};

class Client {
public:
    explicit Client(ApiConfig config, std::chrono::milliseconds timeout = std::chrono::seconds(10), RateLimit limit = {});

    // METHOD path (with its query) with an optional JSON body of `content_type`. Any HTTP status is
    // a response; errors are transport failures (unavailable: connect, TLS, timeout, a cut
    // connection; parse: a response that is not HTTP), naming the server.
    Result<Response> request(std::string_view method, std::string_view path, std::string_view body = {},
                             std::string_view content_type = "application/json");

    // GET `path` (a watch) and hand the body's bytes to `on_body` as they arrive, until the server
    // ends the response, `on_body` returns false, `stop` is set (looked at every 500 ms), or
    // nothing arrives for `idle`. Returns the status and headers, and the body when the status
    // is not 200. Errors: as request(); a connection cut inside the body is unavailable.
    Result<Response> stream(std::string_view path, const std::function<bool(std::string_view)>& on_body,
                            const std::atomic<bool>& stop, std::chrono::milliseconds idle);

    const ApiConfig& config() const { return config_; }
    ~Client();

private:
    struct Conn;
    // `kind`: what a failure so far is (ApiStats's kinds), set as the stages go.
    Status open(Conn& c, std::string_view method, std::string_view path, std::string_view body,
                std::string_view content_type, const std::string& what, std::string_view& kind);
    Result<Response> request_once(std::string_view method, std::string_view path, std::string_view body,
                                  std::string_view content_type, std::string_view& kind);
    Result<Response> stream_once(std::string_view path, const std::function<bool(std::string_view)>& on_body,
                                 const std::atomic<bool>& stop, std::chrono::milliseconds idle, std::string_view& kind,
                                 bool& answered);
    static Result<Response> counted(std::string_view method, std::string_view kind, Result<Response> r);

    ApiConfig config_;
    std::chrono::milliseconds timeout_;
    RateLimiter limiter_;
};

}  // namespace kgpu::kube
