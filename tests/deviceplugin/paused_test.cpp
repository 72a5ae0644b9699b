// The paused-GPUs file (deviceplugin/paused.h): what kgpu mig-manager writes, and what a hand
// may write, read back; anything else refused naming the file and the line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "deviceplugin/paused.h"

namespace {

using kgpu::deviceplugin::parse_paused_gpus;
using kgpu::deviceplugin::paused_gpus_text;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PausedGpus, UuidsWithCommentsAndBlankLinesAndWhatKgpuWritesReadsBack) {
    auto p = parse_paused_gpus("# header\n\n  GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb  # busy\r\n\tGPU-ABC\nGPU-ABC\n", "f");
    ASSERT_TRUE(p) << p.error().message;
    EXPECT_THAT(*p, ElementsAre("GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb", "GPU-ABC"));
    auto again = parse_paused_gpus(paused_gpus_text(*p, "kgpu mig-manager is applying MIG config 'x'"), "f");
    ASSERT_TRUE(again);
    EXPECT_EQ(*again, *p);
    auto empty = parse_paused_gpus("", "f");
    ASSERT_TRUE(empty);
    EXPECT_TRUE(empty->empty());
}

TEST(PausedGpus, AnythingButAUuidIsRefusedNamingTheFileAndLine) {
    auto p = parse_paused_gpus("GPU-0a\nGPU 2\n", "/run/kgpu/mig-manager/paused-gpus");
    ASSERT_FALSE(p);
    EXPECT_THAT(p.error().message, HasSubstr("/run/kgpu/mig-manager/paused-gpus:2: 'GPU 2': expected a GPU UUID"));
    EXPECT_FALSE(parse_paused_gpus("MIG-4b69808b-66a3-1662-f86c-3b76eedd0860\n", "f"));
    EXPECT_FALSE(parse_paused_gpus("GPU-\n", "f"));
    EXPECT_FALSE(parse_paused_gpus("GPU-xyz\n", "f"));
}

// Found by the fuzz target paused_gpus: a line shorter than "GPU-" threw std::out_of_range (the
// device plugin's control loop would have died on a hand-written file).
TEST(PausedGpus, ALineShorterThanTheUuidPrefixIsRefusedNotACrash) {
    for (const char* text : {"(", "GP", "G\n", "(# GP\xff>Us the "}) {
        auto p = parse_paused_gpus(text, "f");
        EXPECT_FALSE(p) << text;
    }
}

}  // namespace
