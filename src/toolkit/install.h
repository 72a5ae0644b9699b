// `kgpu runtime install`: puts kgpu on the node so that a GPU node needs only the driver and
// kgpu (what the GPU Operator's toolkit container does for NVIDIA's toolkit). Run on the host, or
// from the DaemonSet's init container with the host's / mounted at --host-root:
//   1. copies the loader and glibc this binary runs on to <install-dir>/lib/<hash of their
//      contents>, then this binary to <install-dir>/kgpu (one rename, after the glibc is
//      complete) with its PT_INTERP and RPATH pointing there (common/elf.h: so it runs on any
//      host glibc), with the links kgpu-container-runtime and nvidia-cdi-hook next to it; an
//      upgrade to another glibc keeps the directory the replaced binary names (a runtime may be
//      starting on it) and removes older ones;
//   2. runs the copy inside the host's root (chroot), to prove it runs there before anything
//      points at it (the new binary is staged as <install-dir>/.kgpu.new and renamed into place
//      only after this);
//   3. writes the container runtime's config (toolkit/config.h);
//   4. points containerd's `nvidia` runtime at <install-dir>/kgpu-container-runtime
//      (src/runtime, as `kgpu runtime configure --kgpu-runtime`);
//   5. creates the /dev/char links of the NVIDIA device nodes (toolkit/devchar.h);
//   6. restarts containerd, only when its config changed, by the chosen mode, and waits for it
//      to serve its socket again (last: the init container's output after containerd went away
//      may be lost).
// Idempotent: what is already right is not rewritten, and says so.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "toolkit/config.h"

namespace kgpu::toolkit {

enum class RestartMode { none, signal, systemd };

struct InstallOptions {
    std::filesystem::path host_root = "/";
    std::string install_dir = "/usr/local/kgpu";                      // host paths from here on
    std::string source_binary;                                         // "" = /proc/self/exe
    std::string runtime_config_path = std::string(kDefaultConfigPath);
    RuntimeConfig runtime;                                             // what the config file says
    std::string containerd_config = "/etc/containerd/config.toml";
    std::string drop_in;                                               // "" = edit containerd_config in place
    std::string runtime_name = "nvidia";
    bool set_as_default = false;
    bool enable_cdi = false;
    RestartMode restart = RestartMode::signal;
    std::string containerd_socket = "/run/containerd/containerd.sock";
    std::string dbus_socket = "/run/dbus/system_bus_socket";
    std::string containerd_unit = "containerd.service";
    bool dev_char_links = true;
    bool verify = true;
    // After a restart (signal, systemd): how long to wait for containerd to serve its socket
    // again (a new socket, accepting connections); 0 = do not wait. Until it does, the init
    // container must not exit: containerd copies a CRI container's output to its log, and a
    // container that ends while containerd is down loses what it printed since (the e2e suite
    // found the install's log empty).
    std::chrono::milliseconds restart_timeout{60000};
    // Called with each report line as soon as its step is done (the CLI prints it then).
    std::function<void(const std::string&)> progress;
};

struct InstallReport {
    std::vector<std::string> lines;  // what was done (or found right), one sentence each
    bool containerd_changed = false;
};

// Errors name the step and the path. Whatever was done before a failing step stays done (each
// step is atomic and idempotent: run it again after fixing the cause).
Result<InstallReport> install(const InstallOptions& options);

// What a binary `kgpu runtime install` put at `binary` (a host path; the host's / at `host_root`)
// needs to start: its program interpreter and, when that lies in <install-dir>/lib or
// <install-dir>/lib/<hash> (an install from before versioned directories, or after), the glibc
// carried next to it. `missing` lists the host paths of those that are not there. Errors: the
// binary cannot be read, or is not an ELF file with an interpreter.
struct InstalledBinary {
    std::string interpreter;
    std::vector<std::string> missing;
};
Result<InstalledBinary> inspect_installed(const std::filesystem::path& host_root, const std::string& binary);

// The pid of the process serving `socket` (its peer credentials): the containerd that `signal`
// restarts with SIGHUP (it does not handle the signal and exits; systemd's Restart= brings it back
// with the new config, as after NVIDIA's installer). An error when it cannot be seen from here
// (another PID namespace).
Result<int> socket_owner(const std::string& socket);

// A unix socket file's identity: a restarted server removes the old file and binds a new one.
struct SocketIdentity {
    bool exists = false;
    ino_t inode = 0;
    long ctime_sec = 0, ctime_nsec = 0;
    bool operator==(const SocketIdentity&) const = default;
};
SocketIdentity socket_identity(const std::string& socket);

// Waits until `socket` is a different file than `before` (by inode and change time: an inode
// number may be reused) that accepts a connection, polling every 50 ms; the seconds waited, or
// nullopt after `timeout`.
std::optional<double> wait_for_new_server(const std::string& socket, const SocketIdentity& before,
                                          std::chrono::milliseconds timeout);

}  // namespace kgpu::toolkit
