#include "toolkit/devices.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "cdi/naming.h"
#include "common/pci.h"
#include "common/strings.h"

namespace kgpu::toolkit {

namespace {

bool parse_uint(std::string_view s, unsigned& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc{} && p == s.data() + s.size();
}

struct Resolver {
    const inventory::Node& node;
    Selection sel;

    void add_gpu(unsigned g) {
        if (std::find(sel.gpus.begin(), sel.gpus.end(), g) == sel.gpus.end()) sel.gpus.push_back(g);
    }
    void add_mig(unsigned g, unsigned m) {
        for (const auto& x : sel.migs)
            if (x.gpu == g && x.mig == m) return;
        sel.migs.push_back({g, m});
    }

    std::string known() const {
        std::vector<std::string> names;
        for (const auto& g : node.gpus) {
            names.push_back(fmt::format("{} ({})", g.index, g.uuid.empty() ? "unreadable" : g.uuid));
            for (const auto& m : g.mig_devices) names.push_back(fmt::format("{}:{} ({})", g.index, m.index, m.uuid));
        }
        if (names.empty()) return "this node has no GPU";
        return fmt::format("this node has {}", fmt::join(names, ", "));
    }

    Status gpu_ok(unsigned pos, std::string_view name) const {
        const auto& g = node.gpus[pos];
        if (g.lost || g.uuid.empty())
            return fail(Code::unavailable, "device '{}': GPU {} is not usable ({})", name, g.index,
                        g.error.empty() ? "lost" : g.error);
        return {};
    }

    // A GPU or MIG UUID `n`, or a prefix of one that matches one device (`name` as given).
    Status resolve_uuid(std::string_view name, std::string_view n) {
        const bool mig = strings::starts_with_ci(n, "MIG-");
        std::vector<std::pair<unsigned, int>> matches;  // (gpu pos, mig pos or -1)
        bool exact = false;
        auto consider = [&](const std::string& uuid, unsigned g, int m) {
            if (uuid.size() < n.size() || !strings::starts_with_ci(uuid, n)) return;
            if (uuid.size() == n.size() && !exact) {
                exact = true;
                matches.clear();
            }
            if (exact && uuid.size() != n.size()) return;
            matches.emplace_back(g, m);
        };
        for (unsigned i = 0; i < node.gpus.size(); ++i) {
            if (!mig) consider(node.gpus[i].uuid, i, -1);
            else
                for (unsigned j = 0; j < node.gpus[i].mig_devices.size(); ++j)
                    consider(node.gpus[i].mig_devices[j].uuid, i, static_cast<int>(j));
        }
        if (matches.empty()) return fail(Code::not_found, "unknown device '{}': no such UUID; {}", name, known());
        if (matches.size() > 1)
            return fail(Code::invalid_argument, "device '{}': the UUID prefix matches {} devices; give more of it", name,
                        matches.size());
        auto [g, m] = matches.front();
        if (auto st = gpu_ok(g, name); !st) return st;
        if (m < 0) add_gpu(g);
        else add_mig(g, static_cast<unsigned>(m));
        return {};
    }

    // A bare device name (no CDI kind). `cdi_names` also accepts the type-index spellings.
    Status resolve(std::string_view name, bool cdi_names) {
        if (name == "all") {
            sel.all = true;
            return {};
        }
        if (name == "none") {
            sel.none = true;
            return {};
        }
        std::string_view n = name;
        if (cdi_names && n.starts_with("gpu") && n.size() > 3 && std::isdigit(static_cast<unsigned char>(n[3])))
            n.remove_prefix(3);
        else if (cdi_names && n.starts_with("mig") && n.size() > 3 && std::isdigit(static_cast<unsigned char>(n[3])))
            n.remove_prefix(3);
        unsigned idx = 0;
        if (parse_uint(n, idx)) {
            for (unsigned i = 0; i < node.gpus.size(); ++i) {
                if (node.gpus[i].index != idx) continue;
                if (auto st = gpu_ok(i, name); !st) return st;
                add_gpu(i);
                return {};
            }
            return fail(Code::not_found, "unknown device '{}': no GPU with index {}; {}", name, idx, known());
        }
        if (auto colon = n.find(':'); colon != std::string_view::npos && n.find(':', colon + 1) == std::string_view::npos) {
            unsigned gi = 0, mi = 0;
            if (parse_uint(n.substr(0, colon), gi) && parse_uint(n.substr(colon + 1), mi)) {
                for (unsigned i = 0; i < node.gpus.size(); ++i) {
                    if (node.gpus[i].index != gi) continue;
                    for (unsigned j = 0; j < node.gpus[i].mig_devices.size(); ++j) {
                        if (node.gpus[i].mig_devices[j].index != mi) continue;
                        if (auto st = gpu_ok(i, name); !st) return st;
                        add_mig(i, j);
                        return {};
                    }
                }
                return fail(Code::not_found, "unknown device '{}': no MIG device {} on GPU {}; {}", name, mi, gi, known());
            }
        }
        if (strings::starts_with_ci(n, "GPU-") || strings::starts_with_ci(n, "MIG-")) return resolve_uuid(name, n);
        if (auto bus = pci::sysfs_address(n); !bus.empty()) {
            for (unsigned i = 0; i < node.gpus.size(); ++i) {
                if (pci::sysfs_address(node.gpus[i].pci_bus_id) != bus) continue;
                if (auto st = gpu_ok(i, name); !st) return st;
                add_gpu(i);
                return {};
            }
            return fail(Code::not_found, "unknown device '{}': no GPU at that PCI bus id; {}", name, known());
        }
        return fail(Code::invalid_argument,
                    "unknown device '{}': expected all, none, an index, a GPU or MIG UUID, <gpu>:<mig> or a PCI bus id; {}",
                    name, known());
    }
};

}  // namespace

Result<Selection> resolve_devices(const inventory::Node& node, const std::vector<std::string>& names, std::string_view kind) {
    Resolver r{node, {}};
    for (const auto& raw : names) {
        std::string_view name = strings::trim(raw);
        if (name.empty()) continue;
        if (auto eq = name.find('='); eq != std::string_view::npos) {
            std::string_view k = name.substr(0, eq);
            // The device plugin's kind names the same GPUs the same way (its spec is generated
            // by src/cdi too), so a container that kgpu's plugin handed such a name is ours.
            if (k != kind && k != cdi::kDevicePluginKind) {
                r.sel.notes.push_back(fmt::format("CDI device '{}' is not of kind {}: left to containerd's CDI support", name, kind));
                continue;
            }
            if (auto st = r.resolve(name.substr(eq + 1), true); !st) return std::unexpected(st.error());
            continue;
        }
        if (auto st = r.resolve(name, false); !st) return std::unexpected(st.error());
    }
    // "none" together with devices means the devices.
    if (r.sel.none && (r.sel.all || !r.sel.gpus.empty() || !r.sel.migs.empty())) r.sel.none = false;
    return std::move(r.sel);
}

}  // namespace kgpu::toolkit
