// dcgm-exporter's err_msg label values of DCGM_FI_DEV_XID_ERRORS (catalogue.h), as runs of XID
// numbers sharing a text. The texts are NVIDIA's XID catalogue names as dcgm-exporter 4.5.3-4.8.2
// spells them; dashboards and alerts filter on them, so they must match letter for letter.
#include <algorithm>

#include "exporter/catalogue.h"

namespace kgpu::exporter {
namespace {

struct XidRun {
    unsigned first, last;
    std::string_view text;
};

constexpr XidRun kXidRuns[] = {
    {0, 0, "No Error"},
    {1, 4, "Invalid or corrupted push buffer stream"},
    {5, 5, "Unused"},
    {6, 6, "Invalid or corrupted push buffer stream"},
    {7, 7, "Invalid or corrupted push buffer address"},
    {8, 8, "GPU stopped processing"},
    {9, 9, "Driver error programming GPU"},
    {10, 10, "Unused"},
    {11, 11, "Invalid or corrupted push buffer stream"},
    {12, 12, "Driver error handling GPU exception"},
    {13, 13, "Graphics Engine Exception"},
    {14, 15, "Unused"},
    {16, 16, "Display engine hung"},
    {17, 17, "Unused"},
    {18, 18, "Bus mastering disabled in PCI Config Space"},
    {19, 19, "Display Engine error"},
    {20, 20, "Invalid or corrupted Mpeg push buffer"},
    {21, 21, "Invalid or corrupted Motion Estimation push buffer"},
    {22, 22, "Invalid or corrupted Video Processor push buffer"},
    {23, 23, "Unused"},
    {24, 24, "GPU semaphore timeout"},
    {25, 25, "Invalid or illegal push buffer stream"},
    {26, 26, "Framebuffer timeout"},
    {27, 29, "Video processor exception"},
    {30, 30, "GPU semaphore access error"},
    {31, 31, "GPU memory page fault"},
    {32, 32, "Invalid or corrupted push buffer stream"},
    {33, 33, "Internal micro-controller error"},
    {34, 36, "Video processor exception"},
    {37, 38, "Driver firmware error"},
    {39, 41, "Unused"},
    {42, 42, "Video processor exception"},
    {43, 43, "GPU stopped processing"},
    {44, 44, "Graphics Engine fault during context switch"},
    {45, 45, "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda"},
    {46, 46, "GPU stopped processing"},
    {47, 47, "Video processor exception"},
    {48, 48, "Double Bit ECC Error"},
    {49, 53, "Unused"},
    {54, 54, "Auxiliary power is not connected to the GPU board"},
    {55, 55, "Unused"},
    {56, 56, "Display Engine error"},
    {57, 57, "Error programming video memory interface"},
    {58, 58, "Unstable video memory interface detected"},
    {59, 59, "Internal micro-controller error"},
    {60, 60, "Video processor exception"},
    {61, 61, "Internal micro-controller breakpoint/warning"},
    {62, 62, "Internal micro-controller halt"},
    {63, 63, "ECC page retirement or row remapping recording event"},
    {64, 64, "ECC page retirement or row remapper recording failure"},
    {65, 65, "Video processor exception"},
    {66, 67, "Illegal access by driver"},
    {68, 68, "NVDEC0 Exception"},
    {69, 69, "Graphics Engine class error"},
    {70, 70, "CE3: Unknown Error"},
    {71, 71, "CE4: Unknown Error"},
    {72, 72, "CE5: Unknown Error"},
    {73, 73, "NVENC2 Error"},
    {74, 74, "NVLINK Error"},
    {75, 75, "CE6: Unknown Error"},
    {76, 76, "CE7: Unknown Error"},
    {77, 77, "CE8: Unknown Error"},
    {78, 78, "vGPU Start Error"},
    {79, 79, "GPU has fallen off the bus"},
    {80, 80, "Corrupted data sent to GPU"},
    {81, 81, "VGA Subsystem Error"},
    {82, 82, "NVJPG0 Error"},
    {83, 83, "NVDEC1 Error"},
    {84, 84, "NVDEC2 Error"},
    {85, 85, "CE9: Unknown Error"},
    {86, 86, "OFA Exception"},
    {87, 87, "Reserved"},
    {88, 88, "NVDEC3 Error"},
    {89, 89, "NVDEC4 Error"},
    {90, 91, "Reserved"},
    {92, 92, "High single-bit ECC error rate"},
    {93, 93, "Non-fatal violation of provisioned InfoROM wear limit"},
    {94, 94, "Contained ECC error"},
    {95, 95, "Uncontained ECC error"},
    {96, 96, "NVDEC5 Error"},
    {97, 97, "NVDEC6 Error"},
    {98, 98, "NVDEC7 Error"},
    {99, 99, "NVJPG1 Error"},
    {100, 100, "NVJPG2 Error"},
    {101, 101, "NVJPG3 Error"},
    {102, 102, "NVJPG4 Error"},
    {103, 103, "NVJPG5 Error"},
    {104, 104, "NVJPG6 Error"},
    {105, 105, "NVJPG7 Error"},
    {106, 106, "SMBPBI Test Message"},
    {107, 107, "SMBPBI Test Message Silent"},
    {108, 108, "Reserved"},
    {109, 109, "Context Switch Timeout Error"},
    {110, 110, "Security Fault Error"},
    {111, 111, "Display Bundle Error Event"},
    {112, 112, "Display Supervisor Error"},
    {113, 113, "DP Link Training Error"},
    {114, 114, "Display Pipeline Underflow Error"},
    {115, 115, "Display Core Channel Error"},
    {116, 116, "Display Window Channel Error"},
    {117, 117, "Display Cursor Channel Error"},
    {118, 118, "Display Pixel Pipeline Error"},
    {119, 119, "GSP RPC Timeout"},
    {120, 120, "GSP Error"},
    {121, 121, "C2C Link Error"},
    {122, 122, "SPI PMU RPC Read Failure"},
    {123, 123, "SPI PMU RPC Write Failure"},
    {124, 124, "SPI PMU RPC Erase Failure"},
    {125, 125, "Inforom FS Failure"},
    {126, 126, "Robust Channel CE10 Error"},
    {127, 127, "Robust Channel CE11 Error"},
    {128, 128, "Robust Channel CE12 Error"},
    {129, 129, "Robust Channel CE13 Error"},
    {130, 130, "Robust Channel CE14 Error"},
    {131, 131, "Robust Channel CE15 Error"},
    {132, 132, "Robust Channel CE16 Error"},
    {133, 133, "Robust Channel CE17 Error"},
    {134, 134, "Robust Channel CE18 Error"},
    {135, 135, "Robust Channel CE19 Error"},
    {136, 136, "ALI Training Fail"},
    {137, 137, "NVLink Privilege Error"},
    {138, 138, "Robust Channel DLA Error"},
    {139, 139, "Robust Channel OFA1 Error"},
    {140, 140, "Unrecovered ECC Error"},
    {141, 141, "Robust Channel Fast Path Error"},
    {142, 142, "Robust Channel NVENVC3 Error"},
    {143, 143, "GPU Initialization Failure"},
    {144, 144, "NVLINK: Saw Error"},
    {145, 145, "NVLINK: RLW Error"},
    {146, 146, "NVLINK: TLW Error"},
    {147, 147, "NVLINK: TREX Error"},
    {148, 148, "NVLINK: NVLPW_CTRL Error"},
    {149, 149, "NVLINK: NETIR Error"},
    {150, 150, "NVLINK: MSE Error"},
    {151, 151, "Robust Channel Key rotation Error"},
    {152, 152, "Robust Channel DLA SMMU Error"},
    {153, 153, "Robust Channel DLA timeout Error"},
    {154, 154, "GPU Recovery Action Changed"},
    {155, 155, "NVLINK: SW Defined Error"},
    {156, 156, "Resource Retirement Event"},
    {157, 157, "Resource Retirement Failure"},
    {158, 158, "GPU Fatal Timeout"},
    {159, 159, "Robust Channel CHI Non-Data Error"},
    {160, 160, "Channel Retirement Event"},
    {161, 161, "Channel Retirement Failure"},
    {162, 162, "Power Smoothing HW Circuitry Reengaged"},
    {163, 163, "Power Smoothing HW Circuitry Disengaged"},
    {164, 164, "Power Smoothing HW Circuitry Low Lifetime"},
    {165, 165, "Power Smoothing HW Circuitry Lifetime Exhausted"},
    {166, 166, "NVLINK Secure Crypto Error"},
    {167, 167, "PCIE Fatal Timeout"},
    {168, 168, "Reduced GPU Memory Capacity (Errors found in write protection region)"},
    {169, 169, "Internal micro-controller halt"},
    {170, 170, "NVLINK: Interrupt seen in CC mode"},
    {171, 171, "Uncorrectable DRAM Error"},
    {172, 172, "Uncorrectable SRAM Error"},
};

constexpr bool runs_are_contiguous() {
    unsigned next = 0;
    for (const auto& r : kXidRuns) {
        if (r.first != next || r.last < r.first) return false;
        next = r.last + 1;
    }
    return true;
}
static_assert(runs_are_contiguous(), "kXidRuns must cover 0.. without gaps or overlaps");

}  // namespace

std::string_view xid_error_message(unsigned xid) {
    // The first run ending at or after `xid`; runs are contiguous from 0, so it contains xid.
    const auto* it = std::ranges::lower_bound(kXidRuns, xid, {}, &XidRun::last);
    if (it == std::end(kXidRuns)) return "Unknown Error";
    return it->text;
}

std::size_t xid_class(unsigned xid) {
    // deviceplugin::HealthConfig's defaults (a unit test keeps them equal).
    static constexpr unsigned kApplication[] = {13, 31, 43, 45, 68, 109};
    static constexpr unsigned kRecoverable[] = {92, 94};
    if (std::ranges::find(kApplication, xid) != std::end(kApplication)) return 0;
    if (std::ranges::find(kRecoverable, xid) != std::end(kRecoverable)) return 1;
    return 2;
}

}  // namespace kgpu::exporter
