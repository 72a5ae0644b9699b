#include "nvml/xid.h"

namespace kgpu::nvml {

std::string_view xid_meaning(unsigned xid) {
    switch (xid) {
        case 13: return "graphics engine exception (usually an application bug)";
        case 31: return "GPU memory page fault (application)";
        case 43: return "GPU stopped processing (application)";
        case 45: return "preemptive cleanup (after another error)";
        case 48: return "double-bit ECC error";
        case 61: return "micro-controller breakpoint";
        case 62: return "micro-controller halt";
        case 63: return "ECC page retirement / row remap recorded";
        case 64: return "ECC page retirement / row remap failed";
        case 68: return "video processor exception";
        case 74: return "NVLink error";
        case 79: return "GPU has fallen off the bus";
        case 92: return "high single-bit ECC error rate";
        case 94: return "contained ECC error";
        case 95: return "uncontained ECC error";
        case 109: return "context switch timeout";
        case 119: return "GSP RPC timeout";
        case 120: return "GSP error";
        case 140: return "unrecovered ECC error";
        case 143: return "GPU initialisation failure";
        default: return "";
    }
}

}  // namespace kgpu::nvml
