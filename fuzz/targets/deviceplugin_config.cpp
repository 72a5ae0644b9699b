// The device plugin's config file (YAML, NVIDIA's `version: v1` schema plus kgpu's keys): parsed,
// resolved with no overrides, and described. A config that parses must resolve or be refused
// with an error, and its description must be stable.
#include "deviceplugin/config.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(deviceplugin_config) {
    auto cfg = deviceplugin::parse_config(fuzz::text(data, size), "config.yaml");
    if (!cfg) {
        KGPU_FUZZ_CHECK(!cfg.error().message.empty(), "an error without a message");
        return 0;
    }
    auto resolved = deviceplugin::resolve(*cfg, {}, {});
    if (!resolved) return 0;
    KGPU_FUZZ_CHECK(deviceplugin::describe(*resolved) == deviceplugin::describe(*resolved), "describe is not stable");
    return 0;
}
