// The naming function, version rules, YAML rendering and host-file discovery of src/cdi, on
// hand-built inventories and temp directories.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "cdi/driver_files.h"
#include "cdi/hooks.h"
#include "cdi/naming.h"
#include "cdi/spec.h"
#include "support/process.h"

using namespace kgpu;
using cdi::NameStrategy;
using ::testing::HasSubstr;
using ojson = nlohmann::ordered_json;

namespace {

inventory::Node two_gpus() {
    inventory::Node n;
    n.driver_version = "550.54.15";
    inventory::Gpu a;
    a.index = 0;
    a.minor = 0;
    a.uuid = "GPU-aaaa";
    inventory::Gpu b;
    b.index = 1;
    b.minor = 3;
    b.uuid = "GPU-bbbb";
    b.mig_mode = inventory::MigMode::enabled;
    inventory::MigDevice m;
    m.index = 0;
    m.uuid = "MIG-cccc";
    m.gpu_instance_id = 7;
    m.compute_instance_id = 0;
    b.mig_devices.push_back(m);
    n.gpus = {a, b};
    return n;
}

// Issue #22 items 3 and 5: the hook's argv is one its binary runs, whatever that binary is called,
// and --ldconfig-path is the plain host path both hooks take: NVIDIA's nvidia-cdi-hook prepends
// "@" itself, so "@/sbin/ldconfig" failed there with "stat @/sbin/ldconfig".
TEST(CdiHooks, ArgvKgpuRunsUnderAnyNameAndLdconfigWithoutTheAt) {
    cdi::HookOptions o;
    o.ldconfig_path = "@/sbin/ldconfig";
    o.path = "/usr/bin/nvidia-cdi-hook";
    EXPECT_EQ((*cdi::HookCreator(o).create(cdi::kUpdateLdcache, {"/usr/lib64"}))["args"],
              ojson::array({"nvidia-cdi-hook", "update-ldcache", "--ldconfig-path", "/sbin/ldconfig", "--folder", "/usr/lib64"}));
    o.path = "/usr/local/kgpu/kgpu";
    EXPECT_EQ((*cdi::HookCreator(o).create(cdi::kUpdateLdcache, {"/usr/lib64"}))["args"],
              ojson::array({"kgpu", "hook", "update-ldcache", "--ldconfig-path", "/sbin/ldconfig", "--folder", "/usr/lib64"}));
    // Any other name: nvidia-ctk's [<name>, <hook>, ...], which kgpu dispatches on the hook's name.
    o.path = "/opt/kgpu/kgpu-container-runtime";
    EXPECT_EQ((*cdi::HookCreator(o).create(cdi::kEnableCudaCompat, {"--host-driver-version", "550.54.15"}))["args"],
              ojson::array({"kgpu-container-runtime", "enable-cuda-compat", "--host-driver-version", "550.54.15"}));
}

}  // namespace

TEST(CdiNaming, EachStrategyNamesGpusAndMigDevices) {
    auto node = two_gpus();
    const auto& g = node.gpus[1];
    const auto& m = g.mig_devices[0];
    EXPECT_EQ(cdi::device_name(NameStrategy::index, g), "1");
    EXPECT_EQ(cdi::device_name(NameStrategy::uuid, g), "GPU-bbbb");
    EXPECT_EQ(cdi::device_name(NameStrategy::type_index, g), "gpu1");
    EXPECT_EQ(cdi::device_name(NameStrategy::index, g, m), "1:0");
    EXPECT_EQ(cdi::device_name(NameStrategy::uuid, g, m), "MIG-cccc");
    EXPECT_EQ(cdi::device_name(NameStrategy::type_index, g, m), "mig1:0");
    EXPECT_EQ(cdi::qualified_name("nvidia.com/gpu", "GPU-bbbb"), "nvidia.com/gpu=GPU-bbbb");
}

