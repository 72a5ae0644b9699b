// Reading a fixture: the small parsers (PCI addresses, MIG profile names) and YAML → NodeSpec,
// with file:line errors (sim/README.md lists the keys). model.cpp builds the node from it.
#include "model.h"

#include <yaml-cpp/yaml.h>

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

// ---- small parsers ---------------------------------------------------------------------------

std::string PciAddr::text() const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%08X:%02X:%02X.%X", domain, bus, device, function);
    return buf;
}

std::string PciAddr::legacyText() const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04X:%02X:%02X.%X", domain & 0xFFFFu, bus, device, function);
    return buf;
}

namespace {

bool parseHex(const std::string& s, size_t maxDigits, unsigned& out) {
    if (s.empty() || s.size() > maxDigits) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
        if (c == sep) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

bool isHexUuidBody(const std::string& s) {
    // 8-4-4-4-12 hex digits.
    static const size_t groups[] = {8, 4, 4, 4, 12};
    auto parts = split(s, '-');
    if (parts.size() != 5) return false;
    for (size_t i = 0; i < 5; ++i) {
        if (parts[i].size() != groups[i]) return false;
        for (char c : parts[i])
            if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
}

}  // namespace

std::optional<PciAddr> parsePciAddr(const std::string& s) {
    auto parts = split(s, ':');
    if (parts.size() != 2 && parts.size() != 3) return std::nullopt;
    PciAddr a;
    size_t i = 0;
    if (parts.size() == 3 && !parseHex(parts[i++], 8, a.domain)) return std::nullopt;
    if (!parseHex(parts[i++], 2, a.bus)) return std::nullopt;
    auto devfn = split(parts[i], '.');
    if (devfn.size() > 2 || !parseHex(devfn[0], 2, a.device) || a.device > 31) return std::nullopt;
    if (devfn.size() == 2 && (!parseHex(devfn[1], 1, a.function) || a.function > 7)) return std::nullopt;
    return a;
}

std::optional<MigProfile> parseMigProfile(const std::string& name) {
    // <slices>g.<gb>gb[+me]
    MigProfile p;
    std::string s = name;
    const std::string me = "+me";
    if (s.size() > me.size() && s.compare(s.size() - me.size(), me.size(), me) == 0) {
        p.mediaExtensions = true;
        s.resize(s.size() - me.size());
    }
    auto dot = s.find('.');
    if (dot == std::string::npos || dot < 2 || s[dot - 1] != 'g') return std::nullopt;
    if (s.size() < dot + 4 || s.compare(s.size() - 2, 2, "gb") != 0) return std::nullopt;
    std::string sl = s.substr(0, dot - 1), gb = s.substr(dot + 1, s.size() - dot - 3);
    auto [p1, e1] = std::from_chars(sl.data(), sl.data() + sl.size(), p.slices);
    auto [p2, e2] = std::from_chars(gb.data(), gb.data() + gb.size(), p.gb);
    if (e1 != std::errc() || p1 != sl.data() + sl.size() || e2 != std::errc() || p2 != gb.data() + gb.size())
        return std::nullopt;
    if (sliceProfileIndex(p.slices) == kNoId || p.gb == 0) return std::nullopt;
    return p;
}

unsigned sliceProfileIndex(unsigned slices) {
    switch (slices) {
        case 1: return 0;
        case 2: return 1;
        case 3: return 2;
        case 4: return 3;
        case 7: return 4;
        case 8: return 5;
        case 6: return 6;
        default: return kNoId;
    }
}

unsigned slicesOfGiProfile(unsigned id) {
    switch (id) {
        case 0: case 7: case 9: return 1;
        case 1: case 8: return 2;
        case 2: return 3;
        case 3: return 4;
        case 4: return 7;
        case 5: return 8;
        case 6: return 6;
        default: return 0;
    }
}

unsigned memorySlices(unsigned id) {
    switch (id) {
        case 0: case 7: return 1;
        case 1: case 8: case 9: return 2;
        case 2: case 3: return 4;
        default: return 8;
    }
}

// ---- fixture loading -------------------------------------------------------------------------

namespace {

struct FixtureError {
    int line;  // 1-based; 0 when unknown
    std::string key, what;
};

[[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& what) {
    int line = 0;
    if (at.IsDefined()) line = at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
    throw FixtureError{line, key, what};
}

std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// A mapping whose keys must all be in `allowed`.
void checkKeys(const YAML::Node& n, const std::string& path, std::initializer_list<const char*> allowed) {
    if (!n.IsMap()) fail(n, path, "expected a mapping");
    for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->first.IsScalar()) fail(it->first, path, "expected scalar keys");
        std::string k = it->first.Scalar();
        if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) == allowed.end()) {
            std::string list;
            for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
            fail(it->first, join(path, k), "unknown key (expected one of: " + list + ")");
        }
    }
}

