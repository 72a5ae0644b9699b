// The C entry points of the simulated libnvidia-ml.so.1 that the model implements. Every
// definition has exactly the prototype nvml_abi.h declares (the compiler checks that); every other
// exported name is a weak NOT_SUPPORTED stub generated from entry_points.txt.
//
// Common contract: before the first successful init every call except nvmlInit*/nvmlErrorString
// returns UNINITIALIZED; a handle that is not one of ours, or is stale (re-init, MIG
// re-creation), gives INVALID_ARGUMENT; NULL output pointers give INVALID_ARGUMENT; any call on
// a lost GPU (or one of its MIG devices) gives GPU_IS_LOST; string getters give
// INSUFFICIENT_SIZE when the buffer cannot hold the text and its NUL. Older entry points fill
// their own older structs, never the newer layout.
#pragma GCC visibility push(default)
#include "nvml/nvml_abi.h"
#pragma GCC visibility pop

#include "handles.h"
#include "model.h"

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <type_traits>

using namespace kgpu_sim;

namespace {

nvmlReturn_t copyString(const std::string& s, char* buf, unsigned len) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (len < s.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    std::memcpy(buf, s.c_str(), s.size() + 1);
    return NVML_SUCCESS;
}

bool equalsIgnoreCase(const std::string& a, const char* b) {
    return strcasecmp(a.c_str(), b) == 0;
}

// ---- init -----------------------------------------------------------------------------------

// Why the simulator cannot start without KGPU_SIM_NODE, and what to set it to: the fixtures next
// to this library (<build>/sim/nodes, or <prefix>/share/kgpu/nodes beside <prefix>/lib/kgpu).
// Computed once; nvmlErrorString hands it out for the UNKNOWN that nvmlInit returned, so the
// caller's own error message names the cause rather than a driver state (issue #23: kgpu used to
// say "the NVIDIA kernel module is not loaded").
const std::string& missingNodeText() {
    static const std::string text = [] {
        namespace fs = std::filesystem;
        std::string fixtures;
        Dl_info info{};
        if (dladdr(reinterpret_cast<void*>(&missingNodeText), &info) != 0 && info.dli_fname) {
            const fs::path dir = fs::path(info.dli_fname).parent_path();
            for (const fs::path& d : {dir / "nodes", (dir / "../../share/kgpu/nodes").lexically_normal()}) {
                std::error_code ec;
                if (fs::exists(d / "dgx-h100.yaml", ec)) {
                    fixtures = d.string();
                    break;
                }
            }
        }
        if (fixtures.empty())
            return std::string("KGPU_SIM_NODE is unset: the simulated driver needs a node description; set "
                               "KGPU_SIM_NODE to a node YAML, e.g. sim/nodes/dgx-h100.yaml of the kgpu sources");
        return "KGPU_SIM_NODE is unset: the simulated driver needs a node description; set KGPU_SIM_NODE=" + fixtures +
               "/dgx-h100.yaml (or another node YAML in " + fixtures + ")";
    }();
    return text;
}
std::atomic<bool> g_missingNode{false};  // the last nvmlInit failed for want of KGPU_SIM_NODE

nvmlReturn_t initImpl() {
    State& st = state();
    std::lock_guard life(st.lifecycle);
    {
        std::lock_guard lk(st.mutex);
        if (st.refcount > 0) {
            ++st.refcount;
            return NVML_SUCCESS;
        }
    }
    const char* path = std::getenv("KGPU_SIM_NODE");
    if (!path || !*path) {
        // Not a driver state (DRIVER_NOT_LOADED would send the user looking for a kernel module).
        g_missingNode = true;
        std::cerr << "kgpu-sim: " << missingNodeText() << std::endl;
        return NVML_ERROR_UNKNOWN;
    }
    g_missingNode = false;
    auto spec = loadNode(path);
    if (!spec) return NVML_ERROR_UNKNOWN;
    if (spec->initError) return *spec->initError;
    {
        std::lock_guard lk(st.mutex);
        const char* devRoot = std::getenv("KGPU_SIM_DEV_ROOT");
        st.devRoot = devRoot && *devRoot ? devRoot : spec->devRoot;
        const char* procRoot = std::getenv("KGPU_SIM_PROC_ROOT");
        st.procRoot = procRoot ? procRoot : "";
        buildFromSpec(st, std::move(*spec));
        st.refcount = 1;
    }
    startWatcher();  // applies the lines already in KGPU_SIM_EVENTS before init returns
    {
        std::lock_guard lk(st.mutex);
        syncProcfs(st);  // the layout after the events file, never the fixture's on the way there
    }
    return NVML_SUCCESS;
}

// ---- shared pieces -----------------------------------------------------------------------------

void fillPci(const Gpu& g, nvmlPciInfo_t* p) {
    std::memset(p, 0, sizeof *p);
    std::string legacy = g.spec.pci.legacyText(), full = g.spec.pci.text();
    std::memcpy(p->busIdLegacy, legacy.c_str(), std::min(legacy.size() + 1, sizeof p->busIdLegacy - 1));
    std::memcpy(p->busId, full.c_str(), std::min(full.size() + 1, sizeof p->busId - 1));
    p->domain = g.spec.pci.domain;
    p->bus = g.spec.pci.bus;
    p->device = g.spec.pci.device;
    p->pciDeviceId = g.spec.pciDeviceId;
    p->pciSubSystemId = g.spec.pciSubsystemId;
}

void fillPciOld(const nvmlPciInfo_t& n, nvmlPciInfo_v2_t* p) {
    std::memset(p, 0, sizeof *p);
    std::memcpy(p->busId, n.busIdLegacy, sizeof p->busId);
    p->busId[sizeof p->busId - 1] = '\0';
    p->domain = n.domain;
    p->bus = n.bus;
    p->device = n.device;
    p->pciDeviceId = n.pciDeviceId;
    p->pciSubSystemId = n.pciSubSystemId;
}

void fillSwitchPci(const PciAddr& a, nvmlPciInfo_t* p) {
    std::memset(p, 0, sizeof *p);
    std::string legacy = a.legacyText(), full = a.text();
    std::memcpy(p->busIdLegacy, legacy.c_str(), std::min(legacy.size() + 1, sizeof p->busIdLegacy - 1));
    std::memcpy(p->busId, full.c_str(), std::min(full.size() + 1, sizeof p->busId - 1));
    p->domain = a.domain;
    p->bus = a.bus;
    p->device = a.device;
    p->pciDeviceId = kNvSwitchPciDeviceId;
}

// The link's far end, or an error for a link this GPU does not have.
nvmlReturn_t linkAt(const Gpu& g, unsigned link, const NvLinkEnd** out) {
    if (link >= NVML_NVLINK_MAX_LINKS || link >= g.spec.links.size()) return NVML_ERROR_NOT_SUPPORTED;
    *out = &g.spec.links[link];
    return NVML_SUCCESS;
}

nvmlReturn_t remotePci(State& st, const Gpu& g, unsigned link, nvmlPciInfo_t* pci) {
    const NvLinkEnd* end = nullptr;
    if (nvmlReturn_t r = linkAt(g, link, &end)) return r;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    if (end->toSwitch)
        fillSwitchPci(st.node.nvswitches[end->peer], pci);
    else
        fillPci(*st.gpus[end->peer], pci);
    return NVML_SUCCESS;
}

std::vector<std::pair<unsigned, const Process*>> processesOf(const DevRef& d) {
    std::vector<std::pair<unsigned, const Process*>> out;
    for (auto& [pid, p] : d.gpu->procs)
        if (!d.mig || p.giId == d.mig->giId) out.emplace_back(pid, &p);
    return out;
}

template <class Entry>
nvmlReturn_t runningProcesses(nvmlDevice_t device, unsigned* infoCount, Entry* infos) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
        auto procs = processesOf(d);
        if (*infoCount < procs.size()) {
            *infoCount = static_cast<unsigned>(procs.size());
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        *infoCount = static_cast<unsigned>(procs.size());
        if (procs.empty()) return NVML_SUCCESS;
        if (!infos) return NVML_ERROR_INVALID_ARGUMENT;
        for (size_t i = 0; i < procs.size(); ++i) {
            Entry e{};
            e.pid = procs[i].first;
            e.usedGpuMemory = procs[i].second->bytes;
            if constexpr (std::is_same_v<Entry, nvmlProcessInfo_t>) {
                e.gpuInstanceId = procs[i].second->giId;
                e.computeInstanceId = procs[i].second->ciId;
            }
            infos[i] = e;
        }
        return NVML_SUCCESS;
    });
}

