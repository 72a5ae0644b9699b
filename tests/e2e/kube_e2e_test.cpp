// The seeds' chain in a real cluster (issue #25): kgpu's image and deploy/ manifests on kube-mini,
// a one-node Kubernetes v1.32 (real kubelet, scheduler and DaemonSet controller, Debian's
// containerd 1.6 and runc) from the workspace's ../shared/tools/kube, on the simulated driver.
//
// ctest runs KubeE2E.Up once (fixture kube_e2e: the cluster, the simulated driver, the workload
// image), then each case in order under one RESOURCE_LOCK, then KubeE2E.Down, which ctest runs
// even when a case fails. The cases share the cluster: each one checks what it needs from the
// cases before and says so when it is missing. tests/e2e/README.md says what is adapted to the
// cluster and why, and what each case shows.
//
// Skipped (with the reason) only where the shared tools are absent; where they are present,
// anything else missing (root, buildah) is a failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "cluster.h"
#include "deploy.h"
#include "support/fake_kubelet.h"
#include "support/process.h"
#include "support/test_image.h"

namespace kgpu::e2e {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

const char* kWorkloadImage = "docker.io/local/kgpu-e2e-cuda:1";
const std::string kFixture = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml";

// Each case starts with this: the cluster, or a skip / a failure that says why not.
#define E2E_ATTACH(c)                                          \
    Attached attached_ = attach();                             \
    if (!attached_.skip.empty()) GTEST_SKIP() << attached_.skip; \
    ASSERT_TRUE(attached_.cluster.has_value()) << attached_.error; \
    const Cluster& c = *attached_.cluster

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A figure for the report: printed, and kept as a property in ctest's / gtest's XML output.
void figure(const std::string& name, double secs) {
    std::cout << fmt::format("[e2e figure] {}: {:.1f} s", name, secs) << std::endl;
    ::testing::Test::RecordProperty(name, fmt::format("{:.1f}", secs));
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    return s;
}

std::string sha256(const std::string& file) { return run({"/usr/bin/sha256sum", file}).out.substr(0, 64); }

// A workload pod on the `nvidia` runtime class, as deploy/examples/nvidia-smi-pod.yaml writes it,
// with the suite's stand-in for a CUDA base image (busybox, glibc and the simulator's C++
// libraries; its env points the simulator at the node fixture and at the container's own /dev,
// as the real driver shows a container only its own GPUs).
std::string gpu_pod(const std::string& name, int gpus, const std::string& script, const std::map<std::string, std::string>& env = {},
                    const std::string& restart = "Never") {
    json c = {{"name", "cuda"},
              {"image", kWorkloadImage},
              {"command", {"/bin/sh", "-c", script}},
              {"env", json::array()}};
    for (const auto& [k, v] : env) c["env"].push_back({{"name", k}, {"value", v}});
    if (gpus > 0) c["resources"] = {{"limits", {{"nvidia.com/gpu", gpus}}}};
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"restartPolicy", restart},
                  {"runtimeClassName", "nvidia"},
                  {"terminationGracePeriodSeconds", 5},
                  {"containers", {c}}}}};
    return pod.dump();
}

// What a pod prints about its GPUs: `ls /dev`, `nvidia-smi -L`, the sha256 of the injected
// nvidia-smi and its NVIDIA_* environment; then it stays running until it is deleted.
const char* kShowGpus =
    "ls /dev; echo '--- smi'; nvidia-smi -L; echo \"rc=$?\"; echo '--- sha'; busybox sha256sum /usr/bin/nvidia-smi 2>&1; "
    "echo '--- env'; busybox env | busybox grep '^NVIDIA_' | busybox sort; "
    "echo '--- end'; trap 'exit 0' TERM; while :; do busybox sleep 3600 & wait; done";

struct Shown {
    std::vector<std::string> nodes, smi_uuids;
    int smi_lines = 0;
    std::string smi, sha, env, raw;
};

Shown parse_shown(const std::string& log) {
    Shown s;
    s.raw = log;
    const auto smi = log.find("--- smi"), sha = log.find("--- sha"), end = log.find("--- end");
    if (smi == std::string::npos || sha == std::string::npos || end == std::string::npos) return s;
    s.nodes = gpu_nodes(log.substr(0, smi));
    s.smi = log.substr(smi + 8, sha - smi - 8);
    std::istringstream in(s.smi);
    for (std::string l; std::getline(in, l);)
        if (l.starts_with("GPU ")) ++s.smi_lines;
    s.smi_uuids = uuids_in(s.smi);
    std::sort(s.smi_uuids.begin(), s.smi_uuids.end());
    s.sha = log.substr(sha + 8, 64);
    if (const auto env = log.find("--- env"); env != std::string::npos && env < end) s.env = log.substr(env + 8, end - env - 8);
    return s;
}

std::vector<std::string> nodes_of(const std::vector<std::string>& uuids) {
    const auto minors = fixture_minors(kFixture);
    std::vector<std::string> out;
    for (const auto& u : uuids)
        if (minors.contains(u)) out.push_back(fmt::format("nvidia{}", minors.at(u)));
    std::sort(out.begin(), out.end());
    return out;
}

// The kgpu DaemonSet's pod name once all its containers are Ready ("" otherwise).
std::string ready_kgpu_pod(const Cluster& c) {
    for (const auto& p : c.daemonset_pods("kgpu")) {
        if (!p["metadata"].value("deletionTimestamp", "").empty()) continue;
        const std::string name = p["metadata"]["name"];
        if (c.pod_ready("kube-system", name)) return name;
    }
    return {};
}

// Lines of the kubelet's log (all its starts, separated by kube-mini's "=== start" lines) in which
// it took a Register call for nvidia.com/gpu: one count per kubelet start.
std::vector<int> kubelet_registrations(const Cluster& c) {
    std::vector<int> per_start;
    std::istringstream in(slurp(c.state().kube + "/logs/kubelet.log"));
    for (std::string l; std::getline(in, l);) {
        if (l.starts_with("=== start")) per_start.push_back(0);
        else if (!per_start.empty() && l.find("Got registration request from device plugin") != std::string::npos &&
                 l.find("nvidia.com/gpu") != std::string::npos)
            ++per_start.back();
    }
    return per_start;
}

int count_of(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

// kgpu's own log lines for a Register the kubelet answered.
int kgpu_registrations(const Cluster& c, const std::string& pod) {
    return count_of(c.container_log("kube-system", pod, "device-plugin"), "registered nvidia.com/gpu with the kubelet");
}

// Waits for a workload pod to be Ready and returns what it showed about its GPUs.
::testing::AssertionResult started(const Cluster& c, const std::string& name, Shown& shown) {
    if (!wait_until([&] { return c.pod_ready("default", name); }, seconds(90)))
        return ::testing::AssertionFailure() << "pod " << name << " not Ready within 90 s; its events: "
                                             << fmt::format("{}", fmt::join(c.pod_events("default", name), " | ")) << c.describe();
    std::string log;
    wait_until([&] { return (log = c.container_log("default", name, "cuda")).find("--- end") != std::string::npos; }, seconds(30));
    shown = parse_shown(log);
    return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Fixture setup: the cluster.

void mknod_or_fail(const std::string& path, unsigned maj, unsigned min, std::string& failure) {
    fs::create_directories(fs::path(path).parent_path());
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(maj, min)) != 0) failure += "mknod " + path + ": " + std::strerror(errno) + "; ";
}

