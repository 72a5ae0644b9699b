// `nvidia-ctk runtime configure` v1.20 and `kgpu runtime configure` on the same inputs, with the
// same flags, compared as data: every file each leaves in the config directory, parsed (TOML or
// JSON), and the exit code. Inputs: the inputs of nvidia-ctk's own engine tests
// (tests/runtime/nvidia_ctk_cases.h), real-world shapes (tests/parity/runtime-configs: containerd
// 1.6 and 2.1 defaults, k3s, RKE2, a GPU Operator drop-in, CRI-O, Docker) and a missing file per
// engine; each under the flag sets an operator uses (default, --set-as-default, CDI with another
// runtime name and path, in place).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "parity/parity.h"
#include "runtime/nvidia_ctk_cases.h"
#include "support/process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using kgpu::parity::Flat;
using kgpu::test::run_process;
using kgpu::test::TempDir;

namespace {

const std::string kInputs = std::string(KGPU_SOURCE_DIR) + "/tests/parity/runtime-configs";

struct Input {
    std::string name;
    std::string engine;   // containerd, crio, docker
    std::optional<std::string> text;  // the config file; none: it does not exist
    std::optional<std::string> drop_in;  // a drop-in an earlier run left
};

void PrintTo(const Input& i, std::ostream* os) { *os << i.engine << "/" << i.name; }

std::string file_name(const std::string& engine) {
    return engine == "docker" ? "daemon.json" : engine == "crio" ? "crio.conf" : "config.toml";
}

json to_json(const toml::node& n) {
    if (const auto* t = n.as_table()) {
        json o = json::object();
        for (const auto& [k, v] : *t) o[std::string(k.str())] = to_json(v);
        return o;
    }
    if (const auto* a = n.as_array()) {
        json arr = json::array();
        for (const auto& v : *a) arr.push_back(to_json(v));
        return arr;
    }
    if (const auto* s = n.as_string()) return s->get();
    if (const auto* i = n.as_integer()) return i->get();
    if (const auto* f = n.as_floating_point()) return f->get();
    if (const auto* b = n.as_boolean()) return b->get();
    std::ostringstream os;  // dates and times as TOML writes them
    n.visit([&](const auto& v) { os << v; });
    return os.str();
}

// Every file under `dir` ("<relative path>:<key>" -> value), parsed by its kind, and the exit code.
Flat result(const std::string& dir, int exit_code) {
    Flat f{{"exit", std::to_string(exit_code)}};
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        const std::string rel = fs::relative(e.path(), dir).string();
        // A backup is noted, not compared (kgpu keeps one of every file it changes).
        if (std::regex_search(rel, std::regex("\\.bak(\\.[0-9]+)?$"))) {
            f[rel] = "(backup)";
            continue;
        }
        const std::string text = kgpu::parity::slurp(e.path().string());
        if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
            f[rel] = "(empty file)";
            continue;
        }
        json doc;
        if (e.path().extension() == ".json") {
            doc = json::parse(text, nullptr, false);
            if (doc.is_discarded()) {
                f[rel] = "(not JSON) " + text;
                continue;
            }
        } else {
            try {
                doc = to_json(toml::parse(text, rel));
            } catch (const toml::parse_error& err) {
                f[rel] = "(not TOML: " + std::string(err.description()) + ") " + text;
                continue;
            }
        }
        for (auto& [k, v] : kgpu::parity::flatten(doc)) f[rel + ":" + k] = v;
    }
    return f;
}

struct Variant {
    std::string name;
    std::vector<std::string> flags;
};

std::vector<Variant> variants(const std::string& engine) {
    if (engine == "docker")
        return {{"default", {}}, {"set-as-default", {"--set-as-default"}}, {"cdi", {"--cdi.enabled"}}};
    std::vector<Variant> v = {{"default", {}},
                              {"set-as-default", {"--set-as-default"}},
                              {"cdi-named", {"--cdi.enabled", "--nvidia-runtime-name", "gpu", "--nvidia-runtime-path", "/opt/gpu/runtime"}},
                              {"in-place", {"--drop-in-config="}}};
    if (engine == "containerd") v.push_back({"in-place-default", {"--drop-in-config=", "--set-as-default"}});
    return v;
}