TEST(CdiNaming, DevicePluginIdsMapToSpecNames) {
    auto node = two_gpus();
    EXPECT_EQ(cdi::name_for_device_id(node, "GPU-aaaa", NameStrategy::index).value(), "0");
    EXPECT_EQ(cdi::name_for_device_id(node, "0", NameStrategy::uuid).value(), "GPU-aaaa");
    EXPECT_EQ(cdi::name_for_device_id(node, "1:0", NameStrategy::uuid).value(), "MIG-cccc");
    EXPECT_EQ(cdi::name_for_device_id(node, "MIG-cccc", NameStrategy::index).value(), "1:0");
    EXPECT_EQ(cdi::name_for_device_id(node, "GPU-bbbb::3", NameStrategy::uuid).value(), "GPU-bbbb");  // replica
    auto missing = cdi::name_for_device_id(node, "GPU-zzzz", NameStrategy::uuid);
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().code, Code::not_found);
    EXPECT_THAT(missing.error().message, HasSubstr("GPU-zzzz"));
}

TEST(CdiNaming, ParsesStrategyListsAndRejectsUnknownOnes) {
    auto s = cdi::parse_strategies("uuid, index,uuid");
    ASSERT_TRUE(s);
    EXPECT_EQ(*s, (std::vector<NameStrategy>{NameStrategy::uuid, NameStrategy::index}));
    auto bad = cdi::parse_strategies("index,serial");
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("'serial'"));
    EXPECT_THAT(bad.error().message, HasSubstr("type-index"));
    EXPECT_FALSE(cdi::parse_strategies(" , "));
}

TEST(CdiNaming, KindRules) {
    EXPECT_EQ(cdi::make_kind("nvidia.com", "gpu").value(), "nvidia.com/gpu");
    EXPECT_FALSE(cdi::make_kind("nvidia.com/", "gpu"));
    EXPECT_FALSE(cdi::make_kind("nvidia.com", "gpu="));
    EXPECT_FALSE(cdi::make_kind("", "gpu"));
    EXPECT_THAT(cdi::make_kind("nvidia.com", "-x").error().message, HasSubstr("--class"));
}

TEST(CdiVersion, LowestVersionTheFeaturesAllow) {
    ojson spec = {{"cdiVersion", "x"}, {"kind", "nvidia.com/gpu"},
                  {"devices", ojson::array({{{"name", "gpu0"}, {"containerEdits", {{"deviceNodes", ojson::array({{{"path", "/dev/nvidia0"}}})}}}}})}};
    EXPECT_EQ(cdi::minimum_version(spec), "0.3.0");
    spec["devices"][0]["name"] = "0";
    EXPECT_EQ(cdi::minimum_version(spec), "0.5.0");
    spec["devices"][0]["name"] = "gpu0";
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] = "/host/dev/nvidia0";
    EXPECT_EQ(cdi::minimum_version(spec), "0.5.0");
    spec["devices"][0]["containerEdits"]["deviceNodes"][0].erase("hostPath");
    spec["containerEdits"]["mounts"] = ojson::array({{{"hostPath", "/a"}, {"containerPath", "/a"}, {"type", "bind"}}});
    EXPECT_EQ(cdi::minimum_version(spec), "0.4.0");
    spec["kind"] = "nvidia.com/gpu.shared";
    EXPECT_EQ(cdi::minimum_version(spec), "0.6.0");
    spec["containerEdits"]["additionalGids"] = ojson::array({44});
    EXPECT_EQ(cdi::minimum_version(spec), "0.7.0");
}

// A host path that is not UTF-8 (a driver file's name): JSON cannot hold it, so the JSON text is
// an error naming why, where dump() threw out of the device plugin's CDI refresh.
TEST(CdiJson, APathThatIsNotUtf8IsAnErrorNotAnException) {
    ojson spec = {{"cdiVersion", "0.5.0"}, {"containerEdits", {{"mounts", ojson::array({{{"hostPath", "/usr/lib/libcuda\xff.so"}}})}}}};
    auto text = cdi::to_json_text(spec);
    ASSERT_FALSE(text);
    EXPECT_EQ(text.error().code, kgpu::Code::invalid_argument);
    EXPECT_THAT(text.error().message, HasSubstr("not UTF-8"));
    spec["containerEdits"]["mounts"][0]["hostPath"] = "/usr/lib/libcuda.so";
    ASSERT_TRUE(cdi::to_json_text(spec));
}

