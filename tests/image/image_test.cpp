// The container image for real: scripts/build-image builds it from the built binary with buildah
// (no registry), the OCI archive is checked (its name, its config against deploy/Dockerfile's
// image stage, its one layer file by file against deploy/image-rootfs), then imported into a
// containerd the test starts, and kgpu runs from it the way deploy/kubernetes/daemonset.yaml runs
// it: the same securityContext (user, no capabilities, no privilege escalation, read-only root),
// env and volume mounts, each hostPath a temp dir, the ConfigMap's file, and the simulator mounted
// from the build tree where the NVIDIA runtime puts the driver's libnvidia-ml.so.1. A library the
// image lacks fails every run. The exporter also serves HTTPS with basic auth from a
// --web-config-file there: OpenSSL and libcrypt are loaded with dlopen only then, so only such a
// run shows the image carries them. Skipped with the reason when buildah, containerd or root is
// missing (scripts/setup --all installs buildah and containerd).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "support/containerd.h"
#include "support/process.h"
#include "tls_client.h"
#include "support/files.h"

namespace kgpu::test {
namespace {

using kgpu::test::slurp;

namespace fs = std::filesystem;
const std::string kSource = KGPU_SOURCE_DIR;

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

// The image stage of deploy/Dockerfile (after the last FROM): what the image's config must say.
struct ImageStage {
    nlohmann::json entrypoint, cmd;
    std::string user;
    std::vector<std::string> env;
};

ImageStage image_stage() {
    std::istringstream in(slurp(kSource + "/deploy/Dockerfile"));
    ImageStage st;
    std::string line;
    while (std::getline(in, line)) {
        if (line.starts_with("FROM ")) st = {};
        const auto sp = line.find(' ');
        if (sp == std::string::npos) continue;
        const std::string word = line.substr(0, sp), rest = line.substr(sp + 1);
        if (word == "ENTRYPOINT") st.entrypoint = nlohmann::json::parse(rest);
        if (word == "CMD") st.cmd = nlohmann::json::parse(rest);
        if (word == "USER") st.user = rest;
        if (word == "ENV") st.env.push_back(rest);
    }
    return st;
}

// Every entry under `root`: "/path" -> "type mode size" (regular files), "link -> target", "dir mode".
std::map<std::string, std::string> tree(const std::string& root) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
        struct stat st {};
        ::lstat(e.path().c_str(), &st);
        const std::string rel = "/" + e.path().lexically_relative(root).string();
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
        if (S_ISLNK(st.st_mode)) out[rel] = "link -> " + fs::read_symlink(e.path()).string();
        else if (S_ISDIR(st.st_mode)) out[rel] = std::string("dir ") + mode;
        else if (S_ISREG(st.st_mode)) out[rel] = std::string("file ") + mode + " " + std::to_string(st.st_size);
        else out[rel] = "other";
    }
    return out;
}

// A DaemonSet container turned into `ctr run` flags: its securityContext, env and mounts, every
// hostPath volume a directory (or file, for type Socket) under `host`, the ConfigMap's data.
struct PodSettings {
    std::vector<std::string> flags;
    std::map<std::string, std::string> host_dirs;  // mountPath -> the temp dir standing in for it
    std::vector<std::string> args;                 // the container's args
};

YAML::Node daemonset() {
    for (const auto& doc : YAML::LoadAllFromFile(kSource + "/deploy/kubernetes/daemonset.yaml"))
        if (doc["kind"] && doc["kind"].as<std::string>() == "DaemonSet") return doc;
    return {};
}

std::string configmap_file(const std::string& key) {
    for (const auto& doc : YAML::LoadAllFromFile(kSource + "/deploy/kubernetes/configmap.yaml"))
        if (doc["kind"] && doc["kind"].as<std::string>() == "ConfigMap") return doc["data"][key].as<std::string>();
    return {};
}

