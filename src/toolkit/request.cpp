#include "toolkit/request.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "common/strings.h"

namespace kgpu::toolkit {

using ojson = nlohmann::ordered_json;

namespace {

// "/a//b/./c/" -> "/a/b/c" (enough of filepath.Clean for mount paths; ".." is kept).
std::string clean_path(std::string_view p) {
    std::string out;
    for (auto part : strings::split(p, '/')) {
        if (part.empty() || part == ".") continue;
        out += "/";
        out += part;
    }
    if (out.empty()) return p.starts_with('/') ? "/" : "";
    if (!p.starts_with('/')) out.erase(0, 1);
    return out;
}

Status type_error(std::string_view field, std::string_view expected) {
    return fail(Code::invalid_argument, "config.json: {} is not {}", field, expected);
}

// Go's strconv.ParseBool.
bool parse_bool(std::string_view v) {
    return v == "1" || v == "t" || v == "T" || v == "TRUE" || v == "true" || v == "True";
}

// The devices named in env `value` (NVIDIA's devicesFromEnvvars + NewVisibleDevices).
std::vector<std::string> devices_from_env(const ContainerView& c, bool& is_set) {
    std::vector<std::string> tokens;
    bool void_requested = false;
    auto it = c.env.find("NVIDIA_VISIBLE_DEVICES");
    is_set = it != c.env.end();
    if (is_set) {
        for (auto t : strings::split(it->second, ',')) {
            t = strings::trim(t);
            if (t.empty()) continue;
            if (t == "void") void_requested = true;
            tokens.emplace_back(t);
        }
    }
    const bool legacy = c.env.contains("CUDA_VERSION") && !c.env.at("CUDA_VERSION").empty() &&
                        (!c.env.contains("NVIDIA_REQUIRE_CUDA") || c.env.at("NVIDIA_REQUIRE_CUDA").empty());
    if (!is_set && tokens.empty() && legacy) tokens = {"all"};
    if (tokens.empty() || void_requested) return {};
    // The first special value in order decides for the whole list.
    for (const auto& t : tokens) {
        if (t == "all") return {"all"};
        if (t == "none") return {"none"};
    }
    return tokens;
}

// The /dev/null mounts under kVolumeMountsRoot, as device names (NVIDIA's requestsFromMounts).
std::vector<std::string> devices_from_mounts(const ContainerView& c, std::vector<std::string>& notes) {
    const std::string root(kVolumeMountsRoot);
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const auto& m : c.mounts) {
        if (clean_path(m.source) != "/dev/null") continue;
        const std::string dest = clean_path(m.destination);
        if (!seen.insert(dest).second) continue;
        if (!dest.starts_with(root)) continue;
        std::string_view device = std::string_view(dest).substr(root.size());
        while (!device.empty() && device.front() == '/') device.remove_prefix(1);
        if (device.empty()) continue;
        if (device.starts_with("imex/")) continue;  // IMEX channels: not GPUs
        if (device.starts_with("cdi/")) {
            std::string_view name = device.substr(4);
            if (name.find('=') != std::string_view::npos) {
                out.emplace_back(name);
                continue;
            }
            auto parts = strings::split(name, '/');
            if (parts.size() < 3) {
                notes.push_back(fmt::format("ignoring the mount request {} for a CDI device: expected "
                                            "cdi/<vendor>/<class>/<device>",
                                            dest));
                continue;
            }
            // <vendor>/<class>/<device...>
            std::string rest(name.substr(parts[0].size() + parts[1].size() + 2));
            out.push_back(fmt::format("{}/{}={}", parts[0], parts[1], rest));
            continue;
        }
        out.emplace_back(device);
    }
    return out;
}

}  // namespace

std::string_view to_string(RequestSource s) {
    switch (s) {
        case RequestSource::none: return "none";
        case RequestSource::envvar: return "NVIDIA_VISIBLE_DEVICES";
        case RequestSource::volume_mounts: return "volume mounts";
        case RequestSource::annotations: return "CDI annotations";
    }
    return "none";
}