TEST(CdiYaml, QuotesStringsYamlWouldReadAsOtherTypes) {
    ojson j = {{"a", "0"}, {"b", "0:1"}, {"c", "true"}, {"d", "GPU-x"}, {"e", 195}, {"f", "--link"}, {"g", ""}};
    const std::string y = cdi::to_yaml(j);
    EXPECT_THAT(y, HasSubstr("a: \"0\"\n"));
    EXPECT_THAT(y, HasSubstr("b: \"0:1\"\n"));
    EXPECT_THAT(y, HasSubstr("c: \"true\"\n"));
    EXPECT_THAT(y, HasSubstr("d: GPU-x\n"));
    EXPECT_THAT(y, HasSubstr("e: 195\n"));
    EXPECT_THAT(y, HasSubstr("f: \"--link\"\n"));
    EXPECT_THAT(y, HasSubstr("g: \"\"\n"));
}

TEST(CdiDriverFiles, LibrariesMatchTheDriverVersionAndMergedUsrIsReadOnce) {
    test::TempDir root;
    root.write("usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "x");
    root.write("usr/lib/x86_64-linux-gnu/libcuda.so.535.1.1", "x");
    root.write("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "x");
    root.write("usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.550.54.15", "x");
    root.write("usr/lib64/libnvidia-ptxjitcompiler.so.550.54.15", "x");
    root.write("usr/lib64/libnvidia-nvvm70.so.4", "x");
    std::filesystem::create_directory_symlink("usr/lib", root.path() + "/lib");
    auto found = cdi::find_driver_libraries(root.path(), "550.54.15");
    // Search order: /usr/lib64 before /usr/lib/<arch>; /lib/<arch> is the same directory.
    EXPECT_EQ(found.dirs, (std::vector<std::string>{"/usr/lib64", "/usr/lib/x86_64-linux-gnu"}));
    std::vector<std::string> paths;
    for (const auto& f : found.libraries) paths.push_back(f.path);
    EXPECT_EQ(paths, (std::vector<std::string>{
                         "/usr/lib64/libnvidia-ptxjitcompiler.so.550.54.15",
                         "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                         "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15",
                         "/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.550.54.15",
                         "/usr/lib64/libnvidia-nvvm70.so.4",
                     }));
    EXPECT_EQ(found.libraries[1].host_path, root.path() + "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
    auto none = cdi::find_driver_libraries(root.path(), "999.1.1");
    EXPECT_TRUE(none.libraries.empty());
    EXPECT_THAT(none.searched, ::testing::Contains(root.path() + "/usr/lib/x86_64-linux-gnu/nvidia/current"));
}

TEST(CdiDriverFiles, SonameOfARealSharedObject) {
    // The simulator is a real shared library with the SONAME of the driver's NVML.
    auto soname = cdi::read_soname(KGPU_SIM_LIBRARY);
    ASSERT_TRUE(soname) << soname.error().message;
    EXPECT_EQ(*soname, "libnvidia-ml.so.1");
    test::TempDir d;
    auto text = cdi::read_soname(d.write("libx.so.1.2", "not an ELF file"));
    ASSERT_FALSE(text);
    EXPECT_EQ(text.error().code, Code::parse);
    EXPECT_FALSE(cdi::read_soname(d.path() + "/missing.so.1"));
}

// A 64-bit ELF file laid out by hand: header, three section headers (null, .dynamic, .dynstr),
// the dynamic entries at 256 (DT_SONAME, DT_NULL) and the string table at 300.
std::string tiny_elf(std::string_view soname) {
    std::string f(320 + soname.size() + 1, '\0');
    auto put = [&](size_t at, auto value) { std::memcpy(f.data() + at, &value, sizeof value); };
    std::memcpy(f.data(), "\x7f" "ELF\x02\x01\x01", 7);
    put(0x28, uint64_t{64});  // e_shoff
    put(0x3A, uint16_t{64});  // e_shentsize
    put(0x3C, uint16_t{3});   // e_shnum
    put(128 + 4, uint32_t{6});  // [1] SHT_DYNAMIC
    put(128 + 0x18, uint64_t{256});
    put(128 + 0x20, uint64_t{32});
    put(128 + 0x28, uint32_t{2});
    put(192 + 4, uint32_t{3});  // [2] SHT_STRTAB
    put(192 + 0x18, uint64_t{300});
    put(192 + 0x20, uint64_t{20 + soname.size() + 1});
    put(256, int64_t{14});  // DT_SONAME at string 20
    put(264, uint64_t{20});
    std::memcpy(f.data() + 320, soname.data(), soname.size());
    return f;
}

TEST(CdiDriverFiles, SonameOfAFileCutShort) {
    test::TempDir d;
    auto whole = cdi::read_soname(d.write("libx.so.7.1", tiny_elf("libx.so.7")));
    ASSERT_TRUE(whole) << whole.error().message;
    EXPECT_EQ(*whole, "libx.so.7");
    // The name runs to the end of the file: read as far as it goes.
    auto cut_name = cdi::read_soname(d.write("libx.so.7.2", tiny_elf("libx.so.7").substr(0, 324)));
    ASSERT_TRUE(cut_name) << cut_name.error().message;
    EXPECT_EQ(*cut_name, "libx");
    // The dynamic section is past the end: no SONAME.
    auto no_dynamic = cdi::read_soname(d.write("libx.so.7.3", tiny_elf("libx.so.7").substr(0, 256)));
    ASSERT_TRUE(no_dynamic) << no_dynamic.error().message;
    EXPECT_EQ(*no_dynamic, "");
    // The section headers end early.
    auto cut_table = cdi::read_soname(d.write("libx.so.7.4", tiny_elf("libx.so.7").substr(0, 150)));
    ASSERT_FALSE(cut_table);
    EXPECT_EQ(cut_table.error().code, Code::parse);
    EXPECT_THAT(cut_table.error().message, ::testing::HasSubstr("truncated section headers"));
    // Only the ELF magic and class.
    auto cut_header = cdi::read_soname(d.write("libx.so.7.5", tiny_elf("libx.so.7").substr(0, 20)));
    ASSERT_FALSE(cut_header);
    EXPECT_THAT(cut_header.error().message, ::testing::HasSubstr("truncated ELF header"));
}

TEST(CdiDriverFiles, LibraryLinksFollowTheSonameAndTheHostsLinks) {
    test::TempDir d;
    const std::string dir = d.path() + "/usr/lib64";
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(KGPU_SIM_LIBRARY, dir + "/libnvidia-ml.so.550.54.15");
    cdi::HostFile ml{"/usr/lib64/libnvidia-ml.so.550.54.15", dir + "/libnvidia-ml.so.550.54.15"};
    // No links on the host: none in the container either.
    EXPECT_TRUE(cdi::library_links(ml).empty());
    std::filesystem::create_symlink("libnvidia-ml.so.550.54.15", dir + "/libnvidia-ml.so.1");
    EXPECT_EQ(cdi::library_links(ml), (std::vector<std::string>{"libnvidia-ml.so.550.54.15::/usr/lib64/libnvidia-ml.so.1"}));
    std::filesystem::create_symlink("libnvidia-ml.so.1", dir + "/libnvidia-ml.so");
    EXPECT_EQ(cdi::library_links(ml), (std::vector<std::string>{"libnvidia-ml.so.550.54.15::/usr/lib64/libnvidia-ml.so.1",
                                                                "libnvidia-ml.so.1::/usr/lib64/libnvidia-ml.so"}));
    // libcuda always gets libcuda.so (applications dlopen it), whatever its content.
    cdi::HostFile cuda{"/usr/lib64/libcuda.so.550.54.15", d.write("usr/lib64/libcuda.so.550.54.15", "x")};
    EXPECT_EQ(cdi::library_links(cuda), (std::vector<std::string>{"libcuda.so.1::/usr/lib64/libcuda.so"}));
}

TEST(CdiDriverFiles, IpcSocketsFirmwareAndBinaries) {
    test::TempDir root;
    root.write("var/run/nvidia-persistenced/socket", "");
    root.write("run/nvidia-fabricmanager/socket", "");
    std::filesystem::create_directories(root.path() + "/tmp/nvidia-mps");  // a directory: skipped, as nvidia-ctk does
    auto ipc = cdi::find_ipc_sockets(root.path());
    ASSERT_EQ(ipc.size(), 2u);
    EXPECT_EQ(ipc[0].path, "/var/run/nvidia-persistenced/socket");
    EXPECT_EQ(ipc[1].path, "/run/nvidia-fabricmanager/socket");

    root.write("lib/firmware/updates/6.1.0-test/nvidia/550.54.15/gsp_ga10x.bin", "x");
    root.write("lib/firmware/nvidia/550.54.15/gsp_tu10x.bin", "x");
    root.write("lib/firmware/nvidia/550.54.15/other.bin", "x");
    root.write("opt/fw/nvidia/550.54.15/gsp_gb10x.bin", "x");
    auto fw = cdi::find_firmware(root.path(), "550.54.15", "6.1.0-test", "/opt/fw");
    ASSERT_EQ(fw.size(), 3u);
    EXPECT_EQ(fw[0].path, "/opt/fw/nvidia/550.54.15/gsp_gb10x.bin");
    EXPECT_EQ(fw[1].path, "/lib/firmware/updates/6.1.0-test/nvidia/550.54.15/gsp_ga10x.bin");
    EXPECT_EQ(fw[2].path, "/lib/firmware/nvidia/550.54.15/gsp_tu10x.bin");

    const std::string smi = root.write("usr/bin/nvidia-smi", "#!/bin/sh\n");
    ::chmod(smi.c_str(), 0755);
    root.write("usr/bin/nvidia-debugdump", "not executable");
    const std::string imex = root.write("usr/sbin/nvidia-imex", "#!/bin/sh\n");
    ::chmod(imex.c_str(), 0755);
    auto bins = cdi::find_binaries(root.path());
    ASSERT_EQ(bins.size(), 2u);
    EXPECT_EQ(bins[0].path, "/usr/bin/nvidia-smi");
    EXPECT_EQ(bins[1].path, "/usr/sbin/nvidia-imex");
}

TEST(CdiHooks, ArgvForEachBinaryAndDisabledHooks) {
    cdi::HookOptions o;
    o.path = "/usr/bin/nvidia-cdi-hook";
    auto h = cdi::HookCreator(o).create(cdi::kUpdateLdcache, {"/usr/lib64", "/usr/lib64/vdpau"});
    ASSERT_TRUE(h);
    EXPECT_EQ((*h)["args"], ojson::array({"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64", "--folder",
                                          "/usr/lib64/vdpau"}));
    EXPECT_EQ((*h)["env"], ojson::array({"NVIDIA_CTK_DEBUG=false"}));
    EXPECT_EQ((*h)["hookName"], "createContainer");
    o.path = "/usr/local/bin/kgpu";
    o.ldconfig_path = "/sbin/ldconfig";
    h = cdi::HookCreator(o).create(cdi::kUpdateLdcache, {"/usr/lib64"});
    EXPECT_EQ((*h)["args"], ojson::array({"kgpu", "hook", "update-ldcache", "--ldconfig-path", "/sbin/ldconfig", "--folder",
                                          "/usr/lib64"}));
    o.path = "/usr/bin/nvidia-ctk";
    h = cdi::HookCreator(o).create(cdi::kCreateSymlinks, {"a::b"});
    EXPECT_EQ((*h)["args"], ojson::array({"nvidia-ctk", "hook", "create-symlinks", "--link", "a::b"}));
    EXPECT_FALSE(cdi::HookCreator(o).create(cdi::kCreateSymlinks, {}));  // nothing to link
    EXPECT_FALSE(cdi::HookCreator(o).create(cdi::kChmod, {"/dev/dri"}));  // off by default
    o.enabled = {"chmod"};
    o.disabled = {"all"};
    EXPECT_TRUE(cdi::HookCreator(o).create(cdi::kChmod, {"/dev/dri"}));
    EXPECT_FALSE(cdi::HookCreator(o).create(cdi::kUpdateApplicationProfile));
    EXPECT_EQ(cdi::resolve_hook_path("/opt/x/nvidia-cdi-hook"), "/opt/x/nvidia-cdi-hook");
    EXPECT_EQ(cdi::resolve_hook_path("no-such-hook-binary"), "/usr/bin/no-such-hook-binary");
}

TEST(CdiDriverFiles, MigMinorsBadLineNamesFileAndLine) {
    test::TempDir proc;
    proc.write("driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu0/gi1/access x\n");
    auto r = cdi::read_mig_minors(proc.path());
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("mig-minors:3"));
    auto missing = cdi::read_mig_minors(proc.path() + "/nope");
    ASSERT_FALSE(missing);
    EXPECT_THAT(missing.error().message, HasSubstr("mig-minors"));
    EXPECT_EQ(cdi::parse_proc_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
                                             "22:23:52 UTC 2024\nGCC version:  gcc version 12.2.0\n"),
              "550.54.15");
    EXPECT_EQ(cdi::parse_proc_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release"),
              "570.86.15");
    EXPECT_EQ(cdi::parse_proc_driver_version("garbage"), "");
}

TEST(CdiGenerate, MigEnabledGpusGiveWayToTheirMigDevicesAndLostGpusAreLeftOut) {
    test::TempDir root;
    root.write("proc/driver/nvidia-caps/mig-minors", "gpu3/gi7/access 66\ngpu3/gi7/ci0/access 67\n");
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    auto node = two_gpus();
    inventory::Gpu lost;
    lost.index = 2;
    lost.lost = true;
    lost.error = "GPU is lost";
    node.gpus.push_back(lost);
    cdi::SpecOptions o;
    o.driver_root = root.path();
    o.proc_root = root.path() + "/proc";
    o.sysfs_root = root.path() + "/sys";
    auto spec = cdi::generate(node, o);
    ASSERT_TRUE(spec) << spec.error().message;
    std::vector<std::string> names;
    for (const auto& d : (*spec)["devices"]) names.push_back(d["name"]);
    // Sorted by name as nvidia-ctk writes them; GPU 1 is in MIG mode: only its MIG device.
    EXPECT_EQ(names, (std::vector<std::string>{"0", "1:0", "GPU-aaaa", "MIG-cccc", "all"}));
    const auto& mig = (*spec)["devices"][1]["containerEdits"]["deviceNodes"];
    ASSERT_EQ(mig.size(), 3u);
    // By depth, then path.
    EXPECT_EQ(mig[0]["path"], "/dev/nvidia3");
    EXPECT_EQ(mig[1]["path"], "/dev/nvidia-caps/nvidia-cap66");
    EXPECT_EQ(mig[2]["path"], "/dev/nvidia-caps/nvidia-cap67");
    EXPECT_EQ((*spec)["devices"][4]["containerEdits"]["deviceNodes"].size(), 4u);  // nvidia0, nvidia3, two caps
    EXPECT_EQ((*spec)["cdiVersion"], "0.5.0");
    EXPECT_EQ((*spec)["containerEdits"]["env"],
              ojson::array({"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64", "NVIDIA_VISIBLE_DEVICES=void"}));
    std::vector<std::string> hooks;
    for (const auto& h : (*spec)["containerEdits"]["hooks"]) hooks.push_back(h["args"][1]);
    EXPECT_EQ(hooks, (std::vector<std::string>{"create-symlinks", "enable-cuda-compat", "update-ldcache",
                                               "disable-device-node-modification", "update-application-profile"}));
    EXPECT_EQ((*spec)["containerEdits"]["hooks"][0]["args"][3], "libcuda.so.1::/usr/lib64/libcuda.so");
    EXPECT_EQ((*spec)["containerEdits"]["hooks"][1]["args"][2], "--host-driver-version=550.54.15");
    // A device named explicitly is described even in MIG mode.
    o.device_ids = {"GPU-bbbb"};
    auto one = cdi::generate(node, o);
    ASSERT_TRUE(one) << one.error().message;
    EXPECT_EQ((*one)["devices"][0]["name"], "1");
    o.device_ids = {"7"};
    auto bad = cdi::generate(node, o);
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("'7'"));
}