// Every Linux capability by name: `drop: ["ALL"]` (ctr 1.6 has no ALL).
const char* const kCapabilities[] = {
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE"};

PodSettings settings_of(const std::string& container_name, const std::string& image_user, const std::string& host) {
    PodSettings s;
    const YAML::Node spec = daemonset()["spec"]["template"]["spec"];
    std::map<std::string, YAML::Node> volumes;
    for (const auto& v : spec["volumes"]) volumes.emplace(v["name"].as<std::string>(), static_cast<const YAML::Node&>(v));
    for (const auto& c : spec["containers"]) {
        if (c["name"].as<std::string>() != container_name) continue;
        for (const auto& a : c["args"]) s.args.push_back(a.as<std::string>());
        const YAML::Node sc = c["securityContext"];
        // ctr runs the image's USER: the DaemonSet must ask for the same (tests/deploy checks it too).
        EXPECT_EQ(sc["runAsUser"].as<std::string>(), image_user.substr(0, image_user.find(':'))) << container_name;
        if (sc["readOnlyRootFilesystem"].as<bool>(false)) s.flags.push_back("--read-only");
        if (sc["allowPrivilegeEscalation"].as<bool>(true)) s.flags.push_back("--allow-new-privs");
        EXPECT_FALSE(sc["privileged"].as<bool>(false));
        EXPECT_FALSE(sc["capabilities"]["add"]) << container_name;
        for (const auto& d : sc["capabilities"]["drop"]) {
            if (d.as<std::string>() == "ALL") {
                for (const char* cap : kCapabilities) s.flags.insert(s.flags.end(), {"--cap-drop", std::string("CAP_") + cap});
            } else {
                s.flags.insert(s.flags.end(), {"--cap-drop", "CAP_" + d.as<std::string>()});
            }
        }
        for (const auto& e : c["env"]) {
            std::string value = e["value"] ? e["value"].as<std::string>() : "";
            if (e["valueFrom"] && e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>("") == "spec.nodeName")
                value = "kgpu-test-node";
            s.flags.insert(s.flags.end(), {"--env", e["name"].as<std::string>() + "=" + value});
        }
        for (const auto& m : c["volumeMounts"]) {
            const std::string name = m["name"].as<std::string>(), path = m["mountPath"].as<std::string>();
            const YAML::Node v = volumes[name];
            std::string src = host + "/" + name;
            if (v["hostPath"] && v["hostPath"]["type"].as<std::string>("") == "Socket") {
                std::ofstream(src).flush();  // a stand-in file: nothing in these runs dials it
            } else if (v["configMap"]) {
                fs::create_directories(src);
                std::ofstream(src + "/config.yaml") << configmap_file("config.yaml");
            } else {
                fs::create_directories(src);
            }
            std::string options = "rbind:" + std::string(m["readOnly"].as<bool>(false) ? "ro" : "rw");
            if (m["mountPropagation"].as<std::string>("") == "HostToContainer") options += ":rslave";
            s.flags.insert(s.flags.end(), {"--mount", "type=bind,src=" + src + ",dst=" + path + ",options=" + options});
            s.host_dirs[path] = src;
        }
        return s;
    }
    ADD_FAILURE() << "daemonset.yaml has no container " << container_name;
    return s;
}

// What the NVIDIA runtime injects on a GPU node, from the build tree: the driver's library where
// the runtime mounts it (kgpu finds it there with its default search) and the node fixture. The
// real libnvidia-ml needs only glibc; the simulator also needs the C++ runtime and yaml-cpp,
// which kgpu (linked statically apart from glibc) does not bring into the image: those are
// mounted at their host paths too, as part of the stand-in driver.
std::vector<std::string> simulated_driver() {
    std::vector<std::string> flags = {
        "--mount", std::string("type=bind,src=") + KGPU_SIM_LIBRARY + ",dst=/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1,options=rbind:ro",
        "--mount", "type=bind,src=" + kSource + "/sim/nodes,dst=/kgpu-sim/nodes,options=rbind:ro",
        "--env", "KGPU_SIM_NODE=/kgpu-sim/nodes/dgx-h100.yaml"};
    std::istringstream ldd(run_process({"/usr/bin/ldd", KGPU_SIM_LIBRARY}).out);
    for (std::string line; std::getline(ldd, line);) {
        auto arrow = line.find("=> /");
        if (arrow == std::string::npos) continue;
        const std::string path = line.substr(arrow + 3, line.find(' ', arrow + 3) - arrow - 3);
        const std::string name = fs::path(path).filename().string();
        if (name.starts_with("libc.so") || name.starts_with("libm.so") || name.starts_with("ld-linux")) continue;
        flags.insert(flags.end(), {"--mount", "type=bind,src=" + path + ",dst=" + path + ",options=rbind:ro"});
    }
    return flags;
}

TEST(Image, BuiltWithoutARegistryImportedIntoContainerdAndRunsLikeTheDaemonSet) {
    if (::access("/usr/bin/buildah", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/buildah (scripts/setup --all installs Debian's)";
    if (::geteuid() != 0) GTEST_SKIP() << "buildah's and containerd's storage here need root";
    const std::string version = trim(run_process({KGPU_BINARY, "--version"}).out);
    const std::string name = "docker.io/library/kgpu:" + version;

    // 1. scripts/build-image from the built binary (no second compile); the path is its last line.
    TempDir dir;
    const std::string archive = dir.path() + "/out/kgpu.oci.tar";
    auto built = run_process({kSource + "/scripts/build-image", "--binary", KGPU_BINARY, "--output", archive, "--no-install"});
    ASSERT_EQ(built.exit_code, 0) << built.err;
    ASSERT_EQ(trim(built.out).substr(trim(built.out).rfind('\n') + 1), archive) << built.out;

    // 2. The archive: named for containerd and podman, the Dockerfile's config, one layer that is
    // exactly what deploy/image-rootfs stages (which the Dockerfile's image stage copies).
    const std::string oci = dir.path() + "/oci";
    fs::create_directories(oci);
    ASSERT_EQ(run_process({"/bin/tar", "-xf", archive, "-C", oci}).exit_code, 0);
    const auto index = nlohmann::json::parse(slurp(oci + "/index.json"));
    ASSERT_EQ(index["manifests"].size(), 1u) << index;
    EXPECT_EQ(index["manifests"][0]["annotations"]["io.containerd.image.name"], name);
    EXPECT_EQ(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], name);
    auto blob = [&](const nlohmann::json& desc) {
        return oci + "/blobs/sha256/" + desc["digest"].get<std::string>().substr(7);
    };
    const auto manifest = nlohmann::json::parse(slurp(blob(index["manifests"][0])));
    const auto config = nlohmann::json::parse(slurp(blob(manifest["config"])));
    const ImageStage stage = image_stage();
    EXPECT_EQ(config["config"]["Entrypoint"], stage.entrypoint);
    EXPECT_EQ(config["config"]["Cmd"], stage.cmd);
    EXPECT_EQ(config["config"]["User"], stage.user);
    EXPECT_EQ(config["config"]["Env"], nlohmann::json(stage.env));
    EXPECT_EQ(config["os"], "linux");
    ASSERT_EQ(manifest["layers"].size(), 1u) << manifest;
    const std::string layer = dir.path() + "/layer";
    fs::create_directories(layer);
    ASSERT_EQ(run_process({"/bin/tar", "-xzf", blob(manifest["layers"][0]), "-C", layer}).exit_code, 0);
    const std::string staged = dir.path() + "/staged";
    auto st = run_process({kSource + "/deploy/image-rootfs", KGPU_BINARY, staged});
    ASSERT_EQ(st.exit_code, 0) << st.err;
    const auto in_image = tree(layer), expected = tree(staged);
    EXPECT_EQ(in_image, expected) << "the image's layer differs from what deploy/image-rootfs stages";
    std::uintmax_t bytes = 0;
    for (const auto& [path, what] : in_image) {
        if (!what.starts_with("file ")) continue;
        bytes += fs::file_size(layer + path);
        EXPECT_TRUE(slurp(layer + path) == slurp(staged + path)) << path << " differs";
    }
    EXPECT_LT(bytes, 40u * 1000 * 1000) << "the image is over its 40 MB budget";
    // What the manifests and dcgm-exporter's Helm values point at: the toolkit's multi-call name
    // and dcgm-exporter's default counters file (the binary's own list).
    EXPECT_EQ(in_image.count("/usr/bin/kgpu-container-runtime") ? in_image.at("/usr/bin/kgpu-container-runtime") : "",
              "link -> kgpu");
    ASSERT_TRUE(in_image.contains("/etc/dcgm-exporter/default-counters.csv"));
    EXPECT_TRUE(in_image.at("/etc/dcgm-exporter/default-counters.csv").starts_with("file 0644 "));
    EXPECT_EQ(slurp(layer + "/etc/dcgm-exporter/default-counters.csv"),
              run_process({KGPU_BINARY, "exporter", "--print-default-counters"}).out);
    // The TLS and bcrypt libraries the exporter dlopens for --web-config-file (run below).
    for (const char* lib : {"libssl.so.3", "libcrypto.so.3", "libcrypt.so.1"})
        EXPECT_TRUE(fs::exists(layer + "/usr/lib/x86_64-linux-gnu/" + lib)) << lib << " is not in the image";
    std::cout << "image " << name << ": " << bytes / 1024 << " KiB uncompressed, archive "
              << fs::file_size(archive) / 1024 << " KiB, " << in_image.size() << " entries\n";

    // 3. Into containerd.
    if (auto why = TestContainerd::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    TestContainerd containerd(dir.path() + "/containerd");
    ASSERT_TRUE(containerd.started()) << containerd.error();
    auto imported = containerd.ctr({"images", "import", archive});
    ASSERT_EQ(imported.exit_code, 0) << imported.err << imported.out;
    auto listed = containerd.ctr({"images", "list", "--quiet"});
    ASSERT_NE(listed.out.find(name), std::string::npos) << "ctr images import did not name the image " << name
                                                         << ":\n" << listed.out;

    int n = 0;
    auto run = [&](const std::vector<std::string>& flags, const std::vector<std::string>& args) {
        std::vector<std::string> argv = {"--rm"};
        argv.insert(argv.end(), flags.begin(), flags.end());
        argv.push_back(name);
        argv.push_back("kgpu-image-test-" + std::to_string(++n));
        argv.insert(argv.end(), args.begin(), args.end());
        return containerd.ctr_run(argv);
    };

    // The image's own defaults: ENTRYPOINT kgpu, CMD --help.
    auto help = run({}, {});
    EXPECT_EQ(help.exit_code, 0) << help.err;
    EXPECT_NE(help.out.find("Subcommands:"), std::string::npos) << help.out << help.err;
    auto ver = run({}, {"/usr/bin/kgpu", "--version"});
    EXPECT_EQ(ver.exit_code, 0) << ver.err;
    EXPECT_EQ(trim(ver.out), version);

    // `kgpu info --json` in each DaemonSet container's settings, NVML found by the default search.
    for (const std::string c : {"device-plugin", "exporter", "labels"}) {
        SCOPED_TRACE("container " + c);
        TempDir host;
        PodSettings pod = settings_of(c, stage.user, host.path());
        auto flags = pod.flags;
        auto sim = simulated_driver();
        flags.insert(flags.end(), sim.begin(), sim.end());
        auto info = run(flags, {"/usr/bin/kgpu", "info", "--json"});
        ASSERT_EQ(info.exit_code, 0) << info.err << info.out;
        auto j = nlohmann::json::parse(info.out, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << info.out;
        EXPECT_EQ(j["gpu_count"], 8);

        // The settings hold: the root is read-only, and root without capabilities cannot write
        // into another user's directory (CAP_DAC_OVERRIDE is gone).
        auto ro = run(flags, {"/usr/bin/kgpu", "cdi", "generate", "--allow-missing-libraries", "--output", "/kgpu-test.yaml"});
        EXPECT_NE(ro.exit_code, 0) << "wrote into a read-only root: " << ro.out;
        EXPECT_NE(ro.err.find("Read-only file system"), std::string::npos) << ro.err;
        fs::create_directories(host.path() + "/not-root");
        ASSERT_EQ(::chown((host.path() + "/not-root").c_str(), 1000, 1000), 0);
        auto caps_flags = flags;
        caps_flags.insert(caps_flags.end(), {"--mount", "type=bind,src=" + host.path() + "/not-root,dst=/not-root,options=rbind:rw"});
        auto dac = run(caps_flags, {"/usr/bin/kgpu", "cdi", "generate", "--allow-missing-libraries", "--output", "/not-root/x.yaml"});
        EXPECT_NE(dac.exit_code, 0) << "root kept CAP_DAC_OVERRIDE: " << dac.out;
        EXPECT_NE(dac.err.find("Permission denied"), std::string::npos) << dac.err;

        // The container's own subcommand and args, as far as it runs without a kubelet.
        std::vector<std::string> args = {"/usr/bin/kgpu"};
        args.insert(args.end(), pod.args.begin(), pod.args.end());
        if (c == "device-plugin") {
            args.push_back("--check-config");
            auto r = run(flags, args);
            EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
            EXPECT_NE(r.out.find("configFile: /etc/kgpu/config.yaml"), std::string::npos) << r.out;
        } else if (c == "labels") {
            args.push_back("--oneshot");
            auto r = run(flags, args);
            EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
            const std::string features = pod.host_dirs["/etc/kubernetes/node-feature-discovery/features.d"] + "/kgpu";
            EXPECT_NE(slurp(features).find("nvidia.com/gpu.present=true"), std::string::npos)
                << "no labels on the hostPath: " << r.err;
        }
    }

    // `kgpu demo` in the device-plugin container's settings, with an emptyDir-like /tmp for its
    // work dir (the root is read-only) and the host's network: ctr without CNI leaves a new network
    // namespace's loopback down, which a pod's network namespace has up.
    TempDir host;
    PodSettings pod = settings_of("device-plugin", stage.user, host.path());
    auto flags = pod.flags;
    fs::create_directories(host.path() + "/tmp");
    flags.insert(flags.end(), {"--mount", "type=bind,src=" + host.path() + "/tmp,dst=/tmp,options=rbind:rw", "--net-host"});
    auto sim = simulated_driver();
    flags.insert(flags.end(), sim.begin(), sim.end());
    auto demo = run(flags, {"/usr/bin/kgpu", "demo", "--nvml-library", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                            "--node", "/kgpu-sim/nodes/dgx-h100.yaml"});
    EXPECT_EQ(demo.exit_code, 0) << demo.out << demo.err;
    EXPECT_NE(demo.out.find("all 5 steps passed"), std::string::npos) << demo.out << demo.err;
    EXPECT_TRUE(fs::is_empty(host.path() + "/tmp")) << "the demo left its work dir behind";

    // The exporter container with TLS and basic auth (--web-config-file): the dlopen'ed OpenSSL
    // and libcrypt must be in the image, or HTTPS fails only in production. Its args as the
    // DaemonSet's, listening on a loopback port of the host's network, scraped over HTTPS.
    {
        TempDir exp_host;
        PodSettings ex = settings_of("exporter", stage.user, exp_host.path());
        const std::string web = exp_host.path() + "/web";
        fs::create_directories(web);
        std::string pki_error;
        const auto pki = make_pki(web, pki_error);
        ASSERT_TRUE(pki) << pki_error;
        std::ofstream(web + "/web.yml") << "tls_server_config:\n  cert_file: /etc/kgpu-web/server.crt\n"
                                           "  key_file: /etc/kgpu-web/server.key\n"
                                           "basic_auth_users:\n  prometheus: " << bcrypt_hash("scrape-secret") << "\n";
        auto xflags = ex.flags;
        // The address the exporter bound comes back through --ready-file on a host folder.
        const std::string ready = exp_host.path() + "/ready";
        fs::create_directories(ready);
        fs::permissions(ready, fs::perms::all);  // whichever user the DaemonSet runs it as
        xflags.insert(xflags.end(), {"--mount", "type=bind,src=" + web + ",dst=/etc/kgpu-web,options=rbind:ro", "--mount",
                                     "type=bind,src=" + ready + ",dst=/run/kgpu-ready,options=rbind:rw", "--net-host"});
        auto xsim = simulated_driver();
        xflags.insert(xflags.end(), xsim.begin(), xsim.end());
        std::vector<std::string> argv = {"/usr/bin/ctr", "--address", containerd.socket(), "--namespace", "kgpu-test",
                                         "run", "--rm"};
        argv.insert(argv.end(), xflags.begin(), xflags.end());
        argv.insert(argv.end(), {name, "kgpu-image-test-tls", "/usr/bin/kgpu"});
        for (const auto& a : ex.args)
            argv.push_back(a.starts_with("--address") ? "--address=127.0.0.1:0" : a);
        argv.push_back("--web-config-file=/etc/kgpu-web/web.yml");
        argv.push_back("--ready-file=/run/kgpu-ready/address");
        ChildProcess exporter(argv);
        const int port = wait_for_ready_port(exporter, ready + "/address");
        ASSERT_NE(port, 0) << "the exporter in the image did not start with TLS:\n" << exporter.err() << exporter.out();
        TlsClientOptions o;
        o.ca_file = pki->ca_cert;
        auto denied = https_request(port, "GET", "/metrics", o);
        EXPECT_EQ(denied.http.status, 401) << denied.error << "\n" << exporter.err();
        o.headers = {"Authorization: " + basic_auth("prometheus", "scrape-secret")};
        auto scraped = https_request(port, "GET", "/metrics", o);
        EXPECT_EQ(scraped.http.status, 200) << scraped.error << "\n" << exporter.err();
        EXPECT_NE(scraped.http.body.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""), std::string::npos) << scraped.http.body;
        auto plain = http_request(port, "GET", "/metrics", {}, 5000);
        EXPECT_NE(plain.status, 200) << "plain HTTP answered on the TLS port";
        containerd.ctr({"task", "kill", "--signal", "SIGTERM", "kgpu-image-test-tls"});
        EXPECT_EQ(exporter.wait(30000), 0) << exporter.err();
    }

    EXPECT_EQ(containerd.stop(), 0) << containerd.process().err();
}

}  // namespace
}  // namespace kgpu::test
