// The fault-injection command file (env KGPU_SIM_EVENTS) and event delivery to event sets.
//
// Contract: at the first init the lines already in the file are applied before init returns;
// then a background thread polls the file every 25 ms and applies appended complete lines in
// order. A last line without '\n' waits for its newline. A file that does not exist yet is
// waited for; a file that shrinks (truncated) or is replaced (new inode) is read from the start
// again. The thread is started at the first init and joined at the last shutdown.
#include "model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace kgpu_sim {

constexpr size_t kMaxQueuedEvents = 4096;  // per set; the oldest are dropped beyond this

void deliver(State& st, const Gpu& gpu, Object* device, unsigned long long type, unsigned long long data,
             unsigned giId, unsigned ciId) {
    for (EventSet* set : st.sets) {
        auto it = set->registrations.find(&gpu);
        if (!set->valid || it == set->registrations.end() || !(it->second & type)) continue;
        std::lock_guard lk(set->qmutex);
        if (set->queue.size() >= kMaxQueuedEvents) set->queue.pop_front();
        set->queue.push_back(Event{device, type, data, giId, ciId});
        set->cv.notify_all();
    }
}

namespace {

bool parseUnsigned(const std::string& s, unsigned long long& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

struct CommandError {
    std::string what;
};

Gpu& gpuAt(State& st, const std::string& tok) {
    unsigned long long i = 0;
    if (!parseUnsigned(tok, i)) throw CommandError{"'" + tok + "' is not a GPU index"};
    if (i >= st.gpus.size())
        throw CommandError{"GPU index " + tok + " out of range (the node has " + std::to_string(st.gpus.size()) + " GPUs)"};
    return *st.gpus[i];
}

// "<gpu>" or "<gpu>:<mig>"; mig is null for the first form.
std::pair<Gpu*, MigDevice*> target(State& st, const std::string& tok) {
    auto colon = tok.find(':');
    Gpu& g = gpuAt(st, tok.substr(0, colon));
    if (colon == std::string::npos) return {&g, nullptr};
    unsigned long long m = 0;
    std::string ms = tok.substr(colon + 1);
    if (!parseUnsigned(ms, m)) throw CommandError{"'" + ms + "' is not a MIG device index"};
    if (!g.migEnabled || m >= g.migs.size() || !g.migs[m]->hasCi)
        throw CommandError{"GPU " + std::to_string(g.index) + " has no MIG device " + ms};
    return {&g, g.migs[m]};
}

unsigned long long number(const std::string& tok, const char* what, unsigned long long max) {
    unsigned long long v = 0;
    if (!parseUnsigned(tok, v) || v > max) throw CommandError{"'" + tok + "' is not a valid " + what};
    return v;
}

void argc(const std::vector<std::string>& t, size_t lo, size_t hi, const char* usage) {
    if (t.size() < lo || t.size() > hi) throw CommandError{std::string("usage: ") + usage};
}

void applyXid(State& st, Gpu& g, MigDevice* mig, unsigned xid) {
    Object* dev = mig ? static_cast<Object*>(mig) : &g;
    deliver(st, g, dev, nvmlEventTypeXidCriticalError, xid, mig ? mig->giId : kNoId, mig ? mig->ciId : kNoId);
    switch (xid) {
        case 48:  // double-bit ECC error
            ++g.dbeVolatile;
            ++g.dbeAggregate;
            ++g.remapUnc;
            g.remapPending = g.retiredPagesPending = true;
            break;
        case 63:  // row remapping / page retirement recorded
            ++g.remapUnc;
            g.remapPending = g.retiredPagesPending = true;
            break;
        case 64:  // row remapping / page retirement recording failure
            ++g.remapCorr;
            g.remapPending = g.retiredPagesPending = true;
            break;
        case 95: case 119: case 120: case 140: case 143:
            g.recoveryAction = NVML_GPU_RECOVERY_ACTION_GPU_RESET;
            deliver(st, g, &g, nvmlEventTypeGpuRecoveryAction, NVML_GPU_RECOVERY_ACTION_GPU_RESET);
            break;
        default:
            break;
    }
}

// One instance of an exact layout: `<profile>@<start>:gi<G>[:ci<C>]` (no `:ci`: a GPU instance
// without its compute instance). The API writes these (migLayoutLine), so that every process
// sharing the events file keeps the same GPU instance ids and placements.
MigSpec exactInstance(State& st, const Gpu& g, const std::string& tok) {
    const std::string usage = "'" + tok + "' is not <profile>@<start>:gi<id>[:ci<id>]";
    auto at = tok.find('@');
    if (at == std::string::npos) throw CommandError{usage};
    std::vector<std::string> parts;
    std::stringstream ss(tok.substr(at + 1));
    for (std::string part; std::getline(ss, part, ':');) parts.push_back(part);
    if (parts.size() < 2 || parts.size() > 3 || !parts[1].starts_with("gi") || (parts.size() == 3 && !parts[2].starts_with("ci")))
        throw CommandError{usage};
    const unsigned giId = static_cast<unsigned>(number(parts[1].substr(2), "GPU instance id", 0xFFFF));
    std::string why;
    auto spec = migSpecFor(st, g, tok.substr(0, at), giId, &why);
    if (!spec) throw CommandError{why};
    spec->placementStart = static_cast<unsigned>(number(parts[0], "placement start", 7));
    spec->hasCi = parts.size() == 3;
    if (spec->hasCi) spec->ciId = static_cast<unsigned>(number(parts[2].substr(2), "compute instance id", 0xFFFF));
    // An instance that stays keeps what it had (the fixture's UUID and figures).
    for (const MigDevice* m : g.migs)
        if (m->giId == giId && m->profile == spec->profile && m->placementStart == *spec->placementStart) {
            spec->uuid = m->uuid;
            spec->memoryMib = m->memoryMib;
            spec->smCount = m->smCount;
        }
    return *spec;
}

void applyMig(State& st, Gpu& g, const std::string& arg) {
    if (!g.spec.migCapable)
        throw CommandError{"GPU " + std::to_string(g.index) + " (" + g.spec.name +
                           ") is not MIG capable in this node's fixture: its entry has no `mig:` key (give it "
                           "`mig: {mode: disabled}` if the product supports MIG)"};
    if (arg == "off") {
        recreateMig(st, g, {});
        g.migEnabled = g.migPendingEnabled = false;
    } else if (arg == "on") {
        applyMigLayout(st, g, {});
        if (!g.migEnabled) g.migPendingEnabled = true;  // turned on here; on already: a pending mode stays
        g.migEnabled = true;
    } else if (arg.find('@') != std::string::npos) {
        std::vector<MigSpec> specs;
        std::vector<std::pair<unsigned, unsigned>> used;  // memory slice ranges
        std::stringstream ss(arg);
        for (std::string tok; std::getline(ss, tok, ',');) {
            MigSpec spec = exactInstance(st, g, tok);
            const unsigned start = *spec.placementStart;
            const unsigned size = memorySlices(giProfileIdFor(g, *parseMigProfile(spec.profile)));
            for (const MigSpec& o : specs)
                if (o.giId == spec.giId) throw CommandError{"GPU instance id " + std::to_string(spec.giId) + " twice in '" + arg + "'"};
            for (auto [s0, s1] : used)
                if (start < s1 && s0 < start + size) throw CommandError{"'" + tok + "' overlaps another instance in '" + arg + "'"};
            used.emplace_back(start, start + size);
            specs.push_back(spec);
        }
        if (specs.size() > g.spec.maxMigDevices)
            throw CommandError{"'" + arg + "' has more than " + std::to_string(g.spec.maxMigDevices) + " instances"};
        applyMigLayout(st, g, specs);
        if (!g.migEnabled) g.migPendingEnabled = true;  // turned on here; on already: a pending mode stays
        g.migEnabled = true;
    } else {
        std::vector<MigSpec> specs;
        unsigned memSlices = 0, nextGi = g.nextGiId;
        std::stringstream ss(arg);
        std::string prof;
        while (std::getline(ss, prof, ',')) {
            std::string why;
            auto spec = migSpecFor(st, g, prof, nextGi++, &why);
            if (!spec) throw CommandError{why};
            memSlices += memorySlices(giProfileIdFor(g, *parseMigProfile(prof)));
            specs.push_back(*spec);
        }
        if (specs.empty()) throw CommandError{"mig needs profiles like 1g.10gb,3g.40gb, on or off"};
        if (specs.size() > g.spec.maxMigDevices || memSlices > 8)
            throw CommandError{"profiles '" + arg + "' do not fit on GPU " + std::to_string(g.index)};
        recreateMig(st, g, specs);
        g.migEnabled = g.migPendingEnabled = true;
    }
    deliver(st, g, &g, nvmlEventMigConfigChange, 0);
}

bool migModeWord(const std::string& tok) {
    if (tok == "enabled") return true;
    if (tok == "disabled") return false;
    throw CommandError{"'" + tok + "' is not a MIG mode (expected enabled or disabled)"};
}

// The MIG mode now and after the next reset. A mode that changes now starts without instances.
void applyMigMode(State& st, Gpu& g, bool current, bool pending) {
    if (!g.spec.migCapable) throw CommandError{"GPU " + std::to_string(g.index) + " is not MIG capable in this node's fixture"};
    const bool changed = current != g.migEnabled;
    if (changed) recreateMig(st, g, {});
    g.migEnabled = current;
    g.migPendingEnabled = pending;
    if (changed) deliver(st, g, &g, nvmlEventMigConfigChange, 0);
}

// nvidia-smi -c spellings: DEFAULT, PROHIBITED, EXCLUSIVE_PROCESS (any case) or 0, 2, 3.
int computeMode(const std::string& tok) {
    std::string up;
    for (char c : tok) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (up == "0" || up == "DEFAULT") return NVML_COMPUTEMODE_DEFAULT;
    if (up == "2" || up == "PROHIBITED") return NVML_COMPUTEMODE_PROHIBITED;
    if (up == "3" || up == "EXCLUSIVE_PROCESS") return NVML_COMPUTEMODE_EXCLUSIVE_PROCESS;
    throw CommandError{"'" + tok + "' is not a compute mode (expected DEFAULT, PROHIBITED or EXCLUSIVE_PROCESS)"};
}

void runCommand(State& st, const std::vector<std::string>& t) {
    const std::string& cmd = t[0];
    if (cmd == "xid") {
        argc(t, 3, 3, "xid <gpu>[:<mig>] <xid>");
        auto [g, mig] = target(st, t[1]);
        applyXid(st, *g, mig, static_cast<unsigned>(number(t[2], "XID", 0xFFFFFFFFu)));
    } else if (cmd == "lost") {
        argc(t, 2, 2, "lost <gpu>");
        Gpu& g = gpuAt(st, t[1]);
        applyXid(st, g, nullptr, 79);
        g.lost = true;
    } else if (cmd == "fail") {
        constexpr const char* usage = "fail <gpu> <nvmlDevice entry point> <NVML error name without NVML_ERROR_>|off";
        argc(t, 4, 4, usage);
        Gpu& g = gpuAt(st, t[1]);
        if (!t[2].starts_with("nvmlDevice")) throw CommandError{"'" + t[2] + "' is not an nvmlDevice* entry point; usage: " + usage};
        if (t[3] == "off") {
            g.failing.erase(t[2]);
        } else {
            auto e = errorByName(t[3]);
            if (!e || *e == NVML_SUCCESS) throw CommandError{"'" + t[3] + "' is not an NVML error name (e.g. UNKNOWN); usage: " + usage};
            g.failing[t[2]] = *e;
        }
    } else if (cmd == "restore" || cmd == "reset") {
        argc(t, 2, 2, "restore|reset <gpu>");
        Gpu& g = gpuAt(st, t[1]);
        if (g.spec.migCapable && g.migPendingEnabled != g.migEnabled)  // a pending MIG mode takes effect
            applyMigMode(st, g, g.migPendingEnabled, g.migPendingEnabled);
        g.lost = false;
        g.failing.clear();
        g.remapPending = g.retiredPagesPending = false;
        g.recoveryAction = NVML_GPU_RECOVERY_ACTION_NONE;
    } else if (cmd == "util") {
        argc(t, 4, 4, "util <gpu> <gpu%> <mem%>");
        Gpu& g = gpuAt(st, t[1]);
        unsigned gu = static_cast<unsigned>(number(t[2], "percentage", 100));
        unsigned mu = static_cast<unsigned>(number(t[3], "percentage", 100));
        advanceActivity(st, g);  // GPM and NVLink counters integrate the old rates up to now
        g.utilOverride = std::make_pair(gu, mu);
    } else if (cmd == "proc") {
        constexpr const char* usage = "proc <gpu>[:<mig>] <pid> <bytes> [name] [sm=<pct>] [mem=<pct>]";
        argc(t, 4, 7, usage);
        auto [g, mig] = target(st, t[1]);
        unsigned pid = static_cast<unsigned>(number(t[2], "pid", 0x7FFFFFFF));
        unsigned long long bytes = number(t[3], "byte count", 1ULL << 50);
        Process p{bytes, mig ? mig->giId : kNoId, mig ? mig->ciId : kNoId, "python3"};
        bool named = false;
        for (size_t i = 4; i < t.size(); ++i) {
            if (t[i].starts_with("sm=")) p.smUtil = static_cast<unsigned>(number(t[i].substr(3), "SM percentage", 100));
            else if (t[i].starts_with("mem=")) p.memUtil = static_cast<unsigned>(number(t[i].substr(4), "memory percentage", 100));
            else if (!named) {
                p.name = t[i];
                named = true;
            } else
                throw CommandError{std::string("usage: ") + usage};
        }
        // The process replaces an earlier entry with the same pid; it must fit in free memory.
        unsigned long long prev = 0;
        if (auto it = g->procs.find(pid); it != g->procs.end() && (!mig || it->second.giId == p.giId)) prev = it->second.bytes;
        unsigned long long cap = mig ? mig->memoryMib << 20 : (g->spec.memoryMib - g->spec.reservedMib) << 20;
        if (usedBytes(*g, mig) - prev + bytes > cap)
            throw CommandError{"process memory " + t[3] + " does not fit in the free memory of " + t[1]};
        g->procs[pid] = p;
    } else if (cmd == "noproc") {
        argc(t, 3, 3, "noproc <gpu>[:<mig>] <pid>");
        auto [g, mig] = target(st, t[1]);
        unsigned pid = static_cast<unsigned>(number(t[2], "pid", 0x7FFFFFFF));
        if (!g->procs.erase(pid)) throw CommandError{"no process " + t[2] + " on GPU " + std::to_string(g->index)};
    } else if (cmd == "gpm") {
        if (t.size() < 3) throw CommandError{"usage: gpm <gpu>[:<mig>] <metric>=<value>|auto ..."};
        auto [g, mig] = target(st, t[1]);
        if (std::string why = applyGpmCommand(st, *g, mig, {t.begin() + 2, t.end()}); !why.empty())
            throw CommandError{why};
    } else if (cmd == "mig") {
        argc(t, 3, 3, "mig <gpu> <profile>[,<profile>...]|<profile>@<start>:gi<id>[:ci<id>],...|on|off");
        applyMig(st, gpuAt(st, t[1]), t[2]);
    } else if (cmd == "migmode") {
        argc(t, 4, 4, "migmode <gpu> <current: enabled|disabled> <pending: enabled|disabled>");
        Gpu& g = gpuAt(st, t[1]);
        applyMigMode(st, g, migModeWord(t[2]), migModeWord(t[3]));
    } else if (cmd == "computemode") {
        argc(t, 3, 3, "computemode <gpu> DEFAULT|PROHIBITED|EXCLUSIVE_PROCESS");
        Gpu& g = gpuAt(st, t[1]);
        g.computeMode = computeMode(t[2]);
    } else {
        throw CommandError{"unknown command '" + cmd +
                           "' (expected xid, lost, fail, restore, reset, util, proc, noproc, gpm, mig, migmode or computemode)"};
    }
}

}  // namespace

std::string applyOwnCommand(State& st, const std::string& line) {
    std::vector<std::string> tokens;
    std::istringstream is(line);
    for (std::string tok; is >> tok;) tokens.push_back(tok);
    try {
        runCommand(st, tokens);
    } catch (const CommandError& e) {
        return e.what;
    }
    return {};
}

void applyCommand(State& st, const std::string& line, const std::string& file, unsigned lineNo) {
    std::vector<std::string> tokens;
    std::istringstream is(line);
    for (std::string tok; is >> tok;) tokens.push_back(tok);
    if (tokens.empty() || tokens[0][0] == '#') return;
    try {
        runCommand(st, tokens);
    } catch (const CommandError& e) {
        std::cerr << "kgpu-sim: " << file << ":" << lineNo << ": " << e.what << std::endl;
    }
}

// ---- the watcher -----------------------------------------------------------------------------

namespace {

struct Watcher {
    std::mutex m;  // guards stop; cv wakes the thread early at shutdown
    std::mutex pollMutex;  // one poll at a time: the thread's, or shareCommand's
    std::condition_variable cv;
    bool stop = false;
    std::thread thread;
    // Owned by whoever polls (init before the thread starts, then only the thread).
    std::string path;
    bool haveFile = false;
    dev_t dev = 0;
    ino_t ino = 0;
    unsigned long long offset = 0;
    unsigned lineNo = 0;
    std::string partial;