TEST(CdiGenerate, NoDriverLibrariesIsAnErrorNamingWhereItLookedUnlessAllowed) {
    test::TempDir root;
    auto node = two_gpus();
    node.gpus.pop_back();
    cdi::SpecOptions o;
    o.driver_root = root.path();
    auto spec = cdi::generate(node, o);
    ASSERT_FALSE(spec);
    EXPECT_EQ(spec.error().code, Code::not_found);
    EXPECT_THAT(spec.error().message, HasSubstr("lib*.so.550.54.15"));
    EXPECT_THAT(spec.error().message, HasSubstr(root.path() + "/usr/lib64"));
    EXPECT_THAT(spec.error().message, HasSubstr("--allow-missing-libraries"));
    o.allow_missing_libraries = true;
    auto empty = cdi::generate(node, o);
    ASSERT_TRUE(empty) << empty.error().message;
    EXPECT_FALSE((*empty)["containerEdits"].contains("mounts"));
    EXPECT_EQ((*empty)["containerEdits"]["env"], ojson::array({"NVIDIA_VISIBLE_DEVICES=void"}));
}

TEST(CdiGenerate, RelativeHookPathIsRejected) {
    test::TempDir root;
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    auto node = two_gpus();
    node.gpus.pop_back();
    cdi::SpecOptions o;
    o.driver_root = root.path();
    o.hooks.path = "nvidia-cdi-hook";
    auto bad = cdi::generate(node, o);
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("--nvidia-cdi-hook-path"));
}

