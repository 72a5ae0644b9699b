#include "exporter/kube_status.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "common/json.h"

namespace kgpu::exporter {

namespace {

constexpr std::size_t kMaxFiles = 64;
constexpr std::size_t kMaxFileBytes = 64 << 10;
constexpr std::size_t kMaxEntries = 256;  // per list

bool all_of(std::string_view s, std::size_t max, bool (*ok)(char)) {
    return !s.empty() && s.size() <= max && std::all_of(s.begin(), s.end(), ok);
}

bool component_name(std::string_view s) {
    return all_of(s, 63, [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }) &&
           s.front() != '-' && s.back() != '-';
}
bool word(std::string_view s) {
    return all_of(s, 32, [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
}
bool method_name(std::string_view s) {
    return all_of(s, 16, [](char c) { return c >= 'A' && c <= 'Z'; });
}
bool status_code(std::string_view s) {
    return s == "<error>" || (s.size() == 3 && all_of(s, 3, [](char c) { return c >= '0' && c <= '9'; }) && s[0] >= '1');
}

// A count: a whole number from 0 to 2^53.
double count_of(const json::Reader& r) {
    auto c = r.find("count");
    if (!c || !c->value().is_number()) r.fail("a member \"count\" that is a number");
    const double v = c->value().get<double>();
    if (!std::isfinite(v) || v < 0 || v > 9007199254740992.0 || v != std::floor(v)) c->fail("a whole number from 0 to 2^53");
    return v;
}

std::string checked(const json::Reader& r, std::string_view key, bool (*ok)(std::string_view), std::string_view what) {
    auto v = r.string(key);
    if (!ok(v)) r.fail(fmt::format("a member \"{}\" that is {}", key, what));
    return v;
}

std::vector<json::Reader> bounded(const json::Reader& r, std::string_view key) {
    auto list = r.array(key).elements();
    if (list.size() > kMaxEntries) r.fail(fmt::format("at most {} entries in \"{}\"", kMaxEntries, key));
    return list;
}

// The file's bytes: a regular file (not through a symlink) of at most kMaxFileBytes.
Result<std::string> read_bounded(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail(Code::io, "{}: {}", path, std::strerror(errno));
    struct stat st{};
    std::string text;
    Status status;
    if (::fstat(fd, &st) != 0) {
        status = fail(Code::io, "{}: {}", path, std::strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        status = fail(Code::invalid_argument, "{}: not a regular file", path);
    } else {
        text.resize(kMaxFileBytes + 1);
        std::size_t got = 0;
        for (;;) {
            const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                status = fail(Code::io, "{}: {}", path, std::strerror(errno));
                break;
            }
            if (n == 0) break;
            got += static_cast<std::size_t>(n);
            if (got > kMaxFileBytes) {
                status = fail(Code::invalid_argument, "{}: over {} KiB", path, kMaxFileBytes >> 10);
                break;
            }
        }
        text.resize(got);
    }
    ::close(fd);
    if (!status) return std::unexpected(status.error());
    return text;
}

}  // namespace

Result<KubeApiStatus> parse_kube_api_status(std::string_view text) {
    auto doc = json::parse(text, "kube API status");
    if (!doc) return std::unexpected(doc.error());
    return json::decode(*doc, "kube API status", [](const json::Reader& r) {
        if (!r.is_object()) r.fail("an object");
        KubeApiStatus s;
        s.component = checked(r, "component", component_name, "lower-case letters, digits and '-' (at most 63)");
        for (const auto& e : bounded(r, "requests")) {
            if (!e.is_object()) e.fail("an object");
            s.requests.push_back({checked(e, "method", method_name, "an HTTP method in capitals"),
                                  checked(e, "code", status_code, "an HTTP status code or \"<error>\""), count_of(e)});
        }
        for (const auto& e : bounded(r, "errors")) {
            if (!e.is_object()) e.fail("an object");
            s.errors.emplace_back(checked(e, "kind", word, "lower-case letters and '_'"), count_of(e));
        }
        for (const auto& e : bounded(r, "events")) {
            if (!e.is_object()) e.fail("an object");
            s.events.emplace_back(checked(e, "result", word, "lower-case letters and '_'"), count_of(e));
        }
        if (auto t = r.find("last_success")) {
            if (!t->value().is_number() || !std::isfinite(t->value().get<double>()) || t->value().get<double>() < 0)
                t->fail("Unix seconds");
            s.last_success = t->value().get<double>();
        }
        // One series per label set: a repeated entry would be a duplicate series, which makes
        // Prometheus refuse the whole scrape.
        auto unique = [&](auto key_of, auto& list, std::string_view what) {
            std::map<std::string, bool> seen;
            for (const auto& e : list)
                if (!seen.emplace(key_of(e), true).second) r.fail(fmt::format("{} without repeats", what));
        };
        unique([](const KubeApiStatus::Request& q) { return q.method + " " + q.code; }, s.requests, "requests");
        unique([](const std::pair<std::string, double>& e) { return e.first; }, s.errors, "errors");
        unique([](const std::pair<std::string, double>& e) { return e.first; }, s.events, "events");
        return s;
    });
}

std::vector<KubeApiStatus> read_kube_api_statuses(const std::string& dir, std::vector<std::string>* problems_out) {
    std::vector<std::string> ignored;
    std::vector<std::string>& problems = problems_out ? *problems_out : ignored;
    std::vector<KubeApiStatus> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
        if (errno != ENOENT) problems.push_back(fmt::format("{}: {}", dir, std::strerror(errno)));
        return out;
    }
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
        const std::string_view n = e->d_name;
        if (n.size() > 5 && n.substr(n.size() - 5) == ".json" && n.front() != '.') names.emplace_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    if (names.size() > kMaxFiles) {
        problems.push_back(fmt::format("{}: {} status files, only the first {} read", dir, names.size(), kMaxFiles));
        names.resize(kMaxFiles);
    }
    std::map<std::string, std::string> by_component;
    for (const auto& n : names) {
        const std::string path = dir + "/" + n;
        auto text = read_bounded(path);
        if (!text) {
            if (text.error().code != Code::io || text.error().message.find("No such file") == std::string::npos)
                problems.push_back(text.error().message);
            continue;
        }
        auto s = parse_kube_api_status(*text);
        if (!s) {
            problems.push_back(fmt::format("{}: {}", path, s.error().message));
            continue;
        }
        if (auto [it, fresh] = by_component.emplace(s->component, path); !fresh) {
            problems.push_back(fmt::format("{}: component {} is already {}'s; left out", path, s->component, it->second));
            continue;
        }
        out.push_back(std::move(*s));
    }
    return out;
}

}  // namespace kgpu::exporter
