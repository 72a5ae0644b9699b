// kgpu_fuzz_replay <target> <file or directory>...: runs every file through the fuzz target
// (fuzz/fuzz.h), as libFuzzer would run a corpus, without libFuzzer. The test suites run each
// target's committed corpus this way (tests/fuzz/CMakeLists.txt). Exit 0 when every input ran;
// a finding aborts.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz.h"

namespace kgpu::fuzz {

namespace {

std::map<std::string, TargetFn>& registry() {
    static std::map<std::string, TargetFn> r;
    return r;
}

}  // namespace

Registration::Registration(const char* name, TargetFn fn) { registry()[name] = fn; }

}  // namespace kgpu::fuzz

int main(int argc, char** argv) {
    namespace fs = std::filesystem;
    const auto& targets = kgpu::fuzz::registry();
    if (argc < 3 || !targets.contains(argv[1])) {
        std::fprintf(stderr, "usage: kgpu_fuzz_replay <target> <file or directory>...\ntargets:");
        for (const auto& [name, fn] : targets) std::fprintf(stderr, " %s", name.c_str());
        std::fprintf(stderr, "\n");
        return 2;
    }
    const auto fn = targets.at(argv[1]);
    std::vector<fs::path> inputs;
    for (int i = 2; i < argc; ++i) {
        if (fs::is_directory(argv[i])) {
            for (const auto& e : fs::recursive_directory_iterator(argv[i]))
                if (e.is_regular_file()) inputs.push_back(e.path());
        } else if (fs::is_regular_file(argv[i])) {
            inputs.push_back(argv[i]);
        } else {
            std::fprintf(stderr, "kgpu_fuzz_replay: %s: no such file or directory\n", argv[i]);
            return 2;
        }
    }
    std::sort(inputs.begin(), inputs.end());
    if (inputs.empty()) {
        std::fprintf(stderr, "kgpu_fuzz_replay: no inputs for %s\n", argv[1]);
        return 2;
    }
    for (const auto& p : inputs) {
        std::ifstream in(p, std::ios::binary);
        const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::fprintf(stderr, "%s: %s\n", argv[1], p.c_str());
        fn(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    }
    std::printf("%s: %zu inputs ran\n", argv[1], inputs.size());
    return 0;
}
