// MPS pieces without a daemon: the limits NVIDIA's daemon sets, the validation of a resource, the
// directory layout, finding the control binary, the shm size, and the helper that runs programs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "common/process.h"
#include "deviceplugin/allocate.h"
#include "deviceplugin/config.h"
#include "deviceplugin/mps.h"
#include "deviceplugin/resources.h"
#include "mps/mps.h"
#include "mps/shm.h"
#include "support/process.h"

namespace kgpu::mps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

SharedGpu h100(unsigned index, unsigned replicas) {
    return {index, "GPU-" + std::to_string(index), 81559, replicas, 9, 0, false};
}

DaemonSpec dgx(unsigned replicas) {
    DaemonSpec s{"nvidia.com/gpu", {}};
    for (unsigned i = 0; i < 8; ++i) s.gpus.push_back(h100(i, replicas));
    return s;
}

TEST(MpsLimits, QuarterOfEveryGpuWithFourReplicas) {
    const DaemonSpec s = dgx(4);
    EXPECT_EQ(active_thread_percentage(s), 25u);
    auto limits = pinned_memory_limits(s);
    ASSERT_EQ(limits.size(), 8u);
    for (unsigned i = 0; i < 8; ++i) {
        EXPECT_EQ(limits[i].index, i);
        EXPECT_EQ(limits[i].value(), "20389M");  // 81559 MiB / 4, rounded down as NVIDIA's
    }
    auto cmds = setup_commands(s);
    ASSERT_EQ(cmds.size(), 9u);
    EXPECT_EQ(cmds[0], "set_default_device_pinned_mem_limit 0 20389M");
    EXPECT_EQ(cmds[7], "set_default_device_pinned_mem_limit 7 20389M");
    EXPECT_EQ(cmds[8], "set_default_active_thread_percentage 25");
}

TEST(MpsLimits, IntegerDivisionAsNvidiaAndIndexOrder) {
    DaemonSpec s{"nvidia.com/gpu.shared", {h100(3, 3), h100(1, 3)}};
    s.gpus[1].memory_mib = 15360;
    EXPECT_EQ(active_thread_percentage(s), 33u);
    auto limits = pinned_memory_limits(s);
    ASSERT_EQ(limits.size(), 2u);
    EXPECT_EQ(limits[0].index, 1u);
    EXPECT_EQ(limits[0].value(), "5120M");
    EXPECT_EQ(limits[1].value(), "27186M");
    s.gpus[0].memory_mib = 0;  // unknown memory: no limit for that GPU
    EXPECT_EQ(pinned_memory_limits(s).size(), 1u);
    EXPECT_EQ(active_thread_percentage(DaemonSpec{}), 100u);
}

TEST(MpsValidate, RefusesMigTooManyReplicasAndNothingToShare) {
    EXPECT_TRUE(validate(dgx(48)).has_value());
    auto too_many = validate(dgx(49));
    ASSERT_FALSE(too_many.has_value());
    EXPECT_EQ(too_many.error().code, Code::invalid_argument);
    EXPECT_THAT(too_many.error().message, HasSubstr("maximum allowed replicas exceeded: 49 > 48"));

    DaemonSpec pascal{"nvidia.com/gpu", {h100(0, 17)}};
    pascal.gpus[0].cc_major = 6;
    EXPECT_THAT(validate(pascal).error().message, HasSubstr("17 > 16"));
    pascal.gpus[0].cc_major = 7;  // Volta: 48 clients (NVIDIA's plugin says 16 below 7.5)
    EXPECT_TRUE(validate(pascal).has_value());

    DaemonSpec mig{"nvidia.com/gpu", {h100(0, 2)}};
    mig.gpus[0].mig = true;
    EXPECT_EQ(validate(mig).error().code, Code::not_supported);
    EXPECT_THAT(validate(mig).error().message, HasSubstr("not supported for MIG devices"));
    EXPECT_THAT(validate(dgx(1)).error().message, HasSubstr("replicas must be at least 2"));
    EXPECT_THAT(validate(DaemonSpec{"nvidia.com/gpu", {}}).error().message, HasSubstr("no GPUs"));
}

