// Issue 16 item 8: a CDI spec that names the libraries of a driver that is no longer loaded
// stops every GPU container. The device plugin writes its spec for the loaded driver (the
// version in /proc/driver/nvidia/version) and writes it again when that version changes;
// `kgpu doctor` flags a spec whose libraries are not the loaded driver's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/process.h"
#include "support/files.h"

namespace fs = std::filesystem;
using kgpu::test::ChildProcess;
using kgpu::test::run_process;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kgpu::test::slurp;

const std::string kSource = KGPU_SOURCE_DIR;

std::string proc_version(const std::string& v) {
    return "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + v + "  Tue Mar  5 22:23:52 UTC 2024\n"
           "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
}

// Waits (up to 20 s) until `pred` holds for the file's content.
template <class Pred>
bool wait_for(const std::string& path, Pred pred) {
    for (int i = 0; i < 200; ++i) {
        if (fs::exists(path) && pred(slurp(path))) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

}  // namespace

TEST(CdiRefresh, DevicePluginRewritesItsSpecWhenTheLoadedDriverChanges) {
    TempDir root;  // the driver root: libraries of the old and the new driver
    for (const char* lib : {"libcuda.so.535.161.08", "libnvidia-ml.so.535.161.08", "libcuda.so.550.54.15",
                            "libnvidia-ml.so.550.54.15"})
        root.write(std::string("usr/lib/x86_64-linux-gnu/") + lib, "x");
    const std::string version_file = root.write("proc/driver/nvidia/version", proc_version("535.161.08"));
    TempDir plugins, cdi;
    ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-plugin-path", plugins.path(), "--nvml-library",
                         KGPU_SIM_LIBRARY, "--device-list-strategy", "cdi-cri", "--cdi-spec-dir", cdi.path(),
                         "--nvidia-driver-root", root.path(), "--proc-root", root.path() + "/proc"},
                        {{"KGPU_SIM_NODE", kSource + "/sim/nodes/t4x4.yaml"}});
    const std::string spec = cdi.path() + "/k8s.device-plugin.nvidia.com-gpu.json";
    ASSERT_TRUE(wait_for(spec, [](const std::string& s) { return s.find("libcuda.so.535.161.08") != std::string::npos; }))
        << plugin.err();
    EXPECT_THAT(slurp(spec), Not(HasSubstr("550.54.15")));
    EXPECT_THAT(slurp(spec), HasSubstr("update-ldcache"));  // the hooks the next test leaves out

    // The driver is upgraded under the running plugin.
    std::ofstream(version_file) << proc_version("550.54.15");
    ASSERT_TRUE(wait_for(spec, [](const std::string& s) { return s.find("libcuda.so.550.54.15") != std::string::npos; }))
        << plugin.err();
    EXPECT_THAT(slurp(spec), Not(HasSubstr("535.161.08")));
    EXPECT_THAT(plugin.err(), HasSubstr("the loaded NVIDIA driver changed to 550.54.15"));
    EXPECT_TRUE(plugin.running());
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(10000), 0);
}

// NVIDIA v0.20's --cdi-disable-hooks / CDI_DISABLE_HOOKS leave hooks out of the plugin's spec;
// --cdi-feature-flags / CDI_FEATURE_FLAGS are accepted with a warning (kgpu has none).
TEST(CdiRefresh, DisabledHooksAreLeftOutOfThePluginsSpec) {
    TempDir root, plugins, cdi;
    root.write("usr/lib/x86_64-linux-gnu/libcuda.so.535.161.08", "x");
    root.write("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.161.08", "x");
    root.write("proc/driver/nvidia/version", proc_version("535.161.08"));
    ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-plugin-path", plugins.path(), "--nvml-library",
                         KGPU_SIM_LIBRARY, "--device-list-strategy", "cdi-cri", "--cdi-spec-dir", cdi.path(),
                         "--nvidia-driver-root", root.path(), "--proc-root", root.path() + "/proc",
                         "--cdi-feature-flags", "disable-nvsandboxutils"},
                        {{"KGPU_SIM_NODE", kSource + "/sim/nodes/t4x4.yaml"},
                         {"CDI_DISABLE_HOOKS", "update-ldcache,create-symlinks,enable-cuda-compat"}});
    const std::string spec = cdi.path() + "/k8s.device-plugin.nvidia.com-gpu.json";
    ASSERT_TRUE(wait_for(spec, [](const std::string& s) { return s.find("libcuda.so.535.161.08") != std::string::npos; }))
        << plugin.err();
    EXPECT_THAT(slurp(spec), Not(HasSubstr("update-ldcache")));
    EXPECT_THAT(slurp(spec), Not(HasSubstr("create-symlinks")));
    EXPECT_THAT(plugin.err(), HasSubstr("CDI feature flag 'disable-nvsandboxutils' is ignored"));
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(10000), 0);

    // A name that is no hook is said, not silently ignored; `all` leaves every hook out.
    auto checked = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--cdi-disable-hooks", "all,update-ldcahce"});
    EXPECT_EQ(checked.exit_code, 0) << checked.err;
    EXPECT_THAT(checked.out, HasSubstr("cdiDisableHooks: [all,update-ldcahce]"));
    EXPECT_THAT(checked.out, HasSubstr("CDI hook 'update-ldcahce' (--cdi-disable-hooks) is not a hook kgpu writes"));
}

TEST(CdiRefresh, DoctorFlagsASpecOfAnotherDriver) {
    // A host root: containerd with CDI on, a spec written for driver 535, driver 550 loaded.
    TempDir host;
    host.write("etc/containerd/config.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n");
    host.write("proc/driver/nvidia/version", proc_version("550.54.15"));
    host.write("usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "x");
    host.write("var/run/cdi/nvidia.yaml",
               "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n"
               "    - path: /dev/nvidia0\ncontainerEdits:\n  mounts:\n  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.161.08\n"
               "    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.161.08\n    options: [ro, nosuid, nodev, rbind]\n");
    auto r = run_process({KGPU_BINARY, "doctor", "--root", host.path(), "--nvml-library", "/nonexistent/libnvidia-ml.so.1",
                          "--json"});
    EXPECT_THAT(r.out, HasSubstr("names libraries of driver 535.161.08 but driver 550.54.15 is loaded")) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("kgpu cdi generate --output"));
    // Regenerated for the loaded driver: no complaint.
    host.write("var/run/cdi/nvidia.yaml",
               "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n"
               "    - path: /dev/nvidia0\ncontainerEdits:\n  mounts:\n  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
               "    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n");
    auto ok = run_process({KGPU_BINARY, "doctor", "--root", host.path(), "--nvml-library", "/nonexistent/libnvidia-ml.so.1",
                           "--json"});
    EXPECT_THAT(ok.out, Not(HasSubstr("names libraries of driver")));
    EXPECT_THAT(ok.out, HasSubstr("its libraries are the loaded driver's (550.54.15)"));
}