// Waits on a set without holding the global mutex; fill(Event) writes the caller's struct.
template <class Fill>
nvmlReturn_t waitEvent(nvmlEventSet_t set, const void* data, unsigned timeoutMs, Fill&& fill) {
    EventSet* es = nullptr;
    nvmlReturn_t r = withState([&](State& st) -> nvmlReturn_t {
        es = st.lookup<EventSet>(set, Kind::EventSet);
        if (!es || !data) return NVML_ERROR_INVALID_ARGUMENT;
        return NVML_SUCCESS;
    });
    if (r) return r;
    // The set object is never freed, so using it after dropping the global mutex is safe.
    std::unique_lock lk(es->qmutex);
    es->cv.wait_for(lk, std::chrono::milliseconds(timeoutMs),
                    [&] { return !es->queue.empty() || es->closed != NVML_SUCCESS; });
    if (es->closed != NVML_SUCCESS) return es->closed;
    if (es->queue.empty()) return NVML_ERROR_TIMEOUT;
    Event e = es->queue.front();
    es->queue.pop_front();
    fill(e);
    return NVML_SUCCESS;
}

unsigned long long supportedEvents(const Gpu& g) {
    unsigned long long m = nvmlEventTypeXidCriticalError | nvmlEventTypePState | nvmlEventTypeClock |
                           nvmlEventTypeGpuRecoveryAction;
    if (g.spec.ecc) m |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
    if (g.spec.migCapable) m |= nvmlEventMigConfigChange;
    return m;
}

// The engines of a GPU instance of `slices` slices and GI profile `giProfileId`, as NVIDIA's MIG
// user guide lists them ("Supported MIG Profiles"): a product with a known table (H100, see
// knownGiProfile) as listed there; otherwise one copy engine per slice, no encoders; on
// Ampere (A100) NVDECs 0/1/2/2/5 for 1/2/3/4/7 slices with JPEG and OFA only on 7g and the
// media-extension profile (+me, id 7); later parts one NVDEC and one JPEG per slice, OFA on 7g
// and +me. The double-memory 1g profile (id 9) has one NVDEC. A compute instance shares its GPU
// instance's engines.
struct MigEngines {
    unsigned copy = 0, decoders = 0, encoders = 0, jpeg = 0, ofa = 0;
};
MigEngines migEngines(const Gpu& gpu, unsigned slices, unsigned giProfileId) {
    const bool mediaExt = giProfileId == 7;
    MigEngines e;
    if (const KnownGiProfile* k = knownGiProfile(gpu, giProfileId)) {
        e.copy = k->copyEngines;
        e.decoders = k->decoders;
        e.jpeg = k->jpeg;
        e.ofa = k->ofa;
        return e;
    }
    e.copy = slices;
    if (gpu.spec.architecture <= NVML_DEVICE_ARCH_AMPERE) {
        static constexpr unsigned kAmpereDecoders[8] = {0, 0, 1, 2, 2, 2, 4, 5};  // by slices
        e.decoders = mediaExt || giProfileId == 9 ? 1 : kAmpereDecoders[std::min(slices, 7u)];
        e.jpeg = slices == 7 || mediaExt ? 1 : 0;
    } else {
        e.decoders = slices;  // +me: the 1g slice's own NVDEC and JPEG, plus the OFA
        e.jpeg = e.decoders;
    }
    e.ofa = slices == 7 || mediaExt ? 1 : 0;
    return e;
}

const char* errorText(nvmlReturn_t r) {
    switch (r) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
        case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
        case NVML_ERROR_TIMEOUT: return "Timeout";
        case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
        case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
        case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
        case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
        case NVML_ERROR_IN_USE: return "In use by another client";
        case NVML_ERROR_MEMORY: return "Insufficient Memory";
        case NVML_ERROR_NO_DATA: return "No data";
        case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "ECC is not supported on vGPU";
        case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
        case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
        case NVML_ERROR_DEPRECATED: return "Deprecated";
        case NVML_ERROR_NOT_READY: return "Not ready";
        case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
        case NVML_ERROR_INVALID_STATE: return "Invalid state";
        default: return "Unknown Error";
    }
}

// The GPUs the driver shows (State::devRoot hides the others), in order.
std::vector<Gpu*> visibleGpus(const State& st) {
    std::vector<Gpu*> out;
    for (Gpu* g : st.gpus)
        if (!g->hidden) out.push_back(g);
    return out;
}

