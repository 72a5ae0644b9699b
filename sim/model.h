// The simulated driver's state: one node (read from the YAML fixture named by KGPU_SIM_NODE),
// its GPUs, MIG devices and event sets, all behind one mutex.
//
// Contracts:
// - Every object a handle can point to derives from Object and is owned by State::arena, which
//   is never shrunk while the library is loaded: a stale handle points to live memory whose
//   `valid` flag is false, so calls on it answer INVALID_ARGUMENT instead of crashing.
// - Handles are validated against State::registry (the set of every Object ever made), so a
//   pointer the library never handed out is rejected too.
// - All fields are guarded by State::mutex except EventSet's queue, which has its own mutex so a
//   waiter never holds the global one.
#pragma once

// Every file of the library sees the NVML declarations with default visibility, so the entry
// points defined against them are exported whichever file includes the header first (in a unity
// build model.cpp does, before api.cpp).
#pragma GCC visibility push(default)
#include "nvml/nvml_abi.h"
#pragma GCC visibility pop

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace kgpu_sim {

inline constexpr unsigned kNoId = 0xFFFFFFFFu;
inline constexpr unsigned kNvSwitchPciDeviceId = 0x22a310deu;

enum class Kind { Gpu, Mig, GpuInstance, ComputeInstance, EventSet };

struct Object {
    explicit Object(Kind k) : kind(k) {}
    virtual ~Object() = default;
    Object(const Object&) = delete;
    Object& operator=(const Object&) = delete;
    const Kind kind;
    bool valid = true;  // false once the object no longer exists in the driver's view
};

// A PCI address; `text` is the canonical 8-hex-digit-domain upper-case form.
struct PciAddr {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    std::string text() const;        // "00000000:18:00.0"
    std::string legacyText() const;  // "0000:18:00.0"
};
// Accepts "[domain:]bus:device[.function]" in hex, any case, 4- or 8-digit domain.
std::optional<PciAddr> parsePciAddr(const std::string& s);

struct Telemetry {
    unsigned gpuUtil = 0, memUtil = 0, encUtil = 0, decUtil = 0;
    unsigned temperatureC = 34;
    std::optional<unsigned> memoryTemperatureC;  // absent on non-HBM parts
    unsigned powerW = 70;
    unsigned smClockMhz = 1410, memClockMhz = 1593, maxSmClockMhz = 1410, maxMemClockMhz = 1593;
    unsigned long long fbUsedMib = 0;
    unsigned long long energyJ = 0;
    unsigned pcieReplay = 0, pcieTxKBps = 0, pcieRxKBps = 0;
};

// One MIG device as the fixture (or a `mig` command) describes it.
struct MigSpec {
    std::string profile;  // "1g.10gb"
    unsigned giId = 0, ciId = 0;
    std::string uuid;     // "MIG-..."
    unsigned long long memoryMib = 0;
    unsigned smCount = 0;
    std::optional<unsigned> placementStart;
    bool hasCi = true;  // false: a GPU instance without its compute instance (not a MIG device yet)
};

// A MIG profile name decoded: "<slices>g.<gb>gb[+me]".
struct MigProfile {
    unsigned slices = 0, gb = 0;
    bool mediaExtensions = false;
};
std::optional<MigProfile> parseMigProfile(const std::string& name);
unsigned sliceProfileIndex(unsigned slices);  // 1→0 2→1 3→2 4→3 7→4 8→5 6→6; kNoId otherwise
unsigned memorySlices(unsigned giProfileId);  // placement size / memory slices of a GI profile
unsigned slicesOfGiProfile(unsigned giProfileId);  // 0 when the simulator does not know it

struct NvLinkEnd {
    bool toSwitch = false;
    unsigned peer = 0;  // GPU index, or NVSwitch index when toSwitch
};

struct GpuSpec {
    std::string name, uuid, serial;
    unsigned minor = 0;
    PciAddr pci;
    unsigned pciDeviceId = 0, pciSubsystemId = 0;
    int numaNode = -1;
    unsigned boardId = 0;
    std::string vbios = "00.00.00.00.00";
    // infoROM versions (nvmlDeviceGetInforomImageVersion / GetInforomVersion OEM, ECC, power);
    // "" answers NOT_SUPPORTED (as modern boards do for the power object).
    std::string inforomImage = "G000.0000.00.00", inforomOem = "2.1", inforomEcc = "7.0", inforomPower;
    unsigned long long memoryMib = 0, reservedMib = 0;
    int ccMajor = 0, ccMinor = 0;
    unsigned architecture = NVML_DEVICE_ARCH_UNKNOWN;
    int brand = 2;
    unsigned powerLimitW = 0;
    bool persistence = true, ecc = true, lost = false, displayActive = false;
    std::string hostBridge;
    std::vector<std::string> switches;  // root port downwards
    Telemetry telemetry;
    bool migCapable = false;
    bool migEnabled = false, migPendingEnabled = false;
    unsigned maxMigDevices = 0;
    bool migResetRequired = false;  // fixture mig.reset_required: a mode change waits for `reset`
    std::vector<MigSpec> migDevices;
    std::vector<NvLinkEnd> links;  // index = NVLink link number
};

struct NodeSpec {
    std::string driverVersion, nvmlVersion;
    std::string devRoot;  // fixture key dev_root (env KGPU_SIM_DEV_ROOT wins): see State::devRoot
    int cudaDriverVersion = 0;
    std::optional<nvmlReturn_t> initError;
    std::vector<PciAddr> nvswitches;
    std::vector<GpuSpec> gpus;
};

// Parses and checks a fixture. On error prints `kgpu-sim: <file>:<line>: <key>: <expected>` on
// stderr and returns nullopt.
std::optional<NodeSpec> loadNode(const std::string& path);
// An NVML return code by its name without NVML_ERROR_ ("UNKNOWN"; "SUCCESS" for NVML_SUCCESS).
std::optional<nvmlReturn_t> errorByName(const std::string& name);

struct Gpu;

struct GpuInstanceObj : Object {
    GpuInstanceObj() : Object(Kind::GpuInstance) {}
    struct MigDevice* mig = nullptr;
};
struct ComputeInstanceObj : Object {
    ComputeInstanceObj() : Object(Kind::ComputeInstance) {}
    struct MigDevice* mig = nullptr;
};

struct MigDevice : Object {
    MigDevice() : Object(Kind::Mig) {}
    Gpu* parent = nullptr;
    unsigned index = 0;  // position under the parent
    std::string profile;
    unsigned giProfileId = 0, ciProfileId = 0, slices = 0;  // NVML_*_INSTANCE_PROFILE_* indices
    unsigned giProfileDeviceId = 0;  // the profile id the device reports (GiRule::id)
    unsigned giId = 0, ciId = 0;
    bool hasCi = true;  // false: a GPU instance whose compute instance is not (yet) created; then
                        // this object is no MIG device (invalid as one, never enumerated)
    std::string uuid;
    unsigned long long memoryMib = 0;
    unsigned smCount = 0;
    unsigned placementStart = 0, placementSize = 0;
    bool hidden = false;  // no capability nodes under the dev root: not enumerated
    GpuInstanceObj* gi = nullptr;
    ComputeInstanceObj* ci = nullptr;
};

struct Process {
    unsigned long long bytes = 0;
    unsigned giId = kNoId, ciId = kNoId;
    std::string name;
    unsigned smUtil = 0, memUtil = 0;  // percent, for nvmlDeviceGetProcessUtilization
};

struct Gpu : Object {
    Gpu() : Object(Kind::Gpu) {}
    unsigned index = 0;  // position in the fixture (events-file commands use it)
    bool hidden = false; // no <devRoot>/dev/nvidia<minor>: not enumerated (see State::devRoot)
    GpuSpec spec;
    // Mutable state (events file commands).
    bool lost = false;
    bool migEnabled = false, migPendingEnabled = false;
    std::vector<MigDevice*> migs;
    unsigned nextGiId = 1;
    std::optional<std::pair<unsigned, unsigned>> utilOverride;  // gpu%, mem%
    std::map<unsigned, Process> procs;                          // by pid
    std::map<std::string, nvmlReturn_t, std::less<>> failing;  // entry point -> error (`fail` command)
    unsigned remapCorr = 0, remapUnc = 0;
    bool remapPending = false, retiredPagesPending = false;
    unsigned long long sbeVolatile = 0, dbeVolatile = 0, sbeAggregate = 0, dbeAggregate = 0;
    unsigned recoveryAction = NVML_GPU_RECOVERY_ACTION_NONE;
    int computeMode = NVML_COMPUTEMODE_DEFAULT;  // nvmlDeviceSetComputeMode / `computemode`
};

struct Event {
    Object* device = nullptr;  // Gpu or MigDevice
    unsigned long long type = 0, data = 0;
    unsigned giId = kNoId, ciId = kNoId;
};

struct EventSet : Object {
    EventSet() : Object(Kind::EventSet) {}
    std::map<const Gpu*, unsigned long long> registrations;  // guarded by State::mutex
    // Guarded by qmutex (not the global mutex): waiters block on cv.
    std::mutex qmutex;
    std::condition_variable cv;
    std::deque<Event> queue;
    nvmlReturn_t closed = NVML_SUCCESS;  // set when freed / at shutdown: what a waiter returns
};

// Values the telemetry model derives for one GPU at the current time.
struct Sample {
    unsigned gpuUtil, memUtil, temperatureC, powerMw;
    unsigned long long energyMj;
};

struct State {
    std::mutex mutex;
    std::mutex lifecycle;  // serialises init/shutdown (held while the watcher thread is joined)
    int refcount = 0;
    NodeSpec node;
    std::vector<Gpu*> gpus;  // every GPU of the fixture, hidden ones included
    // KGPU_SIM_DEV_ROOT (or the fixture's dev_root): when set, the driver shows only the GPUs whose
    // <devRoot>/dev/nvidia<minor> exists and the MIG devices whose capability nodes
    // <devRoot>/dev/nvidia-caps/nvidia-cap<N> exist, as the real driver shows a container only
    // the devices whose nodes it can open. Enumeration indices count visible GPUs only.
    std::string devRoot;
    // KGPU_SIM_PROC_ROOT: where the driver's /proc entries are kept (syncProcfs); "" = none.
    std::string procRoot;
    std::vector<EventSet*> sets;
    std::chrono::steady_clock::time_point loadedAt;

    std::vector<std::unique_ptr<Object>> arena;
    std::unordered_set<const Object*> registry;

    template <class T>
    T* make() {
        auto p = std::make_unique<T>();
        T* raw = p.get();
        arena.push_back(std::move(p));
        registry.insert(raw);
        return raw;
    }
    // The object behind a handle when it is one of ours, of kind k, and still valid.
    template <class T>
    T* lookup(const void* handle, Kind k) const {
        auto* o = static_cast<const Object*>(handle);
        if (!handle || !registry.count(o) || o->kind != k || !o->valid) return nullptr;
        return static_cast<T*>(const_cast<Object*>(o));
    }
};

State& state();  // destroyed only when the library is unloaded
// Frees the state at unload (dlclose or exit), after the watcher thread has been stopped.
void destroyState();

// Model operations; all expect State::mutex held.
void buildFromSpec(State& st, NodeSpec spec);  // fresh GPUs and MIG devices; invalidates old ones
void invalidateAll(State& st);                 // at the last shutdown
void recreateMig(State& st, Gpu& gpu, const std::vector<MigSpec>& specs);
std::optional<MigSpec> migSpecFor(const State& st, const Gpu& gpu, const std::string& profile,
                                  unsigned giId, std::string* why);
unsigned giProfileIdFor(const Gpu& gpu, const MigProfile& p);
// Makes the GPU's MIG instances exactly `specs` (each with its GI id and placement): an instance
// whose GI id, profile, placement and compute instance are unchanged keeps its objects (handles
// stay valid, its processes stay); a GPU instance whose compute instance comes or goes keeps its
// GPU instance handle; the rest are destroyed or created. `recreateMig` destroys everything first.
void applyMigLayout(State& st, Gpu& gpu, const std::vector<MigSpec>& specs);
// Where a GPU instance profile may be placed on this GPU's product (NVIDIA's MIG user guide,
// `nvidia-smi mig -lgipp`): placements count memory slices, 8 on A100/H100 (4 on A30).
struct GiRule {
    unsigned index;     // NVML_GPU_INSTANCE_PROFILE_* (what nvmlDeviceGetGpuInstanceProfileInfo takes)
    unsigned id;        // the profile id the device reports (what create, placements, capacity take)
    unsigned size;      // memory slices an instance occupies
    unsigned maxCount;  // instances at most (GiProfileInfo instanceCount)
    std::vector<unsigned> starts;     // valid placement starts, ascending
    std::vector<unsigned> autoOrder;  // starts nvmlDeviceCreateGpuInstance tries, in order
};
const GiRule* giRule(const Gpu& gpu, unsigned index);      // null: not a profile of this product
const GiRule* giRuleById(const Gpu& gpu, unsigned id);     // by the device's profile id
// The GPU instance id the driver gives an instance at this placement (A100/H100: 7g 0, the 4-slice
// starts 1-2, 2-slice 3-6, 1-slice 7-14), or the lowest id not in `used` when that one is taken.
unsigned giIdForPlacement(unsigned start, unsigned size, const std::vector<unsigned>& used);
unsigned smPerSlice(const State& st, const Gpu& gpu);
// A GPU instance profile of a product whose profile table the simulator knows, as its driver
// reports it (nvmlDeviceGetGpuInstanceProfileInfo, `nvidia-smi mig -lgip`).
struct KnownGiProfile {
    unsigned id;  // NVML_GPU_INSTANCE_PROFILE_* (0 1g, 7 1g+me, 9 1g double memory, 1 2g, 2 3g, 3 4g, 4 7g)
    unsigned long long memoryMib;
    unsigned smCount, copyEngines, decoders, jpeg, ofa;
};
// The GPU's product table (by PCI device id): the profile's entry, or null when the product is
// not in it (its figures are derived) or the product has no such profile. `known` tells which.
const KnownGiProfile* knownGiProfile(const Gpu& gpu, unsigned giProfileId, bool* known = nullptr);
// Best known {memoryMib, smCount} for a GI profile on this GPU's model; nullopt if unknown.
std::optional<std::pair<unsigned long long, unsigned>> profileFigures(const State& st, const Gpu& gpu,
                                                                     unsigned giProfileId);
Sample sample(const State& st, const Gpu& gpu);
unsigned long long usedMib(const Gpu& gpu);                        // fixture fb_used + processes
unsigned long long usedBytes(const Gpu& gpu, const MigDevice* mig);  // processes (+ fb_used for GPU)
std::string migUuidFor(const std::string& parentUuid, unsigned giId);
// The capability minor of a MIG GPU instance's access node (ci == kNoId) or of a compute
// instance's, as the driver's /proc/driver/nvidia-caps/mig-minors numbers them: config 1,
// monitor 2, then per GPU minor 15 GPU instances of 9 (the GI's node, then its 8 CIs').
unsigned migCapMinor(unsigned gpuMinor, unsigned giId, unsigned ciId);
// Whether a device node exists under st.devRoot (always true when devRoot is empty).
bool devNodeVisible(const State& st, const std::string& node);

// The driver's /proc entries under st.procRoot (procfs.cpp): the module's version, a directory per
// GPU, and capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access for exactly the MIG instances there are
// now. Called once init has applied the events file, and after each batch of changes.
void syncProcfs(State& st);

// Events (events.cpp).
void deliver(State& st, const Gpu& gpu, Object* device, unsigned long long type, unsigned long long data,
             unsigned giId = kNoId, unsigned ciId = kNoId);
// Applies one events-file line; reports problems on stderr as `kgpu-sim: <file>:<line>: ...`.
void applyCommand(State& st, const std::string& line, const std::string& file, unsigned lineNo);
// Applies a line the API made itself (no events file); returns "" or what was wrong.
std::string applyOwnCommand(State& st, const std::string& line);
// Starts watching KGPU_SIM_EVENTS (lines already there are applied before this returns).
// Called at the first init with State::mutex NOT held.
void startWatcher();
// Node-wide state changes made through the API (nvmlDeviceSetComputeMode) are written to the
// events file as a command line, so every process sharing the file sees them as every process
// sees a real GPU's state; the line is applied in this process before this returns. Returns
// nullopt when there is no events file (the caller applies the change itself), false when the
// line could not be written (reported on stderr). Called with State::mutex NOT held.
std::optional<bool> shareCommand(const std::string& line);
// Stops and joins the watcher thread. Called at the last shutdown with State::mutex NOT held.
void stopWatcher();

// Activity counters (gpm.cpp): GPM metrics and NVLink throughput integrate rates derived from the
// GPU's utilisation (or set by `gpm` commands) over time. All expect State::mutex held.
// Brings the integrals of `gpu` and its MIG devices up to now at the current rates; call it
// before anything that changes those rates (a `util` command).
void advanceActivity(State& st, Gpu& gpu);
// `gpm <gpu>[:<mig>] <metric>=<value>|auto ...`; throws nothing, returns "" or the problem.
std::string applyGpmCommand(State& st, Gpu& gpu, MigDevice* mig, const std::vector<std::string>& settings);
// nvmlDeviceGetFieldValues for NVML_FI_DEV_NVLINK_THROUGHPUT_* (138..141): fills `v` and
// returns true, or returns false for any other field id.
bool nvlinkThroughputField(State& st, const Gpu& gpu, nvmlFieldValue_t& v);

}  // namespace kgpu_sim
