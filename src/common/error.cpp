#include "common/error.h"

namespace kgpu {

std::string_view to_string(Code code) {
    switch (code) {
        case Code::invalid_argument: return "invalid argument";
        case Code::not_found: return "not found";
        case Code::not_supported: return "not supported";
        case Code::no_permission: return "no permission";
        case Code::io: return "I/O error";
        case Code::parse: return "parse error";
        case Code::unavailable: return "unavailable";
        case Code::gpu_lost: return "GPU lost";
        case Code::stale: return "stale handle";
        case Code::timeout: return "timeout";
        case Code::internal: return "internal error";
    }
    return "unknown";
}

Error Error::context(std::string_view what) const {
    Error e = *this;
    e.message = fmt::format("{}: {}", what, message);
    return e;
}

}  // namespace kgpu