Result<ContainerView> read_container(const ojson& spec) {
    ContainerView c;
    if (!spec.is_object()) return fail(Code::invalid_argument, "config.json: expected a JSON object");
    if (auto p = spec.find("process"); p != spec.end() && !p->is_null()) {
        if (!p->is_object()) return std::unexpected(type_error("process", "an object").error());
        if (auto env = p->find("env"); env != p->end() && !env->is_null()) {
            if (!env->is_array()) return std::unexpected(type_error("process.env", "an array").error());
            for (const auto& e : *env) {
                if (!e.is_string()) return std::unexpected(type_error("process.env[]", "a string").error());
                const auto& s = e.get_ref<const std::string&>();
                auto eq = s.find('=');
                if (eq == std::string::npos)
                    return fail(Code::invalid_argument, "config.json: process.env entry '{}' has no '='", s);
                c.env[s.substr(0, eq)] = s.substr(eq + 1);
            }
        }
        if (auto caps = p->find("capabilities"); caps != p->end() && !caps->is_null()) {
            if (!caps->is_object()) return std::unexpected(type_error("process.capabilities", "an object").error());
            if (auto b = caps->find("bounding"); b != caps->end() && !b->is_null()) {
                if (!b->is_array()) return std::unexpected(type_error("process.capabilities.bounding", "an array").error());
                for (const auto& cap : *b)
                    if (cap.is_string() && cap.get_ref<const std::string&>() == "CAP_SYS_ADMIN") c.privileged = true;
            }
        }
    }
    if (auto mounts = spec.find("mounts"); mounts != spec.end() && !mounts->is_null()) {
        if (!mounts->is_array()) return std::unexpected(type_error("mounts", "an array").error());
        for (const auto& m : *mounts) {
            if (!m.is_object()) return std::unexpected(type_error("mounts[]", "an object").error());
            ContainerView::Mount mount;
            if (auto s = m.find("source"); s != m.end() && s->is_string()) mount.source = s->get<std::string>();
            if (auto d = m.find("destination"); d != m.end() && d->is_string()) mount.destination = d->get<std::string>();
            c.mounts.push_back(std::move(mount));
        }
    }
    if (auto a = spec.find("annotations"); a != spec.end() && !a->is_null()) {
        if (!a->is_object()) return std::unexpected(type_error("annotations", "an object").error());
        for (const auto& [k, v] : a->items())
            if (v.is_string()) c.annotations[k] = v.get<std::string>();
    }
    return c;
}

const std::set<std::string>& known_capabilities() {
    static const std::set<std::string> caps = {"compute", "compat32", "graphics", "utility", "video", "display", "ngx"};
    return caps;
}