YAML::Node required(const YAML::Node& parent, const char* key, const std::string& path) {
    YAML::Node n = parent[key];
    if (!n.IsDefined() || n.IsNull()) fail(parent, join(path, key), "required key missing");
    return n;
}

std::string asString(const YAML::Node& n, const std::string& key) {
    if (!n.IsScalar()) fail(n, key, "expected a string");
    return n.Scalar();
}

long long asInt(const YAML::Node& n, const std::string& key, long long lo, long long hi) {
    auto bad = [&]() {
        fail(n, key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    };
    if (!n.IsScalar()) bad();
    std::string s = n.Scalar();
    bool neg = !s.empty() && s[0] == '-';
    std::string digits = neg ? s.substr(1) : s;
    int base = 10;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
        base = 16;
        digits = digits.substr(2);
    }
    unsigned long long v = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || v > (1ULL << 62)) bad();
    long long r = neg ? -static_cast<long long>(v) : static_cast<long long>(v);
    if (r < lo || r > hi) bad();
    return r;
}

bool asBool(const YAML::Node& n, const std::string& key) {
    if (n.IsScalar()) {
        std::string s = n.Scalar();
        if (s == "true" || s == "True" || s == "TRUE") return true;
        if (s == "false" || s == "False" || s == "FALSE") return false;
    }
    fail(n, key, "expected true or false");
}

template <class T>
void readOptional(const YAML::Node& parent, const char* key, const std::string& path,
              const std::function<T(const YAML::Node&, const std::string&)>& conv, T& out) {
    YAML::Node n = parent[key];
    if (n.IsDefined() && !n.IsNull()) out = conv(n, join(path, key));
}

