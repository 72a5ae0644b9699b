#include "nvml/device.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "common/strings.h"
#include "nvml/context.h"
#include "nvml/error.h"
#include "nvml/library.h"

namespace kgpu::nvml {


namespace {

// Turns a return code into Result<void>, naming the entry point (by its table field) on failure.
Status check(const Context& ctx, std::string_view field, nvmlReturn_t r) {
    if (r == NVML_SUCCESS) return {};
    return failed(ctx, field, r);
}

#define KGPU_CALL(field, ...)                                                                      \
    do {                                                                                           \
        if (auto st = check(*ctx_, #field, ctx_->api().field(__VA_ARGS__)); !st)                   \
            return std::unexpected(st.error());                                                    \
    } while (0)

// Reads a NUL-terminated string an NVML getter wrote into a fixed buffer.
std::string from_buffer(const char* buf, size_t size) { return std::string(buf, ::strnlen(buf, size)); }

unsigned parse_function(const std::string& bus_id) {
    auto dot = bus_id.rfind('.');
    if (dot == std::string::npos || dot + 1 >= bus_id.size()) return 0;
    return static_cast<unsigned>(bus_id[dot + 1] - '0') & 7u;
}

PciInfo to_pci(const nvmlPciInfo_t& p) {
    PciInfo out;
    out.bus_id = strings::upper(from_buffer(p.busId, sizeof p.busId));
    out.domain = p.domain;
    out.bus = p.bus;
    out.device = p.device;
    out.function = parse_function(out.bus_id);
    out.device_id = p.pciDeviceId;
    out.subsystem_id = p.pciSubSystemId;
    return out;
}

}  // namespace

std::string PciInfo::sysfs_bus_id() const {
    return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

// ---- Session ----------------------------------------------------------------------------------

Result<Session> Session::open(std::shared_ptr<const Library> library) {
    nvmlReturn_t r = library->api().Init();
    if (r != NVML_SUCCESS) return std::unexpected(make_error(*library, library->symbol_name("Init"), r));
    auto ctx = std::make_shared<Context>();
    ctx->lib = std::move(library);
    return Session(std::move(ctx));
}

const Library& Session::library() const { return *ctx_->lib; }

Result<std::string> Session::driver_version() const {
    char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    KGPU_CALL(SystemGetDriverVersion, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Session::nvml_version() const {
    char buf[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = {};
    KGPU_CALL(SystemGetNVMLVersion, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<int> Session::cuda_driver_version() const {
    int v = 0;
    KGPU_CALL(SystemGetCudaDriverVersion, &v);
    return v;
}

Result<unsigned> Session::device_count() const {
    unsigned n = 0;
    KGPU_CALL(DeviceGetCount, &n);
    return n;
}

Result<std::string> Session::process_name(unsigned pid) const {
    char buf[256] = {};
    KGPU_CALL(SystemGetProcessName, pid, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<Device> Session::device_by_index(unsigned index) const {
    nvmlDevice_t h = nullptr;
    KGPU_CALL(DeviceGetHandleByIndex, index, &h);
    return Device(ctx_, h);
}

Result<Device> Session::device_by_uuid(const std::string& uuid) const {
    nvmlDevice_t h = nullptr;
    KGPU_CALL(DeviceGetHandleByUUID, uuid.c_str(), &h);
    return Device(ctx_, h);
}

Result<Session> open_session(const LoadOptions& options) {
    auto lib = Library::load(options);
    if (!lib) return std::unexpected(lib.error());
    auto session = Session::open(*lib);
    if (!session) {
        Error e = session.error();
        std::string_view hint = init_failure_hint(e.nvml_return);
        e.message = fmt::format("initialising NVML from {}: {}{}{}", (*lib)->origin(), e.message,
                                hint.empty() ? "" : " — ", hint);
        return std::unexpected(e);
    }
    return session;
}

// ---- Device -----------------------------------------------------------------------------------

GpuEpoch& epoch_of(const nvmlDevice_st* gpu) {
    // Never freed: a Device may outlive every Session (it holds the Context), and a GPU's epoch
    // must outlive its Devices. One node-based entry per GPU handle this process was given.
    static std::mutex mu;
    static auto* epochs = new std::unordered_map<const nvmlDevice_st*, std::unique_ptr<GpuEpoch>>();
    std::lock_guard lk(mu);
    auto& e = (*epochs)[gpu];
    if (!e) e = std::make_unique<GpuEpoch>();
    return *e;
}

Device::Device(std::shared_ptr<const Context> ctx, nvmlDevice_st* handle)
    : ctx_(std::move(ctx)), handle_(handle), epoch_(&epoch_of(handle)), reset_generation_(epoch_->reset_now()) {}

Device::Device(std::shared_ptr<const Context> ctx, nvmlDevice_st* handle, const Device& gpu, std::uint64_t mig_generation)
    : ctx_(std::move(ctx)),
      handle_(handle),
      mig_(true),
      epoch_(gpu.epoch_),
      mig_generation_(mig_generation),
      reset_generation_(epoch_->reset_now()) {}

Result<std::string> Device::uuid() const {
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    KGPU_DEVICE_CALL(DeviceGetUUID, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::name() const {
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    KGPU_DEVICE_CALL(DeviceGetName, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::serial() const {
    char buf[NVML_DEVICE_SERIAL_BUFFER_SIZE + 2] = {};
    KGPU_DEVICE_CALL(DeviceGetSerial, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::vbios_version() const {
    char buf[NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE] = {};
    KGPU_DEVICE_CALL(DeviceGetVbiosVersion, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::inforom_version(Inforom object) const {
    char buf[NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE] = {};
    KGPU_DEVICE_CALL(DeviceGetInforomVersion, static_cast<nvmlInforomObject_t>(object), buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::inforom_image_version() const {
    char buf[NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE] = {};
    KGPU_DEVICE_CALL(DeviceGetInforomImageVersion, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<unsigned> Device::minor_number() const {
    unsigned v = 0;
    KGPU_DEVICE_CALL(DeviceGetMinorNumber, &v);
    return v;
}

Result<unsigned> Device::index() const {
    unsigned v = 0;
    KGPU_DEVICE_CALL(DeviceGetIndex, &v);
    return v;
}

Result<PciInfo> Device::pci_info() const {
    nvmlPciInfo_t p{};
    auto r = call(ctx_->api().DeviceGetPciInfo, &p);
    if (!r) return std::unexpected(r.error());
    if (*r == NVML_SUCCESS) return to_pci(p);
    if (*r != NVML_ERROR_NOT_SUPPORTED) return failed(*ctx_, "DeviceGetPciInfo", *r);
    // An older driver: the older struct, whose busId is the short form.
    nvmlPciInfo_v2_t old{};
    KGPU_DEVICE_CALL(DeviceGetPciInfoV2, &old);
    PciInfo out;
    out.domain = old.domain;
    out.bus = old.bus;
    out.device = old.device;
    out.function = parse_function(from_buffer(old.busId, sizeof old.busId));
    out.bus_id = fmt::format("{:08X}:{:02X}:{:02X}.{:X}", old.domain, old.bus, old.device, out.function);
    out.device_id = old.pciDeviceId;
    out.subsystem_id = old.pciSubSystemId;
    return out;
}

Result<int> Device::numa_node() const {
    unsigned v = 0;
    KGPU_DEVICE_CALL(DeviceGetNumaNodeId, &v);
    return static_cast<int>(v);
}

Result<MemoryInfo> Device::memory() const {
    nvmlMemory_v2_t m2{};
    m2.version = nvmlMemory_v2;
    auto r = call(ctx_->api().DeviceGetMemoryInfoV2, &m2);
    if (!r) return std::unexpected(r.error());
    if (*r == NVML_SUCCESS) return MemoryInfo{m2.total, m2.reserved, m2.free, m2.used};
    if (*r != NVML_ERROR_NOT_SUPPORTED && *r != NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return failed(*ctx_, "DeviceGetMemoryInfoV2", *r);
    nvmlMemory_t m{};
    KGPU_DEVICE_CALL(DeviceGetMemoryInfo, &m);
    return MemoryInfo{m.total, 0, m.free, m.used};
}

Result<std::pair<int, int>> Device::compute_capability() const {
    int major = 0, minor = 0;
    KGPU_DEVICE_CALL(DeviceGetCudaComputeCapability, &major, &minor);
    return std::pair{major, minor};
}

Result<unsigned> Device::architecture() const {
    nvmlDeviceArchitecture_t a = 0;
    KGPU_DEVICE_CALL(DeviceGetArchitecture, &a);
    return a;
}

Result<unsigned> Device::power_limit_mw() const {
    unsigned v = 0;
    KGPU_DEVICE_CALL(DeviceGetEnforcedPowerLimit, &v);
    return v;
}

Result<bool> Device::persistence_mode() const {
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_DEVICE_CALL(DeviceGetPersistenceMode, &s);
    return s == NVML_FEATURE_ENABLED;
}

Result<bool> Device::display_active() const {
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_DEVICE_CALL(DeviceGetDisplayActive, &s);
    return s == NVML_FEATURE_ENABLED;
}

std::string_view to_string(ComputeMode mode) {
    switch (mode) {
        case ComputeMode::default_: return "Default";
        case ComputeMode::prohibited: return "Prohibited";
        case ComputeMode::exclusive_process: return "Exclusive_Process";
    }
    return "Unknown";
}

Result<ComputeMode> Device::compute_mode() const {
    nvmlComputeMode_t m = NVML_COMPUTEMODE_DEFAULT;
    KGPU_DEVICE_CALL(DeviceGetComputeMode, &m);
    if (m != NVML_COMPUTEMODE_DEFAULT && m != NVML_COMPUTEMODE_PROHIBITED && m != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        return fail(Code::parse, "{}: unknown compute mode {}", ctx_->lib->symbol_name("DeviceGetComputeMode"), m);
    return static_cast<ComputeMode>(m);
}

Status Device::set_compute_mode(ComputeMode mode) const {
    KGPU_DEVICE_CALL(DeviceSetComputeMode, static_cast<nvmlComputeMode_t>(mode));
    return {};
}

Result<std::pair<bool, bool>> Device::ecc_mode() const {
    nvmlEnableState_t cur = NVML_FEATURE_DISABLED, pend = NVML_FEATURE_DISABLED;
    KGPU_DEVICE_CALL(DeviceGetEccMode, &cur, &pend);
    return std::pair{cur == NVML_FEATURE_ENABLED, pend == NVML_FEATURE_ENABLED};
}

Result<RemappedRows> Device::remapped_rows() const {
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    KGPU_DEVICE_CALL(DeviceGetRemappedRows, &corr, &unc, &pending, &failure);
    return RemappedRows{corr, unc, pending != 0, failure != 0};
}

Result<bool> Device::retired_pages_pending() const {
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_DEVICE_CALL(DeviceGetRetiredPagesPendingStatus, &s);
    return s == NVML_FEATURE_ENABLED;
}

Result<unsigned> Device::recovery_action() const {
    nvmlFieldValue_t v{};
    v.fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
    KGPU_DEVICE_CALL(DeviceGetFieldValues, 1, &v);
    if (auto st = check(*ctx_, "DeviceGetFieldValues", v.nvmlReturn); !st) return std::unexpected(st.error());
    return v.value.uiVal;
}

Result<std::vector<ProcessMemory>> Device::compute_processes() const {
    // Ask for the count first; a process may start in between, so retry on INSUFFICIENT_SIZE.
    for (int attempt = 0; attempt < 3; ++attempt) {
        unsigned count = 0;
        auto r = call(ctx_->api().DeviceGetComputeRunningProcesses, &count, nullptr);
        if (!r) return std::unexpected(r.error());
        if (*r == NVML_SUCCESS) return std::vector<ProcessMemory>{};
        if (*r != NVML_ERROR_INSUFFICIENT_SIZE) return failed(*ctx_, "DeviceGetComputeRunningProcesses", *r);
        std::vector<nvmlProcessInfo_t> infos(count + 4);
        count = static_cast<unsigned>(infos.size());
        r = call(ctx_->api().DeviceGetComputeRunningProcesses, &count, infos.data());
        if (!r) return std::unexpected(r.error());
        if (*r == NVML_ERROR_INSUFFICIENT_SIZE) continue;
        if (*r != NVML_SUCCESS) return failed(*ctx_, "DeviceGetComputeRunningProcesses", *r);
        std::vector<ProcessMemory> out;
        for (unsigned i = 0; i < count && i < infos.size(); ++i) {
            // NVML_VALUE_NOT_AVAILABLE (all ones) means the driver does not say.
            std::uint64_t used = infos[i].usedGpuMemory == ~0ULL ? 0 : infos[i].usedGpuMemory;
            out.push_back({infos[i].pid, used});
        }
        return out;
    }
    return std::unexpected(make_error(*ctx_->lib, ctx_->lib->symbol_name("DeviceGetComputeRunningProcesses"),
                                      NVML_ERROR_INSUFFICIENT_SIZE));
}

Result<MigMode> Device::mig_mode() const {
    unsigned cur = 0, pend = 0;
    KGPU_DEVICE_CALL(DeviceGetMigMode, &cur, &pend);
    return MigMode{cur == NVML_DEVICE_MIG_ENABLE, pend == NVML_DEVICE_MIG_ENABLE};
}

Result<unsigned> Device::max_mig_devices() const {
    unsigned v = 0;
    KGPU_DEVICE_CALL(DeviceGetMaxMigDeviceCount, &v);
    return v;
}

Result<std::optional<Device>> Device::mig_device(unsigned i) const {
    nvmlDevice_t h = nullptr;
    // The generation before the handle: a change in between leaves the handle already refused.
    const std::uint64_t generation = epoch_->mig.load();
    auto r = call(ctx_->api().DeviceGetMigDeviceHandleByIndex, i, &h);
    if (!r) return std::unexpected(r.error());
    if (*r == NVML_ERROR_NOT_FOUND) return std::optional<Device>{};
    if (*r != NVML_SUCCESS) return failed(*ctx_, "DeviceGetMigDeviceHandleByIndex", *r);
    return std::optional<Device>(Device(ctx_, h, *this, generation));
}

Status Device::live() const {
    if (const std::uint64_t now = epoch_->resets.load() >> 1; now > reset_generation_)
        return fail(Code::stale,
                    "{} handle taken before its GPU stopped answering and came back (reset generation {}, now {}): "
                    "look the device up again",
                    mig_ ? "MIG device" : "GPU", reset_generation_, now);
    if (!mig_) return {};
    const std::uint64_t now = epoch_->mig.load();
    if (now == mig_generation_) return {};
    return fail(Code::stale,
                "MIG device handle taken before its GPU's MIG configuration changed (generation {}, now {}): look the "
                "device up again",
                mig_generation_, now);
}

Result<unsigned> Device::gpu_instance_id() const {
    unsigned v = 0;
    KGPU_DEVICE_CALL(DeviceGetGpuInstanceId, &v);
    return v;
}

Result<unsigned> Device::compute_instance_id() const {
    unsigned v = 0;
    KGPU_DEVICE_CALL(DeviceGetComputeInstanceId, &v);
    return v;
}

Result<DeviceAttributes> Device::attributes() const {
    nvmlDeviceAttributes_t a{};
    KGPU_DEVICE_CALL(DeviceGetAttributes, &a);
    DeviceAttributes out;
    out.multiprocessor_count = a.multiprocessorCount;
    out.gpu_instance_slice_count = a.gpuInstanceSliceCount;
    out.compute_instance_slice_count = a.computeInstanceSliceCount;
    out.memory_size_mb = a.memorySizeMB;
    out.copy_engines = a.sharedCopyEngineCount;
    out.decoders = a.sharedDecoderCount;
    out.encoders = a.sharedEncoderCount;
    out.jpeg_decoders = a.sharedJpegCount;
    out.optical_flow_accelerators = a.sharedOfaCount;
    return out;
}

Result<int> Device::common_ancestor(const Device& other) const {
    if (auto st = other.live(); !st) return std::unexpected(st.error());
    nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_SYSTEM;
    KGPU_DEVICE_CALL(DeviceGetTopologyCommonAncestor, other.handle_, &level);
    return static_cast<int>(level);
}

Result<bool> Device::nvlink_active(unsigned link) const {
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_DEVICE_CALL(DeviceGetNvLinkState, link, &s);
    return s == NVML_FEATURE_ENABLED;
}

Result<std::string> Device::nvlink_remote_bus_id(unsigned link) const {
    nvmlPciInfo_t p{};
    KGPU_DEVICE_CALL(DeviceGetNvLinkRemotePciInfo, link, &p);
    return strings::upper(from_buffer(p.busId, sizeof p.busId));
}

Result<NvLinkPeerType> Device::nvlink_remote_type(unsigned link) const {
    nvmlIntNvLinkDeviceType_t t = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    KGPU_DEVICE_CALL(DeviceGetNvLinkRemoteDeviceType, link, &t);
    switch (t) {
        case NVML_NVLINK_DEVICE_TYPE_GPU: return NvLinkPeerType::gpu;
        case NVML_NVLINK_DEVICE_TYPE_SWITCH: return NvLinkPeerType::switch_;
        default: return NvLinkPeerType::other;
    }
}

#undef KGPU_CALL

}  // namespace kgpu::nvml
