// The parity suite's shared pieces: NVIDIA's own binaries (the peers), the one table of
// documented differences, and the comparison of two results as data.
//
// Peers. NVIDIA's binaries exist only beside this workspace's checkouts, at
// $KGPU_SHARED_DIR/peers/nvidia/<name>.xz (KGPU_SHARED_DIR defaults to <repo>/../shared). When
// that directory does not exist, every test that needs a peer skips with a message saying so;
// when it exists, a peer that cannot be unpacked or run fails the test. ctest unpacks each peer
// once per run (the parity_peer_* fixtures, tests/parity/unpack-peers) into
// $KGPU_PARITY_PEERS; a test binary run by hand unpacks what it needs once per process.
//
// Differences. docs/migration.md's table "Differences the parity suite allows" is the only
// place a difference between kgpu and NVIDIA may be written down. Each row names what it
// applies to (the comparison, the cases, the key, each side's value) and why; a difference no
// row explains fails the suite, so a new one is either fixed or documented there.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/files.h"

namespace kgpu::parity {

// $KGPU_SHARED_DIR/peers/nvidia, default <repo>/../shared/peers/nvidia (it may not exist).
std::string peers_dir();

struct PeerLookup {
    std::string path;   // the unpacked, executable binary
    std::string skip;   // set when the peers are not here at all: skip with this message
    std::string error;  // set when they are here but this one cannot be had: fail with it
};
PeerLookup find_peer(const std::string& name);

// In a test body or SetUp(): `var` is the path of the peer, or the test skips (no peers here)
// or fails (the peers are here, this one is broken).
#define KGPU_REQUIRE_PEER(var, name)                             \
    std::string var;                                             \
    {                                                            \
        const auto kgpu_peer_ = ::kgpu::parity::find_peer(name); \
        if (!kgpu_peer_.skip.empty()) {                          \
            GTEST_SKIP() << kgpu_peer_.skip;                     \
        }                                                        \
        ASSERT_EQ(kgpu_peer_.error, "") << kgpu_peer_.error;     \
        var = kgpu_peer_.path;                                   \
    }

// ---- the documented differences --------------------------------------------------------------

// A row of docs/migration.md's table. `cases`, `key`, `kgpu` and `nvidia` are regular
// expressions matched against the whole text; a side written `(absent)` means the key is
// missing on that side, `(any)` that it may be anything or missing, and one written `(= kgpu T)` or `(= NVIDIA T)` that its value is the
// named side's value under the key `key` gives with T as replacement (`$1`: its first group),
// for a result one side writes to another file than the other.
struct Difference {
    std::string id, compared, cases, key, kgpu, nvidia, why;
};
// The rows, parsed once. A malformed table fails the calling test.
const std::vector<Difference>& documented();

// A result as data: every leaf as "path" -> value text.
using Flat = std::map<std::string, std::string>;

// JSON to Flat: objects by member name ("a.b"), arrays by index ("a[0]"); strings as they are,
// everything else as its JSON text.
Flat flatten(const nlohmann::json& doc, const std::string& prefix = "");

// The keys where `kgpu` and `nvidia` differ and no documented difference of `compared` explains
// it for the case `case_name`, each as one line (key, both values). Empty: at parity. The ids
// of the rows that explained something are added to `used`.
std::vector<std::string> undocumented(const std::string& compared, const std::string& case_name, const Flat& kgpu,
                                      const Flat& nvidia, std::set<std::string>* used = nullptr);

// Both in one line for a test: fails listing every undocumented difference, and both results.
void expect_parity(const std::string& compared, const std::string& case_name, const Flat& kgpu, const Flat& nvidia);

// ---- running NVIDIA's binaries where their built-in paths point at the test's dirs --------------

// argv run in a new private mount namespace (util-linux `unshare`; as non-root in a new user
// namespace too) after bind-mounting each `from` directory over its `onto` mount point: NVIDIA's
// binaries have paths built in (/var/lib/kubelet/device-plugins, /sys, /proc/driver, /run) and
// see the test's temp dirs there. Nothing is mounted outside the namespace, which ends with the
// process.
std::vector<std::string> in_namespace(const std::vector<std::pair<std::string, std::string>>& binds,
                                      const std::vector<std::string>& argv);

using ::kgpu::test::slurp;  // support/files.h

}  // namespace kgpu::parity
