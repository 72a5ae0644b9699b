// Shared pieces of the `kgpu device-plugin` end-to-end tests: the built binary against the
// simulator (real dlopen), a fake kubelet over unix sockets in a temp directory, and the
// simulator's events file.
//
// SimIds maps the index spellings tests like to write ("1", "0:2", "1::3") to the UUID IDs the
// plugin advertises (ListAndWatch IDs are UUIDs under every --device-id-strategy, as NVIDIA's
// plugin does), and back. It asks `kgpu info --json` on the same simulated node (and the same
// events file, so MIG layouts created by `mig` commands resolve too), once per node and events in
// a test binary.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/expect.h"
#include "support/fake_kubelet.h"
#include "support/files.h"
#include "support/process.h"

namespace kgpu::test {

inline std::string sim_fixture(const std::string& name) {
    return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name;
}

using Devices = std::map<std::string, FakeKubelet::DeviceState>;

class SimIds {
public:
    // Reads the node; an empty `events` file path means none.
    void load(const std::string& node, const std::string& events = "") {
        std::map<std::string, std::string> env{{"KGPU_SIM_NODE", sim_fixture(node)}};
        std::string happened;  // what the events file holds: the same node and events, the same IDs
        if (!events.empty()) {
            env["KGPU_SIM_EVENTS"] = events;
            happened = slurp(events);
        }
        static std::map<std::pair<std::string, std::string>, std::string> known;  // one test binary's runs
        std::string& out = known[{node, happened}];
        if (out.empty()) {
            auto r = run_process({KGPU_BINARY, "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY}, env);
            ASSERT_EQ(r.exit_code, 0) << r.err;
            out = r.out;
        }
        const auto info = nlohmann::json::parse(out);
        to_uuid_.clear();
        to_index_.clear();
        for (const auto& g : info.at("gpus")) {
            add(std::to_string(g.at("index").get<int>()), g.at("uuid").get<std::string>());
            for (const auto& m : g.at("mig").at("devices")) add(m.at("id").get<std::string>(), m.at("uuid").get<std::string>());
        }
    }
    // "1" -> "GPU-…", "0:2" -> "MIG-…", "1::3" -> "GPU-…::3". Unknown spellings are returned as given.
    std::string uuid(const std::string& index_id) const {
        const auto sep = index_id.find("::");
        const std::string base = index_id.substr(0, sep);
        auto it = to_uuid_.find(base);
        const std::string u = it == to_uuid_.end() ? base : it->second;
        return sep == std::string::npos ? u : u + index_id.substr(sep);
    }
    std::vector<std::string> uuids(const std::vector<std::string>& index_ids) const {
        std::vector<std::string> out;
        for (const auto& i : index_ids) out.push_back(uuid(i));
        return out;
    }
    // The reverse: "GPU-…::3" -> "1::3".
    std::string index(const std::string& uuid_id) const {
        const auto sep = uuid_id.find("::");
        const std::string base = uuid_id.substr(0, sep);
        auto it = to_index_.find(base);
        const std::string i = it == to_index_.end() ? base : it->second;
        return sep == std::string::npos ? i : i + uuid_id.substr(sep);
    }
    std::vector<std::string> indices(const std::vector<std::string>& uuid_ids) const {
        std::vector<std::string> out;
        for (const auto& u : uuid_ids) out.push_back(index(u));
        return out;
    }
    // The IDs of a device list in index spelling.
    std::set<std::string> ids(const Devices& d) const {
        std::set<std::string> out;
        for (const auto& [id, s] : d) out.insert(index(id));
        return out;
    }
    std::set<std::string> unhealthy(const Devices& d) const {
        std::set<std::string> out;
        for (const auto& [id, s] : d)
            if (s.health == "Unhealthy") out.insert(index(id));
        return out;
    }

private:
    void add(const std::string& index_id, const std::string& uuid) {
        to_uuid_[index_id] = uuid;
        to_index_[uuid] = index_id;
    }
    std::map<std::string, std::string> to_uuid_, to_index_;
};

// Polls `pred` until it holds or the (generous) deadline passes.
// A plugin under test with its fake kubelet and events file.
class PluginFixture : public ::testing::Test {
protected:
    void SetUp() override {
        kubelet_ = std::make_unique<FakeKubelet>(dir_.path());
        ASSERT_TRUE(kubelet_->start());
        events_ = aux_.path() + "/events";
        std::ofstream(events_).flush();
    }
    void TearDown() override {
        if (plugin_ && plugin_->running()) {
            plugin_->signal(SIGTERM);
            plugin_->wait(10000);
        }
        if (HasFailure() && plugin_) std::cerr << "---- plugin stderr ----\n" << plugin_->err();
        kubelet_.reset();
    }
    // Stops the plugin (SIGTERM) and waits for it: a test whose CDI directory is a local TempDir
    // calls it before that directory goes, or the plugin may write its spec into a path the
    // test already removed (and leave it in /tmp).
    void stop() {
        if (!plugin_ || !plugin_->running()) return;
        plugin_->signal(SIGTERM);
        EXPECT_EQ(plugin_->wait(10000), 0);
    }
    // Starts the plugin on `node` and loads its IDs (after the events already in the file). The
    // plugin serves `device_plugin_path` (default: the fake kubelet's directory).
    void start(const std::string& node, std::vector<std::string> extra = {},
               std::map<std::string, std::string> env = {}, const std::string& device_plugin_path = "") {
        std::vector<std::string> argv = {KGPU_BINARY, "device-plugin", "--device-plugin-path",
                                         device_plugin_path.empty() ? dir_.path() : device_plugin_path,
                                         "--nvml-library", KGPU_SIM_LIBRARY};
        argv.insert(argv.end(), extra.begin(), extra.end());
        // Hermetic: CDI specs (the CDI strategies, IMEX, GPUDirect) go under the test's own
        // directory, never into the machine's /var/run/cdi.
        if (std::ranges::find(extra, std::string("--cdi-spec-dir")) == extra.end())
            argv.insert(argv.end(), {"--cdi-spec-dir", aux_.path() + "/cdi"});
        env.emplace("KGPU_SIM_NODE", sim_fixture(node));
        env.emplace("KGPU_SIM_EVENTS", events_);
        // Probes every 100 ms while something is Unhealthy (1 s in production): recoveries and
        // resets are seen sooner; what the tests check does not depend on the period.
        env.emplace("KGPU_PROBE_INTERVAL_MS", "100");
        plugin_ = std::make_unique<ChildProcess>(argv, env);
        node_ = node;
        sim_.load(node, events_);
    }
    // The environment of a plugin whose recoverable XIDs recover 300 ms after the XID (the config
    // cannot go below 1s) at its next probe (every 100 ms, as start() sets): wait for it with
    // *_seen(), which see the Unhealthy state even when it was over before the test looked.
    static std::map<std::string, std::string> quick_recovery() { return {{"KGPU_RECOVERY_PERIOD_MS", "300"}}; }
    std::string config(const std::string& yaml) { return aux_.write("config.yaml", yaml); }
    // Appends `line` to the simulator's events file; the *_seen() waits look at messages from here on.
    void event(const std::string& line) {
        event_at_ = kubelet_->sequence();
        std::ofstream(events_, std::ios::app) << line << "\n";
    }
    // Where the next *_seen() wait of `resource` looks from: past the last event() and past the
    // message its previous wait found (message numbers go on over kubelet restarts).
    std::uint64_t& seen_cursor(const std::string& resource) {
        std::uint64_t& c = seen_[resource];
        c = std::max(c, event_at_);
        return c;
    }
    Devices registered(const std::string& resource, size_t count, int generation = 1) {
        auto reg = kubelet_->wait_registered(resource, generation, std::chrono::seconds(20));
        EXPECT_TRUE(reg.has_value()) << resource << " not registered";
        EXPECT_TRUE(kubelet_->wait_devices(resource, [&](const Devices& d) { return d.size() == count; },
                                           std::chrono::seconds(20)))
            << resource << " has " << kubelet_->devices(resource).size() << " devices, expected " << count;
        return kubelet_->devices(resource);
    }
    // Waits until the plugin's log holds `text` at least `times` times.
    bool logged(const std::string& text, size_t times = 1, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        return eventually([&] { return count_in(plugin_->err(), text) >= times; }, timeout);
    }
    // Waits until a health probe has seen GPU `index` gone (its `times`-th time): what a reset
    // looks like to the health monitor, so a `restore` after it counts as one.
    bool seen_gone(unsigned index, size_t times = 1) {
        return logged(fmt_gpu(index) + " stopped answering", times);
    }
    std::string fmt_gpu(unsigned index) const {
        const std::string i = std::to_string(index);
        return "GPU " + i + " (" + sim_.uuid(i) + ")";
    }
    static size_t count_in(const std::string& text, const std::string& what) {
        size_t n = 0;
        for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
        return n;
    }
    // An event instead of a sleep for "no recovery within the quiet period": a recoverable XID on
    // `marker` (a device of `resource` the test leaves alone, index spelling) turns it Unhealthy
    // and, once the recovery period has passed since and a probe looked, Healthy again. A device
    // whose XID came before the marker's and that is still Unhealthy then did not recover by
    // the quiet period.
    bool quiet_period_passed(const std::string& resource, const std::string& marker) {
        event("xid " + marker + " 94");
        auto marked = [&](bool unhealthy) {
            return kubelet_->wait_message(
                resource, [&](const Devices& d) { return sim_.unhealthy(d).contains(marker) == unhealthy; },
                seen_cursor(resource), std::chrono::seconds(20));
        };
        return marked(true) && marked(false);
    }
    // Waits until the Unhealthy devices of `resource` (index spelling) are exactly `want`.
    bool unhealthy_becomes(const std::string& resource, const std::set<std::string>& want,
                           std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        return kubelet_->wait_devices(resource, [&](const Devices& d) { return sim_.unhealthy(d) == want; }, timeout);
    }

    // Waits for a ListAndWatch message of `resource`, after the last event() and after the one
    // the previous *_seen() call of `resource` found, whose Unhealthy devices (index spelling) are
    // exactly `want`. Unlike unhealthy_becomes() it also sees a state that lasted only until the
    // next message: what a recovery period of milliseconds (KGPU_RECOVERY_PERIOD_MS) leaves.
    bool unhealthy_seen(const std::string& resource, const std::set<std::string>& want,
                        std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        return kubelet_->wait_message(resource, [&](const Devices& d) { return sim_.unhealthy(d) == want; },
                                      seen_cursor(resource), timeout);
    }
    // The device lists of `resource` received since the last event() (in order).
    std::vector<Devices> since_event(const std::string& resource) { return kubelet_->messages(resource, event_at_); }

    TempDir dir_, aux_;
    std::string events_, node_;
    std::uint64_t event_at_ = 0;                   // the fake kubelet's sequence() at the last event()
    std::map<std::string, std::uint64_t> seen_;  // per resource: the message its last *_seen() wait found
    SimIds sim_;
    std::unique_ptr<FakeKubelet> kubelet_;
    std::unique_ptr<ChildProcess> plugin_;
};

}  // namespace kgpu::test
