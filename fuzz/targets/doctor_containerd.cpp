// `kgpu doctor`'s reading of containerd's config (runtime.containerd check): the config under a
// host root, with its imports.
#include "runtime/containerd_settings.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(doctor_containerd) {
    const auto root = fuzz::scratch_dir() / "host";
    fuzz::write_scratch("host/etc/containerd/config.toml", fuzz::text(data, size));
    auto c = runtime::read_containerd_settings(root, "/etc/containerd/config.toml");
    if (!c) return 0;
    KGPU_FUZZ_CHECK(c->version >= 1 && c->version <= 3, "version out of range");
    KGPU_FUZZ_CHECK(!c->files.empty(), "no file read");
    return 0;
}
