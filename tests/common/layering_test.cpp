// Which folders of src/ may include which (issue #24 item 4): a feature reads the owner's API,
// never the doctor's (the doctor checks everything and so may include anything), and nothing
// below the command line includes src/cli. Read from the source tree, so a new include that
// breaks this fails here, naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

TEST(Layering, OnlyTheDoctorAndTheCommandLineIncludeTheDoctorAndOnlyMainIncludesTheCommandLine) {
    const fs::path src = fs::path(KGPU_SOURCE_DIR) / "src";
    std::string wrong;
    std::size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(src)) {
        if (!e.is_regular_file()) continue;
        const auto ext = e.path().extension();
        if (ext != ".h" && ext != ".cpp") continue;
        ++files;
        const fs::path rel = fs::relative(e.path(), src);
        const std::string top = rel.begin()->string();
        std::ifstream in(e.path());
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
            const bool doctor = line.starts_with("#include \"doctor/");
            const bool cli = line.starts_with("#include \"cli/");
            if ((doctor && top != "doctor" && top != "cli") || (cli && top != "cli" && top != "main.cpp"))
                wrong += rel.string() + ":" + std::to_string(n) + ": " + line + "\n";
        }
    }
    EXPECT_GT(files, 100u) << "src/ not found under " << src;
    EXPECT_EQ(wrong, "");
}

}  // namespace