TEST(MpsRoot, NvidiasLayout) {
    Root r;
    EXPECT_EQ(r.dir, "/run/nvidia/mps");
    EXPECT_EQ(r.pipe_dir("nvidia.com/gpu"), "/run/nvidia/mps/nvidia.com/gpu/pipe");
    EXPECT_EQ(r.log_dir("nvidia.com/gpu"), "/run/nvidia/mps/nvidia.com/gpu/log");
    EXPECT_EQ(r.started_file("nvidia.com/gpu"), "/run/nvidia/mps/nvidia.com/gpu/.started");
    EXPECT_EQ(r.shm_dir(), "/run/nvidia/mps/shm");
    EXPECT_EQ(r.ready_file(), "/run/nvidia/mps/.ready");
    EXPECT_EQ(container_pipe_dir("nvidia.com/gpu.shared"), "/mps/nvidia.com/gpu.shared/pipe");
}

TEST(MpsControlBinary, FoundUnderTheDriverRootOrNamed) {
    test::TempDir root;
    auto none = find_control_binary("", root.path());
    ASSERT_FALSE(none.has_value());
    EXPECT_EQ(none.error().code, Code::not_found);
    EXPECT_THAT(none.error().message, HasSubstr(root.path() + "/usr/bin/nvidia-cuda-mps-control"));
    EXPECT_THAT(none.error().message, HasSubstr("--mps-control-binary"));

    const std::string bin = root.write("usr/sbin/nvidia-cuda-mps-control", "#!/bin/sh\n");
    EXPECT_FALSE(find_control_binary("", root.path()).has_value());  // not executable
    ::chmod(bin.c_str(), 0755);
    EXPECT_EQ(find_control_binary("", root.path()).value(), bin);

    const std::string other = root.write("elsewhere/mps", "x");
    EXPECT_THAT(find_control_binary(other, root.path()).error().message, HasSubstr("KGPU_MPS_CONTROL"));
    ::chmod(other.c_str(), 0755);
    EXPECT_EQ(find_control_binary(other, "/nonexistent").value(), other);
}

TEST(MpsShm, HalfOfMemTotalAsNvidia) {
    EXPECT_EQ(shm_size("MemFree: 1 kB\nMemTotal:       263842328 kB\n"), "131921164k");
    EXPECT_EQ(shm_size("MemTotal: 7 kB"), "3k");
    EXPECT_EQ(shm_size("MemTotal: 4096"), "2048");
    EXPECT_EQ(shm_size("MemTotal: lots\n"), "65536k");
    EXPECT_EQ(shm_size(""), "65536k");
}

process::RunOptions opts(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
                         std::string input = "") {
    process::RunOptions o;
    o.argv = std::move(argv);
    o.set_env = std::move(env);
    o.stdin_text = std::move(input);
    return o;
}

TEST(Process, StdinEnvExitCodeAndExecFailure) {
    auto cat = process::run(opts({"/bin/cat"}, {}, "get_default_active_thread_percentage\n"));
    ASSERT_TRUE(cat.has_value()) << cat.error().message;
    EXPECT_EQ(cat->exit_code, 0);
    EXPECT_EQ(cat->out, "get_default_active_thread_percentage\n");

    auto env = process::run(opts({"/bin/sh", "-c", "echo \"$CUDA_MPS_PIPE_DIRECTORY\"; echo oops >&2; exit 3"},
                                 {{"CUDA_MPS_PIPE_DIRECTORY", "/mps/x/pipe"}}));
    ASSERT_TRUE(env.has_value());
    EXPECT_EQ(env->exit_code, 3);
    EXPECT_EQ(env->out, "/mps/x/pipe\n");
    EXPECT_EQ(env->err, "oops\n");

    auto missing = process::run(opts({"/nonexistent/nvidia-cuda-mps-control"}));
    ASSERT_TRUE(missing.has_value());
    EXPECT_EQ(missing->exit_code, 127);
    EXPECT_THAT(missing->err, HasSubstr("exec /nonexistent/nvidia-cuda-mps-control failed"));
    EXPECT_FALSE(process::run({}).has_value());
}

TEST(Process, TimeoutKillsAndNamesTheProgram) {
    process::RunOptions o = opts({"/bin/sleep", "30"});
    o.timeout = std::chrono::milliseconds(100);
    auto r = process::run(o);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Code::timeout);
    EXPECT_THAT(r.error().message, HasSubstr("/bin/sleep did not finish within 100 ms"));
}

