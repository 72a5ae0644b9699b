#include "parity/parity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "support/process.h"

namespace fs = std::filesystem;

namespace kgpu::parity {

std::string peers_dir() {
    const char* shared = std::getenv("KGPU_SHARED_DIR");
    const std::string base = shared && *shared ? std::string(shared) : std::string(KGPU_SOURCE_DIR) + "/../shared";
    return base + "/peers/nvidia";
}

namespace {

bool executable(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Peers unpacked by this process (when ctest's fixture did not), removed at exit.
kgpu::test::TempDir& own_unpack_dir() {
    static auto* dir = new kgpu::test::TempDir();  // lives until exit; its destructor is not needed
    return *dir;
}

}  // namespace

PeerLookup find_peer(const std::string& name) {
    PeerLookup r;
    const std::string dir = peers_dir();
    if (!fs::is_directory(dir)) {
        r.skip = "NVIDIA's binaries are not here (" + dir +
                 " does not exist; set KGPU_SHARED_DIR to the directory that holds peers/nvidia): "
                 "parity with NVIDIA's " + name + " not checked";
        return r;
    }
    const std::string xz = dir + "/" + name + ".xz";
    if (!fs::exists(xz)) {
        r.error = xz + " is missing although " + dir + " exists";
        return r;
    }
    // Unpacked once per test run by ctest's fixture (tests/parity/unpack-peers).
    if (const char* unpacked = std::getenv("KGPU_PARITY_PEERS"); unpacked && *unpacked) {
        const std::string p = std::string(unpacked) + "/" + name;
        if (executable(p)) {
            r.path = p;
            return r;
        }
    }
    static std::map<std::string, std::string> cache;
    if (auto it = cache.find(name); it != cache.end()) {
        r.path = it->second;
        return r;
    }
    const std::string out = own_unpack_dir().path() + "/" + name;
    auto x = kgpu::test::run_process({"/bin/sh", "-c", "xz -dc \"$1\" > \"$2\" && chmod 755 \"$2\"", "sh", xz, out});
    if (x.exit_code != 0 || !executable(out)) {
        r.error = "cannot unpack " + xz + " (xz -dc): exit " + std::to_string(x.exit_code) + " " + x.err;
        return r;
    }
    cache[name] = out;
    r.path = out;
    return r;
}

// ---- the table ------------------------------------------------------------------------------------

namespace {

constexpr const char* kSection = "## Differences the parity suite allows";

// "| a | `b\|c` |" -> {"a", "b|c"}: cells split at unescaped bars, trimmed, backticks removed.
std::vector<std::string> cells(const std::string& line) {
    std::vector<std::string> out;
    std::string cur;
    for (size_t i = 1; i < line.size(); ++i) {
        if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
            cur += '|';
            ++i;
        } else if (line[i] == '|') {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += line[i];
        }
    }
    for (auto& c : out) {
        const auto b = c.find_first_not_of(" \t");
        const auto e = c.find_last_not_of(" \t");
        c = b == std::string::npos ? "" : c.substr(b, e - b + 1);
        if (c.size() >= 2 && c.front() == '`' && c.back() == '`') c = c.substr(1, c.size() - 2);
    }
    return out;
}

struct Compiled {
    const Difference* row;
    std::regex cases, key, kgpu, nvidia;
};

// `(= kgpu T)` / `(= NVIDIA T)`: the value equals the other side's value at the key the row's
// key pattern gives with T as the replacement ($1 for its first group): a result one side writes
// under another key (another file) than the other.
struct Elsewhere {
    std::string side, key_template;
};
std::optional<Elsewhere> elsewhere(const std::string& pattern) {
    static const std::regex re(R"(\(= (kgpu|NVIDIA) (.+)\))");
    std::smatch m;
    if (!std::regex_match(pattern, m, re)) return std::nullopt;
    return Elsewhere{m[1], m[2]};
}

std::optional<std::string> lookup(const Flat& f, const std::string& key) {
    auto it = f.find(key);
    return it == f.end() ? std::nullopt : std::optional<std::string>(it->second);
}

bool value_matches(const std::string& pattern, const std::regex& re, const std::optional<std::string>& v,
                   const std::string& key, const std::regex& key_re, const Flat& kgpu, const Flat& nvidia) {
    if (pattern == "(absent)") return !v.has_value();
    if (pattern == "(any)") return true;
    if (const auto e = elsewhere(pattern)) {
        const std::string other_key = std::regex_replace(key, key_re, e->key_template, std::regex_constants::format_first_only);
        return v.has_value() && lookup(e->side == "kgpu" ? kgpu : nvidia, other_key) == v;
    }
    return v.has_value() && std::regex_match(*v, re);
}

std::vector<Compiled> load() {
    static std::vector<Difference> rows;  // Compiled points into it; loaded once
    const std::string path = std::string(KGPU_SOURCE_DIR) + "/docs/migration.md";
    std::ifstream in(path);
    std::string line;
    bool in_section = false, in_table = false;
    int lineno = 0;
    std::set<std::string> ids;
    while (std::getline(in, line)) {
        ++lineno;
        if (line.starts_with("## ")) {
            in_section = line.starts_with(kSection);
            continue;
        }
        if (!in_section) continue;
        if (!line.starts_with("|")) {
            if (in_table) break;  // the table ended
            continue;
        }
        const auto c = cells(line);
        if (!in_table) {  // the header row, then the separator
            in_table = true;
            if (c != std::vector<std::string>{"id", "compared", "cases", "key", "kgpu", "NVIDIA", "why"})
                ADD_FAILURE() << path << ":" << lineno << ": expected the header | id | compared | cases | key | kgpu | NVIDIA | why |";
            std::getline(in, line);
            ++lineno;
            continue;
        }
        if (c.size() != 7) {
            ADD_FAILURE() << path << ":" << lineno << ": a row needs 7 cells, has " << c.size() << ": " << line;
            continue;
        }
        if (!ids.insert(c[0]).second) ADD_FAILURE() << path << ":" << lineno << ": id " << c[0] << " twice";
        rows.push_back({c[0], c[1], c[2], c[3], c[4], c[5], c[6]});
    }
    if (rows.empty()) ADD_FAILURE() << path << ": no table under \"" << kSection << "\"";
    std::vector<Compiled> out;
    for (const auto& r : rows) {
        try {
            auto value_re = [](const std::string& v) { return std::regex(v == "(absent)" || v == "(any)" || elsewhere(v) ? "" : v); };
            out.push_back({&r, std::regex(r.cases), std::regex(r.key), value_re(r.kgpu), value_re(r.nvidia)});
        } catch (const std::regex_error& e) {
            ADD_FAILURE() << path << ": row " << r.id << ": bad regular expression: " << e.what();
        }
    }
    return out;
}

const std::vector<Compiled>& compiled() {
    static const std::vector<Compiled> c = load();
    return c;
}

std::string show(const std::optional<std::string>& v) { return v ? "\"" + *v + "\"" : "(absent)"; }

}  // namespace

const std::vector<Difference>& documented() {
    static const std::vector<Difference> rows = [] {
        std::vector<Difference> out;
        for (const auto& c : compiled()) out.push_back(*c.row);
        return out;
    }();
    return rows;
}

Flat flatten(const nlohmann::json& doc, const std::string& prefix) {
    Flat out;
    if (doc.is_object()) {
        for (const auto& [k, v] : doc.items()) out.merge(flatten(v, prefix.empty() ? k : prefix + "." + k));
        if (doc.empty()) out[prefix] = "{}";
    } else if (doc.is_array()) {
        for (size_t i = 0; i < doc.size(); ++i) out.merge(flatten(doc[i], prefix + "[" + std::to_string(i) + "]"));
        if (doc.empty()) out[prefix] = "[]";
    } else {
        out[prefix] = doc.is_string() ? doc.get<std::string>() : doc.dump();
    }
    return out;
}

std::vector<std::string> undocumented(const std::string& compared, const std::string& case_name, const Flat& kgpu,
                                      const Flat& nvidia, std::set<std::string>* used) {
    std::set<std::string> keys;
    for (const auto& [k, v] : kgpu) keys.insert(k);
    for (const auto& [k, v] : nvidia) keys.insert(k);
    std::vector<std::string> out;
    for (const auto& k : keys) {
        std::optional<std::string> a, b;
        if (auto it = kgpu.find(k); it != kgpu.end()) a = it->second;
        if (auto it = nvidia.find(k); it != nvidia.end()) b = it->second;
        if (a == b) continue;
        const Difference* why = nullptr;
        for (const auto& c : compiled()) {
            if (c.row->compared != compared || !std::regex_match(case_name, c.cases) || !std::regex_match(k, c.key)) continue;
            if (value_matches(c.row->kgpu, c.kgpu, a, k, c.key, kgpu, nvidia) &&
                value_matches(c.row->nvidia, c.nvidia, b, k, c.key, kgpu, nvidia)) {
                why = c.row;
                break;
            }
        }
        if (why) {
            if (used) used->insert(why->id);
            continue;
        }
        out.push_back(k + ": kgpu " + show(a) + ", NVIDIA " + show(b));
    }
    return out;
}

namespace {

std::string dump(const Flat& f) {
    std::string s;
    for (const auto& [k, v] : f) s += "  " + k + " = " + v + "\n";
    return s;
}

}  // namespace

void expect_parity(const std::string& compared, const std::string& case_name, const Flat& kgpu, const Flat& nvidia) {
    const auto diffs = undocumented(compared, case_name, kgpu, nvidia);
    if (diffs.empty()) return;
    std::string list;
    for (const auto& d : diffs) list += "  " + d + "\n";
    ADD_FAILURE() << compared << " " << case_name << ": " << diffs.size()
                  << " difference(s) from NVIDIA that docs/migration.md (\"" << kSection
                  << "\") does not explain; fix kgpu or document them there:\n"
                  << list << "--- kgpu:\n" << dump(kgpu) << "--- NVIDIA:\n" << dump(nvidia);
}

std::vector<std::string> in_namespace(const std::vector<std::pair<std::string, std::string>>& binds,
                                      const std::vector<std::string>& argv) {
    std::string script = "set -e; ";
    std::vector<std::string> args;
    for (size_t i = 0; i < binds.size(); ++i) {
        // Paths travel as positional parameters: no quoting of paths in the script.
        // (${N}: "$10" would be "$1" followed by "0".)
        script += "mount --bind \"${" + std::to_string(2 * i + 1) + "}\" \"${" + std::to_string(2 * i + 2) + "}\"; ";
        args.push_back(binds[i].first);
        args.push_back(binds[i].second);
    }
    script += "shift " + std::to_string(2 * binds.size()) + "; exec \"$@\"";
    std::vector<std::string> out = {"/usr/bin/unshare", "--mount", "--propagation", "private"};
    if (::geteuid() != 0) out.push_back("--map-root-user");
    out.insert(out.end(), {"/bin/sh", "-c", script, "sh"});
    out.insert(out.end(), args.begin(), args.end());
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
}

}  // namespace kgpu::parity