const std::pair<const char*, nvmlReturn_t> kErrorNames[] = {
    {"SUCCESS", NVML_SUCCESS},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
    {"ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
    {"INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
    {"TIMEOUT", NVML_ERROR_TIMEOUT},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"IN_USE", NVML_ERROR_IN_USE},
    {"MEMORY", NVML_ERROR_MEMORY},
    {"NO_DATA", NVML_ERROR_NO_DATA},
    {"VGPU_ECC_NOT_SUPPORTED", NVML_ERROR_VGPU_ECC_NOT_SUPPORTED},
    {"INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES},
    {"FREQ_NOT_SUPPORTED", NVML_ERROR_FREQ_NOT_SUPPORTED},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
    {"DEPRECATED", NVML_ERROR_DEPRECATED},
    {"NOT_READY", NVML_ERROR_NOT_READY},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND},
    {"INVALID_STATE", NVML_ERROR_INVALID_STATE},
    {"UNKNOWN", NVML_ERROR_UNKNOWN},
};

const std::pair<const char*, unsigned> kArchitectures[] = {
    {"kepler", NVML_DEVICE_ARCH_KEPLER}, {"maxwell", NVML_DEVICE_ARCH_MAXWELL}, {"pascal", NVML_DEVICE_ARCH_PASCAL},
    {"volta", NVML_DEVICE_ARCH_VOLTA},   {"turing", NVML_DEVICE_ARCH_TURING},   {"ampere", NVML_DEVICE_ARCH_AMPERE},
    {"ada", NVML_DEVICE_ARCH_ADA},       {"hopper", NVML_DEVICE_ARCH_HOPPER},   {"blackwell", NVML_DEVICE_ARCH_BLACKWELL},
};

std::string uuidString(const YAML::Node& n, const std::string& key, const char* prefix) {
    std::string s = asString(n, key);
    std::string pre = prefix;
    if (s.compare(0, pre.size(), pre) != 0 || !isHexUuidBody(s.substr(pre.size())))
        fail(n, key, "expected a UUID like " + pre + "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex digits)");
    return s;
}

PciAddr busId(const YAML::Node& n, const std::string& key) {
    auto a = parsePciAddr(asString(n, key));
    if (!a) fail(n, key, "expected a PCI bus id like 00000000:18:00.0");
    return *a;
}

unsigned u(const YAML::Node& n, const std::string& key) {
    return static_cast<unsigned>(asInt(n, key, 0, 0xFFFFFFFFll));
}

void readTelemetry(const YAML::Node& n, const std::string& path, Telemetry& t) {
    checkKeys(n, path,
              {"gpu_util", "mem_util", "enc_util", "dec_util", "temperature_c", "memory_temperature_c", "power_w",
               "sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "max_mem_clock_mhz", "fb_used_mib", "energy_j",
               "pcie_replay", "pcie_tx_kbps", "pcie_rx_kbps"});
    auto pct = [](const YAML::Node& v, const std::string& k) { return static_cast<unsigned>(asInt(v, k, 0, 100)); };
    auto uint = std::function<unsigned(const YAML::Node&, const std::string&)>(u);
    auto percent = std::function<unsigned(const YAML::Node&, const std::string&)>(pct);
    readOptional(n, "gpu_util", path, percent, t.gpuUtil);
    readOptional(n, "mem_util", path, percent, t.memUtil);
    readOptional(n, "enc_util", path, percent, t.encUtil);
    readOptional(n, "dec_util", path, percent, t.decUtil);
    readOptional(n, "temperature_c", path, uint, t.temperatureC);
    if (n["memory_temperature_c"].IsDefined()) t.memoryTemperatureC = u(n["memory_temperature_c"], join(path, "memory_temperature_c"));
    readOptional(n, "power_w", path, uint, t.powerW);
    readOptional(n, "sm_clock_mhz", path, uint, t.smClockMhz);
    readOptional(n, "mem_clock_mhz", path, uint, t.memClockMhz);
    readOptional(n, "max_sm_clock_mhz", path, uint, t.maxSmClockMhz);
    readOptional(n, "max_mem_clock_mhz", path, uint, t.maxMemClockMhz);
    auto ull = std::function<unsigned long long(const YAML::Node&, const std::string&)>(
        [](const YAML::Node& v, const std::string& k) { return static_cast<unsigned long long>(asInt(v, k, 0, 1LL << 60)); });
    readOptional(n, "fb_used_mib", path, ull, t.fbUsedMib);
    readOptional(n, "energy_j", path, ull, t.energyJ);
    readOptional(n, "pcie_replay", path, uint, t.pcieReplay);
    readOptional(n, "pcie_tx_kbps", path, uint, t.pcieTxKBps);
    readOptional(n, "pcie_rx_kbps", path, uint, t.pcieRxKBps);
}

void readMig(const YAML::Node& n, const std::string& path, GpuSpec& g) {
    checkKeys(n, path, {"mode", "pending", "max_devices", "reset_required", "devices"});
    auto mode = [&](const YAML::Node& v, const std::string& k) {
        std::string s = asString(v, k);
        if (s == "enabled") return true;
        if (s == "disabled") return false;
        fail(v, k, "expected enabled or disabled");
    };
    g.migCapable = true;
    g.migEnabled = mode(required(n, "mode", path), join(path, "mode"));
    g.migPendingEnabled = g.migEnabled;
    if (n["pending"].IsDefined()) g.migPendingEnabled = mode(n["pending"], join(path, "pending"));
    g.maxMigDevices = 7;
    if (n["reset_required"].IsDefined()) g.migResetRequired = asBool(n["reset_required"], join(path, "reset_required"));
    if (n["max_devices"].IsDefined())
        g.maxMigDevices = static_cast<unsigned>(asInt(n["max_devices"], join(path, "max_devices"), 1, 8));
    YAML::Node devs = n["devices"];
    if (!devs.IsDefined() || devs.IsNull()) return;
    const std::string dpath = join(path, "devices");
    if (!devs.IsSequence()) fail(devs, dpath, "expected a list of MIG devices");
    if (!g.migEnabled && devs.size() > 0) fail(devs, dpath, "MIG devices need mode: enabled");
    if (devs.size() > g.maxMigDevices) fail(devs, dpath, "at most max_devices entries");
    std::set<unsigned> giIds;
    for (size_t i = 0; i < devs.size(); ++i) {
        const YAML::Node d = devs[i];
        const std::string p = dpath + "[" + std::to_string(i) + "]";
        checkKeys(d, p, {"profile", "gpu_instance_id", "compute_instance_id", "uuid", "memory_mib", "sm_count",
                         "placement_start"});
        MigSpec m;
        YAML::Node prof = required(d, "profile", p);
        m.profile = asString(prof, join(p, "profile"));
        if (!parseMigProfile(m.profile))
            fail(prof, join(p, "profile"), "expected a MIG profile name like 1g.10gb, 3g.40gb or 1g.10gb+me");
        YAML::Node gi = required(d, "gpu_instance_id", p);
        m.giId = static_cast<unsigned>(asInt(gi, join(p, "gpu_instance_id"), 0, 0xFFFF));
        if (!giIds.insert(m.giId).second) fail(gi, join(p, "gpu_instance_id"), "a GPU instance id unique on this GPU");
        if (d["compute_instance_id"].IsDefined())
            m.ciId = static_cast<unsigned>(asInt(d["compute_instance_id"], join(p, "compute_instance_id"), 0, 0xFFFF));
        m.uuid = uuidString(required(d, "uuid", p), join(p, "uuid"), "MIG-");
        m.memoryMib = static_cast<unsigned long long>(asInt(required(d, "memory_mib", p), join(p, "memory_mib"), 1, 1 << 24));
        m.smCount = static_cast<unsigned>(asInt(required(d, "sm_count", p), join(p, "sm_count"), 1, 1024));
        if (d["placement_start"].IsDefined())
            m.placementStart = static_cast<unsigned>(asInt(d["placement_start"], join(p, "placement_start"), 0, 7));
        g.migDevices.push_back(m);
    }
}

struct PendingLinks {
    std::vector<std::pair<unsigned, unsigned>> direct;  // peer, count
    std::vector<YAML::Node> nodes;
    unsigned switchLinks = 0;
    YAML::Node switchNode;
};

GpuSpec readGpu(const YAML::Node& n, const std::string& path, PendingLinks& links) {
    checkKeys(n, path,
              {"name", "uuid", "serial", "minor", "pci_bus_id", "pci_device_id", "pci_subsystem_id", "numa_node",
               "board_id", "vbios", "inforom", "memory_mib", "reserved_mib", "compute_capability", "architecture", "brand",
               "power_limit_w", "persistence_mode", "display_active", "ecc", "pcie", "lost", "telemetry", "mig", "nvlink",
               "nvswitch_links"});
    GpuSpec g;
    g.name = asString(required(n, "name", path), join(path, "name"));
    g.uuid = uuidString(required(n, "uuid", path), join(path, "uuid"), "GPU-");
    g.serial = asString(required(n, "serial", path), join(path, "serial"));
    g.minor = static_cast<unsigned>(asInt(required(n, "minor", path), join(path, "minor"), 0, 255));
    g.pci = busId(required(n, "pci_bus_id", path), join(path, "pci_bus_id"));
    g.pciDeviceId = u(required(n, "pci_device_id", path), join(path, "pci_device_id"));
    if (n["pci_subsystem_id"].IsDefined()) g.pciSubsystemId = u(n["pci_subsystem_id"], join(path, "pci_subsystem_id"));
    g.numaNode = static_cast<int>(asInt(required(n, "numa_node", path), join(path, "numa_node"), -1, 1023));
    g.boardId = (g.pci.bus << 8) | (g.pci.device << 3) | g.pci.function;
    if (n["board_id"].IsDefined()) g.boardId = u(n["board_id"], join(path, "board_id"));
    if (n["vbios"].IsDefined()) g.vbios = asString(n["vbios"], join(path, "vbios"));
    if (YAML::Node r = n["inforom"]; r.IsDefined()) {
        const std::string rpath = join(path, "inforom");
        if (!r.IsMap()) fail(r, rpath, "expected a map with image, oem, ecc, power");
        checkKeys(r, rpath, {"image", "oem", "ecc", "power"});
        auto version = [&](const char* key, std::string& out) {
            if (!r[key].IsDefined()) return;
            out = asString(r[key], join(rpath, key));
            if (out.size() >= 16) fail(r[key], join(rpath, key), "at most 15 characters (NVML's buffer is 16)");
        };
        version("image", g.inforomImage);
        version("oem", g.inforomOem);
        version("ecc", g.inforomEcc);
        version("power", g.inforomPower);
    }
    g.memoryMib = static_cast<unsigned long long>(asInt(required(n, "memory_mib", path), join(path, "memory_mib"), 1, 1 << 24));
    if (n["reserved_mib"].IsDefined())
        g.reservedMib = static_cast<unsigned long long>(asInt(n["reserved_mib"], join(path, "reserved_mib"), 0, 1 << 24));
    if (g.reservedMib >= g.memoryMib) fail(n, join(path, "reserved_mib"), "less than memory_mib");
    {
        YAML::Node cc = required(n, "compute_capability", path);
        std::string s = asString(cc, join(path, "compute_capability"));
        auto parts = split(s, '.');
        auto num = [](const std::string& part, int& v) {
            auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
            return !part.empty() && ec == std::errc() && p == part.data() + part.size();
        };
        if (parts.size() != 2 || !num(parts[0], g.ccMajor) || !num(parts[1], g.ccMinor)) fail(cc, join(path, "compute_capability"), "expected \"major.minor\" like \"9.0\"");
    }
    {
        YAML::Node a = required(n, "architecture", path);
        std::string s = asString(a, join(path, "architecture"));
        auto it = std::find_if(std::begin(kArchitectures), std::end(kArchitectures),
                               [&](auto& e) { return s == e.first; });
        if (it == std::end(kArchitectures))
            fail(a, join(path, "architecture"),
                 "expected one of kepler, maxwell, pascal, volta, turing, ampere, ada, hopper, blackwell");
        g.architecture = it->second;
    }
    if (n["brand"].IsDefined()) g.brand = static_cast<int>(asInt(n["brand"], join(path, "brand"), 0, 64));
    g.powerLimitW = static_cast<unsigned>(asInt(required(n, "power_limit_w", path), join(path, "power_limit_w"), 1, 100000));
    if (n["persistence_mode"].IsDefined()) g.persistence = asBool(n["persistence_mode"], join(path, "persistence_mode"));
    if (n["ecc"].IsDefined()) g.ecc = asBool(n["ecc"], join(path, "ecc"));
    if (n["display_active"].IsDefined()) g.displayActive = asBool(n["display_active"], join(path, "display_active"));
    if (n["lost"].IsDefined()) g.lost = asBool(n["lost"], join(path, "lost"));
    {
        YAML::Node p = required(n, "pcie", path);
        const std::string pp = join(path, "pcie");
        checkKeys(p, pp, {"host_bridge", "switches"});
        g.hostBridge = asString(required(p, "host_bridge", pp), join(pp, "host_bridge"));
        YAML::Node sw = p["switches"];
        if (sw.IsDefined() && !sw.IsNull()) {
            if (!sw.IsSequence()) fail(sw, join(pp, "switches"), "expected a list of switch names");
            for (size_t i = 0; i < sw.size(); ++i)
                g.switches.push_back(asString(sw[i], join(pp, "switches") + "[" + std::to_string(i) + "]"));
        }
    }
    // Defaults for telemetry follow the fixture's figures where it gives them.
    g.telemetry.powerW = std::min<unsigned>(g.powerLimitW / 10 + 1, g.powerLimitW);
    if (n["telemetry"].IsDefined()) readTelemetry(n["telemetry"], join(path, "telemetry"), g.telemetry);
    if (g.telemetry.fbUsedMib + g.reservedMib > g.memoryMib) fail(n, join(path, "telemetry.fb_used_mib"), "at most memory_mib - reserved_mib");
    if (n["mig"].IsDefined()) readMig(n["mig"], join(path, "mig"), g);
    if (n["nvlink"].IsDefined()) {
        YAML::Node l = n["nvlink"];
        const std::string lp = join(path, "nvlink");
        if (!l.IsSequence()) fail(l, lp, "expected a list of {peer, links}");
        for (size_t i = 0; i < l.size(); ++i) {
            const std::string ep = lp + "[" + std::to_string(i) + "]";
            checkKeys(l[i], ep, {"peer", "links"});
            unsigned peer = static_cast<unsigned>(asInt(required(l[i], "peer", ep), join(ep, "peer"), 0, 1023));
            unsigned cnt = static_cast<unsigned>(asInt(required(l[i], "links", ep), join(ep, "links"), 1, NVML_NVLINK_MAX_LINKS));
            links.direct.emplace_back(peer, cnt);
            links.nodes.push_back(l[i]);
        }
    }
    if (n["nvswitch_links"].IsDefined()) {
        links.switchNode = n["nvswitch_links"];
        links.switchLinks = static_cast<unsigned>(asInt(links.switchNode, join(path, "nvswitch_links"), 0, NVML_NVLINK_MAX_LINKS));
    }
    return g;
}

NodeSpec readNode(const YAML::Node& root) {
    checkKeys(root, "", {"driver_version", "cuda_driver_version", "nvml_version", "init_error", "nvswitches", "gpus", "dev_root"});
    NodeSpec node;
    node.driverVersion = asString(required(root, "driver_version", ""), "driver_version");
    node.cudaDriverVersion = static_cast<int>(asInt(required(root, "cuda_driver_version", ""), "cuda_driver_version", 1000, 99999));
    node.nvmlVersion = "12." + node.driverVersion;
    if (root["nvml_version"].IsDefined()) node.nvmlVersion = asString(root["nvml_version"], "nvml_version");
    if (root["dev_root"].IsDefined()) node.devRoot = asString(root["dev_root"], "dev_root");
    if (root["init_error"].IsDefined()) {
        std::string s = asString(root["init_error"], "init_error");
        auto it = std::find_if(std::begin(kErrorNames), std::end(kErrorNames), [&](auto& e) { return s == e.first; });
        if (it == std::end(kErrorNames) || it->second == NVML_SUCCESS)
            fail(root["init_error"], "init_error", "expected an NVML error name without NVML_ERROR_, e.g. DRIVER_NOT_LOADED");
        node.initError = it->second;
    }
    std::set<std::string> busIds;
    if (root["nvswitches"].IsDefined()) {
        YAML::Node sw = root["nvswitches"];
        if (!sw.IsSequence()) fail(sw, "nvswitches", "expected a list of PCI bus ids");
        for (size_t i = 0; i < sw.size(); ++i) {
            std::string k = "nvswitches[" + std::to_string(i) + "]";
            node.nvswitches.push_back(busId(sw[i], k));
            if (!busIds.insert(node.nvswitches.back().text()).second) fail(sw[i], k, "a unique PCI bus id");
        }
    }
    YAML::Node gpus = required(root, "gpus", "");
    if (!gpus.IsSequence()) fail(gpus, "gpus", "expected a list of GPUs (may be [])");
    std::vector<PendingLinks> links(gpus.size());
    std::set<std::string> uuids;
    std::set<unsigned> minors;
    for (size_t i = 0; i < gpus.size(); ++i) {
        const std::string p = "gpus[" + std::to_string(i) + "]";
        GpuSpec g = readGpu(gpus[i], p, links[i]);
        auto lower = [](std::string s) {
            for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            return s;
        };
        if (!uuids.insert(lower(g.uuid)).second) fail(gpus[i]["uuid"], join(p, "uuid"), "a UUID unique on the node");
        for (size_t m = 0; m < g.migDevices.size(); ++m)
            if (!uuids.insert(lower(g.migDevices[m].uuid)).second)
                fail(gpus[i]["mig"]["devices"][m]["uuid"], p + ".mig.devices[" + std::to_string(m) + "].uuid",
                     "a UUID unique on the node");
        if (!busIds.insert(g.pci.text()).second) fail(gpus[i]["pci_bus_id"], join(p, "pci_bus_id"), "a unique PCI bus id");
        if (!minors.insert(g.minor).second) fail(gpus[i]["minor"], join(p, "minor"), "a minor number unique on the node");
        node.gpus.push_back(std::move(g));
    }
    // NVLink: direct links first (in list order), then links to the NVSwitches round-robin.
    for (size_t i = 0; i < node.gpus.size(); ++i) {
        const std::string p = "gpus[" + std::to_string(i) + "]";
        auto& g = node.gpus[i];
        for (size_t e = 0; e < links[i].direct.size(); ++e) {
            auto [peer, cnt] = links[i].direct[e];
            const YAML::Node& at = links[i].nodes[e];
            const std::string k = p + ".nvlink[" + std::to_string(e) + "].peer";
            if (peer >= node.gpus.size() || peer == i) fail(at, k, "the index of another GPU in gpus");
            unsigned back = 0;
            for (auto [pp, pc] : links[peer].direct)
                if (pp == i) back += pc;
            unsigned fwd = 0;
            for (auto [pp, pc] : links[i].direct)
                if (pp == peer) fwd += pc;
            if (back != fwd)
                fail(at, k, "a symmetric link: gpus[" + std::to_string(peer) + "].nvlink needs {peer: " + std::to_string(i) +
                                ", links: " + std::to_string(fwd) + "}");
            for (unsigned l = 0; l < cnt; ++l) g.links.push_back({false, peer});
        }
        if (links[i].switchLinks > 0 && node.nvswitches.empty())
            fail(links[i].switchNode, p + ".nvswitch_links", "a top-level nvswitches list");
        for (unsigned l = 0; l < links[i].switchLinks; ++l)
            g.links.push_back({true, static_cast<unsigned>(l % node.nvswitches.size())});
        if (g.links.size() > NVML_NVLINK_MAX_LINKS)
            fail(gpus[i], p + ".nvlink", "at most " + std::to_string(NVML_NVLINK_MAX_LINKS) + " links in all");
    }
    return node;
}

}  // namespace

