#include "inventory/mig_strategy.h"

namespace kgpu::inventory {

std::string_view to_string(MigStrategy s) {
    switch (s) {
        case MigStrategy::none: return "none";
        case MigStrategy::single: return "single";
        case MigStrategy::mixed: return "mixed";
    }
    return "none";
}

Result<MigStrategy> parse_mig_strategy(std::string_view text) {
    for (auto s : {MigStrategy::none, MigStrategy::single, MigStrategy::mixed})
        if (text == to_string(s)) return s;
    return fail(Code::invalid_argument, "invalid MIG strategy '{}' (expected none, single or mixed)", text);
}

}  // namespace kgpu::inventory
