#include "kube/api_stats.h"

#include <cstdlib>
#include <filesystem>

#include "common/files.h"
#include "common/log.h"

namespace kgpu::kube {

namespace {

double unix_seconds(std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

std::string_view status_kind(int status) {
    if (status < 400) return "";
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

void ApiStats::answer(std::string_view method, int status) {
    std::unique_lock lk(mu_);
    ++requests_[{std::string(method), std::to_string(status)}];
    if (auto kind = status_kind(status); !kind.empty()) {
        ++errors_[std::string(kind)];
        last_failure_ = std::chrono::system_clock::now();
    } else {
        last_success_ = std::chrono::system_clock::now();
    }
    changed(lk);
}

void ApiStats::failure(std::string_view method, std::string_view kind) {
    std::unique_lock lk(mu_);
    ++requests_[{std::string(method), "<error>"}];
    ++errors_[std::string(kind)];
    last_failure_ = std::chrono::system_clock::now();
    changed(lk);
}

void ApiStats::malformed() {
    std::unique_lock lk(mu_);
    ++errors_["malformed"];
    last_failure_ = std::chrono::system_clock::now();
    changed(lk);
}

void ApiStats::event(std::string_view result) {
    std::unique_lock lk(mu_);
    ++events_[std::string(result)];
    changed(lk);
}

void ApiStats::publish(std::string path, std::string component) {
    std::unique_lock lk(mu_);
    path_ = std::move(path);
    component_ = std::move(component);
    changed(lk);
}

nlohmann::json ApiStats::to_json() const {
    std::lock_guard lk(mu_);
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
}

// Called with mu_ held; writes after letting it go, so counting never waits for the disk. A
// writer that finds a newer version already written skips its older one.
void ApiStats::changed(std::unique_lock<std::mutex>& lk) {
    const std::uint64_t version = ++version_;
    if (path_.empty()) return;
    const std::string path = path_;
    lk.unlock();
    const std::string text = to_json().dump() + "\n";
    std::lock_guard w(write_mu_);
    if (written_ >= version) return;
    if (auto st = files::write_atomic(path, text); !st) {
        if (!write_failed_logged_) {
            write_failed_logged_ = true;
            log::warn("kube API status file: {} (logged once; the counts are kept in memory)", st.error().message);
        }
        return;
    }
    written_ = version;
}

void publish_status_file(const std::optional<std::string>& flag, std::string component) {
    std::optional<std::string> path = flag;
    if (!path)
        if (const char* v = std::getenv(kStatusFileEnv); v && *v) path = v;
    if (path && !path->empty()) ApiStats::global().publish(*path, std::move(component));
}

}  // namespace kgpu::kube