std::optional<nvmlReturn_t> errorByName(const std::string& name) {
    auto it = std::find_if(std::begin(kErrorNames), std::end(kErrorNames), [&](auto& e) { return name == e.first; });
    if (it == std::end(kErrorNames)) return std::nullopt;
    return it->second;
}

std::optional<NodeSpec> loadNode(const std::string& path) {
    try {
        YAML::Node root = YAML::LoadFile(path);
        if (!root.IsDefined() || root.IsNull()) throw FixtureError{1, "(document)", "a mapping with driver_version, cuda_driver_version and gpus"};
        return readNode(root);
    } catch (const FixtureError& e) {
        std::cerr << "kgpu-sim: " << path << ":" << e.line << ": " << (e.key.empty() ? "(document)" : e.key) << ": "
                  << e.what << std::endl;
    } catch (const YAML::BadFile&) {
        std::cerr << "kgpu-sim: " << path << ":0: (file): cannot be read" << std::endl;
    } catch (const YAML::Exception& e) {
        std::cerr << "kgpu-sim: " << path << ":" << (e.mark.line >= 0 ? e.mark.line + 1 : 0) << ": (yaml): "
                  << "valid YAML (" << e.msg << ")" << std::endl;
    } catch (const std::exception& e) {
        std::cerr << "kgpu-sim: " << path << ":0: (file): " << e.what() << std::endl;
    }
    return std::nullopt;
}
}  // namespace kgpu_sim
