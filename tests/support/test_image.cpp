#include "support/test_image.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/process.h"

namespace fs = std::filesystem;

namespace kgpu::test {

namespace {

std::string sha256(const std::string& file) {
    auto r = run_process({"/usr/bin/sha256sum", file});
    return r.exit_code == 0 ? r.out.substr(0, 64) : std::string();
}

// Copies a host file into the root at the same path (following symlinks, keeping the mode).
void copy_in(const std::string& root, const std::string& host, const std::string& in_image) {
    fs::path dst = fs::path(root) / fs::path(in_image).relative_path();
    fs::create_directories(dst.parent_path());
    fs::copy_file(host, dst, fs::copy_options::overwrite_existing);
}

std::string write_blob(const std::string& layout, const std::string& text) {
    const std::string tmp = layout + "/blob.tmp";
    std::ofstream(tmp) << text;
    const std::string digest = sha256(tmp);
    fs::rename(tmp, layout + "/blobs/sha256/" + digest);
    return digest;
}

}  // namespace

std::string build_image(const std::string& dir, const ImageSpec& spec, std::string& error) {
    const std::string root = dir + "/image-rootfs", layout = dir + "/image-layout";
    fs::create_directories(root + "/bin");
    fs::create_directories(root + "/etc");
    fs::create_directories(root + "/tmp");
    fs::create_directories(layout + "/blobs/sha256");
    if (!fs::exists("/bin/busybox")) {
        error = "no /bin/busybox (scripts/setup --all installs busybox-static)";
        return {};
    }
    copy_in(root, "/bin/busybox", "/bin/busybox");
    fs::create_symlink("busybox", root + "/bin/sh");
    // Shared libraries by the paths the loader found them at, and the loader itself.
    static const std::regex lib(R"((/[^ ]+\.so[^ ]*) \(0x)");
    for (const auto& bin : spec.ldd_of) {
        auto r = run_process({"/usr/bin/ldd", bin});
        std::smatch m;
        for (std::string rest = r.out; std::regex_search(rest, m, lib); rest = m.suffix()) copy_in(root, m[1], m[1]);
    }
    for (const auto& [in_image, host] : spec.files) copy_in(root, host, in_image);
    for (const auto& [in_image, text] : spec.contents) {
        fs::path dst = fs::path(root) / fs::path(in_image).relative_path();
        fs::create_directories(dst.parent_path());
        std::ofstream(dst) << text;
    }
    const std::string layer = layout + "/layer.tar";
    auto tar = run_process({"/usr/bin/tar", "--numeric-owner", "--owner=0", "--group=0", "-C", root, "-cf", layer, "."});
    if (tar.exit_code != 0) {
        error = "tar: " + tar.err;
        return {};
    }
    const std::string layer_digest = sha256(layer);
    const auto layer_size = fs::file_size(layer);
    fs::rename(layer, layout + "/blobs/sha256/" + layer_digest);

    nlohmann::json config = {{"architecture", "amd64"},
                             {"os", "linux"},
                             {"config", {{"Env", spec.env}, {"Cmd", {"/bin/sh"}}}},
                             {"rootfs", {{"type", "layers"}, {"diff_ids", {"sha256:" + layer_digest}}}}};
    const std::string config_text = config.dump();
    const std::string config_digest = write_blob(layout, config_text);
    nlohmann::json manifest = {
        {"schemaVersion", 2},
        {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
        {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"}, {"digest", "sha256:" + config_digest}, {"size", config_text.size()}}},
        {"layers", {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"}, {"digest", "sha256:" + layer_digest}, {"size", layer_size}}}}};
    const std::string manifest_text = manifest.dump();
    const std::string manifest_digest = write_blob(layout, manifest_text);
    nlohmann::json index = {{"schemaVersion", 2},
                            {"manifests",
                             {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                               {"digest", "sha256:" + manifest_digest},
                               {"size", manifest_text.size()},
                               {"annotations", {{"io.containerd.image.name", spec.name}, {"org.opencontainers.image.ref.name", "latest"}}}}}}};
    std::ofstream(layout + "/index.json") << index.dump();
    std::ofstream(layout + "/oci-layout") << R"({"imageLayoutVersion":"1.0.0"})";
    const std::string image = dir + "/image.tar";
    auto out = run_process({"/usr/bin/tar", "-C", layout, "-cf", image, "oci-layout", "index.json", "blobs"});
    if (out.exit_code != 0) {
        error = "tar: " + out.err;
        return {};
    }
    return image;
}

}  // namespace kgpu::test