// A daemon that keeps the output pipe open (its parent exited) does not hold the caller.
TEST(Process, DoesNotWaitForADescendantHoldingThePipes) {
    process::RunOptions o = opts({"/bin/sh", "-c", "sleep 30 & echo $!"});
    o.timeout = std::chrono::seconds(20);
    auto r = process::run(o);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->exit_code, 0);
    const int pid = std::atoi(r->out.c_str());
    ASSERT_GT(pid, 0) << r->out;
    EXPECT_EQ(::kill(pid, 0), 0);  // still running, still holding stdout: run() did not wait for it
    ::kill(pid, SIGKILL);
}

// The daemons a node needs: one per shared resource, each physical GPU once with its replicas,
// memory and compute capability from the inventory.
TEST(MpsDaemonSpecs, OnePerSharedResourceWithEveryGpuOnce) {
    inventory::Node node;
    for (unsigned i = 0; i < 3; ++i) {
        inventory::Gpu g;
        g.index = i;
        g.uuid = "GPU-" + std::to_string(i);
        g.memory_total_mib = 81559;
        g.cc_major = 9;
        node.gpus.push_back(g);
    }
    node.gpus[2].mig_devices.push_back({});
    node.gpus[2].mig_devices[0].uuid = "MIG-2-0";
    node.gpus[2].mig_devices[0].memory_mib = 9856;
    deviceplugin::Resource shared;
    shared.name = "nvidia.com/gpu.shared";
    shared.replicas = 4;
    shared.mps = true;
    for (unsigned i = 0; i < 2; ++i)
        for (unsigned n = 0; n < 4; ++n) {
            deviceplugin::Device d;
            d.id = "GPU-" + std::to_string(i) + "::" + std::to_string(n);
            d.physical_id = "GPU-" + std::to_string(i);
            d.gpu_index = i;
            d.uuid = d.physical_id;
            d.replica = n;
            shared.devices.push_back(d);
        }
    deviceplugin::Resource whole;
    whole.name = "nvidia.com/gpu";
    deviceplugin::Resource sliced = whole;  // time-sliced: no daemon
    sliced.name = "nvidia.com/gpu.sliced";
    sliced.replicas = 2;
    whole.devices.push_back({});
    whole.devices[0].gpu_index = 2;
    deviceplugin::Resource mig;
    mig.name = "nvidia.com/mig.shared";
    mig.replicas = 2;
    mig.mps = true;
    for (unsigned n = 0; n < 2; ++n) {
        deviceplugin::Device d;
        d.id = "MIG-2-0::" + std::to_string(n);
        d.physical_id = "MIG-2-0";
        d.gpu_index = 2;
        d.uuid = "MIG-2-0";
        d.mig = deviceplugin::MigInstance{};
        mig.devices.push_back(d);
    }

    auto specs = deviceplugin::mps_daemon_specs({whole, sliced, shared, mig}, node);
    ASSERT_EQ(specs.size(), 2u);
    EXPECT_EQ(specs[0].resource, "nvidia.com/gpu.shared");
    ASSERT_EQ(specs[0].gpus.size(), 2u);
    EXPECT_EQ(specs[0].gpus[1].index, 1u);
    EXPECT_EQ(specs[0].gpus[1].uuid, "GPU-1");
    EXPECT_EQ(specs[0].gpus[1].replicas, 4u);
    EXPECT_EQ(specs[0].gpus[1].memory_mib, 81559u);
    EXPECT_EQ(specs[0].gpus[1].cc_major, 9);
    EXPECT_FALSE(specs[0].gpus[1].mig);
    EXPECT_EQ(setup_commands(specs[0]).back(), "set_default_active_thread_percentage 25");
    ASSERT_EQ(specs[1].gpus.size(), 1u);
    EXPECT_TRUE(specs[1].gpus[0].mig);
    EXPECT_EQ(specs[1].gpus[0].memory_mib, 9856u);
    EXPECT_EQ(validate(specs[1]).error().code, Code::not_supported);
}

inventory::Node four_gpus(bool mig) {
    inventory::Node node;
    for (unsigned i = 0; i < 4; ++i) {
        inventory::Gpu g;
        g.index = i;
        g.minor = i;
        g.uuid = "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000";
        g.memory_total_mib = 81559;
        g.cc_major = 9;
        g.mig_mode = mig ? inventory::MigMode::enabled : inventory::MigMode::disabled;
        if (mig) {
            inventory::MigDevice m;
            m.uuid = "MIG-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000";
            m.profile = "7g.80gb";
            m.memory_mib = 81000;
            g.mig_devices.push_back(m);
        }
        node.gpus.push_back(g);
    }
    node.topology = inventory::Topology(4);
    return node;
}