    void restart() {
        offset = 0;
        lineNo = 0;
        partial.clear();
    }

    // Reads what was appended and applies every complete line.
    void poll() {
        std::lock_guard pl(pollMutex);
        struct stat sb {};
        if (::stat(path.c_str(), &sb) != 0) {
            haveFile = false;  // removed (or not there yet): start again when it appears
            return;
        }
        if (!haveFile || sb.st_dev != dev || sb.st_ino != ino || static_cast<unsigned long long>(sb.st_size) < offset) {
            restart();
            haveFile = true;
            dev = sb.st_dev;
            ino = sb.st_ino;
        }
        if (static_cast<unsigned long long>(sb.st_size) == offset) return;
        std::ifstream in(path, std::ios::binary);
        if (!in) return;
        in.seekg(static_cast<std::streamoff>(offset));
        std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        offset += chunk.size();
        partial += chunk;
        std::vector<std::pair<std::string, unsigned>> lines;
        size_t start = 0;
        for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
            std::string l = partial.substr(start, nl - start);
            if (!l.empty() && l.back() == '\r') l.pop_back();
            lines.emplace_back(std::move(l), ++lineNo);
        }
        partial.erase(0, start);
        if (lines.empty()) return;
        State& st = state();
        std::lock_guard lk(st.mutex);
        for (auto& [l, n] : lines) applyCommand(st, l, path, n);
        syncProcfs(st);  // after the whole batch: the file's last layout, not the ones on the way
    }

