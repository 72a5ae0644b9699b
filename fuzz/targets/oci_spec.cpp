// `kgpu container-runtime`'s reading of a container's config.json (toolkit/oci_edit.h,
// toolkit/request.h), which runs as root on specs a tenant shapes (env, mounts, annotations,
// hooks). The first byte picks the security settings (bit 0: accept NVIDIA_VISIBLE_DEVICES when
// unprivileged, bit 1: accept volume mounts). Must hold: the spec is refused with a message naming
// config.json, or parsed (never deeper than json::kMaxDepth); removing NVIDIA's legacy hook keeps
// every other prestart hook, in order; the request decision and the requirements are values or
// errors, never a crash; edits that apply give a spec that serialises, parses again, and does not
// change when the same edits are applied once more.
#include <nlohmann/json.hpp>

#include "fuzz.h"
#include "toolkit/oci_edit.h"
#include "toolkit/request.h"

using namespace kgpu;
using ojson = nlohmann::ordered_json;

namespace {

// The edits the runtime applies for one GPU (the shape of cdi::generate's), fixed.
const ojson& edits() {
    static const ojson e = ojson::parse(R"({
      "env": ["NVIDIA_VISIBLE_DEVICES=void"],
      "deviceNodes": [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0},
                      {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}],
      "mounts": [{"hostPath": "/usr/lib64/libcuda.so.550.54.15", "containerPath": "/usr/lib64/libcuda.so.550.54.15",
                  "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}],
      "hooks": [{"hookName": "createContainer", "path": "/usr/local/kgpu/nvidia-cdi-hook",
                 "args": ["nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so"]}],
      "additionalGids": [44]
    })");
    return e;
}

bool legacy(const ojson& h) {
    if (!h.is_object() || !h.contains("path") || !h["path"].is_string()) return false;
    const auto& p = h["path"].get_ref<const std::string&>();
    const std::string_view name = std::string_view(p).substr(p.rfind('/') + 1);
    return name == "nvidia-container-runtime-hook" || name == "nvidia-container-toolkit";
}

}  // namespace

KGPU_FUZZ_TARGET(oci_spec) {
    if (size < 1) return -1;
    const uint8_t flags = data[0];
    const std::string_view text = fuzz::text(data + 1, size - 1);
    auto spec = toolkit::parse_spec(text);
    if (!spec) {
        KGPU_FUZZ_CHECK(spec.error().message.starts_with("config.json"), spec.error().message);
        return 0;
    }
    KGPU_FUZZ_CHECK(spec->is_object(), "a spec that is not an object was accepted");

    // The legacy hook goes; every other prestart hook stays, in order.
    ojson expected;
    const bool list = spec->contains("hooks") && (*spec)["hooks"].is_object() && (*spec)["hooks"].contains("prestart") &&
                      (*spec)["hooks"]["prestart"].is_array();
    if (list) {
        expected = ojson::array();
        for (const auto& h : (*spec)["hooks"]["prestart"])
            if (!legacy(h)) expected.push_back(h);
    }
    const auto removed = toolkit::remove_legacy_hooks(*spec);
    if (list) {
        const auto& hooks = (*spec)["hooks"];
        const ojson kept = hooks.contains("prestart") ? hooks["prestart"] : ojson::array();
        KGPU_FUZZ_CHECK(kept == expected, "remove_legacy_hooks changed another prestart hook");
        KGPU_FUZZ_CHECK(removed.empty() || !expected.empty() || !hooks.contains("prestart"), "an emptied prestart list was kept");
    } else {
        KGPU_FUZZ_CHECK(removed.empty(), "removed a hook from a prestart that is not a list");
    }

    auto view = toolkit::read_container(*spec);
    if (!view) {
        KGPU_FUZZ_CHECK(view.error().message.starts_with("config.json"), view.error().message);
        return 0;
    }
    toolkit::RuntimeConfig config;
    config.accept_envvar_when_unprivileged = flags & 1;
    config.accept_volume_mounts = flags & 2;
    if (auto request = toolkit::requested_devices(*view, config)) {
        for (const auto& d : request->devices) KGPU_FUZZ_CHECK(!d.empty(), "an empty device name was requested");
        KGPU_FUZZ_CHECK(!request->capabilities.empty(), "no driver capability");
    }
    (void)toolkit::requirements(*view);

    if (!toolkit::apply_container_edits(*spec, edits())) return 0;  // a field of the wrong type: refused
    auto out = toolkit::dump_spec(*spec);
    if (!out) return 0;  // invalid UTF-8 in a string
    auto again = toolkit::apply_container_edits(*out, edits());
    KGPU_FUZZ_CHECK(again.has_value(), again ? "" : again.error().message);
    KGPU_FUZZ_CHECK(*again == *out, "applying the same edits twice changed the spec");
    return 0;
}
