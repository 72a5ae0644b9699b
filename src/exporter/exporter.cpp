#include "exporter/exporter.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/fd.h"
#include "common/files.h"
#include "common/log.h"
#include "common/memory.h"
#include "common/process.h"
#include "exporter/exposition.h"

namespace kgpu::exporter {

namespace {

// The ready file replaces whatever is at its name (a link there is replaced, never followed: it
// may lie in a shared directory, and the exporter may run as root), so the exit removes exactly
// what was written.
Status write_ready_file(const std::string& path, std::string_view text) {
    const std::filesystem::path p(path);
    const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
    const Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d) return fail(Code::io, "{}: {}", dir.string(), std::strerror(errno));
    if (auto f = files::replace_at(d.get(), p.filename().string(), text, 0644))
        return fail(Code::io, "{} {}: {}", f->step, path, std::strerror(f->error));
    return {};
}

constexpr std::string_view kLanding = R"(<!DOCTYPE html>
<html><head><title>kgpu exporter</title></head>
<body><h1>kgpu exporter</h1>
<p>GPU metrics with dcgm-exporter names, pod labels and per-process GPU memory.</p>
<ul><li><a href="/metrics">/metrics</a> (Prometheus text format 0.0.4)</li>
<li><a href="/health">/health</a></li></ul>
</body></html>
)";

// Each HTTP connection is a file descriptor: lift the soft limit to the hard one (as Go programs
// like dcgm-exporter do at start), so --http-max-connections is not cut short by a soft limit of
// 1024. Where even the hard limit is too low, say what the server will run into.
void raise_fd_limit(const HttpOptions& http) {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &rl);
        ::getrlimit(RLIMIT_NOFILE, &rl);
    }
    const rlim_t need = static_cast<rlim_t>(http.connection_limit) + 128;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        log::warn("exporter: the file descriptor limit is {}, below --http-max-connections {} plus what the exporter "
                  "itself needs; past it the oldest idle connections are closed early",
                  rl.rlim_cur, http.connection_limit);
}

}  // namespace

HttpResponse route(const HttpRequest& req, const Collector& collector, std::chrono::steady_clock::time_point now) {
    if (req.method != "GET" && req.method != "HEAD") {
        auto r = HttpResponse::text(405, "method not allowed: use GET or HEAD\n");
        r.headers.emplace_back("Allow", "GET, HEAD");
        return r;
    }
    if (req.path == "/metrics") {
        auto snap = collector.snapshot();
        if (!snap) return HttpResponse::text(503, "no collection pass has finished yet\n");
        HttpResponse r;
        r.content_type = std::string(kContentType);
        r.headers.emplace_back("Vary", "Accept-Encoding");
        if (req.accepts_gzip) {
            if (auto gz = snap->gzip(); gz && !gz->empty()) {
                r.body = std::move(gz);
                r.gzip = true;
                return r;
            }
        }
        r.body = snap->text();
        return r;
    }
    if (req.path == "/health") {
        // Liveness: 200 while the collector runs, whatever the kubelet does (a kubelet restart
        // must not get the exporter restarted). What is degraded is said in the body.
        auto h = collector.health(now);
        if (!h) return HttpResponse::text(503, h.error().message + "\n");
        std::string body = "OK\n";
        if (auto p = collector.attribution_problem(); !p.empty()) body += fmt::format("pod attribution: {}\n", p);
        return HttpResponse::text(200, std::move(body));
    }
    if (req.path == "/") {
        auto r = HttpResponse::text(200, std::string(kLanding));
        r.content_type = "text/html; charset=utf-8";
        return r;
    }
    return HttpResponse::text(404, "not found: try /metrics, /health or /\n");
}

int run_exporter(const ExporterOptions& options, const std::function<Result<nvml::Session>()>& open_nvml) {
    // Blocked before NVML (whose library may start threads) and before our threads, so every
    // thread inherits the mask and only the signalfd sees these signals.
    const sigset_t mask = process::block_signals({SIGTERM, SIGINT});
    const Fd sfd(::signalfd(-1, &mask, SFD_CLOEXEC));
    if (!sfd) {
        log::error("exporter: signalfd: {}", std::strerror(errno));
        return 1;
    }

    raise_fd_limit(options.http);

    auto session = open_nvml();
    if (!session) {
        log::error("exporter: {}", session.error().message);
        return 1;
    }
    Collector collector(std::move(*session), options.collector);
    collector.collect();  // the first snapshot exists before the first request
    auto server = HttpServer::start(options.http, [&collector](const HttpRequest& r) { return route(r, collector); });
    if (!server) {
        log::error("exporter: {}", server.error().message);
        return 1;
    }
    collector.set_http_stats([s = server->get()] { return s->stats(); });
    collector.start();
    log::info("exporter: listening on {}{}", (*server)->bound_address(), (*server)->tls() ? " (TLS)" : "");
    if (!options.ready_file.empty()) {
        if (auto w = write_ready_file(options.ready_file, (*server)->bound_address() + "\n"); !w) {
            log::error("exporter: --ready-file: {}", w.error().message);
            collector.stop();
            return 1;
        }
    }

    // 10 s after start the pages of code and read-only data that start-up brought in (flags,
    // discovery, the server's setup, the first passes' one-time work) and the free heap go back
    // to the kernel; collection and serving fault back what they run, which lies together in the
    // binary (src/function-order.txt). Later, again whenever a burst of scrapes or a flood of
    // connections has grown the resident set (memory::Settler's policy).
    using Clock = memory::Settler::Clock;
    memory::Settler settler;
    settler.busy();
    int code = 0;
    for (;;) {
        const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(settler.due() - Clock::now());
        pollfd pfd{sfd.get(), POLLIN, 0};
        const int ready = ::poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(0, wait.count())));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) {
            log::error("exporter: waiting for signals: {}", std::strerror(errno));
            code = 1;
            break;
        }
        if (ready == 0) {
            settler.poll_logged("exporter");
            continue;
        }
        signalfd_siginfo si{};
        ssize_t n = ::read(sfd.get(), &si, sizeof si);
        if (n == static_cast<ssize_t>(sizeof si)) {
            log::info("exporter: {}: stopping", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
            break;
        }
        if (n < 0 && errno == EINTR) continue;
        log::error("exporter: reading signals: {}", std::strerror(errno));
        code = 1;
        break;
    }
    // The ready file goes first: whoever reads it must not find an address that no longer answers.
    if (!options.ready_file.empty() && ::unlink(options.ready_file.c_str()) != 0 && errno != ENOENT)
        log::warn("exporter: removing --ready-file {}: {}", options.ready_file, std::strerror(errno));
    collector.stop();  // first: its passes read the server's counters
    server->reset();
    return code;
}

}  // namespace kgpu::exporter