TEST(CdiGenerate, NoReadableGpuIsAnError) {
    inventory::Node node;
    node.driver_version = "550.54.15";
    test::TempDir root;
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    cdi::SpecOptions o;
    o.driver_root = root.path();
    auto spec = cdi::generate(node, o);
    ASSERT_FALSE(spec);
    EXPECT_THAT(spec.error().message, HasSubstr("no devices"));
}

TEST(CdiStale, LibrariesOfAnotherDriverAreFound) {
    test::TempDir root;
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    const nlohmann::json spec = {
        {"containerEdits",
         {{"mounts", nlohmann::json::array({{{"hostPath", "/usr/lib64/libcuda.so.550.54.15"},
                                             {"containerPath", "/usr/lib64/libcuda.so.550.54.15"}},
                                            {{"hostPath", "/usr/lib64/libnvidia-ml.so.550.54.15"},
                                             {"containerPath", "/usr/lib64/libnvidia-ml.so.550.54.15"}},
                                            {{"hostPath", "/usr/bin/nvidia-smi"}, {"containerPath", "/usr/bin/nvidia-smi"}}})}}}};
    auto same = cdi::check_libraries(spec, "550.54.15", root.path());
    EXPECT_TRUE(same.other_version.empty());
    EXPECT_EQ(same.missing, (std::vector<std::string>{"/usr/lib64/libnvidia-ml.so.550.54.15"}));
    auto upgraded = cdi::check_libraries(spec, "570.86.15", root.path());
    EXPECT_EQ(upgraded.other_version.size(), 2u);
    EXPECT_EQ(upgraded.versions, (std::vector<std::string>{"550.54.15"}));
    auto parsed = cdi::parse_spec("cdiVersion: \"0.5.0\"\ncontainerEdits:\n  mounts:\n  - hostPath: /a/libcuda.so.1.2\n"
                                  "    containerPath: /a/libcuda.so.1.2\n",
                                  "spec.yaml");
    ASSERT_TRUE(parsed) << parsed.error().message;
    EXPECT_EQ(cdi::check_libraries(*parsed, "550.54.15").other_version.size(), 1u);
    EXPECT_FALSE(cdi::parse_spec("{ bad json", "spec.json"));
}

