// ProcessAttributor (attribution.h): host PID -> cgroup -> container ID -> CRI -> pod.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unordered_set>
#include <utility>

#include "common/log.h"
#include "exporter/attribution.h"
#include "exporter/attribution_log.h"

namespace kgpu::exporter {
namespace {

// A real /proc/<pid>/cgroup is a few hundred bytes (one line per v1 hierarchy).
constexpr size_t kMaxCgroupFile = 64 * 1024;

// `path`, read with a bound: opened non-blocking (a FIFO planted under --proc-root must not hang
// the collector), only a regular file, at most kMaxCgroupFile bytes. Errors: not_found (ENOENT or
// ESRCH: the process is gone), no_permission, parse (not a regular file, or too large), io.
Result<std::string> read_cgroup_file(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        const int err = errno;
        const Code code = err == ENOENT || err == ESRCH ? Code::not_found
                          : err == EACCES || err == EPERM ? Code::no_permission
                                                          : Code::io;
        return fail(code, "{}: {}", path.string(), std::strerror(err));
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail(Code::io, "{}: {}", path.string(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return fail(Code::parse, "{}: not a regular file", path.string());
    std::string out;
    char buf[4096];
    while (true) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            return fail(err == ESRCH ? Code::not_found : Code::io, "{}: {}", path.string(), std::strerror(err));
        }
        if (out.size() + static_cast<size_t>(n) > kMaxCgroupFile)
            return fail(Code::parse, "{}: larger than {} bytes", path.string(), kMaxCgroupFile);
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

}  // namespace

struct ProcessAttributor::Impl {
    std::filesystem::path proc_root;
    std::string endpoint;
    CriClient cri;
    // Container ID -> pod, for the containers seen in the last call (pruned to those every call).
    std::unordered_map<std::string, PodRef> known;
    // Container IDs a successful listing did not have, and when that listing was made.
    std::unordered_map<std::string, std::chrono::steady_clock::time_point> unlisted;
    detail::FailureLog cri_failures;
    detail::FailureLog proc_failures;
    // Consecutive attribute() calls in which every PID of a non-empty list was gone.
    int all_gone_calls = 0;

    Impl(std::string root, std::string cri_endpoint)
        : proc_root(std::move(root)), endpoint(std::move(cri_endpoint)), cri(endpoint) {}

    // The container ID behind `pid`, or nullopt (not in a pod, gone, unreadable). A read error
    // other than "gone" goes to `problem` (the first one of the call), to be logged once; `gone`
    // counts the PIDs that do not exist.
    std::optional<std::string> container_of(unsigned pid, std::optional<Error>& problem, size_t& gone_count) {
        const auto dir = proc_root / std::to_string(pid);
        auto text = read_cgroup_file(dir / "cgroup");
        if (!text) {
            // A process that exited since NVML listed it is normal (ENOENT, or ESRCH when it exits
            // between open and read); a proc root that is not there (a wrong --proc-root, the
            // host's /proc not mounted) or that we may not read is not.
            std::error_code ec;
            const bool gone = std::filesystem::is_directory(proc_root, ec) &&
                              (text.error().code == Code::not_found || !std::filesystem::exists(dir, ec));
            if (gone) {
                ++gone_count;
                log::debug("process attribution: PID {} is gone ({})", pid, text.error().message);
            } else if (!problem)
                problem = text.error();
            return std::nullopt;
        }
        auto ref = parse_cgroup(*text);
        if (!ref) return std::nullopt;
        return std::move(ref->container_id);
    }
};

ProcessAttributor::ProcessAttributor(std::string proc_root, std::string cri_endpoint)
    : impl_(std::make_unique<Impl>(std::move(proc_root), std::move(cri_endpoint))) {}

ProcessAttributor::~ProcessAttributor() = default;

std::unordered_map<unsigned, PodRef> ProcessAttributor::attribute(std::span<const unsigned> pids) {
    auto& im = *impl_;
    const auto now = std::chrono::steady_clock::now();

    std::vector<std::pair<unsigned, std::string>> in_pods;  // pid, container ID
    std::unordered_set<std::string> seen;
    std::optional<Error> problem;
    size_t gone = 0;
    for (unsigned pid : pids) {
        if (auto id = im.container_of(pid, problem, gone)) {
            seen.insert(*id);
            in_pods.emplace_back(pid, std::move(*id));
        }
    }
    // Every PID NVML lists missing, twice in a row: not processes that just exited but a proc
    // root of another PID namespace (the container's own /proc, without hostPID), where no host
    // PID exists. One call is not enough: a lone GPU process may exit between NVML and the read.
    if (!pids.empty() && gone == pids.size()) ++im.all_gone_calls;
    else if (!pids.empty()) im.all_gone_calls = 0;
    // Keyed on the kind of error, not the PID, so a proc root that stays unreadable logs once.
    if (problem)
        im.proc_failures.failed(fmt::format("process attribution: cannot read process cgroups under {}: {}; GPU processes "
                                            "are shown without pod labels",
                                            im.proc_root.string(),
                                            problem->code == Code::not_found ? "no such directory (check --proc-root)"
                                                                             : std::string(to_string(problem->code))));
    else if (im.all_gone_calls >= 2)
        im.proc_failures.failed(fmt::format(
            "process attribution: none of the GPU processes NVML lists exists under {} (twice in a row), so it is "
            "probably not the host's /proc: set --proc-root to the host's /proc mounted into the container, or run the "
            "pod with hostPID: true; GPU processes are shown without pod labels",
            im.proc_root.string()));
    else if (!pids.empty() && im.all_gone_calls == 0)
        im.proc_failures.ok(fmt::format("process attribution: process cgroups under {} are readable again",
                                        im.proc_root.string()));

    bool refresh = false;
    for (const auto& id : seen) {
        if (im.known.contains(id)) continue;
        auto u = im.unlisted.find(id);
        if (u == im.unlisted.end() || now - u->second >= detail::kUnlistedRetry) {
            refresh = true;
            break;
        }
    }
    if (refresh) {
        auto listed = im.cri.list_containers();
        if (!listed) {
            im.cri_failures.failed(
                fmt::format("{}; GPU processes in new containers are shown without pod labels", listed.error().message));
        } else {
            im.cri_failures.ok(fmt::format("process attribution: the CRI runtime on {} answers again", im.endpoint));
            for (const auto& id : seen) {
                if (auto it = listed->find(id); it != listed->end()) {
                    im.known.insert_or_assign(id, std::move(it->second));
                    im.unlisted.erase(id);
                } else if (!im.known.contains(id)) {
                    im.unlisted.insert_or_assign(id, now);
                    log::debug("process attribution: container {} is in a pod's cgroup but the CRI runtime does not list it", id);
                }
            }
        }
    }

    std::unordered_map<unsigned, PodRef> out;
    for (const auto& [pid, id] : in_pods)
        if (auto it = im.known.find(id); it != im.known.end()) out.emplace(pid, it->second);

    // Containers without GPU processes now are forgotten: the cache stays as small as the set of
    // GPU containers, and a deleted container's ID is never answered from stale data.
    std::erase_if(im.known, [&](const auto& kv) { return !seen.contains(kv.first); });
    std::erase_if(im.unlisted, [&](const auto& kv) { return !seen.contains(kv.first); });
    return out;
}

}  // namespace kgpu::exporter
