// `kgpu labels --config-file`: the parts of the device plugin's config file labels read
// (flags.migStrategy, sharing), from a file.
#include "fuzz.h"
#include "labels/config.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(labels_config) {
    const auto path = fuzz::write_scratch("labels-config.yaml", fuzz::text(data, size));
    auto cfg = labels::read_plugin_config(path);
    if (!cfg) {
        KGPU_FUZZ_CHECK(!cfg.error().message.empty(), "an error without a message");
        return 0;
    }
    for (const auto& [name, replicas] : cfg->sharing.replicas) KGPU_FUZZ_CHECK(replicas >= 2, name);
    return 0;
}