    void run() {
        std::unique_lock lk(m);
        while (!stop) {
            cv.wait_for(lk, std::chrono::milliseconds(25), [&] { return stop; });
            if (stop) break;
            lk.unlock();
            poll();
            lk.lock();
        }
    }
};

Watcher* g_watcher = nullptr;

Watcher& watcher() {
    static Watcher* w = g_watcher = new Watcher;  // freed by the Reaper below, after joining its thread
    return *w;
}

// Joins the thread if the client never called the last nvmlShutdown (exit or dlclose).
struct Reaper {
    ~Reaper() {
        if (g_watcher != nullptr) {
            stopWatcher();
            delete g_watcher;
            g_watcher = nullptr;
        }
        destroyState();
    }
} reaper;

}  // namespace

void startWatcher() {
    Watcher& w = watcher();
    const char* env = std::getenv("KGPU_SIM_EVENTS");
    if (!env || !*env) {
        w.path.clear();
        return;
    }
    w.path = env;
    w.haveFile = false;
    w.restart();
    w.poll();
    {
        std::lock_guard lk(w.m);
        w.stop = false;
    }
    w.thread = std::thread([&w] { w.run(); });
}

std::optional<bool> shareCommand(const std::string& line) {
    Watcher& w = watcher();
    if (w.path.empty()) return std::nullopt;
    const std::string text = line + "\n";
    bool ok = false;
    if (FILE* f = std::fopen(w.path.c_str(), "a")) {
        // One fwrite of one line to an O_APPEND stream: concurrent writers never interleave.
        ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
        ok = std::fclose(f) == 0 && ok;
    }
    if (!ok) {
        std::cerr << "kgpu-sim: " << w.path << ": cannot append '" << line << "': " << std::strerror(errno) << std::endl;
        return false;
    }
    w.poll();  // applies it (and anything before it) now, not within the next 25 ms
    return true;
}

void stopWatcher() {
    Watcher& w = watcher();
    {
        std::lock_guard lk(w.m);
        w.stop = true;
    }
    w.cv.notify_all();
    if (w.thread.joinable()) w.thread.join();
}

}  // namespace kgpu_sim
