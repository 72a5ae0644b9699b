#include "nvml/device.h"

#include <cstring>

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

Result<std::string> Device::uuid() const {
    KGPU_NVML_LIVE();
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    KGPU_CALL(DeviceGetUUID, handle_, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::name() const {
    KGPU_NVML_LIVE();
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    KGPU_CALL(DeviceGetName, handle_, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::serial() const {
    KGPU_NVML_LIVE();
    char buf[NVML_DEVICE_SERIAL_BUFFER_SIZE + 2] = {};
    KGPU_CALL(DeviceGetSerial, handle_, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::vbios_version() const {
    KGPU_NVML_LIVE();
    char buf[NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE] = {};
    KGPU_CALL(DeviceGetVbiosVersion, handle_, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::inforom_version(Inforom object) const {
    KGPU_NVML_LIVE();
    char buf[NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE] = {};
    KGPU_CALL(DeviceGetInforomVersion, handle_, static_cast<nvmlInforomObject_t>(object), buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<std::string> Device::inforom_image_version() const {
    KGPU_NVML_LIVE();
    char buf[NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE] = {};
    KGPU_CALL(DeviceGetInforomImageVersion, handle_, buf, sizeof buf);
    return from_buffer(buf, sizeof buf);
}

Result<unsigned> Device::minor_number() const {
    KGPU_NVML_LIVE();
    unsigned v = 0;
    KGPU_CALL(DeviceGetMinorNumber, handle_, &v);
    return v;
}

Result<unsigned> Device::index() const {
    KGPU_NVML_LIVE();
    unsigned v = 0;
    KGPU_CALL(DeviceGetIndex, handle_, &v);
    return v;
}

Result<PciInfo> Device::pci_info() const {
    KGPU_NVML_LIVE();
    nvmlPciInfo_t p{};
    nvmlReturn_t r = ctx_->api().DeviceGetPciInfo(handle_, &p);
    if (r == NVML_SUCCESS) return to_pci(p);
    if (r != NVML_ERROR_NOT_SUPPORTED) return std::unexpected(make_error(*ctx_->lib, ctx_->lib->symbol_name("DeviceGetPciInfo"), r));
    // An older driver: the older struct, whose busId is the short form.
    nvmlPciInfo_v2_t old{};
    KGPU_CALL(DeviceGetPciInfoV2, handle_, &old);
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
    KGPU_NVML_LIVE();
    unsigned v = 0;
    KGPU_CALL(DeviceGetNumaNodeId, handle_, &v);
    return static_cast<int>(v);
}

Result<MemoryInfo> Device::memory() const {
    KGPU_NVML_LIVE();
    nvmlMemory_v2_t m2{};
    m2.version = nvmlMemory_v2;
    nvmlReturn_t r = ctx_->api().DeviceGetMemoryInfoV2(handle_, &m2);
    if (r == NVML_SUCCESS) return MemoryInfo{m2.total, m2.reserved, m2.free, m2.used};
    if (r != NVML_ERROR_NOT_SUPPORTED && r != NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return std::unexpected(make_error(*ctx_->lib, ctx_->lib->symbol_name("DeviceGetMemoryInfoV2"), r));
    nvmlMemory_t m{};
    KGPU_CALL(DeviceGetMemoryInfo, handle_, &m);
    return MemoryInfo{m.total, 0, m.free, m.used};
}

Result<std::pair<int, int>> Device::compute_capability() const {
    KGPU_NVML_LIVE();
    int major = 0, minor = 0;
    KGPU_CALL(DeviceGetCudaComputeCapability, handle_, &major, &minor);
    return std::pair{major, minor};
}

Result<unsigned> Device::architecture() const {
    KGPU_NVML_LIVE();
    nvmlDeviceArchitecture_t a = 0;
    KGPU_CALL(DeviceGetArchitecture, handle_, &a);
    return a;
}

Result<unsigned> Device::power_limit_mw() const {
    KGPU_NVML_LIVE();
    unsigned v = 0;
    KGPU_CALL(DeviceGetEnforcedPowerLimit, handle_, &v);
    return v;
}

Result<bool> Device::persistence_mode() const {
    KGPU_NVML_LIVE();
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_CALL(DeviceGetPersistenceMode, handle_, &s);
    return s == NVML_FEATURE_ENABLED;
}

Result<bool> Device::display_active() const {
    KGPU_NVML_LIVE();
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_CALL(DeviceGetDisplayActive, handle_, &s);
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
    KGPU_NVML_LIVE();
    nvmlComputeMode_t m = NVML_COMPUTEMODE_DEFAULT;
    KGPU_CALL(DeviceGetComputeMode, handle_, &m);
    if (m != NVML_COMPUTEMODE_DEFAULT && m != NVML_COMPUTEMODE_PROHIBITED && m != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        return fail(Code::parse, "{}: unknown compute mode {}", ctx_->lib->symbol_name("DeviceGetComputeMode"), m);
    return static_cast<ComputeMode>(m);
}

Status Device::set_compute_mode(ComputeMode mode) const {
    KGPU_NVML_LIVE();
    KGPU_CALL(DeviceSetComputeMode, handle_, static_cast<nvmlComputeMode_t>(mode));
    return {};
}

Result<std::pair<bool, bool>> Device::ecc_mode() const {
    KGPU_NVML_LIVE();
    nvmlEnableState_t cur = NVML_FEATURE_DISABLED, pend = NVML_FEATURE_DISABLED;
    KGPU_CALL(DeviceGetEccMode, handle_, &cur, &pend);
    return std::pair{cur == NVML_FEATURE_ENABLED, pend == NVML_FEATURE_ENABLED};
}

Result<RemappedRows> Device::remapped_rows() const {
    KGPU_NVML_LIVE();
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    KGPU_CALL(DeviceGetRemappedRows, handle_, &corr, &unc, &pending, &failure);
    return RemappedRows{corr, unc, pending != 0, failure != 0};
}

Result<bool> Device::retired_pages_pending() const {
    KGPU_NVML_LIVE();
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_CALL(DeviceGetRetiredPagesPendingStatus, handle_, &s);
    return s == NVML_FEATURE_ENABLED;
}

Result<unsigned> Device::recovery_action() const {
    KGPU_NVML_LIVE();
    nvmlFieldValue_t v{};
    v.fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
    KGPU_CALL(DeviceGetFieldValues, handle_, 1, &v);
    if (auto st = check(*ctx_, "DeviceGetFieldValues", v.nvmlReturn); !st) return std::unexpected(st.error());
    return v.value.uiVal;
}

Result<std::vector<ProcessMemory>> Device::compute_processes() const {
    KGPU_NVML_LIVE();
    // Ask for the count first; a process may start in between, so retry on INSUFFICIENT_SIZE.
    for (int attempt = 0; attempt < 3; ++attempt) {
        unsigned count = 0;
        nvmlReturn_t r = ctx_->api().DeviceGetComputeRunningProcesses(handle_, &count, nullptr);
        if (r == NVML_SUCCESS) return std::vector<ProcessMemory>{};
        if (r != NVML_ERROR_INSUFFICIENT_SIZE) {
            if (auto st = check(*ctx_, "DeviceGetComputeRunningProcesses", r); !st) return std::unexpected(st.error());
        }
        std::vector<nvmlProcessInfo_t> infos(count + 4);
        count = static_cast<unsigned>(infos.size());
        r = ctx_->api().DeviceGetComputeRunningProcesses(handle_, &count, infos.data());
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) continue;
        if (auto st = check(*ctx_, "DeviceGetComputeRunningProcesses", r); !st) return std::unexpected(st.error());
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
    KGPU_NVML_LIVE();
    unsigned cur = 0, pend = 0;
    KGPU_CALL(DeviceGetMigMode, handle_, &cur, &pend);
    return MigMode{cur == NVML_DEVICE_MIG_ENABLE, pend == NVML_DEVICE_MIG_ENABLE};
}

Result<unsigned> Device::max_mig_devices() const {
    KGPU_NVML_LIVE();
    unsigned v = 0;
    KGPU_CALL(DeviceGetMaxMigDeviceCount, handle_, &v);
    return v;
}

Result<std::optional<Device>> Device::mig_device(unsigned i) const {
    KGPU_NVML_LIVE();
    nvmlDevice_t h = nullptr;
    // The generation before the handle: a change in between leaves the handle already refused.
    const std::uint64_t generation = MigGenerations::instance().now(handle_);
    nvmlReturn_t r = ctx_->api().DeviceGetMigDeviceHandleByIndex(handle_, i, &h);
    if (r == NVML_ERROR_NOT_FOUND) return std::optional<Device>{};
    if (auto st = check(*ctx_, "DeviceGetMigDeviceHandleByIndex", r); !st) return std::unexpected(st.error());
    return std::optional<Device>(Device(ctx_, h, handle_, generation));
}

Status Device::live() const {
    if (parent_ == nullptr) return {};
    const std::uint64_t now = MigGenerations::instance().now(parent_);
    if (now == generation_) return {};
    return fail(Code::stale,
                "MIG device handle taken before its GPU's MIG configuration changed (generation {}, now {}): look the "
                "device up again",
                generation_, now);
}

Result<unsigned> Device::gpu_instance_id() const {
    KGPU_NVML_LIVE();
    unsigned v = 0;
    KGPU_CALL(DeviceGetGpuInstanceId, handle_, &v);
    return v;
}

Result<unsigned> Device::compute_instance_id() const {
    KGPU_NVML_LIVE();
    unsigned v = 0;
    KGPU_CALL(DeviceGetComputeInstanceId, handle_, &v);
    return v;
}

Result<DeviceAttributes> Device::attributes() const {
    KGPU_NVML_LIVE();
    nvmlDeviceAttributes_t a{};
    KGPU_CALL(DeviceGetAttributes, handle_, &a);
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
    KGPU_NVML_LIVE();
    nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_SYSTEM;
    KGPU_CALL(DeviceGetTopologyCommonAncestor, handle_, other.handle_, &level);
    return static_cast<int>(level);
}

Result<bool> Device::nvlink_active(unsigned link) const {
    KGPU_NVML_LIVE();
    nvmlEnableState_t s = NVML_FEATURE_DISABLED;
    KGPU_CALL(DeviceGetNvLinkState, handle_, link, &s);
    return s == NVML_FEATURE_ENABLED;
}

Result<std::string> Device::nvlink_remote_bus_id(unsigned link) const {
    KGPU_NVML_LIVE();
    nvmlPciInfo_t p{};
    KGPU_CALL(DeviceGetNvLinkRemotePciInfo, handle_, link, &p);
    return strings::upper(from_buffer(p.busId, sizeof p.busId));
}

Result<NvLinkPeerType> Device::nvlink_remote_type(unsigned link) const {
    KGPU_NVML_LIVE();
    nvmlIntNvLinkDeviceType_t t = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    KGPU_CALL(DeviceGetNvLinkRemoteDeviceType, handle_, link, &t);
    switch (t) {
        case NVML_NVLINK_DEVICE_TYPE_GPU: return NvLinkPeerType::gpu;
        case NVML_NVLINK_DEVICE_TYPE_SWITCH: return NvLinkPeerType::switch_;
        default: return NvLinkPeerType::other;
    }
}

#undef KGPU_CALL

}  // namespace kgpu::nvml
