// `kgpu exporter` as a process against the simulator: flags, endpoints, promtool, load, signals,
// sim events, pod labels, and a real Prometheus server scraping it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <sstream>
#include <thread>

#include "metrics_text.h"
#include "support/fake_pod_resources.h"
#include "support/process.h"

namespace kgpu::test {
namespace {

std::string fixture(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A running `kgpu exporter` on 127.0.0.1 with a port it picked.
class Exporter {
public:
    Exporter(const std::string& node, std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {}) {
        std::vector<std::string> argv = {KGPU_BINARY,           "exporter", "--address", "127.0.0.1:0",
                                         "--collect-interval", "200",      "--nvml-library", KGPU_SIM_LIBRARY};
        argv.insert(argv.end(), extra.begin(), extra.end());
        env["KGPU_SIM_NODE"] = fixture(node);
        proc_ = std::make_unique<ChildProcess>(argv, env);
        const std::regex re("listening on 127\\.0\\.0\\.1:([0-9]+)");
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (std::chrono::steady_clock::now() < deadline && proc_->running()) {
            std::smatch m;
            const std::string err = proc_->err();
            if (std::regex_search(err, m, re)) {
                port_ = std::stoi(m[1]);
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ADD_FAILURE() << "exporter did not start; stderr:\n" << proc_->err();
    }
    int port() const { return port_; }
    ChildProcess& proc() { return *proc_; }
    HttpResult get(const std::string& path, const std::vector<std::string>& headers = {}) const {
        return http_request(port_, "GET", path, headers);
    }
    ParsedMetrics metrics() const {
        auto r = get("/metrics");
        EXPECT_EQ(r.status, 200);
        auto m = parse_metrics(r.body);
        EXPECT_TRUE(m.errors.empty()) << m.errors[0];
        return m;
    }
    bool wait_metrics(const std::function<bool(const ParsedMetrics&)>& ok, int seconds = 30) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        while (std::chrono::steady_clock::now() < deadline) {
            auto r = get("/metrics");
            if (r.status == 200 && ok(parse_metrics(r.body))) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return false;
    }

private:
    std::unique_ptr<ChildProcess> proc_;
    int port_ = 0;
};

TEST(ExporterCli, BadFlagsExitTwoNamingTheFlag) {
    const std::map<std::string, std::string> env = {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}};
    struct Case {
        std::vector<std::string> args;
        std::string flag;
    };
    for (const auto& c : std::vector<Case>{{{"--address", "9400"}, "--address"},
                                           {{"--address", "host:99999"}, "--address"},
                                           {{"--collect-interval", "0"}, "--collect-interval"},
                                           {{"--collect-interval", "fast"}, "--collect-interval"},
                                           {{"--hostname-label", "HOST"}, "--hostname-label"},
                                           {{"--kubernetes-gpu-id-type", "serial"}, "--kubernetes-gpu-id-type"},
                                           {{"--resource-name", "gpu"}, "--resource-name"},
                                           {{"--http-idle-timeout", "-1"}, "--http-idle-timeout"},
                                           {{"--no-such-flag"}, "--no-such-flag"}}) {
        std::vector<std::string> argv = {KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY};
        argv.insert(argv.end(), c.args.begin(), c.args.end());
        auto r = run_process(argv, env);
        EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
        EXPECT_NE(r.err.find(c.flag), std::string::npos) << r.err;
    }
    auto r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY},
                         {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}, {"DCGM_EXPORTER_INTERVAL", "soon"}});
    EXPECT_EQ(r.exit_code, 2) << "env vars are validated like flags";
    EXPECT_NE(r.err.find("--collect-interval"), std::string::npos) << r.err;
}

TEST(ExporterCli, NvmlThatCannotLoadExitsOne) {
    auto r = run_process({KGPU_BINARY, "exporter", "--address", "127.0.0.1:0", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << r.err;
}

TEST(ExporterCli, PrintsTheMetricsDocsPage) {
    auto r = run_process({KGPU_BINARY, "exporter", "--print-metrics-markdown"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, read_file(std::string(KGPU_SOURCE_DIR) + "/docs/metrics.md"));
}

TEST(ExporterCli, EnvVarsInDcgmExportersNames) {
    Exporter e("t4x4.yaml", {}, {{"DCGM_EXPORTER_NO_HOSTNAME", "true"}, {"NODE_NAME", "ignored"}});
    auto m = e.metrics();
    auto s = m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_FALSE(s[0]->label("Hostname"));

    Exporter named("t4x4.yaml", {"--hostname-label", "hostname"}, {{"NODE_NAME", "gpu-node-3"}});
    s = named.metrics().find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0]->label("hostname"), "gpu-node-3");
}

TEST(ExporterServe, EndpointsContentTypesAndGzip) {
    Exporter e("dgx-h100.yaml");
    auto r = e.get("/metrics");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_FALSE(r.headers.count("content-encoding"));
    auto m = parse_metrics(r.body);
    EXPECT_TRUE(m.errors.empty());
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP").size(), 8u);

    auto z = e.get("/metrics", {"Accept-Encoding: gzip"});
    ASSERT_EQ(z.status, 200);
    EXPECT_EQ(z.headers["content-encoding"], "gzip");
    EXPECT_EQ(z.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    auto plain = gunzip(z.body);
    ASSERT_TRUE(plain);
    EXPECT_EQ(parse_metrics(*plain).find("DCGM_FI_DEV_GPU_TEMP").size(), 8u);

    auto head = http_request(e.port(), "HEAD", "/metrics");
    EXPECT_EQ(head.status, 200);
    EXPECT_TRUE(head.body.empty());
    auto health = e.get("/health");
    EXPECT_EQ(health.status, 200);
    EXPECT_EQ(health.body, "OK\n");
    EXPECT_EQ(e.get("/").status, 200);
    EXPECT_EQ(e.get("/metrics/extra").status, 404);
    EXPECT_EQ(e.get("/favicon.ico").status, 404);
    auto post = http_request(e.port(), "POST", "/metrics", {"Content-Length: 3"});
    EXPECT_EQ(post.status, 405);
    EXPECT_EQ(post.headers["allow"], "GET, HEAD");
    EXPECT_EQ(http_request(e.port(), "PUT", "/health").status, 405);
}

TEST(ExporterServe, PromtoolAcceptsTheOutputWithLintFindingsOnlyForDcgmNames) {
    if (::access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "/usr/bin/promtool is missing (Debian package prometheus)";
    for (const char* node : {"dgx-h100.yaml", "a100-mig.yaml", "t4x4.yaml"}) {
        SCOPED_TRACE(node);
        Exporter e(node);
        TempDir dir;
        auto r = e.get("/metrics");
        ASSERT_EQ(r.status, 200);
        const std::string file = dir.write("metrics.txt", r.body);
        auto check = run_process({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file});
        // 0: clean, 3: lint findings; 1 would be a parse error.
        EXPECT_TRUE(check.exit_code == 0 || check.exit_code == 3) << check.exit_code << "\n" << check.out << check.err;
        std::istringstream lines(check.out + check.err);
        std::string line;
        int findings = 0;
        while (std::getline(lines, line)) {
            if (line.empty()) continue;
            ++findings;
            EXPECT_EQ(line.find("kgpu_"), std::string::npos) << "lint finding for our own metric: " << line;
            EXPECT_NE(line.find("DCGM_FI_"), std::string::npos) << line;
        }
        EXPECT_GT(findings, 0) << "promtool flags the dcgm names' camelCase labels / counters without _total; "
                                  "no findings at all means promtool did not read the text";
    }
}

TEST(ExporterServe, SixtyFourIdleConnectionsAndHundredsOfConcurrentScrapes) {
    Exporter e("dgx-h100.yaml", {"--http-idle-timeout", "120"});
    std::vector<int> idle;
    for (int i = 0; i < 64; ++i) {
        int fd = connect_loopback(e.port());
        ASSERT_GE(fd, 0);
        idle.push_back(fd);
    }
    auto r = http_request(e.port(), "GET", "/metrics", {}, 20000);
    EXPECT_EQ(r.status, 200) << "a scrape must not wait behind idle connections";
    for (int fd : idle) ::close(fd);

    constexpr int kThreads = 16, kPerThread = 20;
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                auto x = http_request(e.port(), "GET", "/metrics", t % 2 ? std::vector<std::string>{"Accept-Encoding: gzip"}
                                                                           : std::vector<std::string>{});
                if (x.status == 200 && !x.body.empty()) ++ok;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(ok.load(), kThreads * kPerThread);
    EXPECT_EQ(e.get("/health").status, 200);
}

TEST(ExporterServe, SigtermAndSigintExitCleanly) {
    for (int sig : {SIGTERM, SIGINT}) {
        Exporter e("t4x4.yaml");
        ASSERT_EQ(e.get("/metrics").status, 200);
        e.proc().signal(sig);
        EXPECT_EQ(e.proc().wait(30000), 0) << e.proc().err();
    }
}

TEST(ExporterServe, SimEventsAtTheNextInterval) {
    TempDir dir;
    const std::string events = dir.write("events", "");
    Exporter e("dgx-h100.yaml", {}, {{"KGPU_SIM_EVENTS", events}});
    auto append = [&](const std::string& line) {
        std::ofstream out(events, std::ios::app);
        out << line << "\n";
    };
    append("util 0 91 12");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) { return m.value("DCGM_FI_DEV_GPU_UTIL", {{"gpu", "0"}}) == 91.0; }));
    append("proc 4 777 1048576 infer");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return m.value("kgpu_process_fb_used_bytes", {{"gpu", "4"}, {"pid", "777"}}) == 1048576.0;
    }));
    append("xid 6 63");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) { return m.value("DCGM_FI_DEV_XID_ERRORS", {{"gpu", "6"}}) == 63.0; }));
    append("lost 7");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "7"}}).empty() &&
               m.value("kgpu_gpu_health", {{"gpu", "7"}, {"state", "lost"}}) == 1.0 &&
               m.find("DCGM_FI_DEV_GPU_TEMP").size() == 7;
    }));
    EXPECT_EQ(e.get("/health").status, 200) << "a lost GPU shows in the metrics, not in /health";
}

