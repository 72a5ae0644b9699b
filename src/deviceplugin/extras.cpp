#include "deviceplugin/extras.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cdi/driver_files.h"
#include "cdi/spec.h"
#include "common/files.h"
#include "deviceplugin/allocate.h"

namespace kgpu::deviceplugin {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

bool is_char_device(const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// /dev paths under the dev root matching `dir`/`prefix`* (or exactly `dir`/`prefix` when not
// `glob`), sorted, as container paths.
std::vector<std::string> find_nodes(const fs::path& dev_root, const std::string& dir, const std::string& prefix,
                                    bool glob) {
    std::vector<std::string> out;
    const fs::path host_dir = files::under_root(dev_root, dir);
    std::error_code ec;
    if (!glob) {
        if (fs::exists(host_dir / prefix, ec)) out.push_back(dir + "/" + prefix);
        return out;
    }
    for (const auto& e : fs::directory_iterator(host_dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.starts_with(prefix)) out.push_back(dir + "/" + name);
    }
    std::sort(out.begin(), out.end());
    return out;
}

ojson node_json(const fs::path& dev_root, const std::string& path) {
    ojson j;
    j["path"] = path;
    if (auto n = cdi::find_device_node(dev_root, path)) {
        if (n->host_path != path) j["hostPath"] = n->host_path;
        if (n->major && n->minor) {
            j["type"] = "c";
            j["major"] = *n->major;
            j["minor"] = *n->minor;
        }
    } else {
        const std::string host = files::under_root(dev_root, path).string();
        if (host != path) j["hostPath"] = host;
    }
    return j;
}

ojson spec_of(std::string_view kind, ojson devices) {
    ojson spec;
    spec["cdiVersion"] = "0.3.0";
    spec["kind"] = std::string(kind);
    spec["devices"] = std::move(devices);
    spec["cdiVersion"] = cdi::minimum_version(spec);
    return spec;
}

// The CDI specs of the extras, kept in c.cdi_spec_dir: written, or removed when kgpu owns them.
class ExtrasSpecs {
public:
    ExtrasSpecs(const Config& c, OwnedSpecs& owned)
        : c_(c), owned_(owned), dev_root_(c.dev_root()),
          cdi_(c.uses(DeviceListStrategy::cdi_annotations) || c.uses(DeviceListStrategy::cdi_cri)) {}

    // IMEX channels: one device per channel node present; a missing one fails when required.
    Status imex(std::vector<std::string>& warnings) {
        std::vector<unsigned> present;
        for (unsigned ch : c_.imex.channel_ids) {
            const std::string node = imex_channel_node(ch);
            const fs::path host = files::under_root(dev_root_, node);
            if (is_char_device(host)) {
                present.push_back(ch);
                continue;
            }
            std::error_code ec;
            const std::string why = fs::exists(host, ec) ? "is not a character device" : "does not exist";
            if (c_.imex.required)
                return fail(Code::not_found, "requested IMEX channel {} is required (imex.required) but {} {}", ch,
                            host.string(), why);
            warnings.push_back(fmt::format("IMEX channel {}: {} {}; containers get no IMEX channel (set imex.required to "
                                           "fail instead)",
                                           ch, host.string(), why));
        }
        if (!cdi_ || present.empty()) {
            remove_spec(kImexChannelKind);
            return {};
        }
        ojson devices = ojson::array();
        for (unsigned ch : present) {
            ojson d;
            d["name"] = std::to_string(ch);
            d["containerEdits"]["deviceNodes"] = ojson::array({node_json(dev_root_, imex_channel_node(ch))});
            devices.push_back(std::move(d));
        }
        return write_spec(kImexChannelKind, spec_of(kImexChannelKind, std::move(devices)));
    }

    // GPUDirect sets: one "all" device each.
    Status gpudirect(std::vector<std::string>& warnings) {
        Set sets[] = {
            {c_.gdrcopy_enabled, kGdrcopyKind, "gdrcopyEnabled", nodes({{"/dev", "gdrdrv", false}}), {}},
            {c_.gds_enabled, kGdsKind, "gdsEnabled", nodes({{"/dev", "nvidia-fs", true}}),
             {"/run/udev", "/etc/cufile.json"}},
            {c_.mofed_enabled, kMofedKind, "mofedEnabled",
             nodes({{"/dev/infiniband", "uverbs", true}, {"/dev/infiniband", "rdma_cm", false}}), {}},
        };
        for (auto& s : sets) {
            if (!s.enabled || !cdi_) {
                remove_spec(s.kind);
                continue;
            }
            if (s.nodes.empty()) {
                remove_spec(s.kind);
                warnings.push_back(fmt::format("flags.{}: no device node of {} under {}; containers get the environment "
                                               "variable but no CDI device {}=all",
                                               s.flag, s.kind, dev_root_.string(), s.kind));
                continue;
            }
            ojson d;
            d["name"] = "all";
            d["containerEdits"] = edits_of(s);
            if (auto st = write_spec(s.kind, spec_of(s.kind, ojson::array({std::move(d)}))); !st) return st;
        }
        return {};
    }

private:
    struct Set {
        bool enabled;
        std::string_view kind;
        const char* flag;
        std::vector<std::string> nodes;
        std::vector<std::string> mounts;  // container paths, found under the driver root
    };

    std::vector<std::string> nodes(std::initializer_list<std::tuple<const char*, const char*, bool>> wanted) const {
        std::vector<std::string> out;
        for (auto [dir, prefix, glob] : wanted) {
            auto found = find_nodes(dev_root_, dir, prefix, glob);
            out.insert(out.end(), found.begin(), found.end());
        }
        return out;
    }

    ojson edits_of(const Set& s) const {
        ojson edits;
        ojson node_list = ojson::array();
        for (const auto& n : s.nodes) node_list.push_back(node_json(dev_root_, n));
        edits["deviceNodes"] = std::move(node_list);
        ojson mounts = ojson::array();
        for (const auto& m : s.mounts) {
            const fs::path host = files::under_root(c_.nvidia_driver_root, m);
            std::error_code ec;
            if (!fs::exists(host, ec)) continue;
            ojson j;
            j["hostPath"] = host.string();
            j["containerPath"] = m;
            j["options"] = ojson::array({"ro", "nosuid", "nodev", "rbind", "rprivate"});
            mounts.push_back(std::move(j));
        }
        if (!mounts.empty()) edits["mounts"] = std::move(mounts);
        return edits;
    }

    // The file an earlier kgpu wrote for `kind` ("kgpu-nvidia-<class>.yaml"): nvidia.com names,
    // which collide with `nvidia-ctk cdi generate --mode <class>`'s. Removed under a CDI strategy
    // when it carries kgpu's marker (see extras.h).
    void remove_legacy(std::string_view kind) const {
        if (!cdi_) return;
        const fs::path path = fs::path(c_.cdi_spec_dir) / legacy_cdi_spec_file_name(kind.substr(kind.find('/') + 1));
        auto text = files::read(path);
        if (!text || !text->starts_with(kKgpuSpecMarker)) return;
        std::error_code ec;
        fs::remove(path, ec);
    }

    Status write_spec(std::string_view kind, const ojson& spec) {
        if (auto st = files::create_directories(c_.cdi_spec_dir); !st) return st;
        const fs::path path = fs::path(c_.cdi_spec_dir) / cdi_spec_file_name(kind);
        auto text = cdi::to_json_text(spec);
        if (!text) return std::unexpected(text.error());
        if (auto st = files::write_atomic(path, *text); !st) return st;
        owned_.insert(path.string());
        remove_legacy(kind);
        return {};
    }

    // Only kgpu's own specs go (see extras.h).
    void remove_spec(std::string_view kind) {
        remove_legacy(kind);
        const fs::path path = fs::path(c_.cdi_spec_dir) / cdi_spec_file_name(kind);
        if (owned_.erase(path.string()) == 0) return;
        std::error_code ec;
        fs::remove(path, ec);
    }

    const Config& c_;
    OwnedSpecs& owned_;
    const fs::path dev_root_;
    const bool cdi_;
};

}  // namespace

Result<std::vector<std::string>> prepare_container_extras(const Config& c, OwnedSpecs& owned) {
    std::vector<std::string> warnings;
    ExtrasSpecs specs(c, owned);
    if (auto st = specs.imex(warnings); !st) return std::unexpected(st.error());
    if (auto st = specs.gpudirect(warnings); !st) return std::unexpected(st.error());
    return warnings;
}

}  // namespace kgpu::deviceplugin
