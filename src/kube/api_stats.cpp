#include "kube/api_stats.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/files.h"
#include "common/log.h"

namespace kgpu::kube {

namespace {

// `text` into `path` (created 0644, replaced, not through a symlink).
Status write_file(const std::string& path, std::string_view text) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return fail(Code::io, "{}: {}", path, std::strerror(errno));
    ::fchmod(fd, 0644);
    std::size_t off = 0;
    while (off < text.size()) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int e = errno;
            ::close(fd);
            return fail(Code::io, "{}: {}", path, std::strerror(e));
        }
        off += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) return fail(Code::io, "{}: {}", path, std::strerror(errno));
    return {};
}

double unix_seconds(std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

std::string_view status_kind(int status) {
    if (status >= 200 && status < 300) return "";
    if (status < 400) return "unexpected";
    switch (status) {
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 409: return "conflict";
    case 422: return "invalid";
    case 429: return "throttled";
    default: return status < 500 ? "client_error" : "server_error";
    }
}

ApiStats& ApiStats::global() {
    static ApiStats stats;
    return stats;
}

namespace {

// ++map[key], unless the key is new and the map is full (kMaxEntries).
template <class Map, class Key>
void bump(Map& map, Key&& key) {
    if (auto it = map.find(key); it != map.end()) ++it->second;
    else if (map.size() < ApiStats::kMaxEntries) map.emplace(std::forward<Key>(key), 1);
}

}  // namespace

void ApiStats::answer(std::string_view method, int status) {
    std::unique_lock lk(mu_);
    bump(requests_, std::pair{std::string(method), std::to_string(status)});
    if (auto kind = status_kind(status); !kind.empty()) {
        bump(errors_, std::string(kind));
        last_failure_ = std::chrono::system_clock::now();
    } else {
        last_success_ = std::chrono::system_clock::now();
    }
    changed(lk);
}

void ApiStats::failure(std::string_view method, std::string_view kind) {
    std::unique_lock lk(mu_);
    bump(requests_, std::pair{std::string(method), std::string("<error>")});
    bump(errors_, std::string(kind.empty() ? "unexpected" : kind));
    last_failure_ = std::chrono::system_clock::now();
    changed(lk);
}

void ApiStats::error(std::string_view kind) {
    std::unique_lock lk(mu_);
    bump(errors_, std::string(kind.empty() ? "unexpected" : kind));
    last_failure_ = std::chrono::system_clock::now();
    changed(lk);
}

void ApiStats::event(std::string_view result) {
    std::unique_lock lk(mu_);
    bump(events_, std::string(result));
    changed(lk);
}

void ApiStats::publish(std::string path, std::string component) {
    {
        std::lock_guard lk(mu_);
        path_ = std::move(path);
        component_ = std::move(component);
        dirty_ = true;
        if (!path_.empty() && !writer_.joinable()) {
            // Created with every signal blocked (a thread inherits its creator's mask), so the
            // process's SIGTERM or SIGHUP never lands on it, even before it runs.
            sigset_t all, old;
            sigfillset(&all);
            pthread_sigmask(SIG_BLOCK, &all, &old);
            try {
                writer_ = std::thread([this] { write_loop(); });
            } catch (...) {
                pthread_sigmask(SIG_SETMASK, &old, nullptr);  // the caller keeps its signals
                throw;
            }
            pthread_sigmask(SIG_SETMASK, &old, nullptr);
        }
    }
    flush();
}

ApiStats::~ApiStats() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    flush();  // what the last second changed
}

void ApiStats::write_loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
        cv_.wait(lk, [this] { return stop_ || dirty_; });
        if (stop_) break;
        lk.unlock();
        flush();
        lk.lock();
        // At most one write a second: a burst of requests is one write.
        cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stop_; });
    }
}

// The snapshot and the write under write_mu_, so writes land in the order their snapshots were
// taken and the file's counts never go back. A temporary file of this process's own (another
// process given the same path by mistake must not write into it) and rename: the counts restart
// with the process anyway, so no fsync.
void ApiStats::flush() {
    std::lock_guard w(write_mu_);
    std::string path, text;
    {
        std::lock_guard lk(mu_);
        if (!dirty_) return;
        dirty_ = false;  // also with no path: nothing to write until one is given
        if (path_.empty()) return;
        path = path_;
        text = to_json_locked().dump() + "\n";
    }
    const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
    Status st = write_file(tmp, text);
    if (st && std::rename(tmp.c_str(), path.c_str()) != 0)
        st = fail(Code::io, "{}: rename: {}", path, std::strerror(errno));
    if (!st && !write_failed_logged_) {
        write_failed_logged_ = true;
        log::warn("kube API status file: {} (logged once; the counts are kept in memory)", st.error().message);
    }
}

nlohmann::json ApiStats::to_json() const {
    std::lock_guard lk(mu_);
    return to_json_locked();
}

nlohmann::json ApiStats::to_json_locked() const {
    nlohmann::json requests = nlohmann::json::array(), errors = nlohmann::json::array(), events = nlohmann::json::array();
    for (const auto& [key, n] : requests_) requests.push_back({{"method", key.first}, {"code", key.second}, {"count", n}});
    for (const auto& [kind, n] : errors_) errors.push_back({{"kind", kind}, {"count", n}});
    for (const auto& [result, n] : events_) events.push_back({{"result", result}, {"count", n}});
    nlohmann::json j = {{"component", component_}, {"requests", requests}, {"errors", errors}, {"events", events}};
    if (last_success_) j["last_success"] = unix_seconds(*last_success_);
    if (last_failure_) j["last_failure"] = unix_seconds(*last_failure_);
    return j;
}

void ApiStats::reset() {
    std::lock_guard lk(mu_);
    requests_.clear();
    errors_.clear();
    events_.clear();
    last_success_.reset();
    last_failure_.reset();
    path_.clear();
    component_.clear();
    dirty_ = false;
}

// Called with mu_ held: the writer thread takes it from there.
void ApiStats::changed(std::unique_lock<std::mutex>& lk) {
    dirty_ = true;
    const bool wake = !path_.empty();
    lk.unlock();
    if (wake) cv_.notify_all();
}

void publish_status_file(const std::optional<std::string>& flag, std::string component) {
    std::optional<std::string> path = flag;
    if (!path)
        if (const char* v = std::getenv(kStatusFileEnv); v && *v) path = v;
    if (!path || path->empty()) return;
    if (!path->ends_with(".json"))
        log::warn("kube API status file {} (--kube-api-status-file / {}): the exporter reads only *.json files of its "
                  "--kube-api-status-dir, so these counts will not be served",
                  *path, kStatusFileEnv);
    ApiStats::global().publish(*path, std::move(component));
}

}  // namespace kgpu::kube
