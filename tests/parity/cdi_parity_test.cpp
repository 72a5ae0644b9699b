// `nvidia-ctk cdi generate` v1.20 and `kgpu cdi generate` on the same driver root (DriverRoot:
// real ELF libraries with SONAMEs, an ld.so.cache by ldconfig -r, mknod'ed nodes, the simulator
// as libnvidia-ml.so.1) and the same simulated node, with the same flags; the specs compared as
// data. Order that carries no meaning is taken out (devices by name, env by variable, device
// nodes by path, mounts by container path); the order of hooks is kept.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "parity/driver_root.h"
#include "parity/parity.h"
#include "support/process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using kgpu::parity::Flat;
using kgpu::test::run_process;
using kgpu::test::TempDir;

namespace {

const std::string kSource = KGPU_SOURCE_DIR;

// containerEdits with its lists keyed by what identifies an entry.
json edits(const json& e) {
    json out = json::object();
    for (const auto& [k, v] : e.items()) {
        if (k == "env") {
            for (const auto& s : v) {
                const std::string t = s.get<std::string>();
                const auto eq = t.find('=');
                out["env"][t.substr(0, eq)] = eq == std::string::npos ? "" : t.substr(eq + 1);
            }
        } else if (k == "deviceNodes") {
            for (const auto& n : v) out["deviceNodes"][n.value("path", "?")] = n;
        } else if (k == "mounts") {
            for (const auto& m : v) out["mounts"][m.value("containerPath", "?")] = m;
        } else {
            out[k] = v;
        }
    }
    return out;
}

// A CDI spec (JSON) as data.
Flat spec_data(const std::string& text) {
    const json spec = json::parse(text, nullptr, false);
    if (spec.is_discarded()) return {{"spec", "(not JSON) " + text}};
    json norm = json::object();
    for (const auto& [k, v] : spec.items()) {
        if (k == "devices") {
            for (const auto& d : v) {
                json dev = d;
                if (d.contains("containerEdits")) dev["containerEdits"] = edits(d["containerEdits"]);
                norm["devices"][d.value("name", "?")] = dev;
            }
        } else if (k == "containerEdits") {
            norm[k] = edits(v);
        } else {
            norm[k] = v;
        }
    }
    return kgpu::parity::flatten(norm);
}

struct Case {
    std::string fixture, name;
    std::vector<std::string> flags;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "/" << c.name; }

class CdiParity : public ::testing::TestWithParam<Case> {};

TEST_P(CdiParity, NvidiaCtkAndKgpuGenerateTheSameSpec) {
    KGPU_REQUIRE_PEER(ctk, "nvidia-ctk");
    const Case& c = GetParam();
    const std::string node = kSource + "/sim/nodes/" + c.fixture + ".yaml";
    kgpu::parity::DriverRoot root;
    if (const auto why = root.make(node); !why.empty()) {
        GTEST_SKIP() << why;
    }
    TempDir out, xdg, sys;
    std::vector<std::string> common = {"cdi", "generate", "--driver-root", root.path(), "--format", "json",
                                       "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook"};
    common.insert(common.end(), c.flags.begin(), c.flags.end());

    std::vector<std::string> nvidia = {ctk};
    nvidia.insert(nvidia.end(), common.begin(), common.end());
    nvidia.insert(nvidia.end(), {"--output", out.path() + "/nvidia.json"});
    // nvidia-ctk reads MIG minors from /proc/driver and its own config from XDG_CONFIG_HOME.
    const auto n = run_process(kgpu::parity::in_namespace({{root.proc_driver(), "/proc/driver"}}, nvidia),
                               {{"KGPU_SIM_NODE", node}, {"XDG_CONFIG_HOME", xdg.path()}});
    std::vector<std::string> kgpu = {KGPU_BINARY};
    kgpu.insert(kgpu.end(), common.begin(), common.end());
    kgpu.insert(kgpu.end(), {"--output", out.path() + "/kgpu.json", "--proc-root", root.proc(), "--sysfs-root", sys.path()});
    const auto k = run_process(kgpu, {{"KGPU_SIM_NODE", node}});

    SCOPED_TRACE("nvidia-ctk stderr:\n" + n.err + "\nkgpu stderr:\n" + k.err);
    Flat a = spec_data(kgpu::parity::slurp(out.path() + "/kgpu.json"));
    Flat b = spec_data(kgpu::parity::slurp(out.path() + "/nvidia.json"));
    a["exit"] = std::to_string(k.exit_code);
    b["exit"] = std::to_string(n.exit_code);
    // The driver root's path is the same on both sides; shorten it for reading.
    for (Flat* f : {&a, &b}) {
        Flat g;
        for (auto [key, v] : *f) {
            for (size_t p; (p = v.find(root.path())) != std::string::npos;) v.replace(p, root.path().size(), "<root>");
            g[key] = v;
        }
        *f = g;
    }
    kgpu::parity::expect_parity("cdi-generate", c.fixture + "/" + c.name, a, b);
    EXPECT_EQ(n.exit_code, 0) << "nvidia-ctk failed: nothing was compared";
}

std::vector<Case> cases() {
    std::vector<Case> out;
    for (const char* fixture : {"dgx-h100", "t4x4", "a100-mig", "a100-mig-uniform", "pcie-nvlink-pairs"}) {
        out.push_back({fixture, "default", {}});
        out.push_back({fixture, "uuid-names", {"--device-name-strategy", "uuid"}});
    }
    out.push_back({"dgx-h100", "vendor-class-no-all", {"--vendor", "example.com", "--class", "device", "--no-all-device"}});
    out.push_back({"dgx-h100", "type-index", {"--device-name-strategy", "type-index"}});
    out.push_back({"a100-mig", "index-and-uuid", {"--device-name-strategy", "index", "--device-name-strategy", "uuid"}});
    out.push_back({"dgx-h100", "no-hooks", {"--disable-hook", "all"}});
    out.push_back({"dgx-h100", "some-devices", {"--device-id", "1", "--device-id", "GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80"}});
    return out;
}

std::string test_name(std::string n) {
    for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(DriverRoots, CdiParity, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return test_name(info.param.fixture + "_" + info.param.name); });

}  // namespace
