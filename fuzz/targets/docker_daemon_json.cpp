// `kgpu runtime configure --runtime=docker`: Docker's daemon.json edited as nvidia-ctk edits it
// (runtime/docker.h). The first byte picks the options. The text is refused with a message naming
// the file, or edited so that: the result is a JSON object with the runtime entry, the default
// runtime and the CDI feature as asked; every other top-level key keeps its value; and the edit is
// idempotent (configuring the result again changes nothing).
#include <nlohmann/json.hpp>

#include "fuzz.h"
#include "runtime/docker.h"

using namespace kgpu;
using ojson = nlohmann::ordered_json;

KGPU_FUZZ_TARGET(docker_daemon_json) {
    if (size < 1) return -1;
    const uint8_t flags = data[0];
    const std::string_view text = fuzz::text(data + 1, size - 1);
    runtime::DockerOptions o;
    o.set_as_default = flags & 1;
    o.enable_cdi = flags & 2;
    if (flags & 4) o.runtime_name = "nvidia-experimental";
    if (flags & 8) o.runtime_path = "/usr/bin/nvidia-container-runtime";
    auto e = runtime::configure_docker(text, "daemon.json", o);
    if (!e) {
        KGPU_FUZZ_CHECK(e.error().message.starts_with("daemon.json"), e.error().message);
        return 0;
    }
    ojson out;
    try {
        out = ojson::parse(e->text);
    } catch (const std::exception& x) {
        KGPU_FUZZ_CHECK(false, std::string("the result is not JSON: ") + x.what());
    }
    KGPU_FUZZ_CHECK(out.is_object(), "the result is not an object");
    KGPU_FUZZ_CHECK(out["runtimes"][o.runtime_name] == (ojson{{"path", o.runtime_path}, {"args", ojson::array()}}),
                    "the runtime entry is not the one asked for");
    if (o.set_as_default) KGPU_FUZZ_CHECK(out["default-runtime"] == o.runtime_name, "not the default runtime");
    if (o.enable_cdi) KGPU_FUZZ_CHECK(out["features"]["cdi"] == true, "CDI not enabled");
    // configure_docker took the text, so it parses; every key it does not edit is kept.
    const ojson in = text.find_first_not_of(" \t\r\n") == std::string_view::npos ? ojson::object() : ojson::parse(text);
    for (const auto& [key, value] : in.items()) {
        if (key == "runtimes" || key == "default-runtime" || key == "features") continue;
        KGPU_FUZZ_CHECK(out.contains(key) && out[key] == value, "key '" + key + "' changed");
    }
    if (in.contains("runtimes"))
        for (const auto& [name, value] : in["runtimes"].items())
            if (name != o.runtime_name) KGPU_FUZZ_CHECK(out["runtimes"][name] == value, "runtime '" + name + "' changed");
    auto again = runtime::configure_docker(e->text, "daemon.json", o);
    KGPU_FUZZ_CHECK(again.has_value(), again ? "" : again.error().message);
    KGPU_FUZZ_CHECK(!again->changed && again->text == e->text, "configure_docker is not idempotent");
    return 0;
}
