// What a CDI cache makes of the spec directories: the rules of container-device-interface's
// pkg/cdi (cache.go refresh, spec-dirs.go scanSpecDirs, spec.go), which containerd 1.7+/2.x,
// CRI-O, Podman and nvidia-container-runtime's CDI mode all use to turn a requested name such as
// "nvidia.com/gpu=0" into container edits:
//  - the directories are scanned in order, each one's priority its position (the default
//    /etc/cdi then /var/run/cdi: the dynamic directory wins), not recursively; its files ending in
//    .json or .yaml, in name order, each one spec (JSON or YAML);
//  - a spec that does not load (parse error, unknown cdiVersion or one older than its content
//    needs, a bad vendor, class or device name, a device name twice in the file, no devices) is
//    left out whole and its error recorded;
//  - a name defined in a directory of higher priority replaces the one from a lower directory;
//  - a name defined by two specs of ONE directory is a conflict: both files get an error, and the
//    name is dropped at the end of the scan, whatever a higher directory says. Every container
//    asking for it then fails with "unresolvable CDI devices".
// Only what decides names is checked (not every field of the schema: the container edits are
// trusted), so a spec the real cache rejects for a malformed edit still counts here.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kgpu::cdi {

// The default spec directories, lowest priority first (pkg/cdi DefaultSpecDirs).
inline const std::vector<std::filesystem::path> kDefaultSpecDirs = {"/etc/cdi", "/var/run/cdi"};

struct NameDefinitions {
    std::string name;                // qualified: "nvidia.com/gpu=0"
    std::vector<std::string> paths;  // every loaded spec file defining it, in scan order
};

struct CacheView {
    // Resolvable names -> the spec file whose device is used.
    std::map<std::string, std::string> devices;
    // Names dropped because two specs of one directory define them (sorted by name).
    std::vector<NameDefinitions> conflicts;
    // Names defined in several directories where the highest one wins (sorted by name); not an
    // error for CDI, but the lower file is dead weight that looks in use.
    std::vector<NameDefinitions> overridden;
    // Spec files left out, with the reason (scan order).
    std::vector<std::pair<std::string, std::string>> errors;
    // Loaded spec files, in scan order.
    std::vector<std::string> specs;
};

// Scans `dirs` (lowest priority first; a missing directory is skipped) as the cache does.
CacheView scan_spec_dirs(const std::vector<std::filesystem::path>& dirs);

// The names of `requested` the cache cannot resolve (in request order), as InjectDevices reports
// them ("unresolvable CDI devices ...").
std::vector<std::string> unresolved(const CacheView& view, const std::vector<std::string>& requested);

}  // namespace kgpu::cdi
