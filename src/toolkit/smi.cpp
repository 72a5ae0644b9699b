#include "toolkit/smi.h"

#include <ctime>

#include <fmt/format.h>

#include "common/strings.h"
#include "inventory/discovery.h"

namespace kgpu::toolkit {

namespace {

template <class T>
std::optional<T> opt(Result<T> r) {
    return r ? std::optional<T>(*r) : std::nullopt;
}

std::string na(const std::optional<unsigned>& v, std::string_view unit) {
    return v ? fmt::format("{}{}", *v, unit) : "N/A";
}

std::string compute_mode_name(std::optional<unsigned> m) {
    if (!m) return "N/A";
    switch (*m) {
        case 0: return "Default";
        case 1: return "E. Thread";
        case 2: return "Prohibited";
        case 3: return "E. Process";
    }
    return "Unknown";
}

constexpr size_t kWidth = 89;  // between the outer bars

std::string bar_line(char fill, bool columns) {
    if (!columns) return "+" + std::string(kWidth, fill) + "+\n";
    return "+" + std::string(41, fill) + "+" + std::string(24, fill) + "+" + std::string(22, fill) + "+\n";
}

std::string boxed(std::string_view text) {
    std::string t(text.substr(0, kWidth));
    return "|" + t + std::string(kWidth - t.size(), ' ') + "|\n";
}

std::string fit(std::string_view s, size_t n) { return std::string(s.substr(0, n)); }

// The GPUs `ids` names (indices or UUID prefixes, as nvidia-smi -i takes them); all without ids.
Result<std::vector<bool>> selected_gpus(const inventory::Node& node, const std::vector<std::string>& ids) {
    std::vector<bool> wanted(node.gpus.size(), ids.empty());
    for (const auto& id : ids) {
        bool found = false;
        for (const auto& gpu : node.gpus)
            if (id == std::to_string(gpu.index) ||
                (id.size() > 4 && !gpu.uuid.empty() && strings::lower(gpu.uuid).starts_with(strings::lower(id))))
                found = wanted[gpu.index] = true;
        if (!found) return fail(Code::not_found, "No devices were found matching the ID '{}'", id);
    }
    return wanted;
}

// What changes on a GPU: temperature, power, use, memory in use; its fixed properties from the inventory.
SmiGpu read_gpu(const inventory::Gpu& gpu, const nvml::Device& dev) {
    SmiGpu g;
    g.index = gpu.index;
    g.lost = gpu.lost;
    g.uuid = gpu.uuid;
    g.name = gpu.name.empty() ? "Unknown Error" : gpu.name;
    g.bus_id = gpu.pci_bus_id;
    g.persistence = gpu.persistence_mode;
    g.display_active = opt(dev.display_active());
    g.temperature_c = opt(dev.temperature_c());
    if (auto p = dev.power_usage_mw()) g.power_w = (*p + 500) / 1000;
    if (auto p = dev.power_limit_mw()) g.power_cap_w = (*p + 500) / 1000;
    g.pstate = opt(dev.performance_state());
    if (auto u = dev.utilization()) g.utilization = u->gpu;
    if (auto m = dev.compute_mode()) g.compute_mode = static_cast<unsigned>(*m);
    if (auto m = dev.memory()) {
        g.memory_used_mib = m->used >> 20;
        g.memory_total_mib = m->total >> 20;
    }
    if (auto ecc = dev.ecc_mode(); ecc && ecc->first) g.ecc_uncorrected = opt(dev.ecc_volatile_total(false));
    if (gpu.mig_mode != inventory::MigMode::unsupported)
        g.mig_mode = gpu.mig_mode == inventory::MigMode::enabled ? "Enabled" : "Disabled";
    return g;
}

// A MIG device of GPU `gpu` (from the inventory), its memory in use, and its processes into `processes`.
SmiMig read_mig(const nvml::Session& session, unsigned gpu, const inventory::MigDevice& mig, const nvml::Device& dev,
                std::vector<SmiProcess>& processes) {
    SmiMig m;
    m.index = mig.index;
    m.uuid = mig.uuid;
    m.gi = mig.gpu_instance_id;
    m.ci = mig.compute_instance_id;
    m.profile = mig.profile;
    m.sm = mig.sm_count;
    m.ce = mig.copy_engines;
    m.enc = mig.encoders;
    m.dec = mig.decoders;
    m.ofa = mig.optical_flow_accelerators;
    m.jpg = mig.jpeg_decoders;
    if (auto md = dev.mig_device(mig.index); md && *md) {
        if (auto mem = (*md)->memory()) {
            m.memory_used_mib = mem->used >> 20;
            m.memory_total_mib = mem->total >> 20;
        }
        if (auto procs = (*md)->compute_processes())
            for (const auto& p : *procs)
                processes.push_back({gpu, m.gi, m.ci, p.pid, session.process_name(p.pid).value_or("N/A"), p.used_bytes >> 20});
    }
    return m;
}

}  // namespace

Result<SmiSnapshot> collect_smi(const nvml::Session& session, const std::vector<std::string>& ids) {
    SmiSnapshot s;
    std::time_t now = std::time(nullptr);
    char buf[64] = {};
    std::tm tm{};
    ::localtime_r(&now, &tm);
    std::strftime(buf, sizeof buf, "%a %b %e %H:%M:%S %Y", &tm);
    s.timestamp = buf;
    // Which GPUs and MIG devices there are (and their fixed properties) come from the inventory;
    // this reads only what changes: temperature, power, use, memory in use, processes.
    auto node = inventory::discover(session, {.topology = false});
    if (!node) return std::unexpected(node.error());
    s.driver_version = node->driver_version;
    s.cuda_version = node->cuda_driver_version > 0
                         ? fmt::format("{}.{}", node->cuda_driver_version / 1000, (node->cuda_driver_version % 1000) / 10)
                         : "N/A";

    auto wanted = selected_gpus(*node, ids);
    if (!wanted) return std::unexpected(wanted.error());

    for (const auto& gpu : node->gpus) {
        if (!(*wanted)[gpu.index]) continue;
        const unsigned i = gpu.index;
        auto dev = session.device_by_index(i);
        if (!dev) {
            SmiGpu g;
            g.index = i;
            g.lost = true;
            g.name = "Unable to determine the device handle";
            s.gpus.push_back(std::move(g));
            continue;
        }
        SmiGpu g = read_gpu(gpu, *dev);
        for (const auto& mig : gpu.mig_devices) g.migs.push_back(read_mig(session, i, mig, *dev, s.processes));
        if (gpu.mig_mode != inventory::MigMode::enabled)
            if (auto procs = dev->compute_processes())
                for (const auto& p : *procs)
                    s.processes.push_back({i, std::nullopt, std::nullopt, p.pid, session.process_name(p.pid).value_or("N/A"),
                                           p.used_bytes >> 20});
        s.gpus.push_back(std::move(g));
    }
    return s;
}

std::string render_smi_list(const SmiSnapshot& s) {
    std::string out;
    for (const auto& g : s.gpus) {
        out += fmt::format("GPU {}: {} (UUID: {})\n", g.index, g.name, g.uuid);
        for (const auto& m : g.migs) out += fmt::format("  MIG {:<12} Device {:>2}: (UUID: {})\n", m.profile, m.index, m.uuid);
    }
    return out;
}

std::string render_smi_table(const SmiSnapshot& s) {
    std::string out = s.timestamp + "       \n";
    out += bar_line('-', false);
    out += boxed(fmt::format(" NVIDIA-SMI {:<23}Driver Version: {:<15}CUDA Version: {:<9}", s.driver_version, s.driver_version,
                             s.cuda_version));
    out += "|" + std::string(41, '-') + "+" + std::string(24, '-') + "+" + std::string(22, '-') + "+\n";
    out += "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n";
    out += "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n";
    out += "|                                         |                        |               MIG M. |\n";
    out += bar_line('=', true).replace(0, 1, "|").replace(kWidth + 1, 1, "|");
    for (size_t k = 0; k < s.gpus.size(); ++k) {
        const auto& g = s.gpus[k];
        std::string pers = g.persistence ? (*g.persistence ? "On" : "Off") : "N/A";
        std::string display = g.display_active ? (*g.display_active ? "On" : "Off") : "N/A";
        std::string ecc = g.ecc_uncorrected ? std::to_string(*g.ecc_uncorrected) : "N/A";
        if (g.lost) {
            out += fmt::format("|{:>4}  {:<26} {:>6}  |{:>19} {:>3} |{:>21} |\n", g.index, "ERR!", "ERR!", g.bus_id, "ERR!", "ERR!");
            out += fmt::format("|{:<41}|{:<24}|{:>21} |\n", " ERR!", "", "ERR!");
        } else {
            std::string perf = g.pstate && *g.pstate < 16 ? fmt::format("P{}", *g.pstate) : "N/A";
            std::string mem = g.memory_used_mib ? fmt::format("{}MiB", *g.memory_used_mib) : "N/A";
            std::string total = g.memory_total_mib ? fmt::format("{}MiB", *g.memory_total_mib) : "N/A";
            out += fmt::format("|{:>4}  {:<26} {:>6}  |{:>19} {:>3} |{:>21} |\n", g.index, fit(g.name, 26), pers,
                               fit(g.bus_id, 19), display, ecc);
            out += fmt::format("| {:>3}{:>6}{:>6}{:>16} / {:>5} |{:>11} / {:>9} | {:>7} {:>12} |\n", "N/A",
                               na(g.temperature_c, "C"), perf, na(g.power_w, "W"), na(g.power_cap_w, "W"), mem, total,
                               na(g.utilization, "%"), compute_mode_name(g.compute_mode));
            out += fmt::format("|{:<41}|{:<24}|{:>21} |\n", "", "", g.mig_mode);
        }
        out += bar_line('-', true);
    }
    if (s.gpus.empty()) out += boxed("  No devices were found");

    bool any_mig = false;
    for (const auto& g : s.gpus) any_mig |= !g.migs.empty();
    if (any_mig) {
        out += "\n" + bar_line('-', false);
        out += boxed(" MIG devices:");
        const std::string sep = "+" + std::string(18, '-') + "+" + std::string(34, '-') + "+" + std::string(11, '-') + "+" +
                                std::string(23, '-') + "+\n";
        out += sep;
        out += "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n";
        out += "|      ID  ID  Dev |                                  | SM     Unc| CE ENC  DEC  OFA  JPG |\n";
        out += "|                  |                                  |        ECC|                       |\n";
        out += "|" + std::string(18, '=') + "+" + std::string(34, '=') + "+" + std::string(11, '=') + "+" + std::string(23, '=') + "|\n";
        for (const auto& g : s.gpus)
            for (const auto& m : g.migs) {
                out += fmt::format("|{:>3} {:>4} {:>3} {:>4} |{:>33} | {:>3} {:>5} |{:>3} {:>3} {:>4} {:>4} {:>4} |\n", g.index,
                                   m.gi, m.ci, m.index, fmt::format("{}MiB / {}MiB", m.memory_used_mib, m.memory_total_mib),
                                   m.sm, "N/A", m.ce, m.enc, m.dec, m.ofa, m.jpg);
                out += sep;
            }
    }

    out += "\n" + bar_line('-', false);
    out += boxed(" Processes:");
    out += boxed("  GPU   GI   CI        PID   Type   Process name                              GPU Memory");
    out += boxed("        ID   ID                                                               Usage     ");
    out += "|" + std::string(kWidth, '=') + "|\n";
    if (s.processes.empty()) out += boxed("  No running processes found");
    for (const auto& p : s.processes) {
        std::string name = p.name;
        if (name.size() > 38) name = "..." + name.substr(name.size() - 35);
        out += boxed(fmt::format(" {:>4} {:>5} {:>4} {:>10} {:>6}   {:<38} {:>10} ", p.gpu,
                                 p.gi ? std::to_string(*p.gi) : "N/A", p.ci ? std::to_string(*p.ci) : "N/A", p.pid, "C",
                                 name, fmt::format("{}MiB", p.used_mib)));
    }
    out += bar_line('-', false);
    return out;
}

}  // namespace kgpu::toolkit