// Lays the input out in `dir` and runs `argv0 runtime configure` on it with `variant`.
Flat configure(const std::vector<std::string>& argv0, const Input& in, const Variant& variant, std::string* log) {
    TempDir dir;
    const std::string config = dir.path() + "/" + file_name(in.engine);
    if (in.text) dir.write(file_name(in.engine), *in.text);
    const std::string drop_dir = in.engine == "crio" ? "crio.conf.d" : "conf.d";
    if (in.drop_in) dir.write(drop_dir + "/99-nvidia.toml", *in.drop_in);
    std::vector<std::string> argv = argv0;
    argv.insert(argv.end(), {"runtime", "configure", "--runtime", in.engine, "--config", config, "--config-source", "file"});
    const bool in_place = std::ranges::find(variant.flags, "--drop-in-config=") != variant.flags.end();
    if (in.engine != "docker" && !in_place) argv.push_back("--drop-in-config=" + dir.path() + "/" + drop_dir + "/99-nvidia.toml");
    argv.insert(argv.end(), variant.flags.begin(), variant.flags.end());
    // PATH without containerd or crio: the result is what the file says, on any machine.
    const auto r = run_process(argv, {{"PATH", "/nonexistent"}});
    *log += "$ " + argv.front() + " ...: exit " + std::to_string(r.exit_code) + "\n" + r.out + r.err;
    Flat f = result(dir.path(), r.exit_code);
    // Both write the directory's own path into `imports`: the same text on both sides.
    Flat out;
    for (auto& [k, v] : f) {
        std::string value = v;
        for (size_t p; (p = value.find(dir.path())) != std::string::npos;) value.replace(p, dir.path().size(), "<dir>");
        out[k] = value;
    }
    return out;
}

class ConfigureParity : public ::testing::TestWithParam<Input> {};

TEST_P(ConfigureParity, NvidiaCtkAndKgpuLeaveTheSameConfig) {
    KGPU_REQUIRE_PEER(ctk, "nvidia-ctk");
    const Input& in = GetParam();
    for (const auto& v : variants(in.engine)) {
        std::string log;
        const Flat nvidia = configure({ctk}, in, v, &log);
        const Flat kgpu = configure({KGPU_BINARY}, in, v, &log);
        SCOPED_TRACE(log);
        kgpu::parity::expect_parity("runtime-configure", in.engine + "/" + in.name + "/" + v.name, kgpu, nvidia);
        // nvidia-ctk did configure something (not two failures compared); in place it may not
        // (runtime-configure.containerd-in-place-runtime).
        if (v.name == "default") {
            EXPECT_EQ(nvidia.at("exit"), "0") << in.name;
            bool runtime = false;
            for (const auto& [k, val] : nvidia) runtime |= k.find("runtimes.") != std::string::npos || k.find("runtimes[") != std::string::npos;
            EXPECT_TRUE(runtime) << in.name << "/" << v.name << ": no runtime in nvidia-ctk's result";
        }
    }
}

std::vector<Input> inputs() {
    std::vector<Input> out;
    for (const auto& c : kgpu::test::containerd_cases()) out.push_back({"ctk-" + c.name, "containerd", c.input, {}});
    for (const auto& c : kgpu::test::containerd_v1_cases()) out.push_back({"ctk-v1-" + c.name, "containerd", c.input, {}});
    for (const auto& c : kgpu::test::crio_cases()) out.push_back({"ctk-" + c.name, "crio", c.input, {}});
    for (const char* engine : {"containerd", "crio", "docker"}) out.push_back({"missing-file", engine, std::nullopt, {}});
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(kInputs)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
        const std::string name = p.filename().string();
        if (name == "README.md" || name.find(".drop-in.") != std::string::npos) continue;
        const std::string engine = name.starts_with("docker-") ? "docker" : name.starts_with("crio-") ? "crio" : "containerd";
        Input in{p.stem().string(), engine, kgpu::parity::slurp(p.string()), {}};
        const fs::path drop = p.parent_path() / (p.stem().string() + ".drop-in.toml");
        if (fs::exists(drop)) in.drop_in = kgpu::parity::slurp(drop.string());
        out.push_back(in);
    }
    return out;
}

std::string test_name(std::string n) {
    for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(Inputs, ConfigureParity, ::testing::ValuesIn(inputs()),
                         [](const auto& info) { return test_name(info.param.engine + "_" + info.param.name); });

TEST(ConfigureParityInputs, AtLeastThirtyOfEveryEngine) {
    std::map<std::string, int> per_engine;
    for (const auto& i : inputs()) ++per_engine[i.engine];
    EXPECT_GE(inputs().size(), 30u);
    for (const char* e : {"containerd", "crio", "docker"}) EXPECT_GE(per_engine[e], 3) << e;
}

}  // namespace
