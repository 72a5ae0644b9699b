#include "toolkit/inventory_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/files.h"
#include "common/strings.h"
#include "nvml/library.h"

namespace kgpu::toolkit {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// The names in `dir` (sorted; none when it cannot be read), with `prefix` only when given.
std::vector<std::string> names_in(const fs::path& dir, std::string_view prefix = {}) {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return out;
    while (const dirent* e = ::readdir(d)) {
        std::string_view n = e->d_name;
        if (n == "." || n == ".." || !n.starts_with(prefix)) continue;
        out.emplace_back(n);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

// " name=type:device-number" for each entry of `dir` starting with `prefix` (a link followed, as
// the edit follows it; a dangling one as the link).
void device_entries(const fs::path& dir, std::string_view prefix, std::string& out) {
    for (const auto& n : names_in(dir, prefix)) {
        struct stat st {};
        if (::stat((dir / n).c_str(), &st) != 0 && ::lstat((dir / n).c_str(), &st) != 0) continue;
        out += fmt::format(" {}={:o}:{}", n, st.st_mode & S_IFMT, static_cast<unsigned long long>(st.st_rdev));
    }
}

std::string file_identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
    return fmt::format("{} {}:{} {} {}.{} {}.{}", path, static_cast<unsigned long long>(st.st_dev),
                       static_cast<unsigned long long>(st.st_ino), static_cast<long long>(st.st_size),
                       static_cast<long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec, static_cast<long long>(st.st_ctim.tv_sec),
                       st.st_ctim.tv_nsec);
}

// The witness, and the GPUs and MIG devices the driver's /proc shows (counted while it is read,
// for not_keepable).
struct Witness {
    std::string text;
    size_t gpus = 0, mig_devices = 0;
};

std::optional<Witness> read_witness(const RuntimeConfig& config) {
    const fs::path proc = config.proc_root;
    auto version = files::read(proc / "driver/nvidia/version");
    if (!version) return std::nullopt;
    Witness out;
    std::string& w = out.text;
    w = fmt::format("{}\nnvml-library={} driver-root={} dev-root={}\nmodule: {}\n", kInventoryCacheSchema,
                                config.nvml_library, config.driver_root, config.dev_root, strings::trim(*version));
    if (auto boot = files::read_line(proc / "sys/kernel/random/boot_id")) w += fmt::format("boot: {}\n", *boot);
    w += "gpus:";
    for (const auto& bus : names_in(proc / "driver/nvidia/gpus")) {
        w += " " + bus;
        ++out.gpus;
    }
    w += "\nmig:";
    const fs::path caps = proc / "driver/nvidia/capabilities";
    for (const auto& gpu : names_in(caps, "gpu"))
        for (const auto& gi : names_in(caps / gpu / "mig", "gi")) {
            w += fmt::format(" {}/{}", gpu, gi);
            for (const auto& ci : names_in(caps / gpu / "mig" / gi, "ci")) {
                w += fmt::format(" {}/{}/{}", gpu, gi, ci);
                ++out.mig_devices;
            }
        }
    const fs::path dev = files::under_root(config.dev_root.empty() ? config.driver_root : config.dev_root, "/dev");
    w += "\ndev:";
    device_entries(dev, "nvidia", w);
    device_entries(dev / "nvidia-caps", "", w);
    w += "\nlibrary:";
    for (const auto& candidate : nvml::candidate_paths({config.nvml_library, config.driver_root})) {
        if (auto id = file_identity(candidate); !id.empty()) {
            w += " " + id;
            break;
        }
    }
    w += "\n";
    return out;
}

}  // namespace

std::optional<std::string> inventory_witness(const RuntimeConfig& config) {
    auto w = read_witness(config);
    if (!w) return std::nullopt;
    return std::move(w->text);
}

namespace {

template <class T>
json opt(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

template <class T>
std::optional<T> opt_from(const json& j) {
    if (j.is_null()) return std::nullopt;
    return j.get<T>();
}

inventory::MigMode mig_mode_from(const std::string& s) {
    if (s == to_string(inventory::MigMode::enabled)) return inventory::MigMode::enabled;
    if (s == to_string(inventory::MigMode::disabled)) return inventory::MigMode::disabled;
    if (s == to_string(inventory::MigMode::unsupported)) return inventory::MigMode::unsupported;
    throw std::invalid_argument("unknown MIG mode '" + s + "'");
}

}  // namespace

Result<std::string> to_cache_text(const CachedInventory& c) {
    json gpus = json::array();
    for (const auto& g : c.node.gpus) {
        json migs = json::array();
        for (const auto& m : g.mig_devices)
            migs.push_back({{"index", m.index}, {"uuid", m.uuid}, {"profile", m.profile}, {"gi", m.gpu_instance_id},
                            {"ci", m.compute_instance_id}, {"memory_mib", m.memory_mib}, {"sm_count", m.sm_count},
                            {"slices", m.slices}, {"compute_slices", m.compute_slices}, {"copy_engines", m.copy_engines},
                            {"decoders", m.decoders}, {"encoders", m.encoders}, {"jpeg_decoders", m.jpeg_decoders},
                            {"ofa", m.optical_flow_accelerators}});
        gpus.push_back({{"index", g.index}, {"uuid", g.uuid}, {"name", g.name}, {"serial", g.serial}, {"minor", g.minor},
                        {"pci_bus_id", g.pci_bus_id}, {"pci_device_id", g.pci_device_id}, {"pci_class", opt(g.pci_class)},
                        {"numa_node", opt(g.numa_node)}, {"numa_source", to_string(g.numa_source)},
                        {"memory_total_mib", g.memory_total_mib}, {"cc_major", g.cc_major}, {"cc_minor", g.cc_minor},
                        {"architecture", g.architecture}, {"power_limit_w", opt(g.power_limit_w)},
                        {"persistence_mode", opt(g.persistence_mode)}, {"mig_mode", to_string(g.mig_mode)},
                        {"mig_pending", to_string(g.mig_pending)}, {"mig_devices", migs}, {"lost", g.lost},
                        {"error", g.error}});
    }
    json out = {{"schema", kInventoryCacheSchema},
                {"witness", c.witness},
                {"driver_version", c.node.driver_version},
                {"nvml_version", c.node.nvml_version},
                {"cuda_driver_version", c.node.cuda_driver_version},
                {"warnings", c.node.warnings},
                {"gpus", gpus},
                {"brands", c.brands}};
    try {
        return out.dump(1) + "\n";
    } catch (const json::type_error& e) {
        return fail(Code::invalid_argument, "a string NVML gave is not UTF-8: {}", e.what());
    }
}

Result<CachedInventory> from_cache_text(std::string_view text) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail(Code::parse, "not JSON");
    if (j.value("schema", std::string()) != kInventoryCacheSchema)
        return fail(Code::parse, "schema '{}', expected '{}'", j.value("schema", std::string()), kInventoryCacheSchema);
    CachedInventory c;
    try {
        c.witness = j.at("witness").get<std::string>();
        c.node.driver_version = j.at("driver_version").get<std::string>();
        c.node.nvml_version = j.at("nvml_version").get<std::string>();
        c.node.cuda_driver_version = j.at("cuda_driver_version").get<int>();
        c.node.warnings = j.at("warnings").get<std::vector<std::string>>();
        c.brands = j.at("brands").get<std::map<std::string, std::string>>();
        for (const auto& jg : j.at("gpus")) {
            inventory::Gpu g;
            g.index = jg.at("index").get<unsigned>();
            g.uuid = jg.at("uuid").get<std::string>();
            g.name = jg.at("name").get<std::string>();
            g.serial = jg.at("serial").get<std::string>();
            g.minor = jg.at("minor").get<unsigned>();
            g.pci_bus_id = jg.at("pci_bus_id").get<std::string>();
            g.pci_device_id = jg.at("pci_device_id").get<std::uint32_t>();
            g.pci_class = opt_from<std::uint32_t>(jg.at("pci_class"));
            g.numa_node = opt_from<int>(jg.at("numa_node"));
            const auto numa_source = jg.at("numa_source").get<std::string>();
            if (numa_source == "sysfs") g.numa_source = inventory::NumaSource::sysfs;
            else if (numa_source == "nvml") g.numa_source = inventory::NumaSource::nvml;
            else if (numa_source == "none") g.numa_source = inventory::NumaSource::none;
            else throw std::invalid_argument("unknown NUMA source '" + numa_source + "'");
            g.memory_total_mib = jg.at("memory_total_mib").get<std::uint64_t>();
            g.cc_major = jg.at("cc_major").get<int>();
            g.cc_minor = jg.at("cc_minor").get<int>();
            g.architecture = jg.at("architecture").get<std::string>();
            g.power_limit_w = opt_from<unsigned>(jg.at("power_limit_w"));
            g.persistence_mode = opt_from<bool>(jg.at("persistence_mode"));
            g.mig_mode = mig_mode_from(jg.at("mig_mode").get<std::string>());
            g.mig_pending = mig_mode_from(jg.at("mig_pending").get<std::string>());
            for (const auto& jm : jg.at("mig_devices")) {
                inventory::MigDevice m;
                m.index = jm.at("index").get<unsigned>();
                m.uuid = jm.at("uuid").get<std::string>();
                m.profile = jm.at("profile").get<std::string>();
                m.gpu_instance_id = jm.at("gi").get<unsigned>();
                m.compute_instance_id = jm.at("ci").get<unsigned>();
                m.memory_mib = jm.at("memory_mib").get<std::uint64_t>();
                m.sm_count = jm.at("sm_count").get<unsigned>();
                m.slices = jm.at("slices").get<unsigned>();
                m.compute_slices = jm.at("compute_slices").get<unsigned>();
                m.copy_engines = jm.at("copy_engines").get<unsigned>();
                m.decoders = jm.at("decoders").get<unsigned>();
                m.encoders = jm.at("encoders").get<unsigned>();
                m.jpeg_decoders = jm.at("jpeg_decoders").get<unsigned>();
                m.optical_flow_accelerators = jm.at("ofa").get<unsigned>();
                g.mig_devices.push_back(std::move(m));
            }
            g.lost = jg.at("lost").get<bool>();
            g.error = jg.at("error").get<std::string>();
            c.node.gpus.push_back(std::move(g));
        }
    } catch (const std::exception& e) {
        return fail(Code::parse, "{}", e.what());
    }
    return c;
}

namespace {

// The cache file, when it is root's own (or this user's: tests) and only its owner may write it:
// another user's file at that path is never trusted. Missing or refused: nullopt.
std::optional<std::string> read_own_file(const std::string& path) {
    Fd f(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!f) return std::nullopt;
    struct stat st {};
    if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0 ||
        st.st_nlink != 1 || st.st_size > (4 << 20))
        return std::nullopt;
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < text.size()) {
        ssize_t n = ::read(f.get(), text.data() + got, text.size() - got);
        if (n <= 0) return std::nullopt;
        got += static_cast<size_t>(n);
    }
    return text;
}

