#include "toolkit/oci_edit.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/json.h"

namespace kgpu::toolkit {

using ojson = nlohmann::ordered_json;

namespace {

std::unexpected<Error> bad(std::string_view what) { return fail(Code::invalid_argument, "{}", what); }

// spec[key] as an object (created when absent or null). nullptr when it is something else.
ojson* object_at(ojson& parent, const char* key) {
    auto& v = parent[key];
    if (v.is_null()) v = ojson::object();
    return v.is_object() ? &v : nullptr;
}

ojson* array_at(ojson& parent, const char* key) {
    auto& v = parent[key];
    if (v.is_null()) v = ojson::array();
    return v.is_array() ? &v : nullptr;
}

size_t depth(const ojson& mount) {
    auto d = mount.find("destination");
    if (d == mount.end() || !d->is_string()) return 0;
    size_t n = 0;
    const auto& s = d->get_ref<const std::string&>();
    for (size_t i = 0; i < s.size(); ++i)
        if (s[i] != '/' && (i == 0 || s[i - 1] == '/')) ++n;
    return n;
}

Status apply_env(ojson& spec, const ojson& env) {
    if (!env.is_array()) return bad("container edits: env is not an array");
    if (env.empty()) return {};
    ojson* process = object_at(spec, "process");
    if (!process) return bad("config.json: process is not an object");
    ojson* list = array_at(*process, "env");
    if (!list) return bad("config.json: process.env is not an array");
    for (const auto& e : env) {
        if (!e.is_string()) return bad("container edits: env entry is not a string");
        const auto& kv = e.get_ref<const std::string&>();
        auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
            return fail(Code::invalid_argument, "container edits: env entry '{}' is not KEY=VALUE", kv);
        const std::string prefix = kv.substr(0, eq + 1);
        bool replaced = false;
        for (auto& cur : *list) {
            if (cur.is_string() && cur.get_ref<const std::string&>().starts_with(prefix)) {
                if (!replaced) cur = kv;
                else cur = nullptr;  // a later duplicate of the same variable: dropped below
                replaced = true;
            }
        }
        list->erase(std::remove_if(list->begin(), list->end(), [](const ojson& x) { return x.is_null(); }), list->end());
        if (!replaced) list->push_back(kv);
    }
    return {};
}

Status apply_device_nodes(ojson& spec, const ojson& nodes) {
    if (!nodes.is_array()) return bad("container edits: deviceNodes is not an array");
    if (nodes.empty()) return {};
    ojson* linux_ = object_at(spec, "linux");
    if (!linux_) return bad("config.json: linux is not an object");
    // Both keys first: inserting into an ordered object moves its members.
    (*linux_)["devices"];
    (*linux_)["resources"];
    ojson* devices = array_at(*linux_, "devices");
    if (!devices) return bad("config.json: linux.devices is not an array");
    ojson* resources = object_at(*linux_, "resources");
    if (!resources) return bad("config.json: linux.resources is not an object");
    ojson* rules = array_at(*resources, "devices");
    if (!rules) return bad("config.json: linux.resources.devices is not an array");
    // The container's user owns the nodes, as the CDI library does for a non-root user.
    std::optional<std::int64_t> uid, gid;
    if (auto p = spec.find("process"); p != spec.end() && p->is_object())
        if (auto u = p->find("user"); u != p->end() && u->is_object()) {
            if (auto x = u->find("uid"); x != u->end() && x->is_number_integer() && x->get<std::int64_t>() > 0)
                uid = x->get<std::int64_t>();
            if (auto x = u->find("gid"); x != u->end() && x->is_number_integer() && x->get<std::int64_t>() > 0)
                gid = x->get<std::int64_t>();
        }
    for (const auto& n : nodes) {
        if (!n.is_object()) return bad("container edits: a deviceNodes entry is not an object");
        auto path = n.find("path");
        if (path == n.end() || !path->is_string() || path->get_ref<const std::string&>().empty())
            return bad("container edits: a device node has no path");
        const std::string& p = path->get_ref<const std::string&>();
        const std::string type = n.value("type", std::string("c"));
        if (type != "c" && type != "b" && type != "u" && type != "p")
            return fail(Code::invalid_argument, "container edits: device node {}: type '{}' is not c, b, u or p", p, type);
        auto major = n.find("major"), minor = n.find("minor");
        const bool numbers = major != n.end() && minor != n.end() && major->is_number_integer() && minor->is_number_integer();
        if (type != "p" && !numbers)
            return fail(Code::invalid_argument,
                        "device node {}: no major/minor number ({} is not a character device on this host)", p,
                        n.value("hostPath", p));
        ojson dev;
        dev["path"] = p;
        dev["type"] = type;
        if (numbers) {
            dev["major"] = *major;
            dev["minor"] = *minor;
        }
        if (auto m = n.find("fileMode"); m != n.end() && m->is_number_integer()) dev["fileMode"] = *m;
        if (auto u = n.find("uid"); u != n.end() && u->is_number_integer()) dev["uid"] = *u;
        else if (uid) dev["uid"] = *uid;
        if (auto g = n.find("gid"); g != n.end() && g->is_number_integer()) dev["gid"] = *g;
        else if (gid) dev["gid"] = *gid;
        bool replaced = false;
        for (auto& d : *devices)
            if (d.is_object() && d.value("path", std::string()) == p) {
                d = dev;
                replaced = true;
            }
        if (!replaced) devices->push_back(dev);
        if (type == "p") continue;
        std::string access = n.value("permissions", std::string("rwm"));
        if (access.empty()) access = "rwm";
        ojson rule;
        rule["allow"] = true;
        rule["type"] = type;
        rule["major"] = *major;
        rule["minor"] = *minor;
        rule["access"] = access;
        if (std::find(rules->begin(), rules->end(), rule) == rules->end()) rules->push_back(rule);
    }
    return {};
}

Status apply_mounts(ojson& spec, const ojson& mounts) {
    if (!mounts.is_array()) return bad("container edits: mounts is not an array");
    if (mounts.empty()) return {};
    ojson* list = array_at(spec, "mounts");
    if (!list) return bad("config.json: mounts is not an array");
    for (const auto& m : mounts) {
        if (!m.is_object()) return bad("container edits: a mounts entry is not an object");
        auto host = m.find("hostPath"), dest = m.find("containerPath");
        if (host == m.end() || dest == m.end() || !host->is_string() || !dest->is_string() ||
            dest->get_ref<const std::string&>().empty())
            return bad("container edits: a mount needs hostPath and containerPath");
        ojson out;
        out["destination"] = *dest;
        out["type"] = m.value("type", std::string("bind"));
        out["source"] = *host;
        if (auto o = m.find("options"); o != m.end()) {
            if (!o->is_array()) return bad("container edits: mount options is not an array");
            out["options"] = *o;
        }
        const auto& d = dest->get_ref<const std::string&>();
        list->erase(std::remove_if(list->begin(), list->end(),
                                   [&](const ojson& x) { return x.is_object() && x.value("destination", std::string()) == d; }),
                    list->end());
        list->push_back(std::move(out));
    }
    std::stable_sort(list->begin(), list->end(), [](const ojson& a, const ojson& b) { return depth(a) < depth(b); });
    return {};
}

}  // namespace

ojson oci_hook(const ojson& cdi_hook) {
    ojson out;
    for (const char* key : {"path", "args", "env", "timeout"})
        if (auto v = cdi_hook.find(key); v != cdi_hook.end()) out[key] = *v;
    return out;
}

namespace {

Status apply_hooks(ojson& spec, const ojson& hooks) {
    if (!hooks.is_array()) return bad("container edits: hooks is not an array");
    if (hooks.empty()) return {};
    static const char* const names[] = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"};
    ojson* all = object_at(spec, "hooks");
    if (!all) return bad("config.json: hooks is not an object");
    for (const auto& h : hooks) {
        if (!h.is_object()) return bad("container edits: a hooks entry is not an object");
        const std::string name = h.value("hookName", std::string());
        if (std::none_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; }))
            return fail(Code::invalid_argument, "container edits: hookName '{}' is not an OCI hook", name);
        auto path = h.find("path");
        if (path == h.end() || !path->is_string() || path->get_ref<const std::string&>().empty() ||
            path->get_ref<const std::string&>().front() != '/')
            return fail(Code::invalid_argument, "container edits: {} hook without an absolute path", name);
        ojson out = oci_hook(h);
        ojson* list = array_at(*all, name.c_str());
        if (!list) return fail(Code::invalid_argument, "config.json: hooks.{} is not an array", name);
        if (std::find(list->begin(), list->end(), out) == list->end()) list->push_back(std::move(out));
    }
    return {};
}