TEST(KubeE2E, Up) {
    const auto t0 = std::chrono::steady_clock::now();
    State s;
    fs::remove(std::string(KGPU_E2E_BINARY_DIR) + "/ran");
    if (auto why = tools_absent(); !why.empty()) {
        s.skipped = why;
        save_state(s);
        GTEST_SKIP() << why;
    }
    // The shared tools are here: from now on nothing may skip.
    std::vector<std::string> missing;
    if (::geteuid() != 0) missing.push_back("root (kube-mini, mknod)");
    if (!fs::exists("/usr/bin/buildah")) missing.push_back("/usr/bin/buildah (scripts/setup installs it; scripts/build-image needs it)");
    if (!fs::exists("/bin/busybox")) missing.push_back("/bin/busybox (busybox-static, scripts/setup)");
    if (!fs::exists("/usr/bin/ctr")) missing.push_back("/usr/bin/ctr (containerd, scripts/setup)");
    if (!fs::exists("/usr/bin/curl")) missing.push_back("/usr/bin/curl (scripts/setup)");
    ASSERT_TRUE(missing.empty()) << "the shared tools are at " << shared_dir()
                                 << ", so the e2e suite must run here, but it lacks: " << fmt::format("{}", fmt::join(missing, ", "));

    char tmpl[] = "/tmp/kgpu-e2e-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    s.base = tmpl;
    s.kube = s.base + "/k";
    s.kgpu_version = trim(run({KGPU_BINARY, "--version"}).out);
    save_state(s);  // from here on KubeE2E.Down finds what to clean up

    // The simulated driver on the "node": device nodes (mknod), the simulator as the driver's
    // libnvidia-ml.so.<version>, kgpu as its nvidia-smi; the node fixture and events file.
    const std::string driver = driver_root(s.base);
    const std::string version = YAML::LoadFile(kFixture)["driver_version"].as<std::string>();
    std::string failure;
    for (const auto& [uuid, minor] : fixture_minors(kFixture)) mknod_or_fail(fmt::format("{}/dev/nvidia{}", driver, minor), 195, minor, failure);
    mknod_or_fail(driver + "/dev/nvidiactl", 195, 255, failure);
    mknod_or_fail(driver + "/dev/nvidia-uvm", 510, 0, failure);
    mknod_or_fail(driver + "/dev/nvidia-uvm-tools", 510, 1, failure);
    ASSERT_EQ(failure, "");
    fs::create_directories(driver + "/usr/lib64");
    fs::create_directories(driver + "/usr/bin");
    fs::copy_file(KGPU_SIM_LIBRARY, driver + "/usr/lib64/libnvidia-ml.so." + version);
    fs::create_symlink("libnvidia-ml.so." + version, driver + "/usr/lib64/libnvidia-ml.so.1");
    fs::create_symlink("libnvidia-ml.so.1", driver + "/usr/lib64/libnvidia-ml.so");
    fs::copy_file(KGPU_BINARY, driver + "/usr/bin/nvidia-smi");
    fs::create_directories(fs::path(sim_fixture(s.base)).parent_path());
    fs::copy_file(kFixture, sim_fixture(s.base));
    std::ofstream(sim_events(s.base)).flush();
    fs::create_directories(fs::path(runtime_config(s.base)).parent_path());
    // The directories every node has, under <base>/host where the suite's host paths go
    // (deploy.h): the runtime's log file goes to /var/log, and it does not create directories.
    for (const char* d : {"/var/log", "/run", "/usr/local"}) fs::create_directories(s.base + "/host" + d);

    // kube-mini. containerd's environment reaches the runtimes it runs: kgpu's runtime finds the
    // config `runtime install` writes (KGPU_RUNTIME_CONFIG: the host's /etc is not the suite's to
    // write) and the simulator its node (KGPU_SIM_NODE), as the real driver needs no variable.
    const auto up0 = std::chrono::steady_clock::now();
    auto up = run({"/bin/bash", kube_mini_script(), "up", s.kube}, seconds(400),
                  {{"KGPU_RUNTIME_CONFIG", runtime_config(s.base)}, {"KGPU_SIM_NODE", sim_fixture(s.base)}});
    ASSERT_EQ(up.exit_code, 0) << "kube-mini up " << s.kube << " failed:\n" << up.err << up.out;
    figure("kube-mini up", since(up0));
    std::istringstream env(slurp(s.kube + "/env"));
    static const std::regex line(R"(^export ([A-Z_0-9]+)=(.*)$)");
    for (std::string l; std::getline(env, l);)
        if (std::smatch m; std::regex_match(l, m, line)) s.env[m[1]] = m[2];
    save_state(s);
    ASSERT_FALSE(s.env["KUBECTL"].empty()) << s.kube << "/env has no KUBECTL:\n" << slurp(s.kube + "/env");

    // containerd's service manager (see supervisor.cpp).
    auto sup = run({KGPU_E2E_SUPERVISOR, s.kube, s.base + "/supervisor.pid", s.base + "/supervisor.log"});
    ASSERT_EQ(sup.exit_code, 0) << sup.err << slurp(s.base + "/supervisor.log");

    // The workload image: the stand-in for a CUDA base image.
    kgpu::test::ImageSpec spec;
    spec.name = kWorkloadImage;
    spec.ldd_of = {KGPU_BINARY, KGPU_SIM_LIBRARY};
    spec.files = {{"/sim/dgx-h100.yaml", kFixture}};
    spec.env = {"PATH=/bin:/usr/bin", "KGPU_SIM_NODE=/sim/dgx-h100.yaml", "KGPU_SIM_DEV_ROOT=/"};
    std::string error;
    const std::string image = kgpu::test::build_image(s.base + "/workload-image", spec, error);
    ASSERT_FALSE(image.empty()) << error;
    Cluster c(s);
    auto imported = c.ctr({"images", "import", image});
    ASSERT_EQ(imported.exit_code, 0) << imported.err;

    std::ofstream(std::string(KGPU_E2E_BINARY_DIR) + "/ran") << "up " << s.base << "\n";
    figure("setup (up, supervisor, workload image)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 1. kgpu's image and deploy/ on the cluster.

TEST(KubeE2E, Deploy) {
    E2E_ATTACH(c);
    const auto t0 = std::chrono::steady_clock::now();

    // kgpu's own image, built by scripts/build-image from the tested binary, into the cluster's
    // containerd (namespace k8s.io, where the kubelet's images are).
    const std::string archive = c.base() + "/kgpu.oci.tar";
    auto built = run({std::string(KGPU_SOURCE_DIR) + "/scripts/build-image", "--binary", KGPU_BINARY, "--output", archive, "--no-install"},
                     seconds(300));
    ASSERT_EQ(built.exit_code, 0) << "scripts/build-image failed:\n" << built.err;
    auto imported = c.ctr({"images", "import", archive});
    ASSERT_EQ(imported.exit_code, 0) << imported.err;
    const std::string image = "docker.io/library/kgpu:" + c.state().kgpu_version;
    ASSERT_THAT(c.ctr({"images", "ls", "-q"}).out, HasSubstr(image)) << "the archive did not name the image " << image;
    figure("scripts/build-image + import", since(t0));

    std::vector<Manifest> manifests;
    std::string error;
    ASSERT_TRUE(kustomization_manifests(c, manifests, error)) << error;

    // The runtime-install DaemonSet's keep-alive container runs registry.k8s.io/pause:3.9, which no
    // registry can serve here: the cluster's pause image under that name.
    for (const auto& m : manifests) {
        static const std::regex pause(R"re("image":"(registry\.k8s\.io/pause:[^"]+)")re");
        for (std::sregex_iterator it(m.yaml.begin(), m.yaml.end(), pause), end; it != end; ++it) {
            auto tagged = c.ctr({"images", "tag", "--force", c.env("PAUSE_IMAGE"), (*it)[1].str()});
            ASSERT_EQ(tagged.exit_code, 0) << tagged.err;
        }
    }
    // The seed's manual step (000 §3.1): a GPU node is labelled so kgpu's DaemonSets select it.
    auto labelled = c.kubectl({"label", "node", c.env("KUBE_NODE_NAME"), "nvidia.com/gpu.present=true", "--overwrite"});
    ASSERT_EQ(labelled.exit_code, 0) << labelled.err;

    // In the kustomization's order, except that kgpu's DaemonSet waits for kgpu-runtime-install:
    // kube-mini's `nvidia` handler already exists (plain runc), so a kgpu pod started before the
    // install would run without the driver injected. (On a node whose containerd has no nvidia
    // runtime yet, the pods wait for it on their own.)
    const auto i0 = std::chrono::steady_clock::now();
    bool installed = false;
    for (const auto& m : manifests) {
        if (m.name == "daemonset.yaml" && !installed) {
            ASSERT_TRUE(wait_until(
                [&] {
                    for (const auto& p : c.daemonset_pods("kgpu-runtime-install"))
                        if (c.pod_ready("kube-system", p["metadata"]["name"])) return true;
                    return false;
                },
                seconds(180)))
                << "kgpu-runtime-install not Ready within 180 s" << c.describe();
            installed = true;
            figure("runtime install DaemonSet Ready", since(i0));
        }
        if (!m.skipped.empty()) {
            std::cout << "[e2e] not applied: deploy/kubernetes/" << m.name << ": " << m.skipped << std::endl;
            continue;
        }
        auto applied = c.apply(m.yaml, m.name);
        ASSERT_EQ(applied.exit_code, 0) << "kubectl apply " << m.name << ":\n" << applied.err << "\n" << m.yaml;
    }
    ASSERT_TRUE(installed) << "deploy/kubernetes/kustomization.yaml lists no daemonset.yaml";

    const auto d0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(wait_until([&] { return !ready_kgpu_pod(c).empty(); }, seconds(180)))
        << "the kgpu pod's containers (device-plugin, exporter, labels) not all Ready within 180 s" << c.describe();
    EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "8"; }, seconds(60)))
        << "the node's allocatable nvidia.com/gpu is '" << c.allocatable_gpus() << "', not 8" << c.describe();
    figure("kgpu DaemonSet Ready, 8 GPUs allocatable", since(d0));
    figure("case 1 (deploy)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 2. runtime install made containerd's runtime kgpu's; GPU pods see their GPUs and nothing else.

TEST(KubeE2E, GpuPods) {
    E2E_ATTACH(c);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(c.allocatable_gpus(), "8") << "KubeE2E.Deploy did not leave kgpu serving 8 GPUs" << c.describe();

    // containerd's own reading of its config (not kgpu's): the `nvidia` runtime is kgpu's.
    auto dump = run({"/usr/bin/containerd", "--config", c.env("CONTAINERD_CONFIG"), "config", "dump"});
    ASSERT_EQ(dump.exit_code, 0) << dump.err;
    std::string binary;
    try {
        auto t = toml::parse(dump.out);
        binary = t["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"]
                     .value_or(std::string());
    } catch (const std::exception& e) {
        FAIL() << "containerd config dump is not TOML: " << e.what() << "\n" << dump.out;
    }
    const std::string install_dir = host_path(c, "/usr/local/kgpu");
    EXPECT_EQ(binary, install_dir + "/kgpu-container-runtime") << dump.out;
    EXPECT_EQ(fs::read_symlink(install_dir + "/kgpu-container-runtime").string(), "kgpu");
    // The running containerd is a new one (the install's SIGHUP, the supervisor's restart).
    EXPECT_THAT(slurp(c.base() + "/supervisor.log"), HasSubstr("restarted as pid"))
        << "containerd was not restarted after runtime install";
    // And the install's own account reached its log (`kubectl logs … -c install`): it used to
    // print everything at the end, after it had restarted containerd, and the container ended
    // before containerd was back to copy it (an empty log). Now each line goes out as its step is
    // done; the first step's (the glibc it carries) is printed before the copy is even run, long
    // before the restart. (The last lines, a few milliseconds before the SIGHUP, may still miss
    // containerd's copy: not checked.)
    const json installs = c.daemonset_pods("kgpu-runtime-install");
    ASSERT_EQ(installs.size(), 1u);
    const std::string install_log = c.container_log("kube-system", installs[0]["metadata"]["name"], "install");
    EXPECT_THAT(install_log, HasSubstr("/usr/local/kgpu/lib/")) << "the install container's log:\n" << install_log;

    // A pod asking for 2 GPUs, scheduled by the real scheduler: it sees exactly the 2 GPUs the
    // kubelet assigned (nvidia-smi -L is kgpu's smi, injected from the driver root) and /dev holds
    // only their nodes.
    auto applied = c.apply(gpu_pod("gpu-2", 2, kShowGpus), "gpu-2");
    ASSERT_EQ(applied.exit_code, 0) << applied.err;
    Shown two;
    ASSERT_TRUE(started(c, "gpu-2", two));
    const json pod = c.pod("default", "gpu-2");
    const auto assigned = c.assigned_devices(pod["metadata"]["uid"], "cuda");
    ASSERT_EQ(assigned.size(), 2u) << "the kubelet's checkpoint does not assign 2 GPUs to gpu-2\n"
                                   << slurp(c.env("KUBELET_DEVICE_PLUGINS_DIR") + "/kubelet_internal_checkpoint");
    EXPECT_EQ(two.smi_uuids, assigned) << "nvidia-smi -L in the pod:\n" << two.raw;
    EXPECT_EQ(two.smi_lines, 2) << two.raw;
    EXPECT_EQ(two.nodes, nodes_of(assigned)) << "/dev of the pod:\n" << two.raw;
    EXPECT_THAT(two.raw, HasSubstr("nvidiactl"));
    EXPECT_EQ(two.sha, sha256(KGPU_BINARY)) << "the pod's /usr/bin/nvidia-smi is not kgpu\n" << two.raw;
    // The environment the pod ends with: the device plugin's volume-mounts answer
    // (NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices, read by the runtime under the
    // secure settings install wrote) replaced by the driver edits of nvidia-ctk v1.20's spec, as
    // NVIDIA's runtime applies them: "void", so nothing injects GPUs a second time.
    // (KubeE2E.MigrationWithNvidiasPlugin compares it with what a pod NVIDIA's plugin served gets.)
    EXPECT_THAT(two.env, HasSubstr("NVIDIA_VISIBLE_DEVICES=void\n")) << two.raw;
    EXPECT_THAT(two.env, HasSubstr("NVIDIA_CTK_LIBCUDA_DIR=")) << two.raw;
    // kgpu's runtime did the create (its log), not plain runc.
    const std::string runtime_log = slurp(host_path(c, "/var/log/kgpu-container-runtime.log"));
    EXPECT_THAT(runtime_log, HasSubstr(c.container_id("default", "gpu-2", "cuda")));
    // Its hooks ran as one `chain` exec (issue #26): the installed nvidia-cdi-hook is kgpu.
    EXPECT_THAT(runtime_log, ::testing::ContainsRegex("/" + c.container_id("default", "gpu-2", "cuda") +
                                                      "/config.json: injected .* 1 hooks \\([0-9]+ steps chained\\)"))
        << runtime_log;

    // No GPU asked for, NVIDIA_VISIBLE_DEVICES=all set by the pod: no GPU (the secure settings
    // runtime install writes: the variable is not believed from an unprivileged container).
    applied = c.apply(gpu_pod("no-gpu-all", 0, kShowGpus, {{"NVIDIA_VISIBLE_DEVICES", "all"}}), "no-gpu-all");
    ASSERT_EQ(applied.exit_code, 0) << applied.err;
    Shown none;
    ASSERT_TRUE(started(c, "no-gpu-all", none));
    EXPECT_TRUE(none.nodes.empty()) << none.raw;
    EXPECT_THAT(none.raw, ::testing::Not(HasSubstr("nvidiactl")));
    EXPECT_EQ(none.smi_lines, 0) << none.raw;
    EXPECT_THAT(none.smi, HasSubstr("rc=127")) << "nvidia-smi should not exist in a pod without GPUs\n" << none.raw;
    EXPECT_TRUE(c.delete_pod("default", "no-gpu-all"));

    // An unmet NVIDIA_REQUIRE_CUDA: the container does not start, and the pod's events carry
    // kgpu's message (the requirement and the node's driver).
    applied = c.apply(gpu_pod("cuda-99", 1, "echo started", {{"NVIDIA_REQUIRE_CUDA", "cuda>=99.0"}}), "cuda-99");
    ASSERT_EQ(applied.exit_code, 0) << applied.err;
    std::string event;
    EXPECT_TRUE(wait_until(
        [&] {
            for (const auto& e : c.pod_events("default", "cuda-99"))
                if (e.find("cuda>=99.0") != std::string::npos) return event = e, true;
            return false;
        },
        seconds(90)))
        << "no event of pod cuda-99 names the requirement cuda>=99.0; events: "
        << fmt::format("{}", fmt::join(c.pod_events("default", "cuda-99"), " | ")) << c.describe();
    EXPECT_THAT(event, HasSubstr("550.54.15")) << "kgpu's message names the node's driver";
    EXPECT_THAT(event, HasSubstr("12.4")) << "kgpu's message names the node's CUDA version";
    EXPECT_THAT(c.container_log("default", "cuda-99", "cuda"), ::testing::Not(HasSubstr("started")));
    EXPECT_TRUE(c.delete_pod("default", "cuda-99"));
    figure("case 2 (GPU pods)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 3. A pod asking for more GPUs than the node has.

TEST(KubeE2E, PendingPod) {
    E2E_ATTACH(c);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(c.allocatable_gpus(), "8") << c.describe();
    auto applied = c.apply(gpu_pod("gpu-9", 9, "true"), "gpu-9");
    ASSERT_EQ(applied.exit_code, 0) << applied.err;
    std::string message;
    ASSERT_TRUE(wait_until(
        [&] {
            json p = c.pod("default", "gpu-9");
            if (p.is_null()) return false;
            for (const auto& cond : p["status"].value("conditions", json::array()))
                if (cond.value("type", "") == "PodScheduled" && cond.value("status", "") == "False" &&
                    cond.value("reason", "") == "Unschedulable")
                    return message = cond.value("message", ""), true;
            return false;
        },
        seconds(60)))
        << "gpu-9 has no PodScheduled=False/Unschedulable condition" << c.describe();
    EXPECT_THAT(message, HasSubstr("Insufficient nvidia.com/gpu")) << "the scheduler's message";
    EXPECT_EQ(c.pod_phase("default", "gpu-9"), "Pending");

    // kgpu doctor pending on the cluster's own JSON agrees and names the cause.
    const std::string dir = c.base() + "/pending";
    fs::create_directories(dir);
    auto save = [&](const std::vector<std::string>& what, const std::string& file) {
        auto r = c.kubectl(what);
        std::ofstream(dir + "/" + file) << r.out;
        return r.exit_code == 0;
    };
    ASSERT_TRUE(save({"get", "pod", "-n", "default", "gpu-9", "-o", "json"}, "pod.json"));
    ASSERT_TRUE(save({"get", "nodes", "-o", "json"}, "nodes.json"));
    ASSERT_TRUE(save({"get", "pods", "-A", "-o", "json"}, "pods.json"));
    auto doctor = run({KGPU_BINARY, "doctor", "pending", "--pod", dir + "/pod.json", "--nodes", dir + "/nodes.json", "--pods",
                       dir + "/pods.json", "--json"});
    EXPECT_EQ(doctor.exit_code, 1) << "exit 1: the pod fits nowhere\n" << doctor.out << doctor.err;
    json verdict;
    ASSERT_NO_THROW(verdict = json::parse(doctor.out)) << doctor.out << doctor.err;
    EXPECT_EQ(verdict.value("fits", true), false) << doctor.out;
    ASSERT_EQ(verdict["nodes"].size(), 1u) << doctor.out;
    EXPECT_EQ(verdict["nodes"][0].value("node", ""), c.env("KUBE_NODE_NAME"));
    EXPECT_EQ(verdict["nodes"][0].value("fits", true), false);
    const std::string reasons = verdict["nodes"][0]["reasons"].dump();
    EXPECT_THAT(reasons, HasSubstr("nvidia.com/gpu")) << doctor.out;
    EXPECT_THAT(reasons, HasSubstr("9")) << "the reason names what the pod asks for\n" << doctor.out;
    EXPECT_TRUE(c.delete_pod("default", "gpu-9"));
    figure("case 3 (pending)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 4. An XID through the simulator's events file, and the GPU's reset.

// Node Events and the health annotation (issue #27 part 2) through the real API server. The
// deployed pod cannot reach it here (kube-mini has no ServiceAccount tokens and its API server
// listens on loopback): a second kgpu device-plugin on the host, with the cluster's kubeconfig
// and the same simulated driver, reports the node's GPU health. Its device-plugin directory is
// its own, so the kubelet never sees it.
json node_events(const Cluster& c, const std::string& node, const std::string& reason) {
    json out = json::array();
    const json list = c.get({"events", "-n", "default"});
    if (list.is_object())
        for (const auto& e : list.value("items", json::array()))
            if (e["involvedObject"].value("kind", "") == "Node" && e["involvedObject"].value("name", "") == node &&
                e.value("reason", "") == reason)
                out.push_back(e);
    return out;
}

TEST(KubeE2E, XidHealth) {
    E2E_ATTACH(c);
    ASSERT_EQ(c.allocatable_gpus(), "8") << c.describe();
    const std::string node = c.env("KUBE_NODE_NAME");
    const std::string reporter_dir = c.base() + "/health-reporter";
    fs::create_directories(reporter_dir);
    kgpu::test::ChildProcess reporter(
        {KGPU_BINARY, "device-plugin", "--nvml-library", KGPU_SIM_LIBRARY, "--device-plugin-path", reporter_dir,
         "--kubeconfig", c.env("KUBECONFIG"), "--node-name", node, "--node-health-annotation"},
        {{"KGPU_SIM_NODE", sim_fixture(c.base())}, {"KGPU_SIM_EVENTS", sim_events(c.base())}});
    fs::create_directories(c.base() + "/pids");
    std::ofstream(c.base() + "/pids/health-reporter") << reporter.pid() << "\n";
    ASSERT_TRUE(wait_until([&] { return reporter.err().find("serving nvidia.com/gpu") != std::string::npos; }, seconds(60)))
        << reporter.err();
    EXPECT_THAT(reporter.err(), HasSubstr("node " + node + " through https://"));
    EXPECT_THAT(reporter.err(), HasSubstr("GPU health Events, the kgpu/gpu-health annotation"));
    const json before = node_events(c, node, "GPUUnhealthy");

    // XID 48 (double-bit ECC error) on GPU 3 leaves remapped rows pending: the GPU needs a reset.
    const auto t0 = std::chrono::steady_clock::now();
    std::ofstream(sim_events(c.base()), std::ios::app) << "xid 3 48\n";
    EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "7"; }, seconds(60)))
        << "allocatable nvidia.com/gpu is '" << c.allocatable_gpus() << "' after XID 48 on GPU 3, not 7" << c.describe();
    figure("XID 48 appended -> allocatable 7 in the API", since(t0));
    json unhealthy;
    EXPECT_TRUE(wait_until(
        [&] {
            unhealthy = node_events(c, node, "GPUUnhealthy");
            return unhealthy.size() > before.size();
        },
        seconds(30)))
        << "no GPUUnhealthy Event on node " << node << "\n" << reporter.err();
    figure("XID 48 appended -> GPUUnhealthy Event on the Node", since(t0));
    if (!unhealthy.empty()) {
        const json& e = unhealthy.back();
        EXPECT_EQ(e.value("type", ""), "Warning");
        EXPECT_EQ(e["involvedObject"].value("uid", ""), node) << "kubectl describe node finds node events by this UID";
        const std::string message = e.value("message", "");
        EXPECT_THAT(message, HasSubstr("GPU 3 (GPU-")) << message;
        EXPECT_THAT(message, HasSubstr("XID 48 (double-bit ECC error)")) << message;
        EXPECT_THAT(message, HasSubstr("1 nvidia.com/gpu device no longer allocatable")) << message;
        EXPECT_THAT(message, HasSubstr("nvidia-smi --gpu-reset -i 3")) << message;
        EXPECT_EQ(e["source"].value("component", ""), "kgpu-device-plugin");
    }
    EXPECT_THAT(c.kubectl({"describe", "node", node}).out, HasSubstr("GPUUnhealthy"));
    json health;
    EXPECT_TRUE(wait_until(
        [&] {
            const json n = c.get({"node", node});
            const std::string text = n.is_object() ? n["metadata"].value("annotations", json::object()).value("kgpu/gpu-health", "") : "";
            health = json::parse(text, nullptr, false);
            if (!health.is_object()) return false;
            for (const auto& [uuid, g] : health.items())
                if (g.is_object() && g.value("index", -1) == 3) return !g.value("healthy", true);
            return false;
        },
        seconds(30)))
        << "the kgpu/gpu-health annotation does not show GPU 3 Unhealthy: " << health.dump();

    const auto t1 = std::chrono::steady_clock::now();
    std::ofstream(sim_events(c.base()), std::ios::app) << "restore 3\n";
    EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "8"; }, seconds(60)))
        << "allocatable nvidia.com/gpu is '" << c.allocatable_gpus() << "' after GPU 3's reset, not 8" << c.describe();
    figure("GPU reset -> allocatable 8 in the API", since(t1));
    EXPECT_TRUE(wait_until(
        [&] {
            for (const auto& e : node_events(c, node, "GPUHealthy"))
                if (e.value("message", "").find("GPU 3 (") != std::string::npos && e.value("type", "") == "Normal") return true;
            return false;
        },
        seconds(30)))
        << "no GPUHealthy Event for GPU 3 on node " << node << "\n" << reporter.err();

    reporter.signal(SIGTERM);
    EXPECT_EQ(reporter.wait(30000), 0) << reporter.err();
    EXPECT_THAT(reporter.err(), HasSubstr("0 rate-limited, 0 not written")) << reporter.err();
    fs::remove(c.base() + "/pids/health-reporter");
}

// ---------------------------------------------------------------------------------------------
// 5. Kubelet restarts: one Register per restart, running GPU pods keep their devices.

TEST(KubeE2E, KubeletRestarts) {
    E2E_ATTACH(c);
    const auto t0 = std::chrono::steady_clock::now();
    // Ready again after KubeE2E.KubeletRestarts' restarts (its readiness probe runs again first).
    ASSERT_TRUE(wait_until([&] { return !ready_kgpu_pod(c).empty(); }, seconds(120))) << "no Ready kgpu pod" << c.describe();
    const std::string plugin = ready_kgpu_pod(c);
    ASSERT_TRUE(c.pod_ready("default", "gpu-2")) << "KubeE2E.GpuPods left no running pod gpu-2" << c.describe();
    const std::string id = c.container_id("default", "gpu-2", "cuda");
    const json before = c.pod("default", "gpu-2");
    const auto assigned = c.assigned_devices(before["metadata"]["uid"], "cuda");
    ASSERT_EQ(assigned.size(), 2u);
    const int base_kgpu = kgpu_registrations(c, plugin);
    ASSERT_GE(base_kgpu, 1) << "kgpu's log has no registration\n" << c.container_log("kube-system", plugin, "device-plugin");

    for (int i = 1; i <= 3; ++i) {
        SCOPED_TRACE(fmt::format("kubelet restart {}", i));
        const size_t starts = kubelet_registrations(c).size();
        auto r = run({"/bin/bash", kube_mini_script(), "restart-kubelet", c.state().kube}, seconds(120));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        // kgpu registers again with the new kubelet (its log), and the new kubelet took it.
        EXPECT_TRUE(wait_until([&] { return kgpu_registrations(c, plugin) >= base_kgpu + i; }, seconds(60)))
            << "kgpu did not register with the restarted kubelet\n" << c.container_log("kube-system", plugin, "device-plugin");
        EXPECT_TRUE(wait_until([&] {
            auto per = kubelet_registrations(c);
            return per.size() == starts + 1 && per.back() >= 1;
        }, seconds(60))) << "the kubelet's log has no registration for its new start" << c.describe();
        EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "8"; }, seconds(60))) << c.describe();
    }
    // Settled: the node reported its status twice more (its heartbeat, every 5 s here) after the
    // last registration, so a late second Register would have been seen by now.
    auto heartbeat = [&] {
        json n = c.get({"node", c.env("KUBE_NODE_NAME")});
        for (const auto& cond : n["status"].value("conditions", json::array()))
            if (cond.value("type", "") == "Ready") return cond.value("lastHeartbeatTime", "");
        return std::string();
    };
    for (int beat = 0; beat < 2; ++beat) {
        const std::string h = heartbeat();
        EXPECT_TRUE(wait_until([&] { return heartbeat() != h; }, seconds(60)));
    }
    EXPECT_EQ(kgpu_registrations(c, plugin), base_kgpu + 3)
        << "exactly one Register per kubelet restart (kgpu's log):\n" << c.container_log("kube-system", plugin, "device-plugin");
    auto per = kubelet_registrations(c);
    ASSERT_GE(per.size(), 4u);
    for (size_t k = per.size() - 3; k < per.size(); ++k)
        EXPECT_EQ(per[k], 1) << "kubelet start " << k + 1 << " took " << per[k] << " Register calls for nvidia.com/gpu";
    for (const auto& st : c.pod("kube-system", plugin)["status"].value("containerStatuses", json::array()))
        EXPECT_EQ(st.value("restartCount", -1), 0) << st.dump();

    // The running GPU pod kept its container and its devices.
    EXPECT_TRUE(c.pod_ready("default", "gpu-2"));
    EXPECT_EQ(c.container_id("default", "gpu-2", "cuda"), id) << "gpu-2's container was replaced";
    EXPECT_EQ(c.assigned_devices(before["metadata"]["uid"], "cuda"), assigned);
    auto ls = c.exec(id, "ls /dev");
    ASSERT_EQ(ls.exit_code, 0) << ls.err;
    EXPECT_EQ(gpu_nodes(ls.out), nodes_of(assigned)) << ls.out << ls.err;
    // A restarted kubelet holds every container not Ready until its readiness probe passes
    // again: kgpu's pod (the same one) comes back Ready.
    EXPECT_TRUE(wait_until([&] { return ready_kgpu_pod(c) == plugin; }, seconds(120)))
        << "kgpu's pod " << plugin << " not Ready again after the kubelet restarts" << c.describe();
    figure("case 5 (3 kubelet restarts)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 7. The exporter's metrics carry the pods' labels (from the kubelet's PodResources API v1).

TEST(KubeE2E, ExporterPodLabels) {
    E2E_ATTACH(c);
    const auto t0 = std::chrono::steady_clock::now();
    // Ready again after KubeE2E.KubeletRestarts' restarts (its readiness probe runs again first).
    ASSERT_TRUE(wait_until([&] { return !ready_kgpu_pod(c).empty(); }, seconds(120))) << "no Ready kgpu pod" << c.describe();
    const std::string plugin = ready_kgpu_pod(c);
    ASSERT_TRUE(c.pod_ready("default", "gpu-2")) << "KubeE2E.GpuPods left no running pod gpu-2" << c.describe();
    const json gpu2 = c.pod("default", "gpu-2");
    const auto assigned = c.assigned_devices(gpu2["metadata"]["uid"], "cuda");
    const std::string ip = c.pod("kube-system", plugin)["status"].value("podIP", "");
    ASSERT_FALSE(ip.empty());
    const std::string url = fmt::format("http://{}:9400/metrics", ip);
    // The exporter collects every 30 s (the manifest's --collect-interval): wait for a pass that
    // saw gpu-2.
    std::string metrics;
    // The DCGM_FI_DEV_GPU_UTIL series (one per GPU, dcgm-exporter's name) that carry gpu-2's labels.
    auto gpu2_series = [&] {
        std::vector<std::string> out;
        std::istringstream in(metrics);
        for (std::string l; std::getline(in, l);)
            if (l.starts_with("DCGM_FI_DEV_GPU_UTIL{") && l.find("pod=\"gpu-2\"") != std::string::npos &&
                l.find("namespace=\"default\"") != std::string::npos && l.find("container=\"cuda\"") != std::string::npos)
                out.push_back(l);
        return out;
    };
    auto labelled_uuids = [&] {
        std::vector<std::string> out;
        for (const auto& l : gpu2_series())
            for (const auto& u : uuids_in(l)) out.push_back(u);
        std::sort(out.begin(), out.end());
        return out;
    };
    EXPECT_TRUE(wait_until(
        [&] {
            metrics = run({"/usr/bin/curl", "-fsS", "--max-time", "5", url}, seconds(10)).out;
            return !assigned.empty() && labelled_uuids() == assigned;
        },
        seconds(90)))
        << "the DCGM_FI_DEV_GPU_UTIL series with pod=\"gpu-2\", namespace=\"default\", container=\"cuda\" are not exactly those of "
        << fmt::format("{}", fmt::join(assigned, ", ")) << " at " << url << ":\n"
        << fmt::format("{}", fmt::join(gpu2_series(), "\n")) << "\n--- first lines:\n" << metrics.substr(0, 3000);
    figure("case 7 (exporter pod labels)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 6. Migration between NVIDIA's device plugin and kgpu's, in both orders, restarting nothing.

// NVIDIA's k8s-device-plugin v0.18.2 (../shared/peers/nvidia) serving the node as a host process:
// it has no flag for its socket directory (/var/lib/kubelet/device-plugins is compiled in), so it
// runs in a private mount namespace where that path is the kubelet's (as kube-mini does for the
// kubelet). It loads the simulator from the driver root (--driver-root) and answers Allocate with
// volume mounts (the device list kgpu's runtime, secure settings, accepts; NVIDIA's default
// NVIDIA_VISIBLE_DEVICES variable is not believed from unprivileged pods).
class NvidiaPlugin {
public:
    NvidiaPlugin(const Cluster& c, const std::string& binary) : c_(c) {
        process_ = std::make_unique<kgpu::test::ChildProcess>(
            std::vector<std::string>{"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                                     "set -e; mount -t tmpfs kgpu-e2e /var/lib; mkdir -p /var/lib/kubelet/device-plugins; "
                                     "mount --bind \"$1\" /var/lib/kubelet/device-plugins; shift; exec \"$@\"",
                                     "sh", c.env("KUBELET_DEVICE_PLUGINS_DIR"), binary, "--driver-root=" + driver_root(c.base()),
                                     "--device-list-strategy=volume-mounts", "--fail-on-init-error=true"},
            // NVIDIA's platform detection dlopens the bare libnvidia-ml.so.1 (not from
            // --driver-root): the loader's path points at the simulated driver's.
            std::map<std::string, std::string>{{"KGPU_SIM_NODE", sim_fixture(c.base())},
                                               {"LD_LIBRARY_PATH", driver_root(c.base()) + "/usr/lib64"}});
        fs::create_directories(c.base() + "/pids");
        std::ofstream(c.base() + "/pids/nvidia-device-plugin") << process_->pid() << "\n";
    }
    int registrations() const { return count_of(process_->err(), "Registered device plugin for 'nvidia.com/gpu' with Kubelet"); }
    std::string log() const { return process_->err(); }
    bool running() { return process_->running(); }
    int stop() {
        process_->signal(SIGTERM);
        const int rc = process_->wait(30000);
        fs::remove(c_.base() + "/pids/nvidia-device-plugin");
        return rc;
    }

private:
    const Cluster& c_;
    std::unique_ptr<kgpu::test::ChildProcess> process_;
};

std::string kubelet_pid(const Cluster& c) { return trim(slurp(c.state().kube + "/pids/kubelet")); }

// The nvidia<N> nodes a running pod's container has now (through containerd: no pods/exec here).
std::vector<std::string> devices_now(const Cluster& c, const std::string& pod) {
    const RunResult r = c.exec(c.container_id("default", pod, "cuda"), "ls /dev");
    if (r.exit_code != 0) return {"<exec failed: " + r.err + ">"};
    if (r.out.find("null") == std::string::npos) return {"<exec printed no /dev listing: '" + r.out + "' " + r.err + ">"};
    return gpu_nodes(r.out);
}

// A 1-GPU pod that starts and sees exactly one GPU: someone live answered its Allocate.
std::string one_gpu_pod(const Cluster& c, const std::string& name, std::map<std::string, std::vector<std::string>>& kept) {
    SCOPED_TRACE("pod " + name);
    auto applied = c.apply(gpu_pod(name, 1, kShowGpus), name);
    EXPECT_EQ(applied.exit_code, 0) << applied.err;
    Shown shown;
    EXPECT_TRUE(started(c, name, shown));
    EXPECT_EQ(shown.nodes.size(), 1u) << shown.raw;
    EXPECT_EQ(shown.smi_lines, 1) << shown.raw;
    kept[name] = shown.nodes;
    return shown.env;  // its NVIDIA_* environment, from the Allocate that served it
}

TEST(KubeE2E, MigrationWithNvidiasPlugin) {
    E2E_ATTACH(c);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string xz = shared_dir() + "/peers/nvidia/nvidia-device-plugin.xz";
    if (!fs::exists(xz)) GTEST_SKIP() << "no " << xz << " (NVIDIA's device plugin from the workspace's shared peers)";
    const std::string binary = c.base() + "/peers/nvidia-device-plugin";
    fs::create_directories(fs::path(binary).parent_path());
    auto unpacked = run({"/bin/sh", "-c", "xz -dc \"$1\" > \"$2\" && chmod +x \"$2\"", "sh", xz, binary});
    ASSERT_EQ(unpacked.exit_code, 0) << unpacked.err;
    ASSERT_FALSE(ready_kgpu_pod(c).empty()) << "no Ready kgpu pod" << c.describe();
    ASSERT_TRUE(c.pod_ready("default", "gpu-2")) << "KubeE2E.GpuPods left no running pod gpu-2" << c.describe();
    std::vector<Manifest> ds;
    std::string error;
    ASSERT_TRUE(kustomization_manifests(c, ds, error, {"daemonset.yaml"})) << error;
    ASSERT_EQ(ds.size(), 1u);
    const std::string kubelet = kubelet_pid(c);
    std::map<std::string, std::vector<std::string>> kept = {{"gpu-2", devices_now(c, "gpu-2")}};
    ASSERT_EQ(kept["gpu-2"].size(), 2u);

    // A. NVIDIA's plugin serves the node; kgpu's DaemonSet is installed; NVIDIA's is removed.
    {
        SCOPED_TRACE("NVIDIA's plugin first, then kgpu, then NVIDIA's removed");
        auto deleted = c.kubectl({"delete", "daemonset", "-n", "kube-system", "kgpu"});
        ASSERT_EQ(deleted.exit_code, 0) << deleted.err;
        ASSERT_TRUE(wait_until([&] { return c.daemonset_pods("kgpu").empty(); }, seconds(90))) << c.describe();
        EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "0"; }, seconds(60)))
            << "kgpu's plugin gone, yet allocatable is " << c.allocatable_gpus();
        NvidiaPlugin nvidia(c, binary);
        ASSERT_TRUE(wait_until([&] { return nvidia.registrations() >= 1; }, seconds(60))) << nvidia.log();
        ASSERT_TRUE(wait_until([&] { return c.allocatable_gpus() == "8"; }, seconds(60))) << nvidia.log() << c.describe();
        const std::string nvidia_env = one_gpu_pod(c, "nvidia-served", kept);

        auto applied = c.apply(ds[0].yaml, "daemonset-again");
        ASSERT_EQ(applied.exit_code, 0) << applied.err;
        ASSERT_TRUE(wait_until([&] { return !ready_kgpu_pod(c).empty(); }, seconds(120))) << c.describe();
        const std::string plugin = ready_kgpu_pod(c);
        ASSERT_TRUE(wait_until([&] { return kgpu_registrations(c, plugin) >= 1; }, seconds(60)))
            << c.container_log("kube-system", plugin, "device-plugin");
        EXPECT_EQ(nvidia.stop(), 0) << nvidia.log();
        EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "8"; }, seconds(60))) << c.describe();
        const std::string kgpu_env = one_gpu_pod(c, "kgpu-served-a", kept);  // NVIDIA's plugin is gone: kgpu answered
        // A drop-in: the same Allocate environment as NVIDIA's plugin gives (same strategy).
        EXPECT_EQ(kgpu_env, nvidia_env) << "NVIDIA_* environment of a pod served by kgpu vs by NVIDIA's plugin";
        EXPECT_THAT(nvidia_env, HasSubstr("NVIDIA_VISIBLE_DEVICES="));
        EXPECT_EQ(ready_kgpu_pod(c), plugin);
    }
    const std::string plugin = ready_kgpu_pod(c);
    ASSERT_FALSE(plugin.empty());

    // B. kgpu serves; NVIDIA's plugin is installed after it; NVIDIA's is removed.
    {
        SCOPED_TRACE("kgpu first, then NVIDIA's plugin, then NVIDIA's removed");
        NvidiaPlugin nvidia(c, binary);
        ASSERT_TRUE(wait_until([&] { return nvidia.registrations() >= 1; }, seconds(60))) << nvidia.log();
        one_gpu_pod(c, "both-served", kept);
        EXPECT_EQ(nvidia.stop(), 0) << nvidia.log();
        EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "8"; }, seconds(60))) << c.describe();
        one_gpu_pod(c, "kgpu-served-b", kept);
    }

    // Nothing was restarted, and every running GPU pod kept its devices.
    EXPECT_EQ(ready_kgpu_pod(c), plugin) << "kgpu's pod was replaced";
    for (const auto& st : c.pod("kube-system", plugin)["status"]["containerStatuses"])
        EXPECT_EQ(st.value("restartCount", -1), 0) << st.dump();
    EXPECT_EQ(kubelet_pid(c), kubelet) << "the kubelet was restarted";
    EXPECT_EQ(c.allocatable_gpus(), "8");
    for (const auto& [pod, nodes] : kept) EXPECT_EQ(devices_now(c, pod), nodes) << "pod " << pod << " lost its GPUs";
    for (const auto& [pod, nodes] : kept) {
        if (pod != "gpu-2") {
            EXPECT_TRUE(c.delete_pod("default", pod));
        }
    }
    figure("case 6 (migration, both orders)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 8. containerd 2.1 (../shared/tools/containerd2): `runtime configure` and `runtime install` on a
// `version = 3` config, checked by containerd 2.1's own `config dump` and by a pod on the nvidia
// handler; the device plugin's cdi-cri strategy end to end, which containerd 1.6 cannot show (it
// ignores CRI's CDI devices). kube-mini's `up` runs Debian's containerd with a version 2 config,
// so this containerd runs beside the cluster, driven through its CRI client (cri-cdi-check, which
// makes the CRI calls the kubelet makes); the Allocate whose CDI names it passes comes from kgpu's
// device plugin (a host process) through the fake kubelet of tests/support.

// The value at a dotted path of containerd's `config dump` ("" when absent).
std::string dumped(const toml::table& t, const std::vector<std::string>& path) {
    toml::node_view<const toml::node> v{t};
    for (const auto& k : path) v = v[k];
    if (auto s = v.value<std::string>()) return *s;
    if (auto b = v.value<bool>()) return *b ? "true" : "false";
    return {};
}

TEST(KubeE2E, Containerd2) {
    E2E_ATTACH(c);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string pkg = shared_dir() + "/tools/containerd2";
    if (!fs::exists(pkg + "/scripts/start.sh")) GTEST_SKIP() << "no " << pkg << " (containerd 2.x from the workspace's shared tools)";
    const std::string bin = c.base() + "/ctrd2-bin", dir = c.base() + "/ctrd2";  // dir: <= 36 characters (shim sockets)
    ASSERT_LE(dir.size(), 36u);
    auto unpacked = run({"/bin/bash", pkg + "/scripts/unpack.sh", bin}, seconds(120));
    ASSERT_EQ(unpacked.exit_code, 0) << unpacked.err;
    const std::string sock = dir + "/containerd.sock", config = dir + "/config.toml", drop_in = dir + "/conf.d/99-nvidia.toml";
    const std::string install_dir = dir + "/kgpu", rt_config = dir + "/kgpu/container-runtime.toml", rt_log = dir + "/kgpu-runtime.log";
    // containerd's environment reaches kgpu's runtime (as in the cluster: see KubeE2E.Up).
    const std::map<std::string, std::string> env = {{"KGPU_RUNTIME_CONFIG", rt_config}, {"KGPU_SIM_NODE", sim_fixture(c.base())}};
    auto start = [&] { return run({"/bin/bash", pkg + "/scripts/start.sh", dir, bin}, seconds(60), env); };
    auto started = start();
    ASSERT_EQ(started.exit_code, 0) << started.err;
    ASSERT_THAT(slurp(config), HasSubstr("version = 3"));
    auto ctr2 = [&](const std::vector<std::string>& args) {
        std::vector<std::string> argv = {bin + "/ctr", "--address", sock, "--namespace", "k8s.io"};
        argv.insert(argv.end(), args.begin(), args.end());
        return run(argv);
    };
    auto pause = run({"/usr/bin/python3", pkg + "/scripts/make-busybox-image.py", dir + "/pause.tar", "localhost/ctrd2/pause:busybox",
                      "/bin/busybox", R"(["/bin/sleep","2147483647"])"});
    ASSERT_EQ(pause.exit_code, 0) << pause.err;
    for (const auto& tar : {dir + "/pause.tar", c.base() + "/workload-image/image.tar"}) {
        auto imported = ctr2({"images", "import", tar});
        ASSERT_EQ(imported.exit_code, 0) << tar << ": " << imported.err;
    }
    auto dump = [&] {
        auto d = run({bin + "/containerd", "--config", config, "config", "dump"});
        EXPECT_EQ(d.exit_code, 0) << d.err;
        try {
            return toml::parse(d.out);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "containerd 2.1's config dump is not TOML: " << e.what() << "\n" << d.out;
            return toml::table{};
        }
    };
    const std::vector<std::string> cri = {"plugins", "io.containerd.cri.v1.runtime"};
    auto nvidia_binary = [&](const toml::table& t) {
        auto p = cri;
        p.insert(p.end(), {"containerd", "runtimes", "nvidia", "options", "BinaryName"});
        return dumped(t, p);
    };

    // `kgpu runtime configure` on the version 3 config (the drop-in its imports read), with CDI.
    auto configured = run({KGPU_BINARY, "runtime", "configure", "--runtime", "containerd", "--config", config, "--drop-in-config",
                           drop_in, "--cdi.enabled", "--executable-path", bin + "/containerd"});
    ASSERT_EQ(configured.exit_code, 0) << configured.out << configured.err;
    EXPECT_THAT(configured.out + configured.err, HasSubstr("containerd 2.1")) << "kgpu checks its edit with containerd 2.1's dump";
    toml::table after_configure = dump();
    EXPECT_FALSE(nvidia_binary(after_configure).empty()) << "no runtimes.nvidia in containerd 2.1's dump";
    EXPECT_EQ(dumped(after_configure, {"plugins", "io.containerd.cri.v1.runtime", "enable_cdi"}), "true");

    // `kgpu runtime install` on the same config: the nvidia runtime becomes kgpu's and containerd
    // is restarted with SIGHUP; the install waits for it to serve its socket again, and this test
    // is the service manager that starts it.
    const std::string old_pid = trim(slurp(dir + "/containerd.pid"));
    kgpu::test::ChildProcess install({KGPU_BINARY, "runtime", "install", "--host-root=/", "--config=" + config, "--drop-in=" + drop_in,
                                      "--install-dir=" + install_dir, "--runtime-config=" + rt_config, "--runtime-log-file=" + rt_log,
                                      "--socket=" + sock, "--restart-mode=signal", "--nvidia-driver-root=" + driver_root(c.base()),
                                      "--enable-cdi", "--no-dev-char-links"});
    ASSERT_TRUE(wait_until([&] { return ::kill(std::stoi(old_pid), 0) != 0; }, seconds(120)))
        << "containerd 2.1 did not exit on the install's SIGHUP\n" << install.out() << install.err();
    started = start();
    ASSERT_EQ(started.exit_code, 0) << started.err;
    ASSERT_EQ(install.wait(120000), 0) << install.out() << install.err();
    EXPECT_THAT(install.out(), HasSubstr(sock + " again")) << "the install saw containerd 2.1 back";
    // The runtime logs a container without GPUs at debug level only: the test turns that on,
    // to see kgpu's runtime handle such a container below (the runtime reads it at every call).
    {
        std::string rc = slurp(rt_config);
        const auto at = rc.find("log-level = \"info\"");
        ASSERT_NE(at, std::string::npos) << rt_config << ":\n" << rc;
        rc.replace(at, std::string("log-level = \"info\"").size(), "log-level = \"debug\"");
        std::ofstream(rt_config) << rc;
    }
    toml::table after_install = dump();
    EXPECT_EQ(nvidia_binary(after_install), install_dir + "/kgpu-container-runtime");
    EXPECT_EQ(dumped(after_install, {"plugins", "io.containerd.cri.v1.runtime", "enable_cdi"}), "true");

    const std::string cri_check = bin + "/cri-cdi-check";
    auto pod = [&](const std::string& name, const std::vector<std::string>& flags, const std::string& script) {
        std::vector<std::string> argv = {cri_check, "-addr", sock, "-image", kWorkloadImage, "-logdir", dir + "/podlogs", "-name", name};
        argv.insert(argv.end(), flags.begin(), flags.end());
        argv.insert(argv.end(), {"--", "/bin/sh", "-c", script});
        return run(argv, seconds(120));
    };
    const std::string show = "ls /dev; echo '--- smi'; nvidia-smi -L; echo \"rc=$?\"; echo '--- sha'; echo; echo '--- end'";

    // A pod on the nvidia handler runs through kgpu's runtime (its log has the container).
    auto nv = pod("nvidia-handler", {"-runtime-handler", "nvidia"}, show);
    EXPECT_EQ(nv.exit_code, 0) << nv.out << nv.err;
    std::smatch id;
    const std::string nv_out = nv.out;
    ASSERT_TRUE(std::regex_search(nv_out, id, std::regex("container: ([0-9a-f]{64})"))) << nv.out << nv.err;
    EXPECT_THAT(slurp(rt_log), HasSubstr(id[1].str())) << "kgpu's runtime did not run the container";
    EXPECT_TRUE(parse_shown(nv.out).nodes.empty()) << "no GPU asked for\n" << nv.out;

    // cdi-cri: kgpu's device plugin answers Allocate with CDI names and writes their spec into
    // containerd 2.1's CDI directory; the names go in CRI's CDI_devices field; the container gets
    // exactly those GPUs.
    const std::string dp_dir = c.base() + "/cdi-cri";
    fs::create_directories(dp_dir);
    kgpu::test::FakeKubelet kubelet(dp_dir);
    ASSERT_TRUE(kubelet.start());
    kgpu::test::ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-list-strategy=cdi-cri", "--device-plugin-path=" + dp_dir,
                                     "--cdi-spec-dir=" + dir + "/cdi", "--nvidia-driver-root=" + driver_root(c.base()),
                                     "--nvml-library=" + driver_root(c.base()) + "/usr/lib64/libnvidia-ml.so.1",
                                     "--nvidia-cdi-hook-path=" + install_dir + "/nvidia-cdi-hook"},
                                    {{"KGPU_SIM_NODE", sim_fixture(c.base())}});
    fs::create_directories(c.base() + "/pids");
    std::ofstream(c.base() + "/pids/kgpu-device-plugin-cdi-cri") << plugin.pid() << "\n";
    ASSERT_TRUE(kubelet.wait_registered("nvidia.com/gpu", 1, std::chrono::seconds(30))) << plugin.err();
    std::vector<std::string> ids;
    for (const auto& [dev, st] : kubelet.devices("nvidia.com/gpu")) ids.push_back(dev);
    ASSERT_GE(ids.size(), 2u);
    const std::vector<std::string> two = {ids[1], ids[4 % ids.size()]};
    v1beta1::AllocateResponse resp;
    auto status = kubelet.allocate("nvidia.com/gpu", {two}, &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(resp.container_responses_size(), 1);
    std::vector<std::string> names;
    for (const auto& d : resp.container_responses(0).cdi_devices()) names.push_back(d.name());
    ASSERT_FALSE(names.empty()) << "Allocate with cdi-cri returned no CDI names";
    auto cdi = pod("cdi-cri", {"-cdi", fmt::format("{}", fmt::join(names, ","))}, show);
    EXPECT_EQ(cdi.exit_code, 0) << "CDI names " << fmt::format("{}", fmt::join(names, ",")) << "\n" << cdi.out << cdi.err;
    const Shown shown = parse_shown(cdi.out);
    auto want = two;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(shown.nodes, nodes_of(want)) << cdi.out;
    EXPECT_EQ(shown.smi_uuids, want) << cdi.out;
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(10000), 0) << plugin.err();
    fs::remove(c.base() + "/pids/kgpu-device-plugin-cdi-cri");
    kubelet.stop();

    auto stopped = run({"/bin/bash", pkg + "/scripts/stop.sh", dir, bin}, seconds(120));
    EXPECT_EQ(stopped.exit_code, 0) << stopped.out << stopped.err;
    figure("case 8 (containerd 2.1)", since(t0));
}

