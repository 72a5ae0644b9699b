// Runs a program to completion with extra environment variables, capturing stdout and stderr
// (integration tests run the built kgpu binary this way).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kgpu::test {

struct RunResult {
    int exit_code = -1;  // the exit status, or 128 + signal
    std::string out;
    std::string err;
};

RunResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    // Writes `content` to path()/name (creating parent dirs) and returns the full path.
    std::string write(const std::string& name, const std::string& content) const;

private:
    std::string path_;
};

}  // namespace kgpu::test