nvmlReturn_t handleByIndex(unsigned index, nvmlDevice_t* device) {
    return withState([&](State& st) -> nvmlReturn_t {
        auto gpus = visibleGpus(st);
        if (!device || index >= gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
        *device = toHandle<nvmlDevice_t>(gpus[index]);  // a lost GPU still has a handle
        return NVML_SUCCESS;
    });
}

nvmlReturn_t handleByPciBusId(const char* busId, nvmlDevice_t* device) {
    return withState([&](State& st) -> nvmlReturn_t {
        if (!busId || !device) return NVML_ERROR_INVALID_ARGUMENT;
        auto a = parsePciAddr(busId);
        if (!a) return NVML_ERROR_INVALID_ARGUMENT;
        for (Gpu* g : visibleGpus(st)) {
            const PciAddr& p = g->spec.pci;
            if (p.domain == a->domain && p.bus == a->bus && p.device == a->device && p.function == a->function) {
                *device = toHandle<nvmlDevice_t>(g);
                return NVML_SUCCESS;
            }
        }
        return NVML_ERROR_NOT_FOUND;
    });
}

nvmlReturn_t pciOld(nvmlDevice_t device, nvmlPciInfo_v2_t* pci) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
        nvmlPciInfo_t full;
        fillPci(*d.gpu, &full);
        fillPciOld(full, pci);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t deviceCount(unsigned* count) {
    return withState([&](State& st) -> nvmlReturn_t {
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        *count = static_cast<unsigned>(visibleGpus(st).size());
        return NVML_SUCCESS;
    });
}

nvmlReturn_t cudaVersion(int* v) {
    return withState([&](State& st) -> nvmlReturn_t {
        if (!v) return NVML_ERROR_INVALID_ARGUMENT;
        *v = st.node.cudaDriverVersion;
        return NVML_SUCCESS;
    });
}

// Two full GPUs, neither lost.
template <class F>
nvmlReturn_t withPair(nvmlDevice_t a, nvmlDevice_t b, F&& f) {
    return withState([&](State& st) -> nvmlReturn_t {
        DevRef da, db;
        if (nvmlReturn_t r = resolve(st, a, da)) return r;
        if (nvmlReturn_t r = resolve(st, b, db)) return r;
        if (da.gpu->lost || db.gpu->lost) return NVML_ERROR_GPU_IS_LOST;
        if (da.mig || db.mig) return NVML_ERROR_NOT_SUPPORTED;
        return f(st, *da.gpu, *db.gpu);
    });
}

// A MIG object handle (GPU or compute instance) whose parent is not lost.
template <class T, class F>
nvmlReturn_t withInstance(const void* h, Kind k, F&& f) {
    return withState([&](State& st) -> nvmlReturn_t {
        T* obj = st.lookup<T>(h, k);
        if (!obj) return NVML_ERROR_INVALID_ARGUMENT;
        if (obj->mig->parent->lost) return NVML_ERROR_GPU_IS_LOST;
        return f(st, *obj->mig);
    });
}

}  // namespace

extern "C" {

// ---- init and system ---------------------------------------------------------------------------

nvmlReturn_t nvmlInit_v2(void) { return initImpl(); }
nvmlReturn_t nvmlInit(void) { return initImpl(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int) { return initImpl(); }

nvmlReturn_t nvmlShutdown(void) {
    State& st = state();
    std::lock_guard life(st.lifecycle);
    {
        std::lock_guard lk(st.mutex);
        if (st.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        if (st.refcount > 1) {
            --st.refcount;
            return NVML_SUCCESS;
        }
    }
    stopWatcher();  // before the state goes, so no command lands on an emptied node
    std::lock_guard lk(st.mutex);
    st.refcount = 0;
    invalidateAll(st);
    return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
    if (result == NVML_ERROR_UNKNOWN && g_missingNode) return missingNodeText().c_str();
    return errorText(result);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
    return withState([&](State& st) { return copyString(st.node.driverVersion, version, length); });
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
    return withState([&](State& st) { return copyString(st.node.nvmlVersion, version, length); });
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) { return cudaVersion(v); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) { return cudaVersion(v); }

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
    return withState([&](State& st) -> nvmlReturn_t {
        if (!name) return NVML_ERROR_INVALID_ARGUMENT;
        for (Gpu* g : st.gpus)
            if (auto it = g->procs.find(pid); it != g->procs.end()) return copyString(it->second.name, name, length);
        return NVML_ERROR_NOT_FOUND;
    });
}

// ---- enumeration and identity ------------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* c) { return deviceCount(c); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int* c) { return deviceCount(c); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) { return handleByIndex(i, d); }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t* d) { return handleByIndex(i, d); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
    return withState([&](State& st) -> nvmlReturn_t {
        if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
        for (Gpu* g : visibleGpus(st)) {
            if (equalsIgnoreCase(g->spec.uuid, uuid)) {
                *device = toHandle<nvmlDevice_t>(g);
                return NVML_SUCCESS;
            }
            for (MigDevice* m : g->migs)
                if (!m->hidden && m->hasCi && equalsIgnoreCase(m->uuid, uuid)) {
                    *device = toHandle<nvmlDevice_t>(m);
                    return NVML_SUCCESS;
                }
        }
        return NVML_ERROR_NOT_FOUND;
    });
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* b, nvmlDevice_t* d) { return handleByPciBusId(b, d); }
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* b, nvmlDevice_t* d) { return handleByPciBusId(b, d); }

// For a MIG device handle NVML answers its index under the parent, the one
// nvmlDeviceGetMigDeviceHandleByIndex takes back (nvml.h); nvidia-ctk's CDI generation asks it.
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
    return withDevice(device, On::Any, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!index) return NVML_ERROR_INVALID_ARGUMENT;
        if (d.mig) {
            const auto it = std::find(d.gpu->migs.begin(), d.gpu->migs.end(), d.mig);
            if (it == d.gpu->migs.end()) return NVML_ERROR_INVALID_ARGUMENT;
            *index = static_cast<unsigned>(it - d.gpu->migs.begin());
            return NVML_SUCCESS;
        }
        auto gpus = visibleGpus(st);
        *index = static_cast<unsigned>(std::find(gpus.begin(), gpus.end(), d.gpu) - gpus.begin());
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
    return withDevice(device, On::Any, [&](State&, DevRef d) {
        return copyString(d.mig ? d.mig->uuid : d.gpu->spec.uuid, uuid, length);
    });
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
    return withDevice(device, On::Any, [&](State&, DevRef d) {
        return copyString(d.mig ? d.gpu->spec.name + " MIG " + d.mig->profile : d.gpu->spec.name, name, length);
    });
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length) {
    return withDevice(device, On::Any, [&](State&, DevRef d) { return copyString(d.gpu->spec.serial, serial, length); });
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!minorNumber) return NVML_ERROR_INVALID_ARGUMENT;
        *minorNumber = d.gpu->spec.minor;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
        fillPci(*d.gpu, pci);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_v2_t* pci) { return pciOld(device, pci); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v2_t* pci) { return pciOld(device, pci); }

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!type) return NVML_ERROR_INVALID_ARGUMENT;
        *type = d.gpu->spec.brand;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
        *arch = d.gpu->spec.architecture;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
        *major = d.gpu->spec.ccMajor;
        *minor = d.gpu->spec.ccMinor;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!node) return NVML_ERROR_INVALID_ARGUMENT;
        if (d.gpu->spec.numaNode < 0) return NVML_ERROR_NOT_SUPPORTED;
        *node = static_cast<unsigned>(d.gpu->spec.numaNode);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int* boardId) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!boardId) return NVML_ERROR_INVALID_ARGUMENT;
        *boardId = d.gpu->spec.boardId;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char* version, unsigned int length) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) { return copyString(d.gpu->spec.vbios, version, length); });
}

