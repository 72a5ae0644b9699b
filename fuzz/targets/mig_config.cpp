// `kgpu mig apply -f FILE`: a mig-parted configuration file (hostile text). It either parses or is
// refused with a message naming the file; every config it selects is planned on the A100 80GB
// table, and a plan that comes back places every instance on one of its profile's starts
// without overlaps, with as many instances as were asked for.
#include <algorithm>

#include "fuzz.h"
#include "mig/config.h"
#include "mig/plan.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(mig_config) {
    static const std::vector<mig::Profile> kA100 = {
        {"1g.10gb", 19, 1, 7, {0, 1, 2, 3, 4, 5, 6}}, {"1g.10gb+me", 20, 1, 1, {0, 1, 2, 3, 4, 5, 6}},
        {"1g.20gb", 15, 2, 4, {0, 2, 4, 6}},          {"2g.20gb", 14, 2, 3, {0, 2, 4}},
        {"3g.40gb", 9, 4, 2, {0, 4}},                 {"4g.40gb", 5, 4, 1, {0}},
        {"7g.80gb", 0, 8, 1, {0}},
    };
    auto c = mig::parse_config(std::string(fuzz::text(data, size)), "fuzz.yaml");
    if (!c) {
        KGPU_FUZZ_CHECK(c.error().message.starts_with("fuzz.yaml: "), c.error().message);
        return 0;
    }
    for (const auto& [name, _] : c->configs) {
        auto entries = mig::select(*c, name);
        KGPU_FUZZ_CHECK(entries.has_value(), name);
        for (const auto& e : *entries) {
            (void)mig::matches(e, 3, 0x20B210DE, 0x147F10DE);
            std::string why;
            auto p = mig::plan(kA100, {}, e.mig_devices, &why);
            if (!p) {
                KGPU_FUZZ_CHECK(!why.empty(), name);
                continue;
            }
            unsigned used = 0, n = 0;
            for (const auto& placed : p->create) {
                auto prof = std::find_if(kA100.begin(), kA100.end(), [&](const mig::Profile& x) { return x.name == placed.profile; });
                KGPU_FUZZ_CHECK(prof != kA100.end(), placed.profile);
                KGPU_FUZZ_CHECK(std::find(prof->starts.begin(), prof->starts.end(), placed.start) != prof->starts.end(), placed.profile);
                const unsigned m = ((1u << prof->size) - 1) << placed.start;
                KGPU_FUZZ_CHECK((used & m) == 0, placed.profile);
                used |= m;
                ++n;
            }
            unsigned want = 0;
            for (const auto& [_, k] : e.mig_devices) want += k;
            KGPU_FUZZ_CHECK(n == want, name);
        }
    }
    return 0;
}
