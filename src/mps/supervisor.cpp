#include "mps/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/files.h"
#include "common/json.h"
#include "common/log.h"
#include "common/process.h"

namespace kgpu::mps {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

std::string_view to_string(DaemonState s) {
    switch (s) {
        case DaemonState::starting: return "starting";
        case DaemonState::running: return "running";
        case DaemonState::restarting: return "restarting";
        case DaemonState::stopped: return "stopped";
    }
    return "unknown";
}

Status label_for_containers(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists("/sys/fs/selinux", ec)) return {};
    static constexpr char kLabel[] = "system_u:object_r:container_file_t:s0";
    if (::lsetxattr(path.c_str(), "security.selinux", kLabel, sizeof kLabel, 0) != 0)
        return fail(Code::io, "labelling {} {} for containers (SELinux): {}", path.string(), kLabel, std::strerror(errno));
    return {};
}

Supervisor::Supervisor(std::vector<DaemonSpec> specs, SupervisorOptions options, ComputeModes& modes)
    : opts_(std::move(options)), modes_(modes) {
    for (auto& spec : specs) {
        Control control(opts_.control_binary, opts_.root.pipe_dir(spec.resource), opts_.root.log_dir(spec.resource),
                        opts_.command_timeout);
        DaemonStatus st;
        st.resource = spec.resource;
        st.active_thread_percentage = active_thread_percentage(spec);
        st.pinned_limits = pinned_memory_limits(spec);
        slots_.push_back(Slot{std::move(spec), std::move(control), std::move(st)});
    }
}

std::vector<DaemonStatus> Supervisor::status() const {
    std::vector<DaemonStatus> out;
    for (const auto& s : slots_) out.push_back(s.status);
    return out;
}

Status Supervisor::start() {
    // The daemon `-d` forks off is re-parented to us when `-d` exits: we see it die (waitpid) and
    // reap the MPS servers it leaves behind.
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        log::warn("MPS: cannot become a child subreaper ({}); a daemon's death is seen by probes only",
                  std::strerror(errno));
    // 0755 whatever the umask (NVIDIA's daemon: MkdirAll 0755): clients in containers need only
    // to read and search it; nobody but us writes there.
    if (auto st = files::create_directories(opts_.root.dir, 0755); !st)
        return fail(Code::io, "creating the MPS root {}: {}", opts_.root.dir.string(), st.error().message);
    if (slots_.empty()) log::info("MPS: no resource is shared with MPS; nothing to start");
    for (auto& s : slots_) start_one(s);
    update_ready();
    return {};
}