Result<Request> requested_devices(const ContainerView& c, const RuntimeConfig& config) {
    Request r;
    // Driver capabilities.
    std::string caps_env;
    if (auto it = c.env.find("NVIDIA_DRIVER_CAPABILITIES"); it != c.env.end()) caps_env = it->second;
    for (auto t : strings::split(caps_env, ',')) {
        t = strings::trim(t);
        if (t.empty()) continue;
        if (t == "all" || known_capabilities().contains(std::string(t))) r.capabilities.emplace(t);
        else r.notes.push_back(fmt::format("NVIDIA_DRIVER_CAPABILITIES: ignoring unknown capability '{}'", t));
    }
    if (r.capabilities.empty()) r.capabilities = {"utility", "compute"};

    // 1. CDI annotations (std::map iterates keys sorted, as NVIDIA sorts them).
    for (const auto& [key, value] : c.annotations) {
        bool match = std::any_of(config.annotation_prefixes.begin(), config.annotation_prefixes.end(),
                                 [&](const std::string& p) { return key.starts_with(p); });
        if (!match) continue;
        for (auto d : strings::split(value, ',')) {
            d = strings::trim(d);
            if (!d.empty()) r.devices.emplace_back(d);
        }
    }
    if (!r.devices.empty()) {
        r.source = RequestSource::annotations;
        return r;
    }
    // 2. Volume mounts.
    if (config.accept_volume_mounts) {
        r.devices = devices_from_mounts(c, r.notes);
        if (!r.devices.empty()) {
            r.source = RequestSource::volume_mounts;
            return r;
        }
    }
    // 3. The environment variable.
    bool is_set = false;
    auto env_devices = devices_from_env(c, is_set);
    if (env_devices.empty()) return r;
    if (env_devices.size() == 1 && clean_path(env_devices[0]) == kVolumeMountsRoot) {
        if (!config.accept_volume_mounts)
            return fail(Code::invalid_argument,
                        "NVIDIA_VISIBLE_DEVICES={} asks for the devices mounted under it (the device plugin's "
                        "volume-mounts strategy), but {} does not set accept-nvidia-visible-devices-as-volume-mounts = true",
                        kVolumeMountsRoot, config.source.empty() ? std::string(kDefaultConfigPath) : config.source);
        r.notes.push_back(fmt::format("NVIDIA_VISIBLE_DEVICES={} but no /dev/null mount under it: no GPU", kVolumeMountsRoot));
        return r;
    }
    if (!c.privileged && !config.accept_envvar_when_unprivileged) {
        r.notes.push_back(fmt::format("ignoring NVIDIA_VISIBLE_DEVICES={} in an unprivileged container "
                                      "(accept-nvidia-visible-devices-envvar-when-unprivileged = false): GPUs come only "
                                      "from the device plugin's volume mounts or CDI annotations",
                                      is_set ? c.env.at("NVIDIA_VISIBLE_DEVICES") : "(legacy image: all)"));
        return r;
    }
    r.source = RequestSource::envvar;
    r.devices = std::move(env_devices);
    return r;
}

Result<std::vector<std::pair<std::string, std::string>>> requirements(const ContainerView& c) {
    std::vector<std::pair<std::string, std::string>> out;
    if (auto it = c.env.find("NVIDIA_DISABLE_REQUIRE"); it != c.env.end() && parse_bool(it->second)) return out;
    for (const auto& [name, value] : c.env) {
        if (!name.starts_with("NVIDIA_REQUIRE_") || name.starts_with("NVIDIA_REQUIRE_JETPACK")) continue;
        out.emplace_back(name, value);
    }
    auto cuda = c.env.find("CUDA_VERSION");
    auto req = c.env.find("NVIDIA_REQUIRE_CUDA");
    if (cuda != c.env.end() && !cuda->second.empty() && (req == c.env.end() || req->second.empty())) {
        // "12.4.1" or "v12.4" -> "12.4"; a bare major "12" -> "12.0".
        std::string_view v = cuda->second;
        if (v.starts_with('v')) v.remove_prefix(1);
        auto parts = strings::split(v, '.');
        unsigned major = 0, minor = 0;
        auto num = [](std::string_view s, unsigned& out) {
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
            return !s.empty() && ec == std::errc{} && p == s.data() + s.size();
        };
        bool ok = parts.size() <= 3 && num(parts[0], major) && (parts.size() < 2 || num(parts[1], minor));
        if (ok && parts.size() == 3) {
            unsigned patch = 0;
            ok = num(parts[2], patch);
        }
        if (!ok)
            return fail(Code::invalid_argument, "CUDA_VERSION={}: expected a version such as 12.4.1 (a legacy CUDA image "
                        "without NVIDIA_REQUIRE_CUDA requires cuda>=<CUDA_VERSION>)",
                        cuda->second);
        out.emplace_back("CUDA_VERSION", fmt::format("cuda>={}.{}", major, minor));
    }
    return out;
}

}  // namespace kgpu::toolkit