// infoROM versions: per board, so a MIG device answers its parent's.
nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object, char* version,
                                         unsigned int length) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        const std::string* v = nullptr;
        switch (object) {
        case NVML_INFOROM_OEM: v = &d.gpu->spec.inforomOem; break;
        case NVML_INFOROM_ECC: v = &d.gpu->spec.inforomEcc; break;
        case NVML_INFOROM_POWER: v = &d.gpu->spec.inforomPower; break;
        default: return NVML_ERROR_INVALID_ARGUMENT;
        }
        if (v->empty()) return NVML_ERROR_NOT_SUPPORTED;
        return copyString(*v, version, length);
    });
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char* version, unsigned int length) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (d.gpu->spec.inforomImage.empty()) return NVML_ERROR_NOT_SUPPORTED;
        return copyString(d.gpu->spec.inforomImage, version, length);
    });
}

// ---- memory and state --------------------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
        // v1 has no reserved field: reserved memory counts as used, as on a real driver.
        unsigned long long total = (d.mig ? d.mig->memoryMib : d.gpu->spec.memoryMib) << 20;
        unsigned long long used = usedBytes(*d.gpu, d.mig) + (d.mig ? 0 : d.gpu->spec.reservedMib << 20);
        used = std::min(used, total);
        *memory = nvmlMemory_t{total, total - used, used};
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
        if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        unsigned long long total = (d.mig ? d.mig->memoryMib : d.gpu->spec.memoryMib) << 20;
        unsigned long long reserved = d.mig ? 0 : d.gpu->spec.reservedMib << 20;
        unsigned long long used = std::min(usedBytes(*d.gpu, d.mig), total - reserved);
        memory->total = total;
        memory->reserved = reserved;
        memory->used = used;
        memory->free = total - reserved - used;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
        *mode = d.gpu->spec.persistence ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t* isActive) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
        *isActive = d.gpu->spec.displayActive ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current, nvmlEnableState_t* pending) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
        *current = *pending = d.gpu->spec.ecc ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
        *mode = d.gpu->computeMode;
        return NVML_SUCCESS;
    });
}

// Compute mode is the GPU's, not the process's: with an events file the change is written there
// as `computemode <gpu> <mode>` (shareCommand), so every process of the node sees it.
nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
    unsigned index = 0;
    nvmlReturn_t r = withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (mode == 1) return NVML_ERROR_NOT_SUPPORTED;  // EXCLUSIVE_THREAD: removed from the driver
        if (mode != NVML_COMPUTEMODE_DEFAULT && mode != NVML_COMPUTEMODE_PROHIBITED &&
            mode != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
            return NVML_ERROR_INVALID_ARGUMENT;
        index = d.gpu->index;
        return NVML_SUCCESS;
    });
    if (r != NVML_SUCCESS) return r;
    auto shared = shareCommand("computemode " + std::to_string(index) + " " + std::to_string(mode));
    if (shared && !*shared) return NVML_ERROR_UNKNOWN;
    if (!shared) {
        return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
            d.gpu->computeMode = mode;
            return NVML_SUCCESS;
        });
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* pState) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!pState) return NVML_ERROR_INVALID_ARGUMENT;
        *pState = sample(st, *d.gpu).gpuUtil > 0 || !d.gpu->procs.empty() ? 0 : 8;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
        *reasons = sample(st, *d.gpu).gpuUtil == 0 ? 0x1ULL /* GpuIdle */ : 0ULL;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!limit) return NVML_ERROR_INVALID_ARGUMENT;
        *limit = d.gpu->spec.powerLimitW * 1000;
        return NVML_SUCCESS;
    });
}

// ---- telemetry ---------------------------------------------------------------------------------

// nvml.h: "On MIG-enabled GPUs, querying device utilization rates is not currently supported."
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
    return withDevice(device, On::GpuMigOff, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
        Sample s = sample(st, *d.gpu);
        *utilization = nvmlUtilization_t{s.gpuUtil, s.memUtil};
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* temp) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
        *temp = sample(st, *d.gpu).temperatureC;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!power) return NVML_ERROR_INVALID_ARGUMENT;
        *power = sample(st, *d.gpu).powerMw;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
        *energy = sample(st, *d.gpu).energyMj;
        return NVML_SUCCESS;
    });
}

namespace {
nvmlReturn_t clockMhz(nvmlDevice_t device, nvmlClockType_t type, unsigned* clk, bool max) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!clk) return NVML_ERROR_INVALID_ARGUMENT;
        const Telemetry& t = d.gpu->spec.telemetry;
        unsigned sm = max ? t.maxSmClockMhz : t.smClockMhz, mem = max ? t.maxMemClockMhz : t.memClockMhz;
        switch (type) {
            case NVML_CLOCK_GRAPHICS:
            case NVML_CLOCK_SM: *clk = sm; break;
            case NVML_CLOCK_MEM: *clk = mem; break;
            case NVML_CLOCK_VIDEO: *clk = sm * 9 / 10; break;
            default: return NVML_ERROR_INVALID_ARGUMENT;
        }
        return NVML_SUCCESS;
    });
}

// nvml.h: "On MIG-enabled GPUs, querying encoder (decoder) utilization is not currently supported."
nvmlReturn_t engineUtil(nvmlDevice_t device, unsigned* util, unsigned* period, bool encoder) {
    return withDevice(device, On::GpuMigOff, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!util || !period) return NVML_ERROR_INVALID_ARGUMENT;
        *util = encoder ? d.gpu->spec.telemetry.encUtil : d.gpu->spec.telemetry.decUtil;
        *period = 167000;
        return NVML_SUCCESS;
    });
}
}  // namespace

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* c) {
    return clockMhz(device, type, c, false);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* c) {
    return clockMhz(device, type, c, true);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int* value) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!value) return NVML_ERROR_INVALID_ARGUMENT;
        *value = d.gpu->spec.telemetry.pcieReplay;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int* value) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!value) return NVML_ERROR_INVALID_ARGUMENT;
        if (counter == NVML_PCIE_UTIL_TX_BYTES)
            *value = d.gpu->spec.telemetry.pcieTxKBps;
        else if (counter == NVML_PCIE_UTIL_RX_BYTES)
            *value = d.gpu->spec.telemetry.pcieRxKBps;
        else
            return NVML_ERROR_INVALID_ARGUMENT;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int* u, unsigned int* p) {
    return engineUtil(device, u, p, true);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int* u, unsigned int* p) {
    return engineUtil(device, u, p, false);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long* eccCounts) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!eccCounts) return NVML_ERROR_INVALID_ARGUMENT;
        const bool corrected = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED;
        const bool isVolatile = counterType == NVML_VOLATILE_ECC;
        if ((!corrected && errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED) ||
            (!isVolatile && counterType != NVML_AGGREGATE_ECC))
            return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.gpu->spec.ecc) return NVML_ERROR_NOT_SUPPORTED;
        const Gpu& g = *d.gpu;
        *eccCounts = corrected ? (isVolatile ? g.sbeVolatile : g.sbeAggregate)
                               : (isVolatile ? g.dbeVolatile : g.dbeAggregate);
        return NVML_SUCCESS;
    });
}

