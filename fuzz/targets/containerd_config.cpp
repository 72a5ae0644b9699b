// `kgpu runtime configure`: containerd's config.toml, edited as text (comments kept) for versions
// 1, 2 and 3, in place or with a drop-in. The first byte picks the options. An edit that succeeds
// must be idempotent: configuring its result again changes nothing.
#include "fuzz.h"
#include "runtime/containerd.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(containerd_config) {
    if (size < 1) return -1;
    const uint8_t flags = data[0];
    const std::string_view text = fuzz::text(data + 1, size - 1);
    runtime::ContainerdOptions o;
    o.set_as_default = flags & 1;
    o.enable_cdi = flags & 2;
    if (flags & 4) o.runtime_name = "nvidia-experimental";
    if (flags & 8) {
        auto d = runtime::configure_drop_in(text, "config.toml", "/etc/containerd/conf.d/99-nvidia.toml", o);
        if (!d) return 0;
        auto again = runtime::configure_drop_in(d->main.text, "config.toml", "/etc/containerd/conf.d/99-nvidia.toml", o);
        KGPU_FUZZ_CHECK(again.has_value(), again ? "" : again.error().message);
        KGPU_FUZZ_CHECK(again->main.text == d->main.text, "a second drop-in edit changed the main config");
        return 0;
    }
    auto e = runtime::configure(text, "config.toml", o);
    if (!e) {
        KGPU_FUZZ_CHECK(!e.error().message.empty(), "an error without a message");
        return 0;
    }
    auto again = runtime::configure(e->text, "config.toml", o);
    KGPU_FUZZ_CHECK(again.has_value(), again ? "" : again.error().message);
    KGPU_FUZZ_CHECK(!again->changed && again->text == e->text, "configure is not idempotent");
    return 0;
}