void Supervisor::start_one(Slot& s) {
    const std::string& res = s.spec.resource;
    if (s.ever_started) ++s.status.restarts;
    auto give_up = [&](const std::string& why) {
        log::error("MPS {}: {}; retrying in {} ms", res, why,
                   (s.backoff.count() ? s.backoff : opts_.backoff_initial).count());
        went_down(s, why);
    };

    for (const auto& g : s.spec.gpus) {
        if (auto st = modes_.set(g, nvml::ComputeMode::exclusive_process); !st) {
            // A lost GPU (off the bus, or waiting for a reset) serves no client whatever happens
            // here, and refusing to start would keep MPS from every other GPU of the resource
            // until that one is reset (the device plugin marks its replicas unhealthy meanwhile).
            // A reset puts it back in the default mode anyway; the next start sets it again.
            if (st.error().code == Code::gpu_lost) {
                log::warn("MPS {}: GPU {} ({}) is lost, left out of EXCLUSIVE_PROCESS; the daemon starts for the other GPUs: {}",
                          res, g.index, g.uuid, st.error().message);
                continue;
            }
            return give_up(fmt::format("setting GPU {} ({}) to EXCLUSIVE_PROCESS: {}", g.index, g.uuid, st.error().message));
        }
    }
    std::error_code ec;
    for (const fs::path& dir : {opts_.root.pipe_dir(res), opts_.root.log_dir(res)}) {
        if (auto st = files::create_directories(dir, 0755); !st) return give_up(st.error().message);  // as the root
    }
    if (auto st = label_for_containers(opts_.root.pipe_dir(res)); !st) return give_up(st.error().message);
    fs::remove(opts_.root.started_file(res), ec);

    // A daemon left from an earlier run of ours answers on the same pipes: it has to go first, or
    // `-d` refuses to start a second one and the limits would be the old ones.
    if (s.control.send(kProbeCommand)) {
        log::info("MPS {}: a control daemon from an earlier run answers at {}; asking it to quit", res,
                  s.control.pipe_dir().string());
        (void)s.control.send("quit");
        const auto until = clock::now() + opts_.command_timeout;
        while (clock::now() < until && s.control.send(kProbeCommand)) ::usleep(50 * 1000);
    }

    if (auto st = s.control.start_daemon(); !st) return give_up(st.error().message);
    s.ever_started = true;
    s.status.pid = find_daemon(s).value_or(0);
    if (s.status.pid == 0)
        log::warn("MPS {}: started, but its daemon process was not found among our children; its death is seen by probes only",
                  res);
    for (const auto& cmd : setup_commands(s.spec)) {
        if (auto r = s.control.send(cmd); !r) {
            if (s.status.pid > 0) ::kill(s.status.pid, SIGKILL);
            return give_up(r.error().message);
        }
    }
    if (auto st = files::write_atomic(opts_.root.started_file(res), ""); !st) {
        if (s.status.pid > 0) ::kill(s.status.pid, SIGKILL);
        return give_up(st.error().message);
    }
    s.status.state = DaemonState::running;
    s.running_since = s.last_probe = clock::now();
    log::info("MPS {}: control daemon running (pid {}, pipe directory {}, active thread percentage {}, {} pinned memory limits)",
              res, s.status.pid, s.control.pipe_dir().string(), s.status.active_thread_percentage,
              s.status.pinned_limits.size());
    write_status(s);
    update_ready();
}

void Supervisor::went_down(Slot& s, const std::string& why) {
    std::error_code ec;
    fs::remove(opts_.root.started_file(s.spec.resource), ec);
    if (s.status.pid > 0 && process_state(s.status.pid) != 0) ::kill(s.status.pid, SIGKILL);  // hung: make room
    if (s.status.state == DaemonState::running) log::warn("MPS {}: control daemon down: {}", s.spec.resource, why);
    s.status.pid = 0;
    s.status.state = DaemonState::restarting;
    s.status.last_error = why;
    if (s.backoff.count() == 0) s.backoff = opts_.backoff_initial;
    s.next_start = clock::now() + s.backoff;
    s.backoff = std::min(s.backoff * 2, opts_.backoff_max);
    write_status(s);
    update_ready();
}

void Supervisor::tick() {
    std::vector<pid_t> reaped;
    int wst = 0;
    for (pid_t p; (p = ::waitpid(-1, &wst, WNOHANG)) > 0;) reaped.push_back(p);
    const auto now = clock::now();
    for (auto& s : slots_) {
        if (s.status.state == DaemonState::running) {
            const pid_t pid = s.status.pid;
            if (pid > 0) {
                if (std::find(reaped.begin(), reaped.end(), pid) != reaped.end()) {
                    went_down(s, fmt::format("the control daemon (pid {}) exited", pid));
                    continue;
                }
                const char state = process_state(pid);
                // Died between the waitpid above and this look: a zombie of ours is reaped here and
                // said as what it is (the message must not depend on that race).
                if (state == 'Z' && ::waitpid(pid, &wst, WNOHANG) == pid) {
                    went_down(s, fmt::format("the control daemon (pid {}) exited", pid));
                    continue;
                }
                if (state == 0 || state == 'Z' || state == 'X') {
                    went_down(s, fmt::format("the control daemon (pid {}) is gone", pid));
                    continue;
                }
                if (state == 'T' || state == 't') {
                    went_down(s, fmt::format("the control daemon (pid {}) is stopped and cannot answer", pid));
                    continue;
                }
            }
            const auto every = pid > 0 ? opts_.probe_interval : std::min<std::chrono::milliseconds>(opts_.probe_interval, std::chrono::seconds(1));
            if (now - s.last_probe >= every) {
                s.last_probe = now;
                if (auto r = s.control.send(kProbeCommand); !r) {
                    went_down(s, r.error().message);
                    continue;
                }
            }
            if (s.backoff.count() && now - s.running_since >= opts_.healthy_reset) s.backoff = std::chrono::milliseconds(0);
        } else if (s.status.state != DaemonState::stopped && now >= s.next_start) {
            start_one(s);
        }
    }
}