// ---------------------------------------------------------------------------------------------
// 9. Labels on the Node without NFD (issue #27 part 3): `kgpu labels --write-node-labels` through
// the real API server, removing only what it set before.

TEST(KubeE2E, NodeLabelsWithoutNfd) {
    E2E_ATTACH(c);
    const std::string node = c.env("KUBE_NODE_NAME");
    const std::map<std::string, std::string> env = {{"KGPU_SIM_NODE", sim_fixture(c.base())}, {"NODE_NAME", node}};
    const std::vector<std::string> argv = {KGPU_BINARY, "labels", "--oneshot", "--write-node-labels", "--kubeconfig",
                                           c.env("KUBECONFIG"), "--nvml-library", KGPU_SIM_LIBRARY, "--no-timestamp"};
    // A label kgpu set in an earlier run that no longer applies, and one somebody else set.
    auto pre = c.kubectl({"label", "node", node, "nvidia.com/gpu.stale=1", "example.com/keep=1"});
    ASSERT_EQ(pre.exit_code, 0) << pre.err;
    auto note = c.kubectl({"annotate", "node", node, "kgpu/node-labels=nvidia.com/gpu.stale"});
    ASSERT_EQ(note.exit_code, 0) << note.err;

    const auto t0 = std::chrono::steady_clock::now();
    auto r = run(argv, seconds(60), env);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    figure("kgpu labels --write-node-labels (one pass)", since(t0));
    json n = c.get({"node", node});
    const json labels = n["metadata"].value("labels", json::object());
    EXPECT_EQ(labels.value("nvidia.com/gpu.count", ""), "8") << labels.dump();
    EXPECT_EQ(labels.value("nvidia.com/gpu.present", ""), "true") << labels.dump();
    EXPECT_THAT(labels.value("nvidia.com/gpu.product", ""), HasSubstr("H100")) << labels.dump();
    EXPECT_FALSE(labels.contains("nvidia.com/gpu.stale")) << "kgpu's earlier label stays: " << labels.dump();
    EXPECT_EQ(labels.value("example.com/keep", ""), "1") << "a label kgpu did not set was touched";
    const std::string owned = n["metadata"]["annotations"].value("kgpu/node-labels", "");
    EXPECT_THAT(owned, HasSubstr("nvidia.com/gpu.count"));
    EXPECT_THAT(owned, Not(HasSubstr("stale")));
    EXPECT_THAT(r.err, HasSubstr("set or removed")) << r.err;

    // The same labels again: nothing to change, no PATCH.
    auto again = run(argv, seconds(60), env);
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_THAT(again.err, HasSubstr("0 set or removed")) << again.err;

    // An API server that refuses the credentials: a clear failure naming the server's answer.
    const std::string bad = c.base() + "/bad-kubeconfig";
    {
        std::string text = slurp(c.env("KUBECONFIG"));
        static const std::regex token(R"re(token: "[^"]*")re");
        std::ofstream(bad) << std::regex_replace(text, token, "token: \"wrong\"");
    }
    std::vector<std::string> bad_argv = argv;
    bad_argv[5] = bad;
    auto refused = run(bad_argv, seconds(60), env);
    EXPECT_EQ(refused.exit_code, 1) << refused.err;
    EXPECT_THAT(refused.err, HasSubstr("401")) << refused.err;
    EXPECT_THAT(refused.err, HasSubstr(node)) << refused.err;
    c.kubectl({"label", "node", node, "example.com/keep-"});

    // kgpu doctor's kube.api: the real API server, the Node, and RBAC as far as the server answers
    // (kube-mini serves no authorization API), then the refused credentials.
    auto api_check = [&](const std::string& kubeconfig) {
        auto d = run({KGPU_BINARY, "doctor", "--json", "--nvml-library", KGPU_SIM_LIBRARY, "--kubeconfig", kubeconfig,
                      "--node-name", node},
                     seconds(120), {{"KGPU_SIM_NODE", sim_fixture(c.base())}});
        const json report = json::parse(d.out, nullptr, false);
        if (report.is_object())
            for (const auto& check : report.value("checks", json::array()))
                if (check.value("id", "") == "kube.api") return check;
        return json{{"status", "missing"}, {"evidence", d.out + d.err}};
    };
    const json ok = api_check(c.env("KUBECONFIG"));
    EXPECT_EQ(ok.value("status", ""), "ok") << ok.dump(2);
    EXPECT_THAT(ok.value("evidence", ""), HasSubstr("/version: 200 v1.32")) << ok.dump(2);
    EXPECT_THAT(ok.value("evidence", ""), HasSubstr("GET /api/v1/nodes/" + node + ": 200")) << ok.dump(2);
    const json no = api_check(bad);
    EXPECT_EQ(no.value("status", ""), "fail") << no.dump(2);
    EXPECT_THAT(no.value("fix", ""), HasSubstr("refuses kgpu's credentials")) << no.dump(2);
}

// Per-node configs by node label (issue #27 part 1), through the real API server and the real
// kubelet: the plugin reads a ConfigMap-shaped directory, watches its Node and follows
// nvidia.com/device-plugin.config without a restart, and sets nvidia.com/device-plugin.config.state.
// kube-mini gives pods no API access, so the plugin runs on the host, registered with the
// cluster's kubelet; its configs rename the shared resource (nvidia.com/gpu.shared), so the
// deployed plugin's nvidia.com/gpu is left alone and the node's allocatable shows each switch.
TEST(KubeE2E, ConfigByNodeLabel) {
    E2E_ATTACH(c);
    const std::string node = c.env("KUBE_NODE_NAME");
    const std::string srcdir = c.base() + "/config-by-label";
    fs::create_directories(srcdir + "/..2026_12_02");
    auto shared = [](int replicas) {
        return fmt::format("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                           "    - name: nvidia.com/gpu\n      replicas: {}\n",
                           replicas);
    };
    std::ofstream(srcdir + "/..2026_12_02/default") << shared(2);
    std::ofstream(srcdir + "/..2026_12_02/ts4") << shared(4);
    fs::create_directory_symlink("..2026_12_02", srcdir + "/..data");
    fs::create_symlink("..data/default", srcdir + "/default");
    fs::create_symlink("..data/ts4", srcdir + "/ts4");
    auto state = [&] {
        const json n = c.get({"node", node});
        return n.is_object() ? n["metadata"].value("labels", json::object()).value("nvidia.com/device-plugin.config.state", "<none>")
                             : std::string("<unreadable>");
    };
    auto allocatable = [&] {
        const json n = c.get({"node", node});
        return n.is_object() ? n["status"].value("allocatable", json::object()).value("nvidia.com/gpu.shared", "<none>")
                             : std::string("<unreadable>");
    };
    c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config-"});
    const std::string gpus_before = c.allocatable_gpus();

    kgpu::test::ChildProcess plugin(
        {KGPU_BINARY, "device-plugin", "--nvml-library", KGPU_SIM_LIBRARY, "--device-plugin-path",
         c.env("KUBELET_DEVICE_PLUGINS_DIR"), "--kubeconfig", c.env("KUBECONFIG"), "--node-name", node,
         "--node-health-events=false"},
        {{"KGPU_SIM_NODE", sim_fixture(c.base())}, {"CONFIG_FILE_SRCDIR", srcdir}});
    fs::create_directories(c.base() + "/pids");
    std::ofstream(c.base() + "/pids/config-by-label") << plugin.pid() << "\n";
    EXPECT_TRUE(wait_until([&] { return allocatable() == "16"; }, seconds(60)))
        << "allocatable nvidia.com/gpu.shared is " << allocatable() << ", not 16 (the default config)\n" << plugin.err();
    EXPECT_THAT(plugin.err(), HasSubstr("config 'default' (fallback named (a config called default))"));
    EXPECT_TRUE(wait_until([&] { return state() == "default"; }, seconds(30))) << state() << "\n" << plugin.err();

    // The label names ts4: 4 replicas per GPU, without a restart.
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config=ts4"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return allocatable() == "32"; }, seconds(60)))
        << "allocatable nvidia.com/gpu.shared is " << allocatable() << " after config=ts4, not 32\n" << plugin.err();
    figure("node label config=ts4 -> allocatable nvidia.com/gpu.shared 32 in the API", since(t0));
    EXPECT_TRUE(wait_until([&] { return state() == "ts4"; }, seconds(30))) << state();
    // GFD's half: kgpu labels reads the same label and labels with the same config.
    auto gfd = [&] {
        return run({KGPU_BINARY, "labels", "--oneshot", "--output-file", "-", "--no-timestamp", "--nvml-library",
                    KGPU_SIM_LIBRARY, "--config-file-srcdir", srcdir, "--node-name", node, "--kubeconfig", c.env("KUBECONFIG")},
                   seconds(60), {{"KGPU_SIM_NODE", sim_fixture(c.base())}});
    };
    auto l = gfd();
    EXPECT_EQ(l.exit_code, 0) << l.err;
    EXPECT_THAT(l.out, HasSubstr("nvidia.com/gpu.replicas=4")) << l.out << l.err;
    EXPECT_THAT(l.err, HasSubstr("config 'ts4' (node label nvidia.com/device-plugin.config=ts4)")) << l.err;

    // A name with no config: the default, with a warning naming what exists.
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config=ts9", "--overwrite"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return allocatable() == "16"; }, seconds(60))) << allocatable() << "\n" << plugin.err();
    EXPECT_THAT(plugin.err(), HasSubstr("nvidia.com/device-plugin.config=ts9: no config of that name"));
    EXPECT_TRUE(wait_until([&] { return state() == "default"; }, seconds(30))) << state();

    // Back to ts4, then the label removed: the default again.
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config=ts4", "--overwrite"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return allocatable() == "32"; }, seconds(60))) << allocatable();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config-"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return allocatable() == "16" && state() == "default"; }, seconds(60)))
        << allocatable() << " " << state() << "\n" << plugin.err();
    l = gfd();
    EXPECT_THAT(l.out, HasSubstr("nvidia.com/gpu.replicas=2")) << l.out << l.err;
    // One process throughout, and one registration: a switch publishes a new list over the stream.
    EXPECT_TRUE(plugin.running()) << plugin.err();
    EXPECT_EQ(c.allocatable_gpus(), gpus_before) << "the deployed plugin's nvidia.com/gpu was disturbed";

    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(30000), 0) << plugin.err();
    fs::remove(c.base() + "/pids/config-by-label");
    c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config.state-"});

    // NVIDIA's shape: `kgpu config-manager` as the init container (--oneshot) and the sidecar,
    // linking the chosen config where the plugin reads it and sending SIGHUP to the process
    // called nvidia-device-plugin (here kgpu's binary under that name, with its own directory).
    const std::string cm_dir = c.base() + "/config-manager";
    fs::create_directories(cm_dir + "/dp");
    const std::string nvidia_named = cm_dir + "/nvidia-device-plugin";
    if (!fs::exists(nvidia_named)) fs::create_symlink(KGPU_BINARY, nvidia_named);
    const std::string dst = cm_dir + "/config.yaml";
    const std::vector<std::string> cm_args = {"config-manager", "--node-name", node, "--kubeconfig", c.env("KUBECONFIG"),
                                              "--config-file-srcdir", srcdir, "--config-file-dst", dst,
                                              "--fallback-strategies", "named"};
    std::vector<std::string> init = {KGPU_BINARY};
    init.insert(init.end(), cm_args.begin(), cm_args.end());
    init.insert(init.end(), {"--oneshot", "--send-signal=false"});
    auto once = run(init, seconds(60));
    EXPECT_EQ(once.exit_code, 0) << once.err;
    EXPECT_EQ(fs::read_symlink(dst).string(), srcdir + "/default") << once.err;
    kgpu::test::ChildProcess nvidia_shaped({nvidia_named, "device-plugin", "--nvml-library", KGPU_SIM_LIBRARY,
                                            "--device-plugin-path", cm_dir + "/dp", "--config-file", dst,
                                            "--node-health-events=false"},
                                           {{"KGPU_SIM_NODE", sim_fixture(c.base())}});
    std::ofstream(c.base() + "/pids/config-manager-plugin") << nvidia_shaped.pid() << "\n";
    EXPECT_TRUE(wait_until([&] { return nvidia_shaped.err().find("nvidia.com/gpu.shared (16 devices)") != std::string::npos; },
                           seconds(60)))
        << nvidia_shaped.err();
    std::vector<std::string> sidecar_argv = {KGPU_BINARY};
    sidecar_argv.insert(sidecar_argv.end(), cm_args.begin(), cm_args.end());
    kgpu::test::ChildProcess sidecar(sidecar_argv);
    std::ofstream(c.base() + "/pids/config-manager") << sidecar.pid() << "\n";
    EXPECT_TRUE(wait_until([&] { return sidecar.err().find("label nvidia.com/device-plugin.config=(absent)") != std::string::npos; },
                           seconds(30)))
        << sidecar.err();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config=ts4"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return nvidia_shaped.err().find("the devices changed (now 32)") != std::string::npos; },
                           seconds(30)))
        << "sidecar:\n" << sidecar.err() << "\nplugin:\n" << nvidia_shaped.err();
    // The sidecar logs after it signalled: the plugin may have reloaded before that line is written.
    const std::string signalled = "sent signal 1 to 'nvidia-device-plugin' (pid " + std::to_string(nvidia_shaped.pid());
    EXPECT_TRUE(wait_until([&] { return sidecar.err().find(signalled) != std::string::npos; }, seconds(30))) << sidecar.err();
    EXPECT_EQ(fs::read_symlink(dst).string(), srcdir + "/ts4");
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config-"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return nvidia_shaped.err().find("the devices changed (now 16)") != std::string::npos; },
                           seconds(30)))
        << sidecar.err();
    sidecar.signal(SIGTERM);
    EXPECT_EQ(sidecar.wait(30000), 0) << sidecar.err();
    nvidia_shaped.signal(SIGTERM);
    EXPECT_EQ(nvidia_shaped.wait(30000), 0) << nvidia_shaped.err();
    fs::remove(c.base() + "/pids/config-manager");
    fs::remove(c.base() + "/pids/config-manager-plugin");

    // The MPS DaemonSet's shape (deploy/kubernetes/mps-control-daemon.yaml): the same sidecar
    // signals `kgpu mps-control-daemon`, which restarts its daemons on the config the label
    // names (here one that shares with MPS, next to the time-slicing ones).
    std::ofstream(srcdir + "/..2026_12_02/mps2")
        << "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n";
    fs::create_symlink("..data/mps2", srcdir + "/mps2");
    const std::string mps_dst = cm_dir + "/mps/config.yaml";
    const std::string mps_root = cm_dir + "/mps/root";
    fs::create_directories(cm_dir + "/mps");
    std::vector<std::string> mps_cm = {KGPU_BINARY, "config-manager", "--node-name", node, "--kubeconfig", c.env("KUBECONFIG"),
                                       "--config-file-srcdir", srcdir, "--config-file-dst", mps_dst,
                                       "--fallback-strategies", "named", "--process-to-signal", "kgpu mps-control-daemon"};
    std::vector<std::string> mps_init = mps_cm;
    mps_init.insert(mps_init.end(), {"--oneshot", "--send-signal=false"});
    once = run(mps_init, seconds(60));
    EXPECT_EQ(once.exit_code, 0) << once.err;
    kgpu::test::ChildProcess mps({KGPU_BINARY, "mps-control-daemon", "--nvml-library", KGPU_SIM_LIBRARY, "--config-file",
                                  mps_dst, "--mps-root", mps_root, "--mps-control-binary", KGPU_MPS_CONTROL_SIM},
                                 {{"KGPU_SIM_NODE", sim_fixture(c.base())}});
    std::ofstream(c.base() + "/pids/config-manager-mps") << mps.pid() << "\n";
    EXPECT_TRUE(wait_until([&] { return mps.err().find("shares nothing with MPS") != std::string::npos; }, seconds(30)))
        << mps.err();
    kgpu::test::ChildProcess mps_sidecar(mps_cm);
    std::ofstream(c.base() + "/pids/config-manager-mps-sidecar") << mps_sidecar.pid() << "\n";
    EXPECT_TRUE(wait_until([&] { return mps_sidecar.err().find("label nvidia.com/device-plugin.config=(absent)") != std::string::npos; },
                           seconds(30)))
        << mps_sidecar.err();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config=mps2"}).exit_code, 0);
    // The daemon for nvidia.com/gpu runs (its .started) with the config's replicas.
    EXPECT_TRUE(wait_until([&] { return fs::exists(mps_root + "/nvidia.com/gpu/.started"); }, seconds(60)))
        << "sidecar:\n" << mps_sidecar.err() << "\nmps-control-daemon:\n" << mps.err();
    EXPECT_THAT(mps.err(), HasSubstr("MPS nvidia.com/gpu: 8 GPUs, 2 replicas each"));
    const std::string mps_signalled = "sent signal 1 to 'kgpu mps-control-daemon' (pid " + std::to_string(mps.pid());
    EXPECT_TRUE(wait_until([&] { return mps_sidecar.err().find(mps_signalled) != std::string::npos; }, seconds(30)))
        << mps_sidecar.err();
    // Back to the default: the daemons are quit, nothing is shared.
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config-"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return !fs::exists(mps_root + "/nvidia.com/gpu/.started") &&
                                        count_of(mps.err(), "shares nothing with MPS") == 2; },
                           seconds(60)))
        << mps.err();
    EXPECT_TRUE(mps.running()) << mps.err();
    mps_sidecar.signal(SIGTERM);
    EXPECT_EQ(mps_sidecar.wait(30000), 0) << mps_sidecar.err();
    mps.signal(SIGTERM);
    EXPECT_EQ(mps.wait(30000), 0) << mps.err();
    fs::remove(c.base() + "/pids/config-manager-mps");
    fs::remove(c.base() + "/pids/config-manager-mps-sidecar");
}

