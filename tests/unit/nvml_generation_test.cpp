// Handle generations (#24 item 9): a MIG device handle taken before its GPU's MIG configuration
// changed is refused once this process has seen the change, even where the driver kept the
// instance and its handle; a GPU's and its MIG devices' handles taken before the GPU stopped
// answering (GPU_IS_LOST) are refused once it answers again. Looked up again, the device answers.
// Through the real dlopen of the simulator, whose MIG layout commands keep unchanged instances'
// handles as the driver does, and whose restored GPU answers through its old handle.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "nvml/device.h"
#include "nvml/events.h"
#include "nvml/library.h"
#include "support/process.h"

using namespace kgpu;
using ::testing::HasSubstr;

namespace {

const char* kSlot0 = "MIG-4b69808b-66a3-1662-f86c-3b76eedd0860";  // a100-mig.yaml, GPU 0, GI 7

struct Generations : ::testing::Test {
    test::TempDir dir;
    std::string events;
    std::optional<nvml::Session> session;
    Generations() {
        events = dir.write("events", "");
        ::setenv("KGPU_SIM_NODE", (std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml").c_str(), 1);
        ::setenv("KGPU_SIM_EVENTS", events.c_str(), 1);
        auto lib = nvml::Library::load({KGPU_SIM_LIBRARY, "/"});
        if (!lib) throw std::runtime_error(lib.error().message);
        auto s = nvml::Session::open(*lib);
        if (!s) throw std::runtime_error(s.error().message);
        session.emplace(std::move(*s));
    }
    ~Generations() override {
        session.reset();
        ::unsetenv("KGPU_SIM_EVENTS");
    }
    void command(const std::string& line) { std::ofstream(events, std::ios::app) << line << "\n"; }
    // Polls `call` until it fails with `code` (the simulator applies appended lines within 200 ms).
    template <class F>
    bool wait_for(F call, Code code) {
        for (int i = 0; i < 100; ++i) {
            auto r = call();
            if (!r && r.error().code == code) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
        return false;
    }
    // GPU 0 keeps its first six 1g.10gb instances (same GI ids and placements: the driver keeps
    // their handles) and loses the seventh.
    void drop_last_instance() {
        std::string line = "mig 0 ";
        for (unsigned s = 0; s < 6; ++s) line += (s ? "," : "") + fmt::format("1g.10gb@{}:gi{}:ci0", s, 7 + s);
        std::ofstream(events, std::ios::app) << line << "\n";
    }
};

TEST_F(Generations, AMigHandleFromBeforeAMigChangeIsRefusedOnceTheChangeIsSeen) {
    auto gpu = session->device_by_index(0);
    ASSERT_TRUE(gpu) << gpu.error().message;
    auto old = gpu->mig_device(0);
    ASSERT_TRUE(old && *old);
    ASSERT_EQ((*old)->uuid().value_or(""), kSlot0);
    auto set = nvml::EventSet::create(*session);
    ASSERT_TRUE(set);
    ASSERT_TRUE(set->add(*gpu, nvml::kEventMigConfigChange, 0));

    drop_last_instance();
    std::optional<nvml::Event> seen;
    for (int i = 0; i < 50 && !seen; ++i) {
        auto e = set->wait(100);
        ASSERT_TRUE(e) << e.error().message;
        if (*e && ((*e)->type & nvml::kEventMigConfigChange)) seen = **e;
    }
    ASSERT_TRUE(seen) << "no MigConfigChange event";
    EXPECT_EQ(seen->key, 0);

    // The simulator kept the instance and its handle; kgpu refuses it all the same.
    auto refused = (*old)->uuid();
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, Code::stale);
    EXPECT_THAT(refused.error().message, HasSubstr("MIG device handle taken before its GPU's MIG configuration changed "
                                                   "(generation"));
    EXPECT_FALSE((*old)->memory());
    EXPECT_FALSE((*old)->live());
    // The GPU's own handle stays good, and the MIG device looked up again answers.
    EXPECT_TRUE(gpu->uuid());
    auto again = gpu->mig_device(0);
    ASSERT_TRUE(again && *again);
    EXPECT_TRUE((*again)->live());
    EXPECT_EQ((*again)->uuid().value_or(""), kSlot0);
    auto gone = gpu->mig_device(6);
    ASSERT_TRUE(gone);
    EXPECT_FALSE(gone->has_value());
}

TEST_F(Generations, HandlesStayValidUntilTheProcessSeesAChange) {
    auto gpu = session->device_by_index(1);
    ASSERT_TRUE(gpu);
    auto mig = gpu->mig_device(0);
    ASSERT_TRUE(mig && *mig);
    // A change on GPU 0 does not touch GPU 1's MIG handles, seen or not.
    auto gpu0 = session->device_by_index(0);
    ASSERT_TRUE(gpu0);
    auto set = nvml::EventSet::create(*session);
    ASSERT_TRUE(set);
    ASSERT_TRUE(set->add(*gpu0, nvml::kEventMigConfigChange, 0));
    auto old0 = gpu0->mig_device(0);
    ASSERT_TRUE(old0 && *old0);
    drop_last_instance();
    // Not seen yet (the event waits in the set): nothing refused.
    EXPECT_TRUE((*old0)->live());
    for (int i = 0; i < 50; ++i) {
        auto e = set->wait(100);
        ASSERT_TRUE(e);
        if (*e) break;
    }
    EXPECT_FALSE((*old0)->live());
    EXPECT_TRUE((*mig)->live());
    EXPECT_TRUE((*mig)->uuid());
}

TEST_F(Generations, HandlesFromBeforeTheGpuWasLostAreRefusedOnceItAnswersAgain) {
    auto gpu = session->device_by_index(0);
    ASSERT_TRUE(gpu) << gpu.error().message;
    auto mig = gpu->mig_device(0);
    ASSERT_TRUE(mig && *mig);
    auto other = session->device_by_index(1);
    ASSERT_TRUE(other);

    command("lost 0");
    ASSERT_TRUE(wait_for([&] { return gpu->uuid(); }, Code::gpu_lost));
    // While it is gone every handle says so (none is refused yet), and one taken meanwhile belongs
    // to the GPU as it comes back.
    auto mig_lost = (*mig)->uuid();
    ASSERT_FALSE(mig_lost);
    EXPECT_EQ(mig_lost.error().code, Code::gpu_lost);
    auto during = session->device_by_index(0);
    ASSERT_TRUE(during);
    auto during_lost = during->memory();
    ASSERT_FALSE(during_lost);
    EXPECT_EQ(during_lost.error().code, Code::gpu_lost);

    command("restore 0");
    // The simulator answers through the old handle again; kgpu refuses what it answered.
    ASSERT_TRUE(wait_for([&] { return gpu->uuid(); }, Code::stale));
    auto refused = gpu->memory();
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, Code::stale);
    EXPECT_THAT(refused.error().message,
                HasSubstr("GPU handle taken before its GPU stopped answering and came back (reset generation"));
    EXPECT_FALSE(gpu->live());
    EXPECT_FALSE(gpu->mig_device(0)) << "a MIG device is not taken through a refused GPU handle";
    auto mig_refused = (*mig)->uuid();
    ASSERT_FALSE(mig_refused);
    EXPECT_THAT(mig_refused.error().message, HasSubstr("MIG device handle taken before its GPU stopped answering"));

    // Taken while it was gone, or again now: answers, and so do its MIG devices.
    EXPECT_TRUE(during->live());
    EXPECT_TRUE(during->uuid());
    auto again = session->device_by_index(0);
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->uuid());
    auto mig_again = again->mig_device(0);
    ASSERT_TRUE(mig_again && *mig_again);
    EXPECT_EQ((*mig_again)->uuid().value_or(""), kSlot0);
    // Another GPU's handles are untouched.
    EXPECT_TRUE(other->uuid());

    // Lost a second time: the handle taken after the first return is refused after the second.
    command("lost 0");
    ASSERT_TRUE(wait_for([&] { return again->uuid(); }, Code::gpu_lost));
    command("restore 0");
    ASSERT_TRUE(wait_for([&] { return again->uuid(); }, Code::stale));
    EXPECT_TRUE(session->device_by_index(0)->uuid());
}

}  // namespace
