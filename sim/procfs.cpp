// What the loaded driver shows in /proc (env KGPU_SIM_PROC_ROOT): the module's version, a
// directory per GPU under driver/nvidia/gpus, driver/nvidia-caps/mig-minors, and
// driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access for each MIG instance that
// exists now. A real node changes these files
// when the driver loads or an instance is created or destroyed, without any NVML call: tools
// that must notice such a change without opening NVML (the container runtime's inventory cache)
// watch them, so the simulator keeps them as the driver does.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

#include "model.h"

namespace kgpu_sim {

namespace fs = std::filesystem;

namespace {

// Writes `text` to `path` unless it already holds exactly that (every process of the node syncs
// the same tree; a file rewritten under a reader would be read half-written).
void writeIfChanged(const fs::path& path, const std::string& text) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    {
        std::ifstream in(path, std::ios::binary);
        if (in) {
            std::stringstream ss;
            ss << in.rdbuf();
            if (ss.str() == text) return;
        }
    }
    const fs::path tmp = path.string() + ".kgpu-sim." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out) return;
    }
    fs::rename(tmp, path, ec);
    if (ec) fs::remove(tmp, ec);
}

std::string lowerBusId(const PciAddr& a) {
    std::string s = a.legacyText();  // "0000:18:00.0"
    for (char& c : s)
        if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
    return s;
}

std::string accessText(unsigned minor) {
    return "DeviceFileMinor: " + std::to_string(minor) + "\nDeviceFileMode: 292\nDeviceFileModify: 1\n";
}

// Makes <root>/gpu<minor>/mig hold exactly the instances of `gpu`.
void syncMig(const fs::path& caps, const Gpu& gpu) {
    const fs::path mig = caps / ("gpu" + std::to_string(gpu.spec.minor)) / "mig";
    std::set<std::string> want;  // "gi<G>" and "gi<G>/ci<C>"
    for (const MigDevice* m : gpu.migs) {
        const std::string gi = "gi" + std::to_string(m->giId);
        want.insert(gi);
        writeIfChanged(mig / gi / "access", accessText(migCapMinor(gpu.spec.minor, m->giId, kNoId)));
        if (!m->hasCi) continue;
        const std::string ci = gi + "/ci" + std::to_string(m->ciId);
        want.insert(ci);
        writeIfChanged(mig / ci / "access", accessText(migCapMinor(gpu.spec.minor, m->giId, m->ciId)));
    }
    std::error_code ec;
    for (fs::directory_iterator gi(mig, ec), end; !ec && gi != end; gi.increment(ec)) {
        const std::string g = gi->path().filename().string();
        if (!g.starts_with("gi")) continue;
        if (!want.count(g)) {
            std::error_code rm;
            fs::remove_all(gi->path(), rm);
            continue;
        }
        std::error_code ec2;
        for (fs::directory_iterator ci(gi->path(), ec2), end2; !ec2 && ci != end2; ci.increment(ec2)) {
            const std::string c = ci->path().filename().string();
            if (c.starts_with("ci") && !want.count(g + "/" + c)) {
                std::error_code rm;
                fs::remove_all(ci->path(), rm);
            }
        }
    }
}

}  // namespace

void syncProcfs(State& st) {
    if (st.procRoot.empty()) return;
    const fs::path nv = fs::path(st.procRoot) / "driver/nvidia";
    writeIfChanged(nv / "version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + st.node.driverVersion +
                                       "  (simulated by kgpu-sim)\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n");
    // The capability minors of every GPU instance and compute instance each GPU could have, as
    // the driver lists them whether or not the instance exists.
    std::string minors = "config 1\nmonitor 2\n";
    for (const Gpu* g : st.gpus)
        for (unsigned gi = 0; gi < 15; ++gi) {
            const std::string base = "gpu" + std::to_string(g->spec.minor) + "/gi" + std::to_string(gi);
            minors += base + "/access " + std::to_string(migCapMinor(g->spec.minor, gi, kNoId)) + "\n";
            for (unsigned ci = 0; ci < 8; ++ci)
                minors += base + "/ci" + std::to_string(ci) + "/access " + std::to_string(migCapMinor(g->spec.minor, gi, ci)) + "\n";
        }
    writeIfChanged(fs::path(st.procRoot) / "driver/nvidia-caps/mig-minors", minors);
    for (const Gpu* g : st.gpus) {
        writeIfChanged(nv / "gpus" / lowerBusId(g->spec.pci) / "information",
                       "Model: \t\t " + g->spec.name + "\nGPU UUID: \t " + g->spec.uuid + "\nBus Location: \t " +
                           lowerBusId(g->spec.pci) + "\nDevice Minor: \t " + std::to_string(g->spec.minor) + "\n");
        syncMig(nv / "capabilities", *g);
    }
}

}  // namespace kgpu_sim