// The API server away for 30 s (issue #27): the plugin keeps serving, marks an XID meanwhile,
// posts its Event once the server is back (the recorder's retries), and its watch resumes: a
// label switch after the outage still applies. The API server is stopped (SIGTERM) and started
// again with its own command line, as kube-mini started it.
TEST(KubeE2E, ApiServerDown) {
    E2E_ATTACH(c);
    const std::string node = c.env("KUBE_NODE_NAME");
    const std::string dir = c.base() + "/api-down";
    fs::create_directories(dir + "/dp");
    fs::create_directories(dir + "/configs");
    fs::create_directories(dir + "/status");
    std::ofstream(dir + "/configs/default") << "version: v1\n";
    std::ofstream(dir + "/configs/ts4")
        << "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n";
    c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config-"});
    kgpu::test::ChildProcess plugin(
        {KGPU_BINARY, "device-plugin", "--nvml-library", KGPU_SIM_LIBRARY, "--device-plugin-path", dir + "/dp",
         "--kubeconfig", c.env("KUBECONFIG"), "--node-name", node, "--kube-api-status-file", dir + "/status/device-plugin.json"},
        {{"KGPU_SIM_NODE", sim_fixture(c.base())}, {"KGPU_SIM_EVENTS", sim_events(c.base())},
         {"CONFIG_FILE_SRCDIR", dir + "/configs"}});
    std::ofstream(c.base() + "/pids/api-down-plugin") << plugin.pid() << "\n";
    ASSERT_TRUE(wait_until([&] { return plugin.err().find("serving nvidia.com/gpu (8 devices)") != std::string::npos; }, seconds(60)))
        << plugin.err();

    // The watches answered so far (counted when their answer begins; the status file is
    // written within a second of a change): at least the one that is open now.
    auto watches_answered = [&] {
        double n = 0;
        const auto st = nlohmann::json::parse(slurp(dir + "/status/device-plugin.json"), nullptr, false);
        if (st.is_object())
            for (const auto& e : st.value("requests", nlohmann::json::array()))
                if (e.value("method", "") == "WATCH" && e.value("code", "") == "200") n += e.value("count", 0.0);
        return n;
    };
    EXPECT_TRUE(wait_until([&] { return watches_answered() >= 1.0; }, seconds(30))) << slurp(dir + "/status/device-plugin.json");

    const std::string pidfile = c.state().kube + "/pids/apiserver";
    const int pid = std::atoi(trim(slurp(pidfile)).c_str());
    std::string cmdline = slurp(fmt::format("/proc/{}/cmdline", pid));
    ASSERT_GT(pid, 1);
    ASSERT_THAT(cmdline, HasSubstr("apiserver"));
    std::vector<std::string> argv;
    for (std::size_t at = 0; at < cmdline.size();) {
        const auto end = cmdline.find('\0', at);
        argv.push_back(cmdline.substr(at, end - at));
        at = end == std::string::npos ? cmdline.size() : end + 1;
    }
    // SIGTERM: it stops listening at once, then waits for the kubelet's and kgpu's watches to
    // drain; what is left of it after 5 s is killed (as kube-mini's own stop does after its grace).
    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    if (!wait_until([&] { return ::kill(pid, 0) != 0; }, seconds(5))) ::kill(pid, SIGKILL);
    ASSERT_TRUE(wait_until([&] { return ::kill(pid, 0) != 0; }, seconds(30))) << "the API server did not end";
    const auto down = std::chrono::steady_clock::now();

    // Away: an XID on GPU 2; the plugin marks it and keeps serving.
    std::ofstream(sim_events(c.base()), std::ios::app) << "xid 2 48\n";
    EXPECT_TRUE(wait_until([&] { return plugin.err().find("GPU 2 (GPU-") != std::string::npos &&
                                        plugin.err().find("is now Unhealthy") != std::string::npos; },
                           seconds(30)))
        << plugin.err();
    std::this_thread::sleep_until(down + seconds(30));
    EXPECT_TRUE(plugin.running()) << plugin.err();
    // The watches answered before the outage, from the file once it counts a failure of the
    // outage: written after the last answer before it (the writer lags a change by up to 1 s).
    double watches_before = -1;
    EXPECT_TRUE(wait_until([&] {
        const auto st = nlohmann::json::parse(slurp(dir + "/status/device-plugin.json"), nullptr, false);
        bool failed = false;
        if (st.is_object())
            for (const auto& e : st.value("errors", nlohmann::json::array()))
                failed = failed || (e.value("kind", "") == "unreachable" && e.value("count", 0.0) >= 1.0);
        if (failed) watches_before = watches_answered();
        return failed;
    }, seconds(30))) << slurp(dir + "/status/device-plugin.json");

    std::vector<std::string> start = {"/bin/sh", "-c", "setsid \"$@\" >> \"$LOG\" 2>&1 < /dev/null & echo $! > \"$PIDFILE\"", "sh"};
    start.insert(start.end(), argv.begin(), argv.end());
    auto started = run(start, seconds(30), {{"LOG", c.state().kube + "/logs/apiserver.log"}, {"PIDFILE", pidfile}});
    ASSERT_EQ(started.exit_code, 0) << started.err;
    ASSERT_TRUE(wait_until([&] { return c.kubectl({"get", "--raw", "/readyz"}).exit_code == 0; }, seconds(60)))
        << "the API server did not come back";
    const auto back = std::chrono::steady_clock::now();
    figure("API server back after 30 s away", since(down));

    // The Event written once the server answers again, and the watch resumed.
    EXPECT_TRUE(wait_until(
        [&] {
            for (const auto& e : node_events(c, node, "GPUUnhealthy"))
                if (e.value("message", "").find("GPU 2 (") != std::string::npos) return true;
            return false;
        },
        seconds(120)))
        << "no GPUUnhealthy Event for GPU 2 after the API server came back\n" << plugin.err();
    figure("API server back -> the Event written during the outage is on the Node", since(back));
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config=ts4"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return plugin.err().find("the devices changed (now 32)") != std::string::npos; }, seconds(90)))
        << plugin.err();
    figure("API server back -> a label switch applied (the watch resumed)", since(back));
    // Each kind of failure logged once, not once per retry.
    const std::string log = plugin.err();
    std::size_t warnings = 0;
    for (std::size_t at = 0; (at = log.find("logged once for this kind", at)) != std::string::npos; ++at) ++warnings;
    EXPECT_LE(warnings, 4u) << log;
    // ... and counted, for the exporter (kgpu_kube_api_errors_total): the outage's failures, the
    // watch that came back, the Event written.
    nlohmann::json status;
    auto count = [&](const char* list, const char* key, const std::string& value, const std::string& code = "") {
        double n = 0;
        for (const auto& e : status.value(list, nlohmann::json::array()))
            if (e.value(key, "") == value && (code.empty() || e.value("code", "") == code)) n += e.value("count", 0.0);
        return n;
    };
    // The file as the writer leaves it once all three are counted (it writes within a second of
    // a change); the checks below then say which one is missing.
    wait_until([&] {
        status = nlohmann::json::parse(slurp(dir + "/status/device-plugin.json"), nullptr, false);
        return status.is_object() && count("errors", "kind", "unreachable") >= 1.0 &&
               count("requests", "method", "WATCH", "200") > watches_before && count("events", "result", "created") >= 1.0;
    }, seconds(30));
    ASSERT_TRUE(status.is_object()) << slurp(dir + "/status/device-plugin.json");
    // Connections refused while it was away (and the watch it ended, cut or closed).
    EXPECT_GE(count("errors", "kind", "unreachable"), 1.0) << status.dump();
    EXPECT_GT(count("requests", "method", "WATCH", "200"), watches_before) << "no watch answered since" << status.dump();
    EXPECT_GE(count("events", "result", "created"), 1.0) << status.dump();
    EXPECT_EQ(status.value("component", ""), "device-plugin");

    std::ofstream(sim_events(c.base()), std::ios::app) << "restore 2\n";
    c.kubectl({"label", "node", node, "nvidia.com/device-plugin.config-", "nvidia.com/device-plugin.config.state-"});
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(30000), 0) << plugin.err();
    fs::remove(c.base() + "/pids/api-down-plugin");
    EXPECT_TRUE(wait_until([&] { return c.allocatable_gpus() == "8" || c.allocatable_gpus().empty(); }, seconds(60)))
        << c.allocatable_gpus();
}

