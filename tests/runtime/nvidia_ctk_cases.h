// The cases of nvidia-ctk v1.20's engine tests (pkg/config/engine/containerd config_test.go and
// config_v1_test.go, engine/crio crio_test.go), each an input and the result nvidia-ctk gives for
// it, written from the shape of NVIDIA's case (our own values and layout). The runtime is "gpu"
// at /opt/gpu/runtime (NVIDIA's cases add "test" at /usr/bin/test).
//
// tests/runtime replays them against kgpu's engines (nvidia_ctk_cases_test.cpp); tests/parity
// runs nvidia-ctk itself and kgpu on their inputs (ctk_parity_test.cpp).
#pragma once

#include <string>
#include <vector>

namespace kgpu::test {

struct ContainerdCase {
    std::string name;
    std::string input;
    bool set_as_default;
    std::string expected;
};

// Config version 2 and 3 cases (TestAddRuntime).
inline std::vector<ContainerdCase> containerd_cases() {
    const std::string cri = "plugins.\"io.containerd.grpc.v1.cri\"";
    const std::string rts = cri + ".containerd.runtimes";
    return {
        {"EmptyConfigNotDefault", "", false,
         "version = 2\n[" + rts + ".gpu]\nruntime_type = \"io.containerd.runc.v2\"\nruntime_root = \"\"\nruntime_engine = \"\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"},
        {"EmptyConfigSetAsDefault", "", true,
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"gpu\"\n[" + rts + ".gpu]\n"
         "runtime_type = \"io.containerd.runc.v2\"\nruntime_root = \"\"\nruntime_engine = \"\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"},
        {"EmptyRuntimeTypeOfRuncIsReplaced",
         "version = 2\n[" + rts + ".runc]\nruntime_type = \"\"\nruntime_root = \"\"\nruntime_engine = \"\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n",
         false,
         "version = 2\n[" + rts + ".runc]\nruntime_type = \"\"\nruntime_root = \"\"\nruntime_engine = \"\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n"
         "[" + rts + ".gpu]\nruntime_type = \"io.containerd.runc.v2\"\nruntime_root = \"\"\nruntime_engine = \"\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\nSystemdCgroup = true\n"},
        {"RuncTableIsCopiedWhole",
         "version = 2\n[" + rts + ".runc]\nruntime_type = \"rt.v9\"\nruntime_root = \"/r\"\nruntime_engine = \"eng\"\n"
         "privileged_without_host_devices = true\n[" + rts + ".runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n",
         false,
         "version = 2\n[" + rts + ".runc]\nruntime_type = \"rt.v9\"\nruntime_root = \"/r\"\nruntime_engine = \"eng\"\n"
         "privileged_without_host_devices = true\n[" + rts + ".runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n"
         "[" + rts + ".gpu]\nruntime_type = \"rt.v9\"\nruntime_root = \"/r\"\nruntime_engine = \"eng\"\n"
         "privileged_without_host_devices = true\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\nSystemdCgroup = true\n"},
        {"DefaultRuntimeIsTheTemplate",
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".kata]\nruntime_type = \"k.v2\"\n"
         "runtime_root = \"/k\"\nruntime_engine = \"ke\"\nprivileged_without_host_devices = true\n[" + rts + ".kata.options]\n"
         "BinaryName = \"/usr/bin/kata\"\nSystemdCgroup = true\n",
         false,
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".kata]\nruntime_type = \"k.v2\"\n"
         "runtime_root = \"/k\"\nruntime_engine = \"ke\"\nprivileged_without_host_devices = true\n[" + rts + ".kata.options]\n"
         "BinaryName = \"/usr/bin/kata\"\nSystemdCgroup = true\n[" + rts + ".gpu]\nruntime_type = \"k.v2\"\nruntime_root = \"/k\"\n"
         "runtime_engine = \"ke\"\nprivileged_without_host_devices = true\n[" + rts + ".gpu.options]\n"
         "BinaryName = \"/opt/gpu/runtime\"\nSystemdCgroup = true\n"},
        {"DefaultRuntimeWinsOverRunc",
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".runc]\nruntime_type = \"r.v2\"\n"
         "runtime_root = \"/r\"\nruntime_engine = \"re\"\nprivileged_without_host_devices = true\n[" + rts + ".runc.options]\n"
         "BinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n[" + rts + ".kata]\nruntime_type = \"k.v2\"\nruntime_root = \"/k\"\n"
         "runtime_engine = \"ke\"\nprivileged_without_host_devices = false\n[" + rts + ".kata.options]\nBinaryName = \"/usr/bin/kata\"\n"
         "SystemdCgroup = false\n",
         false,
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".runc]\nruntime_type = \"r.v2\"\n"
         "runtime_root = \"/r\"\nruntime_engine = \"re\"\nprivileged_without_host_devices = true\n[" + rts + ".runc.options]\n"
         "BinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n[" + rts + ".kata]\nruntime_type = \"k.v2\"\nruntime_root = \"/k\"\n"
         "runtime_engine = \"ke\"\nprivileged_without_host_devices = false\n[" + rts + ".kata.options]\nBinaryName = \"/usr/bin/kata\"\n"
         "SystemdCgroup = false\n[" + rts + ".gpu]\nruntime_type = \"k.v2\"\nruntime_root = \"/k\"\nruntime_engine = \"ke\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\nSystemdCgroup = false\n"},
        {"EmptyVersion3", "version = 3\n", false,
         "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gpu]\nruntime_type = \"io.containerd.runc.v2\"\n"
         "runtime_root = \"\"\nruntime_engine = \"\"\nprivileged_without_host_devices = false\n"
         "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"},
        {"Version3",
         "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\nruntime_type = \"r.v2\"\n"
         "runtime_root = \"/r\"\nruntime_engine = \"re\"\nprivileged_without_host_devices = true\n"
         "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n",
         false,
         "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\nruntime_type = \"r.v2\"\n"
         "runtime_root = \"/r\"\nruntime_engine = \"re\"\nprivileged_without_host_devices = true\n"
         "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n"
         "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpu]\nruntime_type = \"r.v2\"\nruntime_root = \"/r\"\n"
         "runtime_engine = \"re\"\nprivileged_without_host_devices = true\n"
         "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\nSystemdCgroup = true\n"},
        {"ExistingRuntimeSetAsDefault",
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"gpu\"\n[" + rts + ".gpu]\n"
         "runtime_type = \"io.containerd.runc.v2\"\nruntime_root = \"\"\nruntime_engine = \"\"\nprivileged_without_host_devices = false\n"
         "[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n",
         true,
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"gpu\"\n[" + rts + ".gpu]\n"
         "runtime_type = \"io.containerd.runc.v2\"\nruntime_root = \"\"\nruntime_engine = \"\"\nprivileged_without_host_devices = false\n"
         "[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"},
        // Without --set-as-default a default_runtime_name naming the runtime is removed.
        {"ExistingRuntimeNotDefaultLosesDefaultName",
         "version = 2\n[" + cri + ".containerd]\ndefault_runtime_name = \"gpu\"\n[" + rts + ".gpu]\n"
         "runtime_type = \"io.containerd.runc.v2\"\nruntime_root = \"\"\nruntime_engine = \"\"\nprivileged_without_host_devices = false\n"
         "[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n",
         false,
         "version = 2\n[" + rts + ".gpu]\nruntime_type = \"io.containerd.runc.v2\"\nruntime_root = \"\"\nruntime_engine = \"\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"},
    };
}

// Version 1 cases (TestAddRuntimeV1): NVIDIA runs them with the legacy config switch and an
// empty runtime type; options.Runtime is set besides BinaryName.
inline std::vector<ContainerdCase> containerd_v1_cases() {
    const std::string rts = "plugins.cri.containerd.runtimes";
    return {
        {"EmptyConfig", "", false,
         "version = 1\n[" + rts + ".gpu]\nruntime_type = \"\"\nruntime_root = \"\"\nruntime_engine = \"\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"
         "Runtime = \"/opt/gpu/runtime\"\n"},
        {"RuncTableIsCopiedWhole",
         "[" + rts + ".runc]\nruntime_type = \"r.v1\"\nruntime_root = \"/r\"\nruntime_engine = \"re\"\n"
         "privileged_without_host_devices = true\n[" + rts + ".runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n",
         false,
         "version = 1\n[" + rts + ".runc]\nruntime_type = \"r.v1\"\nruntime_root = \"/r\"\nruntime_engine = \"re\"\n"
         "privileged_without_host_devices = true\n[" + rts + ".runc.options]\nBinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n"
         "[" + rts + ".gpu]\nruntime_type = \"r.v1\"\nruntime_root = \"/r\"\nruntime_engine = \"re\"\n"
         "privileged_without_host_devices = true\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"
         "Runtime = \"/opt/gpu/runtime\"\nSystemdCgroup = true\n"},
        {"DefaultRuntimeIsTheTemplate",
         "[plugins.cri.containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".kata]\nruntime_type = \"k.v1\"\n"
         "runtime_root = \"/k\"\nruntime_engine = \"ke\"\nprivileged_without_host_devices = true\n[" + rts + ".kata.options]\n"
         "BinaryName = \"/usr/bin/kata\"\nSystemdCgroup = true\n",
         false,
         "version = 1\n[plugins.cri.containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".kata]\nruntime_type = \"k.v1\"\n"
         "runtime_root = \"/k\"\nruntime_engine = \"ke\"\nprivileged_without_host_devices = true\n[" + rts + ".kata.options]\n"
         "BinaryName = \"/usr/bin/kata\"\nSystemdCgroup = true\n[" + rts + ".gpu]\nruntime_type = \"k.v1\"\nruntime_root = \"/k\"\n"
         "runtime_engine = \"ke\"\nprivileged_without_host_devices = true\n[" + rts + ".gpu.options]\n"
         "BinaryName = \"/opt/gpu/runtime\"\nRuntime = \"/opt/gpu/runtime\"\nSystemdCgroup = true\n"},
        {"DefaultRuntimeWinsOverRunc",
         "[plugins.cri.containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".runc]\nruntime_type = \"r.v1\"\n"
         "runtime_root = \"/r\"\nruntime_engine = \"re\"\nprivileged_without_host_devices = true\n[" + rts + ".runc.options]\n"
         "BinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n[" + rts + ".kata]\nruntime_type = \"k.v1\"\nruntime_root = \"/k\"\n"
         "runtime_engine = \"ke\"\nprivileged_without_host_devices = false\n[" + rts + ".kata.options]\nBinaryName = \"/usr/bin/kata\"\n"
         "SystemdCgroup = false\n",
         false,
         "version = 1\n[plugins.cri.containerd]\ndefault_runtime_name = \"kata\"\n[" + rts + ".runc]\nruntime_type = \"r.v1\"\n"
         "runtime_root = \"/r\"\nruntime_engine = \"re\"\nprivileged_without_host_devices = true\n[" + rts + ".runc.options]\n"
         "BinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = true\n[" + rts + ".kata]\nruntime_type = \"k.v1\"\nruntime_root = \"/k\"\n"
         "runtime_engine = \"ke\"\nprivileged_without_host_devices = false\n[" + rts + ".kata.options]\nBinaryName = \"/usr/bin/kata\"\n"
         "SystemdCgroup = false\n[" + rts + ".gpu]\nruntime_type = \"k.v1\"\nruntime_root = \"/k\"\nruntime_engine = \"ke\"\n"
         "privileged_without_host_devices = false\n[" + rts + ".gpu.options]\nBinaryName = \"/opt/gpu/runtime\"\n"
         "Runtime = \"/opt/gpu/runtime\"\nSystemdCgroup = false\n"},
    };
}

