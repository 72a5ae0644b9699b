// A container image built by a test from host files, as an OCI image-layout tar that `ctr images
// import` reads: busybox-static as the shell, the host's glibc (the dynamic loader and libc) and
// whatever else `ldd` says the named programs need, plus extra files. No registry, no network.
// Used by the toolkit's containerd test and as the e2e suite's workload image (tests/e2e).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kgpu::test {

struct ImageSpec {
    std::string name = "docker.io/library/kgpu-e2e:latest";
    std::vector<std::string> ldd_of;              // host binaries whose shared libraries go in
    std::map<std::string, std::string> files;     // path in the image -> host file to copy
    std::map<std::string, std::string> contents;  // path in the image -> text
    std::vector<std::string> env = {"PATH=/bin:/usr/bin"};  // the image config's Env
};

// Builds the image tar under `dir`; returns its path, or "" with `error` set.
std::string build_image(const std::string& dir, const ImageSpec& spec, std::string& error);

}  // namespace kgpu::test