int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

std::string url_encode(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '_' || c == '-' || c == '.') out += static_cast<char>(c);
        else out += fmt::format("%{:02X}", c);
    }
    return out;
}

TEST(ExporterPrometheus, ARealPrometheusScrapesGpuMetricsWithPodLabels) {
    if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "/usr/bin/prometheus is missing (Debian package prometheus)";
    TempDir dir;
    FakePodResources pr(dir.path() + "/kubelet.sock");
    ASSERT_TRUE(pr.start());
    pr.add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {"GPU-64bbca15-1776-feaf-35c7-c0761cd05691", "1"});
    Exporter e("dgx-h100.yaml",
               {"--kubernetes", "--pod-resources-kubelet-socket", dir.path() + "/kubelet.sock",
                "--container-runtime-endpoint", "unix://" + dir.path() + "/no-cri.sock", "--proc-root", dir.path()});
    ASSERT_NE(e.port(), 0);
    ASSERT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return !m.find("DCGM_FI_DEV_GPU_UTIL", {{"pod", "trainer-0"}}).empty();
    })) << "pod labels never showed up";

    const int prom_port = free_port();
    const std::string config = dir.write("prometheus.yml",
                                         "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                         "scrape_configs:\n  - job_name: kgpu\n    static_configs:\n"
                                         "      - targets: ['127.0.0.1:" + std::to_string(e.port()) + "']\n");
    ChildProcess prom({"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                       "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"});
    const std::string query = "/api/v1/query?query=" + url_encode("DCGM_FI_DEV_GPU_UTIL{pod=\"trainer-0\",namespace=\"ml\"}");
    nlohmann::json result;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline && prom.running()) {
        auto r = http_request(prom_port, "GET", query, {}, 5000);
        if (r.status == 200) {
            auto j = nlohmann::json::parse(r.body, nullptr, false);
            if (!j.is_discarded() && j["status"] == "success" && j["data"]["result"].size() == 2) {
                result = j["data"]["result"];
                break;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    ASSERT_EQ(result.size(), 2u) << "Prometheus never returned the series; its log:\n" << prom.err();
    std::set<std::string> gpus;
    for (const auto& s : result) {
        EXPECT_EQ(s["metric"]["container"], "main");
        EXPECT_EQ(s["metric"]["job"], "kgpu");
        EXPECT_TRUE(s["metric"].contains("UUID"));
        EXPECT_TRUE(s["metric"].contains("modelName"));
        gpus.insert(s["metric"]["gpu"].get<std::string>());
    }
    EXPECT_EQ(gpus, (std::set<std::string>{"0", "1"}));
    // The scrape itself was healthy.
    auto up = http_request(prom_port, "GET", "/api/v1/query?query=up", {}, 5000);
    EXPECT_NE(up.body.find("\"1\""), std::string::npos) << up.body;
    prom.signal(SIGTERM);
    prom.wait(30000);
}

}  // namespace
}  // namespace kgpu::test