Status apply_gids(ojson& spec, const ojson& gids) {
    if (!gids.is_array()) return bad("container edits: additionalGids is not an array");
    if (gids.empty()) return {};
    ojson* process = object_at(spec, "process");
    if (!process) return bad("config.json: process is not an object");
    ojson* user = object_at(*process, "user");
    if (!user) return bad("config.json: process.user is not an object");
    ojson* list = array_at(*user, "additionalGids");
    if (!list) return bad("config.json: process.user.additionalGids is not an array");
    for (const auto& g : gids) {
        if (!g.is_number_unsigned() && !g.is_number_integer()) return bad("container edits: additionalGids entry is not a number");
        if (g.get<std::int64_t>() == 0) continue;  // root's group adds nothing
        if (std::find(list->begin(), list->end(), g) == list->end()) list->push_back(g);
    }
    return {};
}

}  // namespace

Result<ojson> parse_spec(std::string_view text) {
    if (auto st = json::check_depth(text, "config.json"); !st) return std::unexpected(st.error());
    try {
        auto spec = ojson::parse(text);
        if (!spec.is_object()) return fail(Code::parse, "config.json: expected a JSON object");
        return spec;
    } catch (const ojson::parse_error& e) {
        return fail(Code::parse, "config.json: not JSON (byte {}): {}", e.byte, e.what());
    } catch (const ojson::exception& e) {  // a number out of range (1e999)
        return fail(Code::parse, "config.json: not JSON: {}", e.what());
    }
}