// The graphics files' EGL libraries have versions of their own: not a stale spec (but still
// missing when their host file is gone).
TEST(CdiStale, EglPlatformLibrariesKeepTheirOwnVersions) {
    test::TempDir root;
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    root.write("usr/lib64/libnvidia-egl-gbm.so.1.1.2", "x");
    auto mount = [](const std::string& p) { return nlohmann::json{{"hostPath", p}, {"containerPath", p}}; };
    const nlohmann::json spec = {
        {"containerEdits",
         {{"mounts", nlohmann::json::array({mount("/usr/lib64/libcuda.so.550.54.15"),
                                            mount("/usr/lib64/libnvidia-egl-gbm.so.1.1.2"),
                                            mount("/usr/lib64/libnvidia-egl-wayland.so.1.1.17"),
                                            mount("/usr/lib64/libnvidia-egl-wayland2.so.1.0.0")})}}}};
    auto r = cdi::check_libraries(spec, "550.54.15", root.path());
    EXPECT_TRUE(r.other_version.empty()) << r.other_version.front();
    EXPECT_EQ(r.versions, (std::vector<std::string>{"550.54.15"}));
    EXPECT_EQ(r.missing, (std::vector<std::string>{"/usr/lib64/libnvidia-egl-wayland.so.1.1.17",
                                                   "/usr/lib64/libnvidia-egl-wayland2.so.1.0.0"}));
}