// nvml.h: "On MIG-enabled GPUs with active instances, querying the number of remapped rows is not
// supported."
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrRows, unsigned int* uncRows,
                                       unsigned int* isPending, unsigned int* failureOccurred) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
        if (d.gpu->migEnabled && !d.gpu->migs.empty()) return NVML_ERROR_NOT_SUPPORTED;
        *corrRows = d.gpu->remapCorr;
        *uncRows = d.gpu->remapUnc;
        *isPending = d.gpu->remapPending ? 1 : 0;
        *failureOccurred = 0;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t* isPending) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
        *isPending = d.gpu->retiredPagesPending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t* values) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (valuesCount < 0 || (valuesCount > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
        const Gpu& g = *d.gpu;
        const long long now = std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
        for (int i = 0; i < valuesCount; ++i) {
            nvmlFieldValue_t& v = values[i];
            v.timestamp = now;
            v.latencyUsec = 0;
            v.nvmlReturn = NVML_SUCCESS;
            v.value.ullVal = 0;
            if (nvlinkThroughputField(st, g, v)) continue;
            switch (v.fieldId) {
                case NVML_FI_DEV_MEMORY_TEMP:
                    if (!g.spec.telemetry.memoryTemperatureC) {
                        v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                        break;
                    }
                    v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
                    v.value.uiVal = *g.spec.telemetry.memoryTemperatureC +
                                    (sample(st, g).temperatureC - g.spec.telemetry.temperatureC);
                    break;
                case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
                case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
                    if (!g.spec.ecc) {
                        v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                        break;
                    }
                    v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
                    v.value.ullVal = v.fieldId == NVML_FI_DEV_ECC_SBE_VOL_TOTAL ? g.sbeVolatile : g.dbeVolatile;
                    break;
                case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
                    v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
                    v.value.uiVal = g.recoveryAction;
                    break;
                default:
                    v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                    break;
            }
        }
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
    return runningProcesses(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
    return runningProcesses(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos) {
    return runningProcesses(device, infoCount, infos);
}

// ---- topology ----------------------------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t* pathInfo) {
    return withPair(device1, device2, [&](State&, const Gpu& a, const Gpu& b) -> nvmlReturn_t {
        if (!pathInfo) return NVML_ERROR_INVALID_ARGUMENT;
        const auto &sa = a.spec.switches, &sb = b.spec.switches;
        auto shares = [&] {
            for (auto& s : sa)
                if (std::find(sb.begin(), sb.end(), s) != sb.end()) return true;
            return false;
        };
        if (&a == &b)
            *pathInfo = NVML_TOPOLOGY_INTERNAL;
        else if (!sa.empty() && !sb.empty() && sa.back() == sb.back())
            *pathInfo = NVML_TOPOLOGY_SINGLE;
        else if (shares())
            *pathInfo = NVML_TOPOLOGY_MULTIPLE;
        else if (a.spec.hostBridge == b.spec.hostBridge)
            *pathInfo = NVML_TOPOLOGY_HOSTBRIDGE;
        else if (a.spec.numaNode == b.spec.numaNode)
            *pathInfo = NVML_TOPOLOGY_NODE;
        else
            *pathInfo = NVML_TOPOLOGY_SYSTEM;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        const NvLinkEnd* end = nullptr;
        if (nvmlReturn_t r = linkAt(*d.gpu, link, &end)) return r;
        if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
        *isActive = NVML_FEATURE_ENABLED;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) { return remotePci(st, *d.gpu, link, pci); });
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_v2_t* pci) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
        nvmlPciInfo_t full;
        if (nvmlReturn_t r = remotePci(st, *d.gpu, link, &full)) return r;
        fillPciOld(full, pci);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t* type) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        const NvLinkEnd* end = nullptr;
        if (nvmlReturn_t r = linkAt(*d.gpu, link, &end)) return r;
        if (!type) return NVML_ERROR_INVALID_ARGUMENT;
        *type = end->toSwitch ? NVML_NVLINK_DEVICE_TYPE_SWITCH : NVML_NVLINK_DEVICE_TYPE_GPU;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t* p2pStatus) {
    return withPair(device1, device2, [&](State&, const Gpu& a, const Gpu& b) -> nvmlReturn_t {
        if (!p2pStatus || p2pIndex < NVML_P2P_CAPS_INDEX_READ || p2pIndex > NVML_P2P_CAPS_INDEX_UNKNOWN)
            return NVML_ERROR_INVALID_ARGUMENT;
        *p2pStatus = NVML_P2P_STATUS_OK;
        if (p2pIndex == NVML_P2P_CAPS_INDEX_NVLINK && &a != &b) {
            bool direct = false, aSw = false, bSw = false;
            for (auto& l : a.spec.links) {
                direct = direct || (!l.toSwitch && l.peer == b.index);
                aSw = aSw || l.toSwitch;
            }
            for (auto& l : b.spec.links) bSw = bSw || l.toSwitch;
            if (!direct && !(aSw && bSw)) *p2pStatus = NVML_P2P_STATUS_NOT_SUPPORTED;
        }
        return NVML_SUCCESS;
    });
}