// ---------------------------------------------------------------------------------------------
// 12. MIG layouts by node label (issue #28): `kgpu mig-manager` and a kgpu device plugin on the
// host, on the simulated A100 node (a100-mig.yaml: GPU 0 7x 1g.10gb, GPU 1 3g+2g+2x 1g, GPUs 2-3
// MIG off; its own events file), strategy mixed, whole GPUs renamed nvidia.com/a100 so they stay
// apart from the deployed plugin's nvidia.com/gpu. A pod holds one whole GPU (its process: a
// `proc` line in the simulator's file); labelled all-1g.10gb, that GPU is paused and left alone
// until the pod ends, the others switch; then pending -> success, a new pod gets a MIG device;
// all-disabled and back.

TEST(KubeE2E, MigManager) {
    E2E_ATTACH(c);
    const std::string node = c.env("KUBE_NODE_NAME");
    const std::string dir = c.base() + "/mig-manager";
    fs::create_directories(dir + "/run");
    const std::string events = dir + "/sim-events", paused = dir + "/run/paused-gpus";
    std::ofstream(events).flush();
    std::ofstream(dir + "/plugin.yaml") << "version: v1\nflags:\n  migStrategy: mixed\n  applyResourceNaming: true\n"
                                           "resources:\n  gpus:\n  - pattern: \"*\"\n    name: a100\n";
    // NVIDIA's default-mig-parted-config entries for this GPU (A100 80GB, 0x20B2).
    std::ofstream(dir + "/mig-config.yaml")
        << "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
           "  all-1g.10gb:\n    - device-filter: [\"0x233010DE\", \"0x233110DE\", \"0x232210DE\", \"0x20B210DE\", \"0x20B510DE\", "
           "\"0x20F310DE\", \"0x20F510DE\", \"0x232410DE\"]\n      devices: all\n      mig-enabled: true\n"
           "      mig-devices:\n        \"1g.10gb\": 7\n";
    const std::map<std::string, std::string> sim_env = {{"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml"},
                                                        {"KGPU_SIM_EVENTS", events}};
    auto node_json = [&] { return c.get({"node", node}); };
    auto allocatable = [&](const std::string& resource) {
        const json n = node_json();
        return n.is_object() ? n["status"].value("allocatable", json::object()).value(resource, "0") : std::string("<unreadable>");
    };
    auto state = [&] {
        const json n = node_json();
        return n.is_object() ? n["metadata"].value("labels", json::object()).value("nvidia.com/mig.config.state", "<none>")
                             : std::string("<unreadable>");
    };
    auto node_events = [&] {
        const json ev = c.get({"events", "-n", "default", "--field-selector", "involvedObject.kind=Node"});
        std::string out;
        if (ev.is_object())
            for (const auto& e : ev.value("items", json::array()))
                if (e.value("source", json::object()).value("component", "") == "kgpu-mig-manager")
                    out += e.value("reason", "") + ": " + e.value("message", "") + "\n";
        return out;
    };
    c.kubectl({"label", "node", node, "nvidia.com/mig.config-", "nvidia.com/mig.config.state-"});

    kgpu::test::ChildProcess plugin({KGPU_BINARY, "device-plugin", "--nvml-library", KGPU_SIM_LIBRARY, "--device-plugin-path",
                                     c.env("KUBELET_DEVICE_PLUGINS_DIR"), "--config-file", dir + "/plugin.yaml",
                                     "--cdi-spec-dir", dir + "/cdi", "--mig-paused-gpus-file", paused},
                                    sim_env);
    fs::create_directories(c.base() + "/pids");
    std::ofstream(c.base() + "/pids/mig-plugin") << plugin.pid() << "\n";
    ASSERT_TRUE(wait_until([&] { return allocatable("nvidia.com/a100") == "2" && allocatable("nvidia.com/mig-1g.10gb") == "9"; },
                           seconds(60)))
        << "a100 " << allocatable("nvidia.com/a100") << ", mig-1g.10gb " << allocatable("nvidia.com/mig-1g.10gb") << "\n"
        << plugin.err();

    // A pod on one whole A100 (plain runc: the kgpu runtime's simulated node is the H100 one).
    auto pod = [&](const std::string& name, const std::string& resource) {
        json p = {{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"metadata", {{"name", name}, {"namespace", "default"}}},
                  {"spec",
                   {{"restartPolicy", "Never"},
                    {"terminationGracePeriodSeconds", 1},
                    {"containers",
                     {{{"name", "cuda"},
                       {"image", kWorkloadImage},
                       {"command", {"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do busybox sleep 3600 & wait; done"}},
                       {"resources", {{"limits", {{resource, 1}}}}}}}}}}};
        return p.dump();
    };
    ASSERT_EQ(c.apply(pod("a100-job", "nvidia.com/a100"), "a100-job").exit_code, 0);
    ASSERT_TRUE(wait_until([&] { return c.pod_ready("default", "a100-job"); }, seconds(90))) << c.describe();
    const auto held = c.assigned_devices(c.pod("default", "a100-job")["metadata"]["uid"], "cuda", "nvidia.com/a100");
    ASSERT_EQ(held.size(), 1u);
    const auto fixture = kgpu::test::run_process({KGPU_BINARY, "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY}, sim_env);
    unsigned busy = 99;
    const json listed = json::parse(fixture.out);
    for (const auto& g : listed["gpus"])
        if (g["uuid"] == held[0]) busy = g["index"];
    ASSERT_TRUE(busy == 2 || busy == 3) << held[0];
    const unsigned idle = busy == 2 ? 3 : 2;
    std::ofstream(events, std::ios::app) << "proc " << busy << " 4242 1073741824\n";  // the pod's CUDA process

    kgpu::test::ChildProcess manager({KGPU_BINARY, "mig-manager", "--nvml-library", KGPU_SIM_LIBRARY, "-n", node, "--kubeconfig",
                                      c.env("KUBECONFIG"), "-f", dir + "/mig-config.yaml", "--paused-gpus-file", paused,
                                      "--process-timeout", "5m", "--pod-resources-kubelet-socket",
                                      c.env("KUBELET_POD_RESOURCES_SOCKET")},
                                     sim_env);
    std::ofstream(c.base() + "/pids/mig-manager") << manager.pid() << "\n";
    ASSERT_TRUE(wait_until([&] { return manager.err().find("has no label nvidia.com/mig.config") != std::string::npos; }, seconds(30)))
        << manager.err();

    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/mig.config=all-1g.10gb"}).exit_code, 0);
    // GPU 1 and the idle A100 switch; the busy one is paused (allocatable a100 0), and waited for.
    EXPECT_TRUE(wait_until([&] { return allocatable("nvidia.com/mig-1g.10gb") == "21" && allocatable("nvidia.com/a100") == "0"; },
                           seconds(60)))
        << "mig-1g.10gb " << allocatable("nvidia.com/mig-1g.10gb") << ", a100 " << allocatable("nvidia.com/a100") << "\n"
        << manager.err() << plugin.err();
    EXPECT_EQ(state(), "pending");
    EXPECT_TRUE(wait_until([&] { return node_events().find("MigConfigWaiting") != std::string::npos; }, seconds(30))) << node_events();
    EXPECT_THAT(node_events(), HasSubstr(fmt::format("waits for GPU {} (NVIDIA A100-SXM4-80GB) (pids 4242; pods default/a100-job)", busy)));
    EXPECT_THAT(plugin.err(), HasSubstr(fmt::format("GPU {} ({}) paused for a MIG change", busy, held[0])));
    EXPECT_TRUE(c.pod_ready("default", "a100-job")) << "the running pod keeps its GPU";
    auto info = kgpu::test::run_process({KGPU_BINARY, "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY}, sim_env);
    const json gpus = json::parse(info.out)["gpus"];
    EXPECT_EQ(gpus[busy]["mig"]["devices"].size(), 0u) << "the busy GPU was left alone";
    EXPECT_EQ(gpus[idle]["mig"]["devices"].size(), 7u);

    // The pod ends: its GPU switches too.
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(c.delete_pod("default", "a100-job"));
    std::ofstream(events, std::ios::app) << "noproc " << busy << " 4242\n";
    EXPECT_TRUE(wait_until([&] { return allocatable("nvidia.com/mig-1g.10gb") == "28"; }, seconds(60)))
        << allocatable("nvidia.com/mig-1g.10gb") << "\n" << manager.err();
    figure("pod ended -> its GPU in MIG mode, allocatable nvidia.com/mig-1g.10gb 28", since(t0));
    EXPECT_TRUE(wait_until([&] { return state() == "success"; }, seconds(30))) << state() << "\n" << manager.err();
    EXPECT_THAT(node_events(), HasSubstr("MigConfigApplied: MIG config 'all-1g.10gb' applied: GPUs "));
    EXPECT_FALSE(fs::exists(paused));
    // A new pod gets a MIG device.
    ASSERT_EQ(c.apply(pod("mig-job", "nvidia.com/mig-1g.10gb"), "mig-job").exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return c.pod_ready("default", "mig-job"); }, seconds(90))) << c.describe();
    const auto mig = c.assigned_devices(c.pod("default", "mig-job")["metadata"]["uid"], "cuda", "nvidia.com/mig-1g.10gb");
    ASSERT_EQ(mig.size(), 1u);
    EXPECT_TRUE(mig[0].starts_with("MIG-")) << mig[0];
    EXPECT_TRUE(c.delete_pod("default", "mig-job"));

    // all-disabled and back, each timed from the label to the allocatable it leads to.
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/mig.config=all-disabled", "--overwrite"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return allocatable("nvidia.com/a100") == "4" && allocatable("nvidia.com/mig-1g.10gb") == "0"; },
                           seconds(60)))
        << allocatable("nvidia.com/a100") << "\n" << manager.err();
    figure("label all-disabled -> allocatable nvidia.com/a100 4", since(t1));
    EXPECT_TRUE(wait_until([&] { return state() == "success"; }, seconds(30))) << state();
    t1 = std::chrono::steady_clock::now();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/mig.config=all-1g.10gb", "--overwrite"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return allocatable("nvidia.com/mig-1g.10gb") == "28" && allocatable("nvidia.com/a100") == "0"; },
                           seconds(60)))
        << allocatable("nvidia.com/mig-1g.10gb") << "\n" << manager.err();
    figure("label all-1g.10gb -> allocatable nvidia.com/mig-1g.10gb 28", since(t1));
    EXPECT_TRUE(wait_until([&] { return state() == "success"; }, seconds(30))) << state();
    // A name the file does not have: failed, with the reason in an Event; nothing changes.
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/mig.config=all-9g.99gb", "--overwrite"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return state() == "failed"; }, seconds(30))) << state();
    EXPECT_THAT(node_events(), HasSubstr("MigConfigFailed: MIG config 'all-9g.99gb' failed: error selecting MIG config: "
                                         "selected mig-config not present: all-9g.99gb"));
    EXPECT_EQ(allocatable("nvidia.com/mig-1g.10gb"), "28");
    // A run cut short by the label's removal (a pod on a GPU it waits for): failed, not pending.
    ASSERT_EQ(c.apply(pod("mig-holder", "nvidia.com/mig-1g.10gb"), "mig-holder").exit_code, 0);
    ASSERT_TRUE(wait_until([&] { return c.pod_ready("default", "mig-holder"); }, seconds(90))) << c.describe();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/mig.config=all-disabled", "--overwrite"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return state() == "pending" && node_events().find("(pods default/mig-holder)") != std::string::npos; },
                           seconds(30)))
        << state() << "\n" << node_events();
    ASSERT_EQ(c.kubectl({"label", "node", node, "nvidia.com/mig.config-"}).exit_code, 0);
    EXPECT_TRUE(wait_until([&] { return state() == "failed"; }, seconds(30))) << state() << "\n" << manager.err();
    EXPECT_TRUE(wait_until([&] { return node_events().find("not applied: the label was removed") != std::string::npos; },
                           seconds(30)))
        << node_events();
    EXPECT_FALSE(fs::exists(paused));
    EXPECT_TRUE(c.delete_pod("default", "mig-holder"));

    EXPECT_TRUE(manager.running()) << manager.err();
    EXPECT_TRUE(plugin.running()) << plugin.err();
    manager.signal(SIGTERM);
    EXPECT_EQ(manager.wait(30000), 0) << manager.err();
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(30000), 0) << plugin.err();
    fs::remove(c.base() + "/pids/mig-manager");
    fs::remove(c.base() + "/pids/mig-plugin");
    c.kubectl({"label", "node", node, "nvidia.com/mig.config-", "nvidia.com/mig.config.state-"});
}

