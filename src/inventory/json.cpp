#include "inventory/json.h"

#include <fmt/format.h>

namespace kgpu::inventory {
namespace {

nlohmann::ordered_json mig_json(const Gpu& g) {
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const auto& m : g.mig_devices) {
        devices.push_back({{"index", m.index},
                           {"id", fmt::format("{}:{}", g.index, m.index)},
                           {"uuid", m.uuid},
                           {"profile", m.profile},
                           {"gpu_instance_id", m.gpu_instance_id},
                           {"compute_instance_id", m.compute_instance_id},
                           {"memory_mib", m.memory_mib},
                           {"sm_count", m.sm_count},
                           {"slices", m.slices}});
    }
    return {{"mode", to_string(g.mig_mode)}, {"pending_mode", to_string(g.mig_pending)}, {"devices", devices}};
}

template <class T>
nlohmann::ordered_json or_null(const std::optional<T>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json to_json(const Node& node) {
    nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
    for (const auto& g : node.gpus) {
        gpus.push_back({{"index", g.index},
                        {"uuid", g.uuid},
                        {"name", g.name},
                        {"serial", g.serial},
                        {"minor", g.minor},
                        {"device_node", fmt::format("/dev/nvidia{}", g.minor)},
                        {"pci_bus_id", g.pci_bus_id},
                        {"pci_device_id", fmt::format("0x{:08X}", g.pci_device_id)},
                        {"numa_node", or_null(g.numa_node)},
                        {"numa_source", to_string(g.numa_source)},
                        {"memory_total_mib", g.memory_total_mib},
                        {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                        {"architecture", g.architecture},
                        {"power_limit_w", or_null(g.power_limit_w)},
                        {"persistence_mode", or_null(g.persistence_mode)},
                        {"mig", mig_json(g)},
                        {"state", g.lost ? "lost" : (g.error.empty() ? "ok" : "degraded")},
                        {"error", g.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.error)}});
    }

    const auto& t = node.topology;
    nlohmann::ordered_json matrix = nlohmann::ordered_json::array();
    nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
    for (size_t a = 0; a < t.size(); ++a) {
        nlohmann::ordered_json row = nlohmann::ordered_json::array();
        for (size_t b = 0; b < t.size(); ++b) row.push_back(t.label(a, b));
        matrix.push_back(row);
        for (size_t b = a + 1; b < t.size(); ++b) {
            const Link& l = t.at(a, b);
            pairs.push_back({{"gpu_a", a},
                             {"gpu_b", b},
                             {"nvlink_count", l.nvlinks},
                             {"pcie_level", topo_label(l.pcie)},
                             {"pcie_level_value", static_cast<int>(l.pcie)},
                             {"connection", t.label(a, b)}});
        }
    }

    return {{"schema", kInfoSchema},
            {"driver_version", node.driver_version},
            {"nvml_version", node.nvml_version},
            {"cuda_version", node.cuda_version_string()},
            {"gpu_count", node.gpus.size()},
            {"gpus", gpus},
            {"topology", {{"matrix", matrix}, {"pairs", pairs}}},
            {"warnings", node.warnings}};
}

}  // namespace kgpu::inventory