// ---- MIG ---------------------------------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.gpu->spec.migCapable) return NVML_ERROR_NOT_SUPPORTED;
        *currentMode = d.gpu->migEnabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
        *pendingMode = d.gpu->migPendingEnabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        *count = d.gpu->migEnabled ? d.gpu->spec.maxMigDevices : 0;  // 0 when MIG is off or absent
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t* migDevice) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!migDevice) return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.gpu->spec.migCapable) return NVML_ERROR_NOT_SUPPORTED;
        if (index >= d.gpu->spec.maxMigDevices) return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.gpu->migEnabled || index >= d.gpu->migs.size() || d.gpu->migs[index]->hidden || !d.gpu->migs[index]->hasCi)
            return NVML_ERROR_NOT_FOUND;
        *migDevice = toHandle<nvmlDevice_t>(d.gpu->migs[index]);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
        *isMigDevice = d.mig ? 1 : 0;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t* device) {
    return withDevice(migDevice, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!device || !d.mig) return NVML_ERROR_INVALID_ARGUMENT;
        *device = toHandle<nvmlDevice_t>(d.gpu);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!id) return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.mig) return NVML_ERROR_NOT_SUPPORTED;
        *id = d.mig->giId;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!id) return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.mig) return NVML_ERROR_NOT_SUPPORTED;
        *id = d.mig->ciId;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!attributes) return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.mig) return NVML_ERROR_NOT_SUPPORTED;  // like the real API: MIG device handles only
        const MigDevice& m = *d.mig;
        nvmlDeviceAttributes_t a{};
        const MigEngines e = migEngines(*m.parent, m.slices, m.giProfileId);
        a.multiprocessorCount = m.smCount;
        a.sharedCopyEngineCount = e.copy;
        a.sharedDecoderCount = e.decoders;
        a.sharedEncoderCount = e.encoders;
        a.sharedJpegCount = e.jpeg;
        a.sharedOfaCount = e.ofa;
        a.gpuInstanceSliceCount = m.slices;
        a.computeInstanceSliceCount = m.slices;
        a.memorySizeMB = m.memoryMib;
        *attributes = a;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
        const GiRule* rule = d.gpu->spec.migCapable ? giRule(*d.gpu, profile) : nullptr;
        if (!rule) return NVML_ERROR_NOT_SUPPORTED;
        auto fig = profileFigures(st, *d.gpu, profile);
        if (!fig) return NVML_ERROR_NOT_SUPPORTED;
        const unsigned slices = slicesOfGiProfile(profile);
        nvmlGpuInstanceProfileInfo_t i{};
        i.id = rule->id;  // the device's id for the profile, not the index asked for (19 for 1g on A100)
        i.isP2pSupported = 0;
        i.sliceCount = slices;
        i.instanceCount = rule->maxCount;
        i.multiprocessorCount = fig->second;
        const MigEngines e = migEngines(*d.gpu, slices, profile);
        i.copyEngineCount = e.copy;
        i.decoderCount = e.decoders;
        i.encoderCount = e.encoders;
        i.jpegCount = e.jpeg;
        i.ofaCount = e.ofa;
        i.memorySizeMB = fig->first;
        *info = i;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t* gpuInstance) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!gpuInstance) return NVML_ERROR_INVALID_ARGUMENT;
        if (!d.gpu->spec.migCapable) return NVML_ERROR_NOT_SUPPORTED;
        if (!d.gpu->migEnabled) return NVML_ERROR_INVALID_STATE;
        for (MigDevice* m : d.gpu->migs)
            if (m->giId == id) {
                *gpuInstance = toHandle<nvmlGpuInstance_t>(m->gi);
                return NVML_SUCCESS;
            }
        return NVML_ERROR_NOT_FOUND;
    });
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
    return withInstance<GpuInstanceObj>(gpuInstance, Kind::GpuInstance, [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!info) return NVML_ERROR_INVALID_ARGUMENT;
        nvmlGpuInstanceInfo_t i{};
        i.device = toHandle<nvmlDevice_t>(m.parent);
        i.id = m.giId;
        i.profileId = m.giProfileDeviceId;
        i.placement = nvmlGpuInstancePlacement_t{m.placementStart, m.placementSize};
        *info = i;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t* computeInstance) {
    return withInstance<GpuInstanceObj>(gpuInstance, Kind::GpuInstance, [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!computeInstance) return NVML_ERROR_INVALID_ARGUMENT;
        if (!m.hasCi || id != m.ciId) return NVML_ERROR_NOT_FOUND;
        *computeInstance = toHandle<nvmlComputeInstance_t>(m.ci);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t* info) {
    return withInstance<ComputeInstanceObj>(computeInstance, Kind::ComputeInstance,
                                            [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!info) return NVML_ERROR_INVALID_ARGUMENT;
        nvmlComputeInstanceInfo_t i{};
        i.device = toHandle<nvmlDevice_t>(m.parent);
        i.gpuInstance = toHandle<nvmlGpuInstance_t>(m.gi);
        i.id = m.ciId;
        i.profileId = m.ciProfileId;
        i.placement = nvmlComputeInstancePlacement_t{0, m.slices};
        *info = i;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_v1_t* info) {
    return withInstance<ComputeInstanceObj>(computeInstance, Kind::ComputeInstance,
                                            [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!info) return NVML_ERROR_INVALID_ARGUMENT;
        nvmlComputeInstanceInfo_v1_t i{};
        i.device = toHandle<nvmlDevice_t>(m.parent);
        i.gpuInstance = toHandle<nvmlGpuInstance_t>(m.gi);
        i.id = m.ciId;
        i.profileId = m.ciProfileId;
        *info = i;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
    return withInstance<GpuInstanceObj>(gpuInstance, Kind::GpuInstance, [&](State& st, MigDevice& m) -> nvmlReturn_t {
        if (!info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
            engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
            return NVML_ERROR_INVALID_ARGUMENT;
        const unsigned slices = profile <= 6 ? slicesOfGiProfile(profile) : 0;  // CI ids 0..6 by slice count
        if (!slices || slices > m.slices) return NVML_ERROR_NOT_SUPPORTED;
        nvmlComputeInstanceProfileInfo_t i{};
        i.id = profile;
        i.sliceCount = slices;
        i.instanceCount = m.slices / slices;
        i.multiprocessorCount = slices == m.slices ? m.smCount : smPerSlice(st, *m.parent) * slices;
        const MigEngines e = migEngines(*m.parent, m.slices, m.giProfileId);
        i.sharedCopyEngineCount = e.copy;
        i.sharedDecoderCount = e.decoders;
        i.sharedEncoderCount = e.encoders;
        i.sharedJpegCount = e.jpeg;
        i.sharedOfaCount = e.ofa;
        *info = i;
        return NVML_SUCCESS;
    });
}

// ---- MIG management ------------------------------------------------------------------------------
// A change is made as the driver makes it: checked against the GPU's present layout, then
// written as the whole new layout (`mig <gpu> <profile>@<start>:gi<G>[:ci<C>],...`, or `migmode`)
// to the events file when there is one, so that every process sharing it sees the same instances
// with the same ids, and applied in this process before the call returns.

}  // extern "C"

namespace {

// Applies `line` (made under the lock, applied without it when shared). UNKNOWN when it could not
// be written or (without an events file) did not apply; with one, the callers check that the
// change is there. Two processes changing one GPU at the same moment can lose one change: each
// line is the whole layout (a known limit of the simulator; a real driver serialises).
nvmlReturn_t applyChange(const std::string& line) {
    auto shared = shareCommand(line);
    if (shared) return *shared ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
    return withState([&](State& st) -> nvmlReturn_t {
        if (std::string why = applyOwnCommand(st, line); !why.empty()) {
            std::cerr << "kgpu-sim: " << line << ": " << why << std::endl;
            return NVML_ERROR_UNKNOWN;
        }
        syncProcfs(st);
        return NVML_SUCCESS;
    });
}

// One instance of a layout line.
struct Instance {
    std::string profile;
    unsigned start = 0, giId = 0;
    bool hasCi = false;
    unsigned ciId = 0;
};
Instance instanceOf(const MigDevice& m) { return {m.profile, m.placementStart, m.giId, m.hasCi, m.ciId}; }

// The layout line of `g` with one instance changed: `replace` (by GI id) dropped or replaced by
// `with`, or `with` added when `replace` is kNoId.
std::string layoutWith(const Gpu& g, unsigned replace, const Instance* with) {
    std::string tokens;
    auto add = [&](const Instance& i) {
        tokens += (tokens.empty() ? "" : ",") + i.profile + "@" + std::to_string(i.start) + ":gi" + std::to_string(i.giId);
        if (i.hasCi) tokens += ":ci" + std::to_string(i.ciId);
    };
    for (const MigDevice* m : g.migs) {
        if (m->giId != replace) add(instanceOf(*m));
        else if (with) add(*with);
    }
    if (replace == kNoId && with) add(*with);
    return "mig " + std::to_string(g.index) + " " + (tokens.empty() ? "on" : tokens);
}

bool overlaps(const Gpu& g, unsigned start, unsigned size) {
    for (const MigDevice* m : g.migs)
        if (start < m->placementStart + m->placementSize && m->placementStart < start + size) return true;
    return false;
}

unsigned countOf(const Gpu& g, unsigned giProfileIndex) {
    unsigned n = 0;
    for (const MigDevice* m : g.migs) n += m->giProfileId == giProfileIndex;
    return n;
}

// How many more instances of `rule` fit now (starts taken lowest first; the tables' starts are
// aligned to the instance size, so that is the most that fit).
unsigned remaining(const Gpu& g, const GiRule& rule) {
    std::vector<std::pair<unsigned, unsigned>> taken;
    for (const MigDevice* m : g.migs) taken.emplace_back(m->placementStart, m->placementStart + m->placementSize);
    unsigned n = 0;
    for (unsigned start : rule.starts) {
        bool free = true;
        for (auto [a, b] : taken) free = free && !(start < b && a < start + rule.size);
        if (!free) continue;
        taken.emplace_back(start, start + rule.size);
        ++n;
    }
    const unsigned have = countOf(g, rule.index);
    const unsigned byProfile = rule.maxCount > have ? rule.maxCount - have : 0;
    const unsigned byDevices = g.spec.maxMigDevices > g.migs.size() ? g.spec.maxMigDevices - static_cast<unsigned>(g.migs.size()) : 0;
    return std::min({n, byProfile, byDevices});
}

// The profile's name as nvidia-smi and mig-parted spell it: "<slices>g.<GB>gb[+me]", GB the
// instance's memory rounded up to eighths of the GPU's, times the GPU's memory in GiB rounded up.
std::string giProfileName(const State& st, const Gpu& g, const GiRule& rule) {
    const auto fig = profileFigures(st, g, rule.index);
    const double total = static_cast<double>(g.spec.memoryMib);
    const double eighths = fig ? std::ceil(static_cast<double>(fig->first) / total * 8.0 - 1e-9) : rule.size;
    const auto gb = static_cast<unsigned>(std::lround(eighths / 8.0 * std::ceil(total / 1024.0)));
    const bool me = rule.index == 7 || rule.index == 8;
    return std::to_string(slicesOfGiProfile(rule.index)) + "g." + std::to_string(gb) + "gb" + (me ? "+me" : "");
}

// A GPU with MIG enabled now, for the GPU-instance calls (NOT_SUPPORTED otherwise, as nvml.h says).
nvmlReturn_t migEnabledGpu(const DevRef& d) {
    if (!d.gpu->spec.migCapable || !d.gpu->migEnabled) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

nvmlReturn_t createGpuInstance(nvmlDevice_t device, unsigned profileId, const nvmlGpuInstancePlacement_t* placement,
                               nvmlGpuInstance_t* gpuInstance) {
    std::string line;
    unsigned giId = 0;
    nvmlReturn_t r = withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!gpuInstance) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t e = migEnabledGpu(d); e != NVML_SUCCESS) return e;
        const Gpu& g = *d.gpu;
        const GiRule* rule = giRuleById(g, profileId);
        if (!rule) return NVML_ERROR_INVALID_ARGUMENT;
        if (countOf(g, rule->index) >= rule->maxCount || g.migs.size() >= g.spec.maxMigDevices)
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
        std::optional<unsigned> start;
        if (placement) {
            if (placement->size != rule->size ||
                std::find(rule->starts.begin(), rule->starts.end(), placement->start) == rule->starts.end())
                return NVML_ERROR_INVALID_ARGUMENT;
            if (overlaps(g, placement->start, rule->size)) return NVML_ERROR_INSUFFICIENT_RESOURCES;
            start = placement->start;
        } else {
            for (unsigned s : rule->autoOrder)
                if (!overlaps(g, s, rule->size)) {
                    start = s;
                    break;
                }
            if (!start) return NVML_ERROR_INSUFFICIENT_RESOURCES;
        }
        std::vector<unsigned> used;
        for (const MigDevice* m : g.migs) used.push_back(m->giId);
        giId = giIdForPlacement(*start, rule->size, used);
        const Instance fresh{giProfileName(st, g, *rule), *start, giId, false, 0};
        line = layoutWith(g, kNoId, &fresh);
        return NVML_SUCCESS;
    });
    if (r != NVML_SUCCESS) return r;
    if ((r = applyChange(line)) != NVML_SUCCESS) return r;
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        for (MigDevice* m : d.gpu->migs)
            if (m->giId == giId) {
                *gpuInstance = toHandle<nvmlGpuInstance_t>(m->gi);
                return NVML_SUCCESS;
            }
        return NVML_ERROR_UNKNOWN;
    });
}

}  // namespace

