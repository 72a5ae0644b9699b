// Helpers for the simulator tests: the library is dlopen'ed (RTLD_NOW | RTLD_LOCAL) from
// KGPU_SIM_LIBRARY and every call goes through a dlsym'd pointer typed from nvml_abi.h, exactly as
// a real NVML client binds it. The simulator keeps process-global state, so SimTest shuts it down
// completely (reference count back to 0) after each test.
#pragma once

#include "nvml/nvml_abi.h"
#include "support/expect.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace simtest {

using kgpu::test::eventually;

inline void* library() {
    static void* h = [] {
        void* p = ::dlopen(KGPU_SIM_LIBRARY, RTLD_NOW | RTLD_LOCAL);
        if (!p) {
            std::fprintf(stderr, "cannot dlopen %s: %s\n", KGPU_SIM_LIBRARY, ::dlerror());
            std::abort();
        }
        return p;
    }();
    return h;
}

template <class F>
F symbol(const char* name) {
    void* p = ::dlsym(library(), name);
    if (!p) {
        std::fprintf(stderr, "symbol %s missing from %s\n", name, KGPU_SIM_LIBRARY);
        std::abort();
    }
    return reinterpret_cast<F>(p);
}

// NV(nvmlDeviceGetName)(dev, buf, len): call the simulator's entry point with the header's type.
#define NV(name) (::simtest::symbol<decltype(&::name)>(#name))

inline std::string fixture(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

// A temporary directory removed at the end of the test.
class TempDir {
public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "kgpu-sim-test-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) std::abort();
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    std::string write(const std::string& name, const std::string& text) const {
        std::ofstream(file(name), std::ios::trunc) << text;
        return file(name);
    }

private:
    std::filesystem::path path_;
};

// Appends text to a file in one write (as a fault-injection script would).
inline void append(const std::string& path, const std::string& text) {
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
}

// Captures what is written to fd 2 while it lives.
class StderrCapture {
public:
    StderrCapture() {
        std::fflush(stderr);
        saved_ = ::dup(2);
        std::string tmpl = (std::filesystem::temp_directory_path() / "kgpu-sim-stderr-XXXXXX").string();
        int fd = ::mkstemp(tmpl.data());
        path_ = tmpl;
        ::dup2(fd, 2);
        ::close(fd);
    }
    ~StderrCapture() {
        restore();
        std::filesystem::remove(path_);
    }
    StderrCapture(const StderrCapture&) = delete;
    StderrCapture& operator=(const StderrCapture&) = delete;
    // Restores fd 2 and returns what was captured.
    std::string text() {
        restore();
        std::ifstream in(path_);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

private:
    void restore() {
        if (saved_ < 0) return;
        std::fflush(stderr);
        ::dup2(saved_, 2);
        ::close(saved_);
        saved_ = -1;
    }
    int saved_ = -1;
    std::string path_;
};

class SimTest : public ::testing::Test {
protected:
    void SetUp() override {
        ::unsetenv("KGPU_SIM_EVENTS");
        ::unsetenv("KGPU_SIM_NODE");
    }
    void TearDown() override {
        // Back to a reference count of 0 so the next test starts from a fresh load.
        for (int i = 0; i < 100 && NV(nvmlShutdown)() == NVML_SUCCESS; ++i) {
        }
        ::unsetenv("KGPU_SIM_EVENTS");
        ::unsetenv("KGPU_SIM_NODE");
    }
    // Sets the environment and initialises; the events file is optional.
    nvmlReturn_t start(const std::string& node, const std::string& events = "") {
        ::setenv("KGPU_SIM_NODE", node.c_str(), 1);
        if (!events.empty()) ::setenv("KGPU_SIM_EVENTS", events.c_str(), 1);
        return NV(nvmlInit_v2)();
    }
    nvmlDevice_t dev(unsigned i) {
        nvmlDevice_t d = nullptr;
        EXPECT_EQ(NV(nvmlDeviceGetHandleByIndex_v2)(i, &d), NVML_SUCCESS);
        return d;
    }
    nvmlDevice_t mig(unsigned gpu, unsigned i) {
        nvmlDevice_t d = nullptr;
        EXPECT_EQ(NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(gpu), i, &d), NVML_SUCCESS);
        return d;
    }
    std::string name(nvmlDevice_t d) {
        char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
        EXPECT_EQ(NV(nvmlDeviceGetName)(d, buf, sizeof buf), NVML_SUCCESS);
        return buf;
    }
    std::string uuid(nvmlDevice_t d) {
        char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        EXPECT_EQ(NV(nvmlDeviceGetUUID)(d, buf, sizeof buf), NVML_SUCCESS);
        return buf;
    }
    nvmlPciInfo_t pci(nvmlDevice_t d) {
        nvmlPciInfo_t p{};
        EXPECT_EQ(NV(nvmlDeviceGetPciInfo_v3)(d, &p), NVML_SUCCESS);
        return p;
    }
    int topo(unsigned a, unsigned b) {
        nvmlGpuTopologyLevel_t l{};
        EXPECT_EQ(NV(nvmlDeviceGetTopologyCommonAncestor)(dev(a), dev(b), &l), NVML_SUCCESS);
        return l;
    }
    // Number of NVLink links of GPU i whose far end is `remoteBusId` (as NVML reports it).
    unsigned linksTo(unsigned i, const std::string& remoteBusId) {
        unsigned n = 0;
        for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; ++l) {
            nvmlEnableState_t s{};
            if (NV(nvmlDeviceGetNvLinkState)(dev(i), l, &s) != NVML_SUCCESS || s != NVML_FEATURE_ENABLED) continue;
            nvmlPciInfo_t p{};
            if (NV(nvmlDeviceGetNvLinkRemotePciInfo_v2)(dev(i), l, &p) == NVML_SUCCESS && remoteBusId == p.busId) ++n;
        }
        return n;
    }
    unsigned activeLinks(unsigned i) {
        unsigned n = 0;
        for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; ++l) {
            nvmlEnableState_t s{};
            if (NV(nvmlDeviceGetNvLinkState)(dev(i), l, &s) == NVML_SUCCESS && s == NVML_FEATURE_ENABLED) ++n;
        }
        return n;
    }
    nvmlUtilization_t util(unsigned i) {
        nvmlUtilization_t u{};
        EXPECT_EQ(NV(nvmlDeviceGetUtilizationRates)(dev(i), &u), NVML_SUCCESS);
        return u;
    }
    nvmlFieldValue_t field(nvmlDevice_t d, unsigned id) {
        nvmlFieldValue_t v{};
        v.fieldId = id;
        EXPECT_EQ(NV(nvmlDeviceGetFieldValues)(d, 1, &v), NVML_SUCCESS);
        return v;
    }
};

}  // namespace simtest