struct CrioCase {
    std::string name;
    std::string input;
    bool set_as_default;
    std::string expected;  // the drop-in
};

// TestAddRuntime of the crio engine: the result is the drop-in (only the runtime and the default).
inline std::vector<CrioCase> crio_cases() {
    return {
        {"EmptyConfigNotDefault", "", false,
         "[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\nruntime_type = \"oci\"\n"},
        {"EmptyConfigSetAsDefault", "", true,
         "[crio.runtime]\ndefault_runtime = \"gpu\"\n[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\n"
         "runtime_type = \"oci\"\n"},
        {"RuncSettingsAreCopied",
         "[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/sbin/runc\"\nruntime_type = \"vm\"\nmonitor_path = \"/m\"\n", false,
         "[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\nruntime_type = \"oci\"\nmonitor_path = \"/m\"\n"},
        {"DefaultRuntimeSettingsAreCopied",
         "[crio.runtime]\ndefault_runtime = \"crun-x\"\n[crio.runtime.runtimes.crun-x]\nruntime_path = \"/usr/bin/crun\"\n"
         "runtime_type = \"vm\"\nruntime_root = \"/run/crun\"\n",
         false,
         "[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\nruntime_type = \"oci\"\nruntime_root = \"/run/crun\"\n"},
        {"DefaultRuntimeWinsOverRunc",
         "[crio.runtime]\ndefault_runtime = \"crun-x\"\n[crio.runtime.runtimes.crun-x]\nruntime_path = \"/usr/bin/crun\"\n"
         "runtime_type = \"vm\"\nruntime_root = \"/run/crun\"\n[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/sbin/runc\"\n"
         "monitor_path = \"/m\"\n",
         false,
         "[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\nruntime_type = \"oci\"\nruntime_root = \"/run/crun\"\n"},
        {"ExistingRuntimeSetAsDefault",
         "[crio.runtime]\ndefault_runtime = \"gpu\"\n[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\n"
         "runtime_type = \"oci\"\n",
         true,
         "[crio.runtime]\ndefault_runtime = \"gpu\"\n[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\n"
         "runtime_type = \"oci\"\n"},
        {"ExistingRuntimeNotDefault",
         "[crio.runtime]\ndefault_runtime = \"gpu\"\n[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\n"
         "runtime_type = \"oci\"\n",
         false, "[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\nruntime_type = \"oci\"\n"},
    };
}

}  // namespace kgpu::test