extern "C" {

// Bare metal: an idle GPU changes mode at once (the driver resets it); with processes on it the
// new mode waits for a reset (activationStatus IN_USE), and with the fixture's
// mig.reset_required (a VM with the GPU passed through) always (RESET_REQUIRED). GPU instances
// must be gone before MIG is disabled.
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t* activationStatus) {
    std::string line;
    nvmlReturn_t activation = NVML_SUCCESS;
    nvmlReturn_t r = withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!activationStatus || mode > NVML_DEVICE_MIG_ENABLE) return NVML_ERROR_INVALID_ARGUMENT;
        const Gpu& g = *d.gpu;
        if (!g.spec.migCapable) return NVML_ERROR_NOT_SUPPORTED;
        const bool want = mode == NVML_DEVICE_MIG_ENABLE;
        if (!want && g.migEnabled && !g.migs.empty()) return NVML_ERROR_IN_USE;
        bool current = g.migEnabled;
        if (want != g.migEnabled) {
            if (g.spec.migResetRequired) activation = NVML_ERROR_RESET_REQUIRED;
            else if (!g.procs.empty()) activation = NVML_ERROR_IN_USE;
            else current = want;
        }
        auto word = [](bool on) { return on ? "enabled" : "disabled"; };
        line = "migmode " + std::to_string(g.index) + " " + word(current) + " " + word(want);
        return NVML_SUCCESS;
    });
    if (r != NVML_SUCCESS) return r;
    if ((r = applyChange(line)) != NVML_SUCCESS) return r;
    *activationStatus = activation;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t* placements, unsigned int* count) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        const GiRule* rule = d.gpu->spec.migCapable ? giRuleById(*d.gpu, profileId) : nullptr;
        if (!rule) return NVML_ERROR_NOT_SUPPORTED;
        const auto n = static_cast<unsigned>(rule->starts.size());
        if (!placements) {
            *count = n;
            return NVML_SUCCESS;
        }
        if (*count < n) {
            *count = n;
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (unsigned i = 0; i < n; ++i) placements[i] = nvmlGpuInstancePlacement_t{rule->starts[i], rule->size};
        *count = n;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId, unsigned int* count) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t e = migEnabledGpu(d); e != NVML_SUCCESS) return e;
        const GiRule* rule = giRuleById(*d.gpu, profileId);
        if (!rule) return NVML_ERROR_NOT_SUPPORTED;
        *count = remaining(*d.gpu, *rule);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t* gpuInstance) {
    return createGpuInstance(device, profileId, nullptr, gpuInstance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gpuInstance) {
    if (!placement) return NVML_ERROR_INVALID_ARGUMENT;
    return createGpuInstance(device, profileId, placement, gpuInstance);
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t* gpuInstances,
                                       unsigned int* count) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!count || !gpuInstances) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t e = migEnabledGpu(d); e != NVML_SUCCESS) return e;
        if (!giRuleById(*d.gpu, profileId)) return NVML_ERROR_NOT_SUPPORTED;
        unsigned n = 0;
        for (MigDevice* m : d.gpu->migs)
            if (m->giProfileDeviceId == profileId) gpuInstances[n++] = toHandle<nvmlGpuInstance_t>(m->gi);
        *count = n;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
    std::string line;
    nvmlReturn_t r = withInstance<GpuInstanceObj>(gpuInstance, Kind::GpuInstance, [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (m.hasCi) return NVML_ERROR_IN_USE;  // its compute instance first
        line = layoutWith(*m.parent, m.giId, nullptr);
        return NVML_SUCCESS;
    });
    if (r != NVML_SUCCESS) return r;
    if ((r = applyChange(line)) != NVML_SUCCESS) return r;
    // Gone, unless the line did not apply (another process changed the GPU in between).
    return withState([&](State& st) { return st.lookup<GpuInstanceObj>(gpuInstance, Kind::GpuInstance) ? NVML_ERROR_UNKNOWN : NVML_SUCCESS; });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                unsigned int* count) {
    return withInstance<GpuInstanceObj>(gpuInstance, Kind::GpuInstance, [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        if (profileId != m.ciProfileId) return NVML_ERROR_NOT_SUPPORTED;  // full-size compute instances only
        *count = m.hasCi ? 0 : 1;
        return NVML_SUCCESS;
    });
}