void Supervisor::stop() {
    std::error_code ec;
    fs::remove(opts_.root.ready_file(), ec);
    for (auto& s : slots_) {
        if (s.status.state == DaemonState::running) {
            if (auto r = s.control.send("quit"); !r)
                log::warn("MPS {}: quit: {}", s.spec.resource, r.error().message);
            else
                log::info("MPS {}: control daemon asked to quit", s.spec.resource);
        }
        fs::remove(opts_.root.started_file(s.spec.resource), ec);
        for (const auto& g : s.spec.gpus)
            if (auto st = modes_.set(g, nvml::ComputeMode::default_); !st)
                log::warn("MPS {}: setting GPU {} back to compute mode DEFAULT: {}", s.spec.resource, g.index, st.error().message);
        s.status.state = DaemonState::stopped;
        s.status.pid = 0;
        write_status(s);
    }
}

void Supervisor::write_status(const Slot& s) const {
    nlohmann::json limits = nlohmann::json::array();
    for (const auto& l : s.status.pinned_limits)
        limits.push_back({{"gpu", l.index}, {"uuid", l.uuid}, {"limit", l.value()}, {"bytes", l.mib << 20}});
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto& g : s.spec.gpus) gpus.push_back({{"gpu", g.index}, {"uuid", g.uuid}, {"replicas", g.replicas}});
    nlohmann::json j = {
        {"resource", s.spec.resource},
        {"state", to_string(s.status.state)},
        {"pid", s.status.pid},
        {"restarts", s.status.restarts},
        {"lastError", s.status.last_error},
        {"activeThreadPercentage", s.status.active_thread_percentage},
        {"pinnedMemoryLimits", limits},
        {"gpus", gpus},
        {"pipeDirectory", opts_.root.pipe_dir(s.spec.resource).string()},
    };
    if (auto st = files::write_atomic(opts_.root.status_file(s.spec.resource), kgpu::json::dump_text(j, 2) + "\n"); !st)
        log::warn("MPS {}: {}", s.spec.resource, st.error().message);
}

void Supervisor::update_ready() const {
    const bool all = std::all_of(slots_.begin(), slots_.end(),
                                 [](const Slot& s) { return s.status.state == DaemonState::running; });
    std::error_code ec;
    if (!all) {
        fs::remove(opts_.root.ready_file(), ec);
    } else if (!fs::exists(opts_.root.ready_file(), ec)) {
        if (auto st = files::write_atomic(opts_.root.ready_file(), ""); !st) log::warn("MPS: {}", st.error().message);
    }
}

char Supervisor::process_state(pid_t pid) const {
    auto stat = files::read(opts_.proc_root / std::to_string(pid) / "stat");
    if (!stat) return 0;
    // "<pid> (<comm>) <state> <ppid> ...": comm may hold spaces and parentheses.
    auto close = stat->rfind(')');
    if (close == std::string::npos || close + 2 >= stat->size()) return 0;
    return (*stat)[close + 2];
}