// Issue #26: kgpu's runtime hands runc one `chain` hook instead of one exec per step when the
// hooks' binary is kgpu; what cannot be chained (another path, env or key, a lone hook, an
// argument that is the separator) stays as it is, in order.
TEST(CdiHooks, ConsecutiveHooksOfOneBinaryBecomeOneChain) {
    cdi::HookOptions o;
    o.path = "/usr/local/kgpu/nvidia-cdi-hook";
    const cdi::HookCreator hooks(o);
    ojson in = ojson::array({*hooks.create(cdi::kCreateSymlinks, {"libcuda.so.1::/usr/lib64/libcuda.so"}),
                             *hooks.create(cdi::kEnableCudaCompat, {"--host-driver-version=550.54.15"}),
                             *hooks.create(cdi::kUpdateLdcache, {"/usr/lib64"}),
                             *hooks.create(cdi::kDisableDeviceNodeModification)});
    ojson out = cdi::chain_hooks(in);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0]["hookName"], "createContainer");
    EXPECT_EQ(out[0]["path"], o.path);
    EXPECT_EQ(out[0]["env"], in[0]["env"]);
    EXPECT_EQ(out[0]["args"], ojson::array({"nvidia-cdi-hook", "chain", "create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so",
                                            "+", "enable-cuda-compat", "--host-driver-version=550.54.15", "+", "update-ldcache",
                                            "--folder", "/usr/lib64", "+", "disable-device-node-modification"}));

    // `kgpu hook <name>`: the chain keeps the `hook` word.
    o.path = "/usr/local/kgpu/kgpu";
    const cdi::HookCreator kgpu(o);
    out = cdi::chain_hooks(ojson::array({*kgpu.create(cdi::kUpdateLdcache, {"/usr/lib64"}), *kgpu.create(cdi::kUpdateApplicationProfile)}));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0]["args"], ojson::array({"kgpu", "hook", "chain", "update-ldcache", "--folder", "/usr/lib64", "+",
                                            "update-application-profile"}));

    // What breaks a run: a hook with a timeout, another binary, another env, a "+" argument.
    ojson timed = *kgpu.create(cdi::kDisableDeviceNodeModification);
    timed["timeout"] = 5;
    ojson other = *hooks.create(cdi::kUpdateApplicationProfile);  // nvidia-cdi-hook, not kgpu
    ojson debug = *kgpu.create(cdi::kUpdateApplicationProfile);
    debug["env"] = ojson::array({"NVIDIA_CTK_DEBUG=true"});
    ojson plus = *kgpu.create(cdi::kUpdateLdcache, {"+"});
    ojson prestart = *kgpu.create(cdi::kUpdateApplicationProfile);
    prestart["hookName"] = "prestart";
    ojson unknown = *kgpu.create(cdi::kUpdateApplicationProfile);
    unknown["args"][2] = "no-such-hook";
    const ojson a = *kgpu.create(cdi::kEnableCudaCompat, {"--host-driver-version=550.54.15"});
    const ojson b = *kgpu.create(cdi::kDisableDeviceNodeModification);
    ojson mixed = ojson::array({a, b, timed, a, other, debug, plus, b, prestart, a, unknown, b});
    out = cdi::chain_hooks(mixed);
    ASSERT_EQ(out.size(), 11u);
    EXPECT_EQ(out[0]["args"], ojson::array({"kgpu", "hook", "chain", "enable-cuda-compat", "--host-driver-version=550.54.15", "+",
                                            "disable-device-node-modification"}));
    for (size_t i = 1; i < out.size(); ++i) EXPECT_EQ(out[i], mixed[i + 1]) << i;
    // Nothing to chain: the same array.
    EXPECT_EQ(cdi::chain_hooks(ojson::array({a})), ojson::array({a}));
    EXPECT_EQ(cdi::chain_hooks(ojson::array()), ojson::array());
}
