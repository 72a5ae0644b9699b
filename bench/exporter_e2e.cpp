// End-to-end figures for `kgpu exporter` (DESIGN.md budgets), measured from outside the process
// the way Prometheus sees it: the built binary on the simulator, a fake kubelet PodResources
// server with 100 pods sharing the GPUs (time-slicing replicas, --kubernetes-virtual-gpus so each
// pod has its own series), loopback HTTP, every catalogue metric (GPM profiling metrics included).
//
//   build/release/bench/kgpu_exporter_e2e [fixture.yaml] [collections for the RSS figure, default 3600]
//
// Figures: scrape latency p50/p99 (plain and gzip) and concurrent scrape throughput, each also as
// a ratio against a bare server measured in the same run, taking turns with kgpu (this binary run
// as `--bare-server`: one thread that accepts, reads the request head and writes kgpu's own
// answer, prepared in memory, with one send loop: the least any HTTP server can do for the same
// bytes), then RSS after N
// collections at a 10 ms interval, CPU per collection (utime+stime of the process over those
// passes, with nobody scraping), and what that is at a 1 s interval. Then the floods of issue #14:
// scrape latency with 2000 idle connections and with 1000 clients trickling a request head one
// byte a second (from other loopback addresses than the scraper), and while one client pipelines
// without pause, and RSS, scrape size and CPU
// per collection with 100k pods on one GPU.
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include "metrics_text.h"
#include "support/fake_pod_resources.h"
#include "support/files.h"
#include "support/process.h"

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kgpu::test::ChildProcess;

namespace {

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Prints p50, p99 and max; returns p50.
double report(const char* what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))]; };
    std::printf("%-44s n=%-5zu p50=%9.1f us  p99=%9.1f us  max=%9.1f us\n", what, v.size(), pct(0.5), pct(0.99), v.back());
    return pct(0.5);
}

// The baseline: one thread, blocking calls, kgpu's answers (headers and body) prepared in memory.
// It answers a request whose head names gzip with the gzip body, any other with the plain one,
// then closes the connection (the client asks for Connection: close, as with kgpu).
int bare_server(const std::string& plain_file, const std::string& gzip_file) {
    auto answer = [](const std::string& body, bool gzip) {
        return fmt::format("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n{}"
                           "Content-Length: {}\r\nConnection: close\r\n\r\n",
                           gzip ? "Content-Encoding: gzip\r\n" : "", body.size()) +
               body;
    };
    const std::string plain = answer(kgpu::test::slurp(plain_file), false);
    const std::string gzip = answer(kgpu::test::slurp(gzip_file), true);
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s, 4096) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        std::perror("bare server");
        return 1;
    }
    std::fprintf(stderr, "listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
    for (std::string head;; head.clear()) {
        const int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        char buf[4096];
        while (head.find("\r\n\r\n") == std::string::npos) {
            const ssize_t n = ::recv(c, buf, sizeof buf, 0);
            if (n <= 0) break;
            head.append(buf, static_cast<size_t>(n));
        }
        const std::string& a = head.find("gzip") != std::string::npos ? gzip : plain;
        for (size_t off = 0; off < a.size();) {
            const ssize_t n = ::send(c, a.data() + off, a.size() - off, MSG_NOSIGNAL);
            if (n <= 0) break;
            off += static_cast<size_t>(n);
        }
        ::close(c);
    }
}

// A flood's scrapes, with their p50 against the undisturbed scrapes' of the same run.
void flood_report(const char* what, std::vector<double> v, double quiet_p50) {
    const double p50 = report(what, std::move(v));
    std::printf("%-44s %.2fx the undisturbed gzip scrape's p50\n", "", p50 / quiet_p50);
}