std::vector<std::string> remove_legacy_hooks(ojson& spec) {
    std::vector<std::string> removed;
    auto hooks = spec.find("hooks");
    if (hooks == spec.end() || !hooks->is_object()) return removed;
    auto prestart = hooks->find("prestart");
    if (prestart == hooks->end() || !prestart->is_array()) return removed;
    const auto is_legacy = [](const ojson& h) {
        const auto path = h.is_object() ? h.find("path") : h.end();
        if (path == h.end() || !path->is_string()) return false;
        const auto& p = path->get_ref<const std::string&>();
        const std::string_view name = std::string_view(p).substr(p.rfind('/') + 1);
        return std::find(std::begin(kLegacyHookNames), std::end(kLegacyHookNames), name) != std::end(kLegacyHookNames);
    };
    // The list is left as it is (not moved from) unless a legacy hook is in it.
    ojson kept = ojson::array();
    for (const auto& h : *prestart) {
        if (is_legacy(h)) removed.push_back(h["path"].get<std::string>());
        else kept.push_back(h);
    }
    if (removed.empty()) return removed;
    if (kept.empty()) hooks->erase("prestart");
    else *prestart = std::move(kept);
    return removed;
}

Status apply_container_edits(ojson& spec, const ojson& edits) {
    if (!spec.is_object()) return bad("config.json: expected a JSON object");
    if (!edits.is_object()) return bad("container edits: expected an object");
    if (auto e = edits.find("env"); e != edits.end())
        if (auto st = apply_env(spec, *e); !st) return st;
    if (auto e = edits.find("deviceNodes"); e != edits.end())
        if (auto st = apply_device_nodes(spec, *e); !st) return st;
    if (auto e = edits.find("mounts"); e != edits.end())
        if (auto st = apply_mounts(spec, *e); !st) return st;
    if (auto e = edits.find("hooks"); e != edits.end())
        if (auto st = apply_hooks(spec, *e); !st) return st;
    if (auto e = edits.find("additionalGids"); e != edits.end())
        if (auto st = apply_gids(spec, *e); !st) return st;
    return {};
}

Result<std::string> dump_spec(const ojson& spec) {
    try {
        return spec.dump();
    } catch (const ojson::type_error& e) {
        return fail(Code::invalid_argument, "config.json: cannot write it back: {}", e.what());
    }
}

Result<std::string> apply_container_edits(std::string_view config_json, const ojson& edits) {
    auto spec = parse_spec(config_json);
    if (!spec) return std::unexpected(spec.error());
    if (auto st = apply_container_edits(*spec, edits); !st) return std::unexpected(st.error());
    return dump_spec(*spec);
}

}  // namespace kgpu::toolkit
