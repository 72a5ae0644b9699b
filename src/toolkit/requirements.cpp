#include "toolkit/requirements.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/strings.h"
#include "inventory/cuda_compat.h"

namespace kgpu::toolkit {

namespace {

enum class Op { eq, ne, lt, le, gt, ge };

struct Constraint {
    std::string property;  // lower case
    Op op;
    std::string value;
    std::string text;
};

bool holds(int cmp, Op op) {
    switch (op) {
        case Op::eq: return cmp == 0;
        case Op::ne: return cmp != 0;
        case Op::lt: return cmp < 0;
        case Op::le: return cmp <= 0;
        case Op::gt: return cmp > 0;
        case Op::ge: return cmp >= 0;
    }
    return false;
}

bool known_property(std::string_view p) { return p == "cuda" || p == "driver" || p == "arch" || p == "brand"; }

// nullopt: an unknown property (skipped). Errors name the variable.
Result<std::optional<Constraint>> parse_constraint(std::string_view text, std::string_view variable) {
    auto op_at = text.find_first_of("<>=!");
    if (op_at == std::string_view::npos || op_at == 0)
        return fail(Code::invalid_argument, "{}: constraint '{}': expected <property><operator><value>, e.g. cuda>=12.4",
                    variable, text);
    Constraint c;
    c.text = std::string(text);
    c.property = strings::lower(text.substr(0, op_at));
    std::string_view rest = text.substr(op_at);
    static constexpr std::pair<std::string_view, Op> ops[] = {{"!=", Op::ne}, {"<=", Op::le}, {">=", Op::ge},
                                                              {"=", Op::eq},  {"<", Op::lt},  {">", Op::gt}};
    bool found = false;
    for (const auto& [s, op] : ops) {
        if (rest.starts_with(s)) {
            c.op = op;
            rest.remove_prefix(s.size());
            found = true;
            break;
        }
    }
    if (!found) return fail(Code::invalid_argument, "{}: constraint '{}': unknown operator", variable, text);
    c.value = std::string(rest);
    if (!known_property(c.property)) return std::optional<Constraint>{};
    if (c.property == "brand") {
        if (c.op != Op::eq && c.op != Op::ne)
            return fail(Code::invalid_argument, "{}: constraint '{}': brand compares only with = or !=", variable, text);
        if (c.value.empty()) return fail(Code::invalid_argument, "{}: constraint '{}': expected a brand", variable, text);
    } else if (!strings::version_parts(c.value)) {
        return fail(Code::invalid_argument, "{}: constraint '{}': '{}' is not a version (dotted numbers such as 12.4)",
                    variable, text, c.value);
    }
    return std::optional<Constraint>{std::move(c)};
}

// Whether `c` holds on the node for `gpu` (nullptr: no GPU; device properties are then unknown
// and a constraint on them does not hold).
bool evaluate(const Constraint& c, const NodeProperties& node, const GpuProperties* gpu) {
    if (c.property == "brand") {
        if (!gpu || gpu->brand.empty()) return false;
        bool equal = strings::lower(gpu->brand) == strings::lower(c.value);
        return c.op == Op::eq ? equal : !equal;
    }
    std::string have = c.property == "cuda" ? node.cuda : c.property == "driver" ? node.driver : gpu ? gpu->arch : "";
    auto a = strings::version_parts(have);
    auto b = strings::version_parts(c.value);
    if (!a || !b) return false;
    return holds(strings::compare_versions(*a, *b), c.op);
}

}  // namespace

Result<std::optional<Unmet>> check_requirements(const std::vector<std::pair<std::string, std::string>>& reqs,
                                                const NodeProperties& node) {
    for (const auto& [variable, value] : reqs) {
        // Terms (ORed) of factors (ANDed); unknown properties dropped.
        std::vector<std::vector<Constraint>> terms;
        for (auto term : strings::split(value, ' ')) {
            if (strings::trim(term).empty()) continue;
            std::vector<Constraint> factors;
            for (auto factor : strings::split(term, ',')) {
                factor = strings::trim(factor);
                if (factor.empty()) continue;
                auto c = parse_constraint(factor, variable);
                if (!c) return std::unexpected(c.error());
                if (*c) factors.push_back(std::move(**c));
            }
            if (!factors.empty()) terms.push_back(std::move(factors));
        }
        if (terms.empty()) continue;
        // Every selected GPU must satisfy the requirement (once with no GPU when none is selected).
        std::vector<const GpuProperties*> gpus;
        for (const auto& g : node.gpus) gpus.push_back(&g);
        if (gpus.empty()) gpus.push_back(nullptr);
        for (const GpuProperties* gpu : gpus) {
            Unmet unmet{variable, value, {}, std::nullopt};
            bool met = false;
            bool device_rule = false;
            for (const auto& factors : terms) {
                auto failed = std::find_if(factors.begin(), factors.end(),
                                           [&](const Constraint& c) { return !evaluate(c, node, gpu); });
                if (failed == factors.end()) {
                    met = true;
                    break;
                }
                unmet.failed.push_back(failed->text);
                device_rule |= failed->property == "arch" || failed->property == "brand";
            }
            if (!met) {
                if (gpu && device_rule) unmet.gpu = gpu->index;
                return std::optional<Unmet>{std::move(unmet)};
            }
        }
    }
    return std::optional<Unmet>{};
}

std::string explain(const Unmet& u, const NodeProperties& node) {
    std::string msg = fmt::format("the image's requirement {}=\"{}\" is not met (unmet: {}) by this node: NVIDIA driver {}, "
                                  "CUDA {}",
                                  u.variable, u.value, fmt::join(u.failed, " or "), node.driver.empty() ? "unknown" : node.driver,
                                  node.cuda.empty() ? "unknown" : node.cuda);
    const GpuProperties* gpu = nullptr;
    if (u.gpu)
        for (const auto& g : node.gpus)
            if (g.index == *u.gpu) gpu = &g;
    if (gpu)
        msg += fmt::format(", GPU {} {} (compute capability {}, brand {})", gpu->index, gpu->name, gpu->arch,
                           gpu->brand.empty() ? "unknown" : gpu->brand);
    msg += ". ";

    // The fix, from the first failed cuda>= constraint (the usual case), else by property.
    std::optional<inventory::compat::Cuda> wanted;
    for (const auto& f : u.failed) {
        std::string_view t = f;
        if (strings::lower(t.substr(0, 4)) != "cuda") continue;
        auto at = t.find_first_of("0123456789");
        if (at == std::string_view::npos) continue;
        if (auto c = inventory::compat::parse_cuda(t.substr(at))) {
            wanted = c;
            break;
        }
    }
    auto newest = inventory::compat::newest_cuda(node.driver);
    if (wanted) {
        auto min = inventory::compat::min_driver(*wanted);
        if (min)
            msg += fmt::format("CUDA {} needs NVIDIA driver >= {}: upgrade this node's driver, ", wanted->str(), *min);
        else
            msg += fmt::format("CUDA {} is not a CUDA release kgpu knows: check the image, or ", wanted->str());
        msg += fmt::format("run an image built for CUDA {} or older, or schedule the pod on a node with a newer driver",
                           newest ? newest->str() : node.cuda);
        if (auto compat = inventory::compat::minor_compat_driver(wanted->major);
            compat && inventory::compat::compare_driver(node.driver, *compat) >= 0)
            msg += fmt::format("; this driver runs CUDA {}.x applications through minor-version compatibility, so if the "
                               "application needs no newer driver feature, NVIDIA_DISABLE_REQUIRE=true skips the check",
                               wanted->major);
        msg += fmt::format(" (`kgpu doctor compat --cuda {} --driver {}`).", wanted->str(), node.driver);
    } else if (gpu) {
        msg += "Schedule the pod on a node whose GPUs meet the requirement (node labels nvidia.com/gpu.compute.major, "
               "nvidia.com/gpu.product), or use an image built for this GPU.";
    } else {
        msg += fmt::format("Upgrade this node's driver, or use an image whose requirement this driver meets "
                           "(`kgpu doctor compat --cuda <version> --driver {}`).",
                           node.driver);
    }
    return msg;
}

}  // namespace kgpu::toolkit