// A fixed job to measure CPU figures against, on this machine in this run: the CPU time (this
// thread's) of compressing `body` with zlib's default level, median of 21.
double reference_cpu_us(const std::string& body) {
    std::vector<double> v;
    std::vector<Bytef> out(compressBound(static_cast<uLong>(body.size())));
    for (int i = 0; i < 21; ++i) {
        timespec a{}, b{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        uLongf n = static_cast<uLongf>(out.size());
        compress(out.data(), &n, reinterpret_cast<const Bytef*>(body.data()), static_cast<uLong>(body.size()));
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        v.push_back(static_cast<double>(b.tv_sec - a.tv_sec) * 1e6 + static_cast<double>(b.tv_nsec - a.tv_nsec) / 1e3);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// The 1-minute load average (/proc/loadavg), printed with the figures: the machine is shared.
double load_average() {
    double l = -1;
    std::ifstream("/proc/loadavg") >> l;
    return l;
}

long status_kib(int pid, const char* key) { return kgpu::test::proc_status_kib(pid, key); }

// utime + stime of a process, in seconds.
double cpu_seconds(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    auto close = s.rfind(')');
    std::istringstream rest(s.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14) utime = std::stoull(field);
        if (i == 15) stime = std::stoull(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int start_port(ChildProcess& p) {
    const std::regex re("listening on 127\\.0\\.0\\.1:([0-9]+)");
    const auto deadline = Clock::now() + 60s;
    while (Clock::now() < deadline && p.running()) {
        std::smatch m;
        const std::string err = p.err();
        if (std::regex_search(err, m, re)) return std::stoi(m[1]);
        std::this_thread::sleep_for(10ms);
    }
    return 0;
}

double collections(int port) {
    auto r = kgpu::test::http_request(port, "GET", "/metrics");
    auto m = kgpu::test::parse_metrics(r.body);
    return m.value("kgpu_collections_total").value_or(-1);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 4 && argv[1] == std::string("--bare-server")) return bare_server(argv[2], argv[3]);
    std::printf("%-44s %.2f (1-minute load average at start, %ld CPUs)\n", "machine", load_average(),
                ::sysconf(_SC_NPROCESSORS_ONLN));
    const std::string node = argc > 1 ? argv[1] : std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml";
    const int passes = argc > 2 ? std::atoi(argv[2]) : 3600;
    kgpu::test::TempDir dir;

    // 100 pods, spread over the GPUs as time-slicing replicas "<uuid>::<n>".
    const YAML::Node yaml = YAML::LoadFile(node);
    std::vector<std::string> uuids;
    for (const auto& g : yaml["gpus"]) uuids.push_back(g["uuid"].as<std::string>());
    kgpu::test::FakePodResources pr(dir.path() + "/kubelet.sock");
    if (!pr.start()) return 1;
    for (int i = 0; i < 100 && !uuids.empty(); ++i)
        pr.add_pod("team-" + std::to_string(i % 5), "pod-" + std::to_string(i), "main", "nvidia.com/gpu",
                   {uuids[static_cast<size_t>(i) % uuids.size()] + "::" + std::to_string(i / uuids.size())});

    const std::vector<std::string> common = {KGPU_BINARY, "exporter", "--address", "127.0.0.1:0", "--nvml-library",
                                             KGPU_SIM_LIBRARY, "--kubernetes", "--pod-resources-kubelet-socket",
                                             dir.path() + "/kubelet.sock", "--container-runtime-endpoint",
                                             "unix://" + dir.path() + "/no-cri.sock", "--proc-root", dir.path(),
                                             // One series per pod on the shared GPUs: the most series.
                                             "--kubernetes-virtual-gpus"};

    double reference_us = 0;  // reference_cpu_us of the scrape body
    double quiet_gzip_p50 = 0;  // a gzip scrape's p50 with nothing else going on: the floods' baseline

    // 1. Scrapes from the cache (1 s interval, as Prometheus would see it).
    {
        auto argv1 = common;
        argv1.insert(argv1.end(), {"--collect-interval", "1000", "--log-level", "info"});
        ChildProcess p(kgpu::test::under_profiler(argv1), {{"KGPU_SIM_NODE", node}});
        const int port = start_port(p);
        if (!port) {
            std::cerr << "exporter did not start\n" << p.err();
            return 1;
        }
        // The profiling metrics (GPM) appear from the second pass on.
        for (int i = 0; i < 100 && collections(port) < 2; ++i) std::this_thread::sleep_for(50ms);
        auto first = kgpu::test::http_request(port, "GET", "/metrics");
        auto parsed = kgpu::test::parse_metrics(first.body);
        auto gz = kgpu::test::http_request(port, "GET", "/metrics", {"Accept-Encoding: gzip"});
        std::printf("%-44s %zu series, %zu bytes (%zu gzip), %zu GPUs, 100 pods\n", "scrape body", parsed.samples.size(),
                    first.body.size(), gz.body.size(), uuids.size());
        reference_us = reference_cpu_us(first.body);
        std::printf("%-44s %.0f us CPU (zlib compress() of the plain body, median of 21): the unit of the CPU ratios below\n",
                    "reference job", reference_us);
        // The baseline serves these very bytes.
        const std::string plain_file = dir.write("bare/plain", first.body), gzip_file = dir.write("bare/gzip", gz.body);
        ChildProcess bare({"/proc/self/exe", "--bare-server", plain_file, gzip_file});
        const int bare_port = start_port(bare);
        if (!bare_port) {
            std::cerr << "the bare server did not start\n" << bare.err();
            return 1;
        }
        for (int i = 0; i < 50; ++i) {  // warm up
            kgpu::test::http_request(port, "GET", "/metrics");
            kgpu::test::http_request(bare_port, "GET", "/metrics");
        }
        // kgpu and the bare server take turns, request by request: whatever else the machine
        // does falls on both alike.
        std::vector<double> plain, gzip, bare_plain, bare_gzip;
        auto timed = [](int at, std::vector<std::string> headers, std::vector<double>& into) {
            const auto t = Clock::now();
            const auto r = kgpu::test::http_request(at, "GET", "/metrics", headers);
            into.push_back(us(Clock::now() - t));
            if (r.status != 200) std::cerr << "scrape failed\n";
        };
        for (int i = 0; i < 2000; ++i) {
            timed(port, {}, plain);
            timed(bare_port, {}, bare_plain);
            timed(port, {"Accept-Encoding: gzip"}, gzip);
            timed(bare_port, {"Accept-Encoding: gzip"}, bare_gzip);
        }
        const double p_plain = report("scrape /metrics (plain, full body read)", plain);
        const double b_plain = report("  bare server, same bytes (plain)", bare_plain);
        const double p_gzip = quiet_gzip_p50 = report("scrape /metrics (gzip, full body read)", gzip);
        const double b_gzip = report("  bare server, same bytes (gzip)", bare_gzip);
        std::printf("%-44s plain %.2fx, gzip %.2fx (p50 over p50)\n", "scrape latency vs the bare server", p_plain / b_plain,
                    p_gzip / b_gzip);

        // 16 clients at once, against kgpu and then the bare server, three times in turn.
        constexpr int kThreads = 16, kEach = 100;
        auto concurrent = [&](int at, int& ok_out) {
            std::atomic<int> ok{0};
            const auto t0 = Clock::now();
            std::vector<std::thread> threads;
            for (int t = 0; t < kThreads; ++t)
                threads.emplace_back([&] {
                    for (int i = 0; i < kEach; ++i)
                        if (kgpu::test::http_request(at, "GET", "/metrics", {"Accept-Encoding: gzip"}).status == 200) ++ok;
                });
            for (auto& t : threads) t.join();
            ok_out += ok.load();
            return ok.load() / (us(Clock::now() - t0) / 1e6);
        };
        std::vector<double> rates, bare_rates;
        int ok = 0, bare_ok = 0;
        for (int round = 0; round < 3; ++round) {
            rates.push_back(concurrent(port, ok));
            bare_rates.push_back(concurrent(bare_port, bare_ok));
        }
        std::sort(rates.begin(), rates.end());
        std::sort(bare_rates.begin(), bare_rates.end());
        std::printf("%-44s %d/%d ok, %.0f scrapes/s (16 clients, gzip; median of 3 rounds)\n", "concurrent scrapes", ok,
                    3 * kThreads * kEach, rates[1]);
        std::printf("%-44s %d/%d ok, %.0f scrapes/s; kgpu %.2fx of it\n", "  bare server, same bytes", bare_ok,
                    3 * kThreads * kEach, bare_rates[1], rates[1] / bare_rates[1]);
        bare.signal(SIGTERM);
        bare.wait(10000);
        std::printf("%-44s %ld KiB (peak %ld KiB; anonymous %ld KiB, the rest is shared-library pages)\n",
                    "RSS after those scrapes", status_kib(p.pid(), "VmRSS:"), status_kib(p.pid(), "VmHWM:"),
                    status_kib(p.pid(), "RssAnon:"));
        p.signal(SIGTERM);
        p.wait(30000);
    }

    // 2. Many collections: RSS after `passes`, CPU per pass (nobody scraping in between). At a
    // 10 ms interval GPM samples are taken every 100 ms (NVML's minimum gap), so a second run at
    // 150 ms gives the cost of a pass that samples GPM every time.
    for (const auto& [interval, n_passes] : {std::pair{"10", passes}, std::pair{"150", std::max(20, passes / 36)}}) {
        const int passes = n_passes;
        auto argv2 = common;
        argv2.insert(argv2.end(), {"--collect-interval", interval});
        ChildProcess p(argv2, {{"KGPU_SIM_NODE", node}});
        const int port = start_port(p);
        if (!port) {
            std::cerr << "exporter did not start\n" << p.err();
            return 1;
        }
        const double c0 = collections(port), cpu0 = cpu_seconds(p.pid());
        const auto t0 = Clock::now();
        const long rss_start = status_kib(p.pid(), "VmRSS:");
        double c1 = c0;
        while (c1 < c0 + passes && p.running()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(std::max(100, passes * 2)));
            c1 = collections(port);
        }
        const double cpu1 = cpu_seconds(p.pid());
        const double n = c1 - c0;
        std::printf("%-44s %ld KiB after %.0f collections (%ld KiB at start; peak %ld KiB; anonymous %ld KiB)\n",
                    "RSS", status_kib(p.pid(), "VmRSS:"), c1, rss_start, status_kib(p.pid(), "VmHWM:"),
                    status_kib(p.pid(), "RssAnon:"));
        const double per = (cpu1 - cpu0) / n;
        std::printf("%-44s %.0f us CPU per collection (%.0f passes in %.1f s; includes the few scrapes that "
                    "counted them) = %.3f %% of a core at a 1 s interval = %.2fx the reference job\n",
                    interval == std::string("10") ? "collection CPU" : "collection CPU, GPM sampled every pass",
                    per * 1e6, n, us(Clock::now() - t0) / 1e6, per * 100.0, per * 1e6 / reference_us);
        p.signal(SIGTERM);
        p.wait(30000);
    }

    // 3. Floods (issue #14): scrape latency while other clients hold connections.
    auto source = [](int i) { return fmt::format("127.0.0.{}", 2 + i / 100); };
    {
        rlimit rl{};
        ::getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &rl);
        auto argv3 = common;
        argv3.insert(argv3.end(), {"--collect-interval", "1000", "--http-idle-timeout", "300", "--http-request-timeout", "300"});
        ChildProcess p(argv3, {{"KGPU_SIM_NODE", node}});
        const int port = start_port(p);
        if (!port) {
            std::cerr << "exporter did not start\n" << p.err();
            return 1;
        }
        auto scrapes = [&](int n) {
            std::vector<double> v;
            for (int i = 0; i < n; ++i) {
                auto t = Clock::now();
                auto r = kgpu::test::http_request(port, "GET", "/metrics", {"Accept-Encoding: gzip"}, 20000);
                v.push_back(r.status == 200 ? us(Clock::now() - t) : 20e6);
                std::this_thread::sleep_for(10ms);
            }
            return v;
        };
        std::vector<int> idle;
        for (int i = 0; i < 2000; ++i) idle.push_back(kgpu::test::connect_loopback(port, source(i).c_str()));
        flood_report("scrape (gzip) with 2000 idle connections", scrapes(200), quiet_gzip_p50);
        for (int fd : idle)
            if (fd >= 0) ::close(fd);

        const std::string head = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(200, 'z');
        std::vector<int> slow(1000);
        for (int i = 0; i < 1000; ++i) slow[static_cast<size_t>(i)] = kgpu::test::connect_loopback(port, source(i).c_str());
        std::atomic<bool> stop{false};
        std::thread trickle([&] {
            for (size_t n = 0; !stop; ++n) {
                for (size_t i = 0; i < slow.size() && !stop; ++i) {
                    if (slow[i] >= 0 && ::send(slow[i], head.data() + n % head.size(), 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
                        continue;
                    if (slow[i] >= 0) ::close(slow[i]);
                    slow[i] = kgpu::test::connect_loopback(port, source(static_cast<int>(i)).c_str());
                }
                std::this_thread::sleep_for(1s);
            }
        });
        std::this_thread::sleep_for(1500ms);
        flood_report("scrape (gzip) with 1000 slow-header clients", scrapes(200), quiet_gzip_p50);
        stop = true;
        trickle.join();
        for (int fd : slow)
            if (fd >= 0) ::close(fd);

        // One client pipelining batches of 2000 requests as fast as it is answered.
        const int flood = kgpu::test::connect_loopback(port, "127.0.0.2");
        std::string batch;
        for (int i = 0; i < 2000; ++i) batch += "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n";
        std::atomic<bool> done{false};
        std::atomic<long> answered{0};
        std::thread writer([&] {
            while (!done)
                for (size_t off = 0; off < batch.size() && !done;) {
                    const ssize_t n = ::send(flood, batch.data() + off, batch.size() - off, MSG_NOSIGNAL);
                    if (n <= 0) return;
                    off += static_cast<size_t>(n);
                }
        });
        std::thread reader([&] {
            char buf[65536];
            for (ssize_t n; !done && (n = ::recv(flood, buf, sizeof buf, 0)) > 0;) answered += n;
        });
        std::this_thread::sleep_for(500ms);
        const long before = answered;
        const auto t0 = Clock::now();
        flood_report("scrape (gzip) while one client pipelines", scrapes(200), quiet_gzip_p50);
        std::printf("%-44s %.1f MB/s of answers to the pipelining client meanwhile\n", "pipelining client",
                    static_cast<double>(answered - before) / (us(Clock::now() - t0)));
        done = true;
        ::shutdown(flood, SHUT_RDWR);
        writer.join();
        reader.join();
        ::close(flood);
        p.signal(SIGTERM);
        p.wait(30000);
    }

    // 4. 100k pods on GPU 0 (issue #14): memory and scrape size stay bounded.
    if (!uuids.empty()) {
        v1::ListPodResourcesResponse many;
        for (int i = 0; i < 100000; ++i) {
            auto* pod = many.add_pod_resources();
            pod->set_name(fmt::format("inference-{:06}", i));
            pod->set_namespace_(fmt::format("team-{}", i % 50));
            auto* c = pod->add_containers();
            c->set_name("server");
            auto* d = c->add_devices();
            d->set_resource_name("nvidia.com/gpu");
            d->add_device_ids(fmt::format("{}::{}", uuids[0], i));
        }
        std::printf("%-44s %zu bytes\n", "PodResources answer, 100k pods", many.ByteSizeLong());
        pr.set(std::move(many));
        auto argv4 = common;
        argv4.insert(argv4.end(), {"--collect-interval", "1000"});
        ChildProcess p(argv4, {{"KGPU_SIM_NODE", node}});
        const int port = start_port(p);
        if (!port) {
            std::cerr << "exporter did not start\n" << p.err();
            return 1;
        }
        const double c0 = collections(port), cpu0 = cpu_seconds(p.pid());
        while (collections(port) < c0 + 20 && p.running()) std::this_thread::sleep_for(200ms);
        const double c1 = collections(port), cpu1 = cpu_seconds(p.pid());
        auto r = kgpu::test::http_request(port, "GET", "/metrics");
        const double per_ms = (cpu1 - cpu0) / (c1 - c0) * 1e3;
        std::printf("%-44s %zu bytes, %zu series; RSS %ld KiB (peak %ld KiB) after %.0f collections; %.1f ms CPU per "
                    "collection = %.1fx the reference job\n",
                    "100k pods on one GPU", r.body.size(), kgpu::test::parse_metrics(r.body).samples.size(),
                    status_kib(p.pid(), "VmRSS:"), status_kib(p.pid(), "VmHWM:"), c1, per_ms, per_ms * 1e3 / reference_us);
        p.signal(SIGTERM);
        p.wait(30000);
    }
    return 0;
}