deviceplugin::Config mps_config(const std::string& yaml) {
    auto c = deviceplugin::parse_config(yaml, "mps.yaml");
    EXPECT_TRUE(c.has_value()) << c.error().message;
    auto r = deviceplugin::resolve(c.value_or(deviceplugin::Config{}), {}, {});
    EXPECT_TRUE(r.has_value()) << r.error().message;
    return r.value_or(deviceplugin::Config{});
}

// sharing.mps builds replicas as timeSlicing does, marked mps, and MIG devices are refused.
TEST(MpsResources, ReplicasMarkedMpsAndMigRefused) {
    const std::string yaml = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n";
    auto cfg = mps_config(yaml);
    auto rs = deviceplugin::build_resources(four_gpus(false), cfg);
    ASSERT_TRUE(rs.has_value()) << rs.error().message;
    ASSERT_EQ(rs->size(), 1u);
    const auto& r = rs->front();
    EXPECT_EQ(r.name, "nvidia.com/gpu");
    EXPECT_TRUE(r.mps);
    EXPECT_EQ(r.replicas, 4u);
    EXPECT_EQ(r.devices.size(), 16u);
    EXPECT_TRUE(r.fail_requests_greater_than_one);  // NVIDIA's default for MPS
    EXPECT_EQ(r.devices[5].id, "GPU-00000001-0000-0000-0000-000000000000::1");
    auto ts = deviceplugin::build_resources(
        four_gpus(false), mps_config("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 4}]\n"));
    ASSERT_TRUE(ts.has_value());
    EXPECT_FALSE(ts->front().mps);

    cfg.mig_strategy = deviceplugin::MigStrategy::single;
    auto mig = deviceplugin::build_resources(four_gpus(true), cfg);
    ASSERT_FALSE(mig.has_value());
    EXPECT_EQ(mig.error().code, Code::parse);
    EXPECT_THAT(mig.error().message, HasSubstr("mps.yaml:5: key 'sharing.mps.resources[0].name': MPS sharing is not "
                                               "supported for MIG devices"));
}

// Allocate for an MPS replica: NVIDIA's env and mounts, under the configured root.
TEST(MpsAllocate, PipeDirectoryAndSharedMemory) {
    auto cfg = mps_config("version: v1\nflags: {mpsRoot: /var/lib/mps}\nsharing:\n  mps:\n    renameByDefault: true\n"
                          "    resources: [{name: gpu, replicas: 2}]\n");
    auto rs = deviceplugin::build_resources(four_gpus(false), cfg);
    ASSERT_TRUE(rs.has_value()) << rs.error().message;
    const auto& r = rs->front();
    ASSERT_EQ(r.name, "nvidia.com/gpu.shared");
    auto a = deviceplugin::allocate(r, {r.devices[3].id}, cfg, {}, deviceplugin::DevRootView("/nonexistent"));
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->envs.at("CUDA_MPS_PIPE_DIRECTORY"), "/mps/nvidia.com/gpu.shared/pipe");
    EXPECT_EQ(a->envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-00000001-0000-0000-0000-000000000000");
    ASSERT_EQ(a->mounts.size(), 2u);
    EXPECT_EQ(a->mounts[0], (deviceplugin::Mount{"/mps/nvidia.com/gpu.shared/pipe", "/var/lib/mps/nvidia.com/gpu.shared/pipe", false}));
    EXPECT_EQ(a->mounts[1], (deviceplugin::Mount{"/dev/shm", "/var/lib/mps/shm", false}));
    auto two = deviceplugin::allocate(r, {r.devices[0].id, r.devices[1].id}, cfg, {}, deviceplugin::DevRootView("/x"));
    ASSERT_FALSE(two.has_value());
    EXPECT_THAT(two.error().message, HasSubstr("maximum request size for shared resources is 1"));
    // A time-sliced replica gets none of it.
    auto ts_cfg = mps_config("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n");
    auto ts = deviceplugin::build_resources(four_gpus(false), ts_cfg);
    auto b = deviceplugin::allocate(ts->front(), {ts->front().devices[0].id}, ts_cfg, {}, deviceplugin::DevRootView("/x"));
    ASSERT_TRUE(b.has_value());
    EXPECT_FALSE(b->envs.contains("CUDA_MPS_PIPE_DIRECTORY"));
    EXPECT_TRUE(b->mounts.empty());
}

}  // namespace
}  // namespace kgpu::mps
