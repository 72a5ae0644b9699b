// nvidia-smi's layout (toolkit/smi.h), rendered from hand-made values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/strings.h"
#include "toolkit/smi.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::HasSubstr;

namespace {

SmiSnapshot snapshot() {
    SmiSnapshot s;
    s.timestamp = "Mon Dec  1 16:07:00 2025";
    s.driver_version = "550.54.15";
    s.cuda_version = "12.4";
    SmiGpu g;
    g.index = 0;
    g.name = "NVIDIA H100 80GB HBM3";
    g.uuid = "GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80";
    g.bus_id = "00000000:5D:00.0";
    g.persistence = true;
    g.temperature_c = 33;
    g.power_w = 70;
    g.power_cap_w = 700;
    g.pstate = 0;
    g.utilization = 5;
    g.compute_mode = 0;
    g.memory_used_mib = 1024;
    g.memory_total_mib = 81559;
    g.ecc_uncorrected = 0;
    g.mig_mode = "Disabled";
    s.gpus.push_back(g);
    SmiGpu m = g;
    m.index = 1;
    m.name = "NVIDIA A100-SXM4-80GB";
    m.mig_mode = "Enabled";
    m.display_active = true;
    m.migs.push_back({0, "MIG-4b69808b-66a3-1662-f86c-3b76eedd0860", "1g.10gb", 7, 0, 0, 9728, 14, 1, 0, 0, 0, 0});
    s.gpus.push_back(m);
    s.processes.push_back({0, std::nullopt, std::nullopt, 4242, "/usr/bin/python3", 1024});
    return s;
}

TEST(Smi, TableLinesHaveNvidiaSmisWidth) {
    const std::string t = render_smi_table(snapshot());
    for (auto line : strings::split(t, '\n')) {
        if (line.empty() || line.starts_with("Mon ")) continue;
        EXPECT_EQ(line.size(), 91u) << "'" << line << "'";
    }
    EXPECT_THAT(t, HasSubstr("| NVIDIA-SMI 550.54.15"));
    EXPECT_THAT(t, HasSubstr("Driver Version: 550.54.15"));
    EXPECT_THAT(t, HasSubstr("CUDA Version: 12.4"));
    EXPECT_THAT(t, HasSubstr("|   0  NVIDIA H100 80GB HBM3          On  |   00000000:5D:00.0 N/A |                    0 |"));
    EXPECT_THAT(t, HasSubstr("| N/A   33C    P0             70W /  700W |    1024MiB /  81559MiB |      5%      Default |"));
    EXPECT_THAT(t, HasSubstr("|   1  NVIDIA A100-SXM4-80GB          On  |   00000000:5D:00.0  On |"));  // Disp.A read
    EXPECT_THAT(t, HasSubstr("|             Disabled |"));
    EXPECT_THAT(t, HasSubstr("| MIG devices:"));
    EXPECT_THAT(t, HasSubstr("4242"));
    EXPECT_THAT(t, HasSubstr("/usr/bin/python3"));
}

TEST(Smi, ListIsNvidiaSmiL) {
    EXPECT_EQ(render_smi_list(snapshot()),
              "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80)\n"
              "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80)\n"
              "  MIG 1g.10gb      Device  0: (UUID: MIG-4b69808b-66a3-1662-f86c-3b76eedd0860)\n");
}

TEST(Smi, NoProcessesAndNoDevices) {
    SmiSnapshot s;
    s.timestamp = "Mon Dec  1 16:07:00 2025";
    s.driver_version = "550.54.15";
    s.cuda_version = "12.4";
    const std::string t = render_smi_table(s);
    EXPECT_THAT(t, HasSubstr("No devices were found"));
    EXPECT_THAT(t, HasSubstr("No running processes found"));
}

}  // namespace
