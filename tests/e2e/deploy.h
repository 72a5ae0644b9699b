// kgpu's deploy/kubernetes manifests as the e2e suite applies them to kube-mini: the files the
// kustomization lists, each changed only where this one-node cluster on a shared machine cannot
// provide what a GPU node has (tests/e2e/README.md lists every change and why).
#pragma once

#include <string>
#include <vector>

#include "cluster.h"

namespace kgpu::e2e {

// Where a host path of the manifests lives on this machine: the kubelet's and containerd's
// own paths are kube-mini's, the host's /, /proc, /sys and /dev stay, and everything else (/etc,
// /usr/local, /run, /var) moves under <base>/host so the suite writes nothing outside its
// temp dir.
std::string host_path(const Cluster& c, const std::string& path);

// The simulated driver the suite sets up on the "node": device nodes made with mknod, the
// simulator as libnvidia-ml.so.<driver version>, kgpu as nvidia-smi.
std::string driver_root(const std::string& base);
std::string sim_fixture(const std::string& base);  // the node fixture the simulator reads
std::string sim_events(const std::string& base);   // the simulator's events file (XIDs)
std::string runtime_config(const std::string& base);  // where runtime install writes the runtime's config

struct Manifest {
    std::string name;  // file name in deploy/kubernetes
    std::string yaml;  // the documents to apply, adapted
    std::string skipped;  // why it is not applied here ("" when it is)
};

// The kustomization's resources in its order, each adapted; `only` restricts to those file names.
// Fails (returns false with `error`) when a manifest cannot be read or adapted.
bool kustomization_manifests(const Cluster& c, std::vector<Manifest>& out, std::string& error,
                             const std::vector<std::string>& only = {});

}  // namespace kgpu::e2e
