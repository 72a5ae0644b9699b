// The exporter's reading of /proc/<pid>/cgroup (v1 and v2, cgroupfs and systemd, containerd,
// CRI-O and docker names) into a pod UID and container ID.
#include <cctype>

#include "exporter/attribution.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(cgroup) {
    auto ref = exporter::parse_cgroup(fuzz::text(data, size));
    if (!ref) return 0;
    // Documented shapes: a dashed UID (or a static pod's 32-hex hash) and a bare 64-hex container ID.
    KGPU_FUZZ_CHECK(ref->pod_uid.size() == 36 || ref->pod_uid.size() == 32, ref->pod_uid);
    if (ref->pod_uid.size() == 36)
        for (size_t i : {8, 13, 18, 23}) KGPU_FUZZ_CHECK(ref->pod_uid[i] == '-', ref->pod_uid);
    KGPU_FUZZ_CHECK(ref->container_id.size() == 64, ref->container_id);
    for (char c : ref->container_id) KGPU_FUZZ_CHECK(std::isxdigit(static_cast<unsigned char>(c)), ref->container_id);
    return 0;
}