// One compute instance of the GPU instance's full size (what mig-parted and `nvidia-smi mig -cgi
// ... -C` create); smaller ones are not modelled (NOT_SUPPORTED).
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance) {
    std::string line;
    nvmlGpuInstance_t gi = gpuInstance;
    nvmlReturn_t r = withInstance<GpuInstanceObj>(gpuInstance, Kind::GpuInstance, [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!computeInstance || profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
        if (profileId != m.ciProfileId) return NVML_ERROR_NOT_SUPPORTED;
        if (m.hasCi) return NVML_ERROR_INSUFFICIENT_RESOURCES;
        Instance with = instanceOf(m);
        with.hasCi = true;
        with.ciId = 0;
        line = layoutWith(*m.parent, m.giId, &with);
        return NVML_SUCCESS;
    });
    if (r != NVML_SUCCESS) return r;
    if ((r = applyChange(line)) != NVML_SUCCESS) return r;
    return withInstance<GpuInstanceObj>(gi, Kind::GpuInstance, [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!m.hasCi) return NVML_ERROR_UNKNOWN;
        *computeInstance = toHandle<nvmlComputeInstance_t>(m.ci);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
    std::string line;
    nvmlReturn_t r = withInstance<ComputeInstanceObj>(computeInstance, Kind::ComputeInstance,
                                                      [&](State&, MigDevice& m) -> nvmlReturn_t {
        for (const auto& [pid, p] : m.parent->procs)
            if (p.giId == m.giId) return NVML_ERROR_IN_USE;
        Instance without = instanceOf(m);
        without.hasCi = false;
        line = layoutWith(*m.parent, m.giId, &without);
        return NVML_SUCCESS;
    });
    if (r != NVML_SUCCESS) return r;
    if ((r = applyChange(line)) != NVML_SUCCESS) return r;
    return withState([&](State& st) {
        return st.lookup<ComputeInstanceObj>(computeInstance, Kind::ComputeInstance) ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances, unsigned int* count) {
    return withInstance<GpuInstanceObj>(gpuInstance, Kind::GpuInstance, [&](State&, MigDevice& m) -> nvmlReturn_t {
        if (!count || !computeInstances || profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
        unsigned n = 0;
        if (m.hasCi && m.ciProfileId == profileId) computeInstances[n++] = toHandle<nvmlComputeInstance_t>(m.ci);
        *count = n;
        return NVML_SUCCESS;
    });
}

// ---- events ------------------------------------------------------------------------------------

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
    return withState([&](State& st) -> nvmlReturn_t {
        if (!set) return NVML_ERROR_INVALID_ARGUMENT;
        EventSet* es = st.make<EventSet>();
        st.sets.push_back(es);
        *set = toHandle<nvmlEventSet_t>(es);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!eventTypes) return NVML_ERROR_INVALID_ARGUMENT;
        *eventTypes = supportedEvents(*d.gpu);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        EventSet* es = st.lookup<EventSet>(set, Kind::EventSet);
        if (!es) return NVML_ERROR_INVALID_ARGUMENT;
        if (eventTypes & ~supportedEvents(*d.gpu)) return NVML_ERROR_NOT_SUPPORTED;
        es->registrations[d.gpu] |= eventTypes;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
    return waitEvent(set, data, timeoutms, [&](const Event& e) {
        *data = nvmlEventData_t{toHandle<nvmlDevice_t>(e.device), e.type, e.data, e.giId, e.ciId};
    });
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t* data, unsigned int timeoutms) {
    return waitEvent(set, data, timeoutms, [&](const Event& e) {
        *data = nvmlEventData_v1_t{toHandle<nvmlDevice_t>(e.device), e.type, e.data};
    });
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    return withState([&](State& st) -> nvmlReturn_t {
        EventSet* es = st.lookup<EventSet>(set, Kind::EventSet);
        if (!es) return NVML_ERROR_INVALID_ARGUMENT;
        es->valid = false;
        std::erase(st.sets, es);
        std::lock_guard lk(es->qmutex);
        es->closed = NVML_ERROR_INVALID_ARGUMENT;  // a thread still waiting on it wakes up
        es->queue.clear();
        es->cv.notify_all();
        return NVML_SUCCESS;
    });
}

}  // extern "C"