// Whether NVML's answer may be kept: every GPU read whole (none lost or failing, no warning,
// e.g. a MIG device that could not be read), and as many GPUs and MIG devices as the driver's
// /proc showed when the witness was read (an instance being created shows there before NVML can
// read it). Otherwise the next create asks NVML again.
std::string not_keepable(const inventory::Node& n, const Witness& w) {
    for (const auto& g : n.gpus)
        if (g.lost || !g.error.empty()) return fmt::format("GPU {} is lost or failing", g.index);
    if (!n.warnings.empty()) return fmt::format("discovery warned: {}", n.warnings.front());
    if (w.gpus != n.gpus.size()) return fmt::format("NVML shows {} GPUs, the driver's /proc {}", n.gpus.size(), w.gpus);
    size_t migs = 0;
    for (const auto& g : n.gpus) migs += g.mig_devices.size();
    if (w.mig_devices != migs) return fmt::format("NVML shows {} MIG devices, the driver's /proc {}", migs, w.mig_devices);
    return {};
}

// Writes the cache as a new file in its directory, through descriptors: the directory must be
// this user's and writable by nobody else (else nothing is written), the file is created beside
// the old one and renamed over it (a link at the path is replaced, never followed).
Status write_cache(const fs::path& path, std::string_view text) {
    const fs::path dir = path.parent_path();
    if (auto st = files::create_directories(dir.parent_path(), 0755); !st) return st;
    if (auto st = files::create_directories(dir, 0700); !st) return st;
    Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) return fail(Code::io, "{}: {}", dir.string(), std::strerror(errno));
    struct stat st {};
    if (::fstat(d.get(), &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
        return fail(Code::no_permission, "{}: not this user's own directory (owner {}, mode {:o})", dir.string(), st.st_uid,
                    st.st_mode & 07777);
    if (auto f = files::replace_at(d.get(), path.filename().string(), text, 0600))
        return fail(Code::io, "{} {}: {}", f->step, path.string(), std::strerror(f->error));
    return {};
}

class CachedNodeSource : public NodeSource {
public:
    CachedNodeSource(const RuntimeConfig& config, std::unique_ptr<NodeSource> nvml)
        : config_(config), nvml_(std::move(nvml)) {}

    Result<inventory::Node> node() override {
        if (fresh_) return *fresh_;
        if (cached_) return cached_->node;
        if (config_.inventory_cache.empty()) {
            how_ = "NVML (inventory-cache = \"\")";
            return nvml_->node();
        }
        witness_ = read_witness(config_);
        if (!witness_) {
            how_ = fmt::format("NVML (no cache: no {}/driver/nvidia/version)", config_.proc_root);
            return nvml_->node();
        }
        if (auto text = read_own_file(config_.inventory_cache)) {
            if (auto c = from_cache_text(*text); c && c->witness == witness_->text) {
                cached_ = std::move(*c);
                how_ = "cache";
                return cached_->node;
            }
        }
        // The witness was read before NVML: a change while NVML is read leaves a witness that no
        // longer matches, so the next create asks again; the other order could keep an old node
        // under a new witness.
        return from_nvml(*witness_);
    }

    // The cache was kept under the witness node() read, so there is one; NVML is asked after it
    // was read, which keeps the order from_nvml needs.
    bool refresh() override {
        if (!cached_) return false;
        cached_.reset();
        fresh_ = from_nvml(*witness_, " (the cached inventory did not serve this request)");
        return true;
    }

    Result<std::string> brand(const std::string& uuid) override {
        if (cached_)
            if (auto it = cached_->brands.find(uuid); it != cached_->brands.end()) return it->second;
        return nvml_->brand(uuid);
    }

    std::string how() const override { return how_.empty() ? nvml_->how() : how_; }

private:
    // NVML's inventory, kept under `witness` when it may be.
    Result<inventory::Node> from_nvml(const Witness& witness, std::string_view why = {}) {
        auto n = nvml_->node();
        if (!n) return n;
        if (auto no = not_keepable(*n, witness); !no.empty()) {
            how_ = fmt::format("NVML{} (not cached: {})", why, no);
            return n;
        }
        CachedInventory c{witness.text, *n, {}};
        for (const auto& g : n->gpus)
            if (auto b = nvml_->brand(g.uuid)) c.brands[g.uuid] = *b;
        auto text = to_cache_text(c);
        auto wrote = text ? write_cache(config_.inventory_cache, *text) : Status(std::unexpected(text.error()));
        how_ = wrote ? fmt::format("NVML{}, cache written", why) : fmt::format("NVML{} (cache not written: {})", why, wrote.error().message);
        return n;
    }

    std::optional<Witness> witness_;  // read by node(), before NVML
    std::optional<Result<inventory::Node>> fresh_;
    const RuntimeConfig& config_;
    std::unique_ptr<NodeSource> nvml_;
    std::optional<CachedInventory> cached_;
    std::string how_;
};

}  // namespace

std::unique_ptr<NodeSource> cached_node_source(const RuntimeConfig& config, std::unique_ptr<NodeSource> nvml) {
    return std::make_unique<CachedNodeSource>(config, std::move(nvml));
}

}  // namespace kgpu::toolkit