std::optional<pid_t> Supervisor::find_daemon(const Slot& s) const {
    const pid_t self = ::getpid();
    const std::string want_env = "CUDA_MPS_PIPE_DIRECTORY=" + s.control.pipe_dir().string();
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(opts_.proc_root, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
        auto stat = files::read(entry.path() / "stat");
        if (!stat) continue;
        auto close = stat->rfind(')');
        if (close == std::string::npos) continue;
        int ppid = 0;
        char state = 0;
        if (std::sscanf(stat->c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != self) continue;
        auto cmdline = files::read(entry.path() / "cmdline");
        if (!cmdline) continue;
        std::vector<std::string> argv;
        for (size_t b = 0, e; b < cmdline->size(); b = e + 1) {
            e = cmdline->find('\0', b);
            if (e == std::string::npos) e = cmdline->size();
            argv.push_back(cmdline->substr(b, e - b));
        }
        if (argv.size() < 2 || argv[1] != "-d") continue;
        if (argv[0] != s.control.binary() && fs::path(argv[0]).filename() != kControlBinary) continue;
        auto environ_text = files::read(entry.path() / "environ");
        if (!environ_text) continue;
        for (size_t b = 0, e; b < environ_text->size(); b = e + 1) {
            e = environ_text->find('\0', b);
            if (e == std::string::npos) e = environ_text->size();
            if (std::string_view(*environ_text).substr(b, e - b) == want_env) return static_cast<pid_t>(std::stoi(name));
        }
    }
    return std::nullopt;
}

namespace {

std::optional<DaemonState> parse_state(std::string_view s) {
    for (auto st : {DaemonState::starting, DaemonState::running, DaemonState::restarting, DaemonState::stopped})
        if (to_string(st) == s) return st;
    return std::nullopt;
}

}  // namespace

std::vector<DaemonStatus> read_statuses(const Root& root, std::vector<std::string>* problems) {
    std::vector<DaemonStatus> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root.dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (it.depth() >= 2) it.disable_recursion_pending();  // <domain>/<name>/status.json at most
        if (it->path().filename() != "status.json") continue;
        auto text = files::read(it->path());
        if (!text) continue;
        try {
            auto j = nlohmann::json::parse(*text);
            DaemonStatus st;
            st.resource = j.at("resource").get<std::string>();
            auto state = parse_state(j.at("state").get<std::string>());
            if (!state) throw std::runtime_error("unknown state");
            st.state = *state;
            st.pid = j.value("pid", 0);
            st.restarts = j.value("restarts", 0u);
            st.last_error = j.value("lastError", "");
            st.active_thread_percentage = j.value("activeThreadPercentage", 100u);
            for (const auto& l : j.value("pinnedMemoryLimits", nlohmann::json::array()))
                st.pinned_limits.push_back({l.at("gpu").get<unsigned>(), l.at("bytes").get<std::uint64_t>() >> 20,
                                            l.value("uuid", "")});
            if (st.state == DaemonState::running && !fs::exists(root.started_file(st.resource), ec))
                st.state = DaemonState::restarting;
            out.push_back(std::move(st));
        } catch (const std::exception& e) {
            if (problems)
                problems->push_back(fmt::format("{}: not a status file kgpu wrote: {}", it->path().string(), e.what()));
        }
    }
    std::sort(out.begin(), out.end(), [](const DaemonStatus& a, const DaemonStatus& b) { return a.resource < b.resource; });
    return out;
}

Result<bool> run(Supervisor& supervisor, std::chrono::milliseconds watch_interval, const std::function<bool()>& reload_ok) {
    const sigset_t set = process::block_signals({SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGCHLD});
    const Fd sfd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!sfd) return fail(Code::io, "signalfd: {}", std::strerror(errno));
    if (auto st = supervisor.start(); !st) return std::unexpected(st.error());
    bool reload = false;
    for (;;) {
        pollfd p{sfd.get(), POLLIN, 0};
        int r = ::poll(&p, 1, static_cast<int>(watch_interval.count()));
        if (r < 0 && errno != EINTR) {
            log::error("MPS: poll: {}", std::strerror(errno));
            break;
        }
        bool quit = false;
        if (r > 0) {
            signalfd_siginfo si{};
            while (::read(sfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                if (si.ssi_signo == SIGCHLD) continue;
                if (si.ssi_signo == SIGHUP && reload_ok && !reload_ok()) {
                    log::error("MPS: received signal {}: the new configuration is not valid; the daemons keep running on the "
                               "last good one",
                               si.ssi_signo);
                    continue;
                }
                log::info("MPS: received signal {}, {}", si.ssi_signo, si.ssi_signo == SIGHUP ? "restarting" : "shutting down");
                quit = true;
                reload = si.ssi_signo == SIGHUP;
                break;
            }
        }
        if (quit) break;
        supervisor.tick();
    }
    supervisor.stop();
    return reload;
}

}  // namespace kgpu::mps