// ---------------------------------------------------------------------------------------------
// Fixture cleanup: always runs (ctest runs FIXTURES_CLEANUP tests whatever the cases did).

// Ends a process the suite started, by the pid it recorded, only if it still is that process
// (its command line names the suite's temp dir or `expect`).
void stop_recorded(const std::string& pidfile, const std::string& expect, std::vector<std::string>& errors) {
    int pid = -1;
    try {
        pid = std::stoi(slurp(pidfile));
    } catch (...) {
        return;
    }
    const std::string cmdline = slurp(fmt::format("/proc/{}/cmdline", pid));
    if (pid <= 1 || cmdline.find(expect) == std::string::npos) return;
    ::kill(pid, SIGTERM);
    if (!wait_until([&] { return ::kill(pid, 0) != 0; }, seconds(15))) {
        errors.push_back(fmt::format("pid {} ({}) ignored SIGTERM: killed", pid, pidfile));
        ::kill(pid, SIGKILL);
    }
}

TEST(KubeE2E, Down) {
    State s;
    std::string error;
    if (!load_state(s, error)) GTEST_SKIP() << "nothing to clean up: " << error;
    if (!s.skipped.empty()) GTEST_SKIP() << s.skipped;
    ASSERT_FALSE(s.base.empty());
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> errors;

    // What the cases started themselves (NVIDIA's device plugin in case 6), then the supervisor,
    // so that nobody starts containerd again while kube-mini stops it.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(s.base + "/pids", ec)) stop_recorded(e.path().string(), s.base, errors);
    stop_recorded(s.base + "/supervisor.pid", "kube_e2e_supervisor", errors);
    if (fs::exists(s.kube)) {
        auto down = run({"/bin/bash", kube_mini_script(), "down", s.kube}, seconds(300));
        if (down.exit_code != 0) errors.push_back("kube-mini down " + s.kube + " failed:\n" + down.err + down.out);
    }
    if (fs::exists(s.base + "/ctrd2/containerd.pid")) {
        auto stop = run({"/bin/bash", shared_dir() + "/tools/containerd2/scripts/stop.sh", s.base + "/ctrd2", s.base + "/ctrd2-bin"},
                        seconds(120));
        if (stop.exit_code != 0) errors.push_back("containerd2 stop.sh failed:\n" + stop.err + stop.out);
    }

    // Nothing of the suite's left running, mounted or linked.
    std::string left;
    for (const auto& p : fs::directory_iterator("/proc")) {
        const std::string pid = p.path().filename().string();
        if (!std::all_of(pid.begin(), pid.end(), ::isdigit) || std::stoi(pid) == ::getpid()) continue;
        std::string cmd = slurp(p.path().string() + "/cmdline");
        std::replace(cmd.begin(), cmd.end(), '\0', ' ');
        if (cmd.find(s.base) != std::string::npos) left += pid + " " + cmd.substr(0, 200) + "\n";
    }
    if (!left.empty()) errors.push_back("processes naming " + s.base + " left running:\n" + left);
    std::istringstream mounts(slurp("/proc/self/mountinfo"));
    std::vector<std::string> mounted;
    for (std::string l; std::getline(mounts, l);) {
        std::istringstream f(l);
        std::string id, parent, dev, root, point;
        f >> id >> parent >> dev >> root >> point;
        if (point == s.base || point.starts_with(s.base + "/")) mounted.push_back(point);
    }
    if (!mounted.empty()) {
        errors.push_back("mounts left under " + s.base + ": " + fmt::format("{}", fmt::join(mounted, ", ")));
        std::sort(mounted.rbegin(), mounted.rend());
        for (const auto& m : mounted) run({"/usr/bin/umount", "-l", m});
    }
    const std::string links = run({"/usr/sbin/ip", "-o", "link", "show"}).out;
    const std::string id = run({"/bin/sh", "-c", "printf '%s' \"$(cd \"$1\" 2>/dev/null && pwd -P || echo \"$1\")\" | sha256sum | cut -c1-8", "sh", s.kube}).out;
    if (id.size() >= 8 && links.find("km" + id.substr(0, 8)) != std::string::npos)
        errors.push_back("network link km" + id.substr(0, 8) + " left");

    fs::remove_all(s.base, ec);
    if (ec) errors.push_back("cannot remove " + s.base + ": " + ec.message());
    fs::remove(state_file(), ec);
    figure("cleanup (down)", since(t0));
    EXPECT_TRUE(errors.empty()) << fmt::format("{}", fmt::join(errors, "\n"));
}

}  // namespace
}  // namespace kgpu::e2e
