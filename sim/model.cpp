// The deterministic model of a node: GPUs, MIG devices, telemetry as a function of time since
// init (fixture.cpp reads the fixture it starts from).
#include "model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <set>
#include <sstream>

namespace kgpu_sim {

namespace {
// Lives until the library is unloaded (destroyState), not until the last nvmlShutdown: a client
// that keeps a stale handle after shutdown still points at valid memory.
State* g_state = nullptr;
}  // namespace

State& state() {
    if (!g_state) g_state = new State;
    return *g_state;
}

void destroyState() {
    delete g_state;
    g_state = nullptr;
}

// ---- the model -------------------------------------------------------------------------------

std::string migUuidFor(const std::string& parentUuid, unsigned giId) {
    // Two FNV-1a 64-bit hashes with different seeds give 128 deterministic bits.
    auto fnv = [&](unsigned long long h) {
        std::string s = parentUuid + "/gi" + std::to_string(giId);
        for (unsigned char c : s) {
            h ^= c;
            h *= 0x100000001b3ULL;
        }
        return h;
    };
    unsigned long long a = fnv(0xcbf29ce484222325ULL), b = fnv(0x84222325cbf29ce4ULL);
    char buf[64];
    std::snprintf(buf, sizeof buf, "MIG-%08llx-%04llx-%04llx-%04llx-%012llx", a >> 32, (a >> 16) & 0xFFFF, a & 0xFFFF,
                  b >> 48, b & 0xFFFFFFFFFFFFULL);
    return buf;
}

unsigned giProfileIdFor(const Gpu& gpu, const MigProfile& p) {
    if (p.slices == 1) {
        if (p.mediaExtensions) return 7;  // 1_SLICE_REV1
        // The smallest 1g size is about an eighth of the memory; twice that is 1_SLICE_REV2.
        unsigned base = static_cast<unsigned>(std::lround(static_cast<double>(gpu.spec.memoryMib) / 1024.0 / 8.0));
        if (base > 0 && 2 * p.gb >= 3 * base) return 9;
        return 0;
    }
    if (p.slices == 2 && p.mediaExtensions) return 8;  // 2_SLICE_REV1 (A30 2g.12gb+me)
    return sliceProfileIndex(p.slices);
}

namespace {
// Fixture MIG devices of every GPU with the same model name as `gpu`.
template <class F>
void forFixtureMigs(const State& st, const Gpu& gpu, F&& f) {
    for (const Gpu* g : st.gpus)
        if (g->spec.name == gpu.spec.name)
            for (const MigSpec& m : g->spec.migDevices)
                if (auto p = parseMigProfile(m.profile)) f(*g, m, *p);
}
}  // namespace

// Products whose profile tables differ from what the fixture's MIG devices and the per-slice
// rules give. H100 SXM5 80GB (0x2330) from `nvidia-smi mig -lgip` on that part (memory in MiB:
// 9.75, 19.62, 39.50 and 79.25 GiB), consistent with NVIDIA's MIG user guide ("H100 MIG
// Profiles": one NVDEC and one JPEG per slice, 7g with 8 copy engines and the OFA, +me with the
// OFA); the SM counts are not slices x 16 (1g.20gb 26, 3g 60, 7g 132).
const KnownGiProfile* knownGiProfile(const Gpu& gpu, unsigned id, bool* known) {
    struct Product {
        unsigned pciDeviceId;
        std::vector<KnownGiProfile> profiles;
    };
    // GI profile ids: 0 1g, 7 1g+me, 9 1g with twice the memory, 1 2g, 2 3g, 3 4g, 4 7g.
    static const std::vector<Product> kProducts = {
        {0x233010DE,
         {{0, 9984, 16, 1, 1, 1, 0},
          {7, 9984, 16, 1, 1, 1, 1},
          {9, 20096, 26, 1, 1, 1, 0},
          {1, 20096, 32, 2, 2, 2, 0},
          {2, 40448, 60, 3, 3, 3, 0},
          {3, 40448, 64, 4, 4, 4, 0},
          {4, 81152, 132, 8, 7, 7, 1}}},
    };
    if (known) *known = false;
    for (const Product& p : kProducts) {
        if (p.pciDeviceId != gpu.spec.pciDeviceId) continue;
        if (known) *known = true;
        for (const KnownGiProfile& k : p.profiles)
            if (k.id == id) return &k;
        return nullptr;
    }
    return nullptr;
}

unsigned smPerSlice(const State& st, const Gpu& gpu) {
    if (const KnownGiProfile* k = knownGiProfile(gpu, 0)) return k->smCount;
    unsigned bestSlices = 0, sm = 0;
    forFixtureMigs(st, gpu, [&](const Gpu&, const MigSpec& m, const MigProfile& p) {
        if (p.slices > bestSlices) {
            bestSlices = p.slices;
            sm = m.smCount / p.slices;
        }
    });
    if (sm) return sm;
    return gpu.spec.architecture == NVML_DEVICE_ARCH_HOPPER ? 16 : 14;
}

std::optional<std::pair<unsigned long long, unsigned>> profileFigures(const State& st, const Gpu& gpu, unsigned id) {
    bool known = false;
    if (const KnownGiProfile* k = knownGiProfile(gpu, id, &known)) return std::make_pair(k->memoryMib, k->smCount);
    if (known) return std::nullopt;  // the product has no such profile
    std::optional<std::pair<unsigned long long, unsigned>> exact;
    unsigned long long perMemSlice = 0;
    forFixtureMigs(st, gpu, [&](const Gpu& g, const MigSpec& m, const MigProfile& p) {
        unsigned pid = giProfileIdFor(g, p);
        if (pid == id && !exact) exact = std::make_pair(m.memoryMib, m.smCount);
        if (!perMemSlice) perMemSlice = m.memoryMib / memorySlices(pid);
    });
    if (exact) return exact;
    unsigned slices = slicesOfGiProfile(id);
    if (!slices) return std::nullopt;
    if (!perMemSlice) perMemSlice = (gpu.spec.memoryMib / 8) / 256 * 256;
    return std::make_pair(perMemSlice * memorySlices(id), smPerSlice(st, gpu) * slices);
}

std::optional<MigSpec> migSpecFor(const State& st, const Gpu& gpu, const std::string& profile, unsigned giId,
                                  std::string* why) {
    auto p = parseMigProfile(profile);
    if (!p) {
        if (why) *why = "'" + profile + "' is not a MIG profile name like 1g.10gb or 3g.40gb";
        return std::nullopt;
    }
    unsigned id = giProfileIdFor(gpu, *p);
    auto fig = profileFigures(st, gpu, id);
    if (!fig) {
        if (why) *why = "profile " + profile + " is not supported on this GPU";
        return std::nullopt;
    }
    MigSpec m;
    m.profile = profile;
    m.giId = giId;
    m.ciId = 0;
    m.uuid = migUuidFor(gpu.spec.uuid, giId);
    m.memoryMib = fig->first;
    m.smCount = fig->second;
    return m;
}

namespace {

// Drops a MIG instance: its MIG device, GPU and compute instance handles go stale and processes
// attributed to it go with it.
void destroyMig(Gpu& gpu, MigDevice* m) {
    m->valid = m->gi->valid = m->ci->valid = false;
    for (auto it = gpu.procs.begin(); it != gpu.procs.end();)
        it = it->second.giId == m->giId ? gpu.procs.erase(it) : std::next(it);
}

bool sameInstance(const MigDevice& m, const MigSpec& s) {
    return m.giId == s.giId && m.profile == s.profile && s.placementStart && m.placementStart == *s.placementStart;
}

}  // namespace

void applyMigLayout(State& st, Gpu& gpu, const std::vector<MigSpec>& specs) {
    std::vector<MigDevice*> old = std::move(gpu.migs);
    gpu.migs.clear();
    unsigned cursor = 0;
    for (const MigSpec& s : specs) {
        auto kept = std::find_if(old.begin(), old.end(), [&](MigDevice* m) { return m && sameInstance(*m, s); });
        if (kept != old.end() && (*kept)->hasCi == s.hasCi && (!s.hasCi || (*kept)->ciId == s.ciId)) {
            MigDevice* m = *kept;
            *kept = nullptr;
            m->index = static_cast<unsigned>(gpu.migs.size());
            gpu.migs.push_back(m);
            cursor = std::max(cursor, m->placementStart + m->placementSize);
            continue;
        }
        GpuInstanceObj* gi = nullptr;  // the GPU instance stays when only its compute instance changes
        if (kept != old.end()) {
            MigDevice* m = *kept;
            *kept = nullptr;
            gi = m->gi;
            m->gi = st.make<GpuInstanceObj>();  // a placeholder, so destroyMig leaves `gi` valid
            m->gi->mig = m;
            destroyMig(gpu, m);
        }
        auto p = parseMigProfile(s.profile);  // checked by the caller
        MigDevice* m = st.make<MigDevice>();
        m->parent = &gpu;
        m->index = static_cast<unsigned>(gpu.migs.size());
        m->profile = s.profile;
        m->slices = p ? p->slices : 1;
        m->giProfileId = p ? giProfileIdFor(gpu, *p) : 0;
        const GiRule* rule = giRule(gpu, m->giProfileId);
        m->giProfileDeviceId = rule ? rule->id : m->giProfileId;
        m->ciProfileId = sliceProfileIndex(m->slices);
        m->giId = s.giId;
        m->ciId = s.ciId;
        m->hasCi = s.hasCi;
        m->uuid = s.uuid;
        m->memoryMib = s.memoryMib;
        m->smCount = s.smCount;
        m->placementSize = memorySlices(m->giProfileId);
        m->placementStart = s.placementStart.value_or(cursor);
        cursor = std::max(cursor, m->placementStart + m->placementSize);
        m->hidden = !devNodeVisible(st, "dev/nvidia-caps/nvidia-cap" + std::to_string(migCapMinor(gpu.spec.minor, m->giId, kNoId))) ||
                    !devNodeVisible(st, "dev/nvidia-caps/nvidia-cap" + std::to_string(migCapMinor(gpu.spec.minor, m->giId, m->ciId)));
        m->gi = gi ? gi : st.make<GpuInstanceObj>();
        m->gi->mig = m;
        m->ci = st.make<ComputeInstanceObj>();
        m->ci->mig = m;
        if (!m->hasCi) m->valid = m->ci->valid = false;  // no MIG device until its compute instance exists
        gpu.nextGiId = std::max(gpu.nextGiId, s.giId + 1);
        gpu.migs.push_back(m);
    }
    for (MigDevice* m : old)
        if (m) destroyMig(gpu, m);
}

void recreateMig(State& st, Gpu& gpu, const std::vector<MigSpec>& specs) {
    for (MigDevice* m : gpu.migs) destroyMig(gpu, m);
    gpu.migs.clear();
    applyMigLayout(st, gpu, specs);
}

const GiRule* giRule(const Gpu& gpu, unsigned index) {
    // NVIDIA's MIG user guide and `nvidia-smi mig -lgip`/`-lgipp` on the parts: A100 and H100 share
    // the ids and placements (8 memory slices); A30 (0x20B7) has 4 memory slices and its own ids.
    // Where CreateGpuInstance puts an instance when not told is the driver's choice, not the lowest
    // free start: the guide's examples put a 2g first at 4 and 1g's at 6, 0, 1, ..., and document
    // that 1g,1g,2g,3g fails (the 3g must come first); autoOrder reproduces those examples.
    static const std::vector<GiRule> k8 = {
        {0, 19, 1, 7, {0, 1, 2, 3, 4, 5, 6}, {6, 0, 1, 2, 3, 4, 5}},
        {7, 20, 1, 1, {0, 1, 2, 3, 4, 5, 6}, {6, 0, 1, 2, 3, 4, 5}},
        {9, 15, 2, 4, {0, 2, 4, 6}, {6, 4, 2, 0}},
        {1, 14, 2, 3, {0, 2, 4}, {4, 0, 2}},
        {2, 9, 4, 2, {0, 4}, {4, 0}},
        {3, 5, 4, 1, {0}, {0}},
        {4, 0, 8, 1, {0}, {0}},
    };
    static const std::vector<GiRule> kA30 = {
        {0, 14, 1, 4, {0, 1, 2, 3}, {3, 0, 1, 2}},
        {7, 21, 1, 1, {0, 1, 2, 3}, {3, 0, 1, 2}},
        {1, 5, 2, 2, {0, 2}, {2, 0}},
        {8, 6, 2, 1, {0, 2}, {2, 0}},
        {3, 0, 4, 1, {0}, {0}},
    };
    const auto& rules = (gpu.spec.pciDeviceId >> 16) == 0x20B7 ? kA30 : k8;
    for (const GiRule& r : rules)
        if (r.index == index) return &r;
    return nullptr;
}

const GiRule* giRuleById(const Gpu& gpu, unsigned id) {
    for (unsigned index : {0u, 7u, 9u, 1u, 8u, 2u, 3u, 4u})
        if (const GiRule* r = giRule(gpu, index); r && r->id == id) return r;
    return nullptr;
}

unsigned giIdForPlacement(unsigned start, unsigned size, const std::vector<unsigned>& used) {
    unsigned id = size >= 8 ? 0 : size >= 4 ? 1 + start / 4 : size == 2 ? 3 + start / 2 : 7 + start;
    if (std::find(used.begin(), used.end(), id) == used.end()) return id;
    for (id = 1;; ++id)
        if (std::find(used.begin(), used.end(), id) == used.end()) return id;
}

void invalidateAll(State& st) {
    for (Gpu* g : st.gpus) {
        for (MigDevice* m : g->migs) destroyMig(*g, m);
        g->valid = false;
    }
    st.gpus.clear();
    for (EventSet* s : st.sets) {
        s->valid = false;
        std::lock_guard lk(s->qmutex);
        s->closed = NVML_ERROR_UNINITIALIZED;
        s->cv.notify_all();
    }
    st.sets.clear();
}

void buildFromSpec(State& st, NodeSpec spec) {
    invalidateAll(st);
    st.node = std::move(spec);
    st.loadedAt = std::chrono::steady_clock::now();
    for (size_t i = 0; i < st.node.gpus.size(); ++i) {
        Gpu* g = st.make<Gpu>();
        g->index = static_cast<unsigned>(i);
        g->spec = st.node.gpus[i];
        g->hidden = !devNodeVisible(st, "dev/nvidia" + std::to_string(g->spec.minor));
        g->lost = g->spec.lost;
        g->migEnabled = g->spec.migEnabled;
        g->migPendingEnabled = g->spec.migPendingEnabled;
        st.gpus.push_back(g);
    }
    for (Gpu* g : st.gpus)
        if (g->migEnabled) recreateMig(st, *g, g->spec.migDevices);
}

unsigned long long usedBytes(const Gpu& gpu, const MigDevice* mig) {
    unsigned long long b = mig ? 0 : gpu.spec.telemetry.fbUsedMib << 20;
    for (auto& [pid, p] : gpu.procs)
        if (!mig || p.giId == mig->giId) b += p.bytes;
    return b;
}

unsigned migCapMinor(unsigned gpuMinor, unsigned giId, unsigned ciId) {
    return 3 + gpuMinor * 135 + giId * 9 + (ciId == kNoId ? 0 : 1 + ciId);
}

bool devNodeVisible(const State& st, const std::string& node) {
    if (st.devRoot.empty()) return true;
    struct stat sb {};
    return ::stat((st.devRoot + "/" + node).c_str(), &sb) == 0;
}

unsigned long long usedMib(const Gpu& gpu) { return (usedBytes(gpu, nullptr) + (1 << 20) - 1) >> 20; }

Sample sample(const State& st, const Gpu& gpu) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.loadedAt).count();
    const double phase = gpu.index;
    const Telemetry& b = gpu.spec.telemetry;
    auto wobble = [&](unsigned base, double rate, double off, double maxAmp) {
        double amp = std::min<double>(maxAmp, base);  // an idle (0) counter stays at 0
        double v = base + amp * std::sin(t * rate + phase + off);
        return static_cast<unsigned>(std::lround(std::clamp(v, 0.0, 100.0)));
    };
    Sample s{};
    if (gpu.utilOverride) {
        s.gpuUtil = gpu.utilOverride->first;
        s.memUtil = gpu.utilOverride->second;
    } else {
        s.gpuUtil = wobble(b.gpuUtil, 0.7, 0.0, 5.0);
        s.memUtil = wobble(b.memUtil, 0.7, 1.0, 5.0);
    }
    s.temperatureC = static_cast<unsigned>(std::lround(std::max(0.0, b.temperatureC + 2.0 * std::sin(t * 0.5 + phase))));
    const double p0 = b.powerW, w = 0.9, k = 0.05;
    s.powerMw = static_cast<unsigned>(std::lround(1000.0 * p0 * (1.0 + k * std::sin(w * t + phase))));
    // ∫ p0 (1 + k sin(w τ + φ)) dτ from 0 to t, in mJ: monotonic because k < 1.
    const double joules = p0 * t + p0 * k / w * (std::cos(phase) - std::cos(w * t + phase));
    s.energyMj = b.energyJ * 1000ULL + static_cast<unsigned long long>(std::max(0.0, joules) * 1000.0);
    return s;
}

}  // namespace kgpu_sim
