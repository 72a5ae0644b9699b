// The device plugin's lifecycle around a kubelet that behaves like v1.26 (issue #12): one
// Register and one ListAndWatch stream per resource and kubelet instance, migration from NVIDIA's
// plugin in both orders, a kubelet that never answers Register, health known before the first
// list, a fast SIGTERM, and socket/directory modes whatever the umask.
// The built binary, the real dlopen of the simulator, real gRPC over unix sockets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/unix_socket.h"
#include "doctor/grpc_probe.h"
#include "plugin_fixture.h"
#include "support/fake_device_plugin.h"
#include "support/fake_kubelet.h"
#include "support/plugin_watcher.h"
#include "support/process.h"

using namespace std::chrono_literals;
using kgpu::test::ChildProcess;
using kgpu::test::FakeDevicePlugin;
using kgpu::test::FakeKubelet;
using kgpu::test::PluginWatcher;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using Devices = FakeKubelet::Devices;

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kSocket = "kgpu-nvidia-com-gpu.sock";
constexpr const char* kMig1g = "nvidia.com/mig-1g.10gb";
constexpr const char* kMig2g = "nvidia.com/mig-2g.20gb";
constexpr const char* kMig3g = "nvidia.com/mig-3g.40gb";

std::string fixture(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
    return n;
}

// A unix socket bound at `path` that listens only when told to, then hands each connection to
// the socket at `target` (a plugin served elsewhere): what a plugin looks like between its bind()
// and its listen(), and afterwards. kill() closes it and every connection without removing the
// file, as SIGKILL does.
class LateListener {
public:
    LateListener(const std::string& path, std::string target)
        : target_(std::move(target)), fd_(kgpu::unix_bind(path).release()), bound_(fd_ >= 0) {}
    ~LateListener() { kill(); }
    bool bound() const { return bound_; }
    bool listen() {
        if (::listen(fd_, 16) != 0) return false;
        accepting_ = std::thread([this] { accept_loop(); });
        return true;
    }
    void kill() {
        if (fd_ < 0) return;
        {
            std::lock_guard lk(mu_);
            dead_ = true;
            for (int c : conns_) ::shutdown(c, SHUT_RDWR);
        }
        if (accepting_.joinable()) accepting_.join();
        for (auto& t : pumps_) t.join();
        for (int c : conns_) ::close(c);
        ::close(fd_);
        fd_ = -1;
    }

private:
    void accept_loop() {
        while (!dead_) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            const int in = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (in < 0) continue;
            const int out = dead_ ? -1 : kgpu::unix_connect(target_).release();
            std::lock_guard lk(mu_);
            conns_.push_back(in);
            if (out >= 0) conns_.push_back(out);
            if (dead_ || out < 0) {
                ::shutdown(in, SHUT_RDWR);
                continue;
            }
            pumps_.emplace_back([in, out] { pump(in, out); });
            pumps_.emplace_back([in, out] { pump(out, in); });
        }
    }
    static void pump(int from, int to) {
        char buf[16384];
        for (ssize_t n; (n = ::read(from, buf, sizeof buf)) != 0;) {
            if (n < 0) {
                if (errno == EINTR) continue;
                break;
            }
            for (ssize_t off = 0; off < n;) {
                const ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
                if (w <= 0) {
                    ::shutdown(from, SHUT_RDWR);
                    return;
                }
                off += w;
            }
        }
        ::shutdown(to, SHUT_WR);
    }

    std::string target_;
    int fd_ = -1;
    bool bound_ = false;
    std::mutex mu_;
    std::atomic<bool> dead_{false};
    std::vector<int> conns_;
    std::thread accepting_;
    std::vector<std::thread> pumps_;
};

// The shared fixture (plugin_fixture.h): its aux_ holds the test's other files (events, config,
// CDI specs); dir_ is the device plugin directory (a kubelet restart empties it, as the real one
// does).
class LifecycleTest : public kgpu::test::PluginFixture {
protected:
    void start(const std::string& node, std::vector<std::string> extra = {}, const std::string& dp = "") {
        PluginFixture::start(node, std::move(extra), env_, dp);
    }
    std::map<std::string, std::string> env_;  // more variables for the next start()
    // The advertised ID (a UUID under every ID strategy, issue #13) of GPU `index`.
    std::string id(const std::string& index) const { return sim_.uuid(index); }
    // Every resource in `want` registered once with this kubelet instance, holding one stream, and
    // served with `size` devices.
    bool settled(const std::map<std::string, size_t>& want) {
        return kubelet_->wait_until(
            [&] {
                for (const auto& [r, size] : want) {
                    if (kubelet_->register_calls(r) != 1 || kubelet_->open_streams(r) != 1 || !kubelet_->connected(r) ||
                        kubelet_->devices(r).size() != size || kubelet_->allocatable(r) != static_cast<int>(size))
                        return false;
                }
                return true;
            },
            20s);
    }
    // kgpu is again the plugin the kubelet uses for nvidia.com/gpu, with one stream and 4 GPUs.
    bool kgpu_serves_gpus_again() {
        return kubelet_->wait_until(
            [&] {
                return kubelet_->connected(kGpu) && kubelet_->endpoint(kGpu) == kSocket &&
                       kubelet_->allocatable(kGpu) == 4 && kubelet_->open_streams(kGpu) == 1;
            },
            20s);
    }
    std::string counts(const std::map<std::string, size_t>& want) {
        std::string out;
        for (const auto& [r, size] : want)
            out += r + ": " + std::to_string(kubelet_->register_calls(r)) + " Register, " +
                   std::to_string(kubelet_->open_streams(r)) + " streams, connected " +
                   std::to_string(kubelet_->connected(r)) + ", " + std::to_string(kubelet_->devices(r).size()) +
                   " devices, " + std::to_string(kubelet_->allocatable(r)) + " allocatable (want " +
                   std::to_string(size) + ")\n";
        return out;
    }

};

// Items 1 and 2: a kubelet restart is one Register per resource, a MIG change only a
// ListAndWatch update; at the end one Register and one open stream per resource.
TEST_F(LifecycleTest, OneRegisterAndOneStreamPerResourceAcrossKubeletRestartsAndMigChanges) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index"});
    std::map<std::string, size_t> want = {{kGpu, 2}, {kMig1g, 9}, {kMig2g, 1}, {kMig3g, 1}};
    ASSERT_TRUE(settled(want)) << counts(want);
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(kubelet_->restart());
        ASSERT_TRUE(settled(want)) << "after kubelet restart " << i + 1 << ":\n" << counts(want);
    }
    const int before = kubelet_->updates(kMig1g);
    for (int i = 0; i < 10; ++i) {
        // GPU 0 alternates between 5 and 7 1g.10gb instances: only nvidia.com/mig-1g.10gb changes.
        const bool five = i % 2 == 0;
        event(five ? "mig 0 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb"
                   : "mig 0 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb");
        want[kMig1g] = five ? 7 : 9;
        ASSERT_TRUE(settled(want)) << "after MIG change " << i + 1 << ":\n" << counts(want);
    }
    // Every change reached the kubelet once: one stream, so no update processed twice.
    EXPECT_LE(kubelet_->updates(kMig1g) - before, 20) << counts(want);
    EXPECT_EQ(count(plugin_->err(), "registered nvidia.com/mig-1g.10gb"), 4u) << plugin_->err();
}

// Item 2: a resource that disappears sends an empty list and closes its stream; when it comes
// back it registers once more.
TEST_F(LifecycleTest, ResourceThatDisappearsEmptiesItsListAndComesBackWithOneRegister) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index"});
    std::map<std::string, size_t> want = {{kGpu, 2}, {kMig1g, 9}, {kMig2g, 1}, {kMig3g, 1}};
    ASSERT_TRUE(settled(want)) << counts(want);
    event("mig 1 3g.40gb,1g.10gb,1g.10gb,1g.10gb");  // GPU 1 loses its 2g.20gb
    ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->stream_ended(kMig2g); }, 20s));
    EXPECT_EQ(kubelet_->history(kMig2g).back(), 0u);
    EXPECT_EQ(kubelet_->allocatable(kMig2g), 0);
    event("mig 1 3g.40gb,2g.20gb,1g.10gb,1g.10gb");  // and gets it back
    ASSERT_TRUE(kubelet_->wait_until(
        [&] { return kubelet_->open_streams(kMig2g) == 1 && kubelet_->allocatable(kMig2g) == 1; }, 20s));
    EXPECT_EQ(kubelet_->register_calls(kMig2g), 2);
    want.erase(kMig2g);
    EXPECT_TRUE(settled(want)) << counts(want);
}

// Items 1 and 7: `kgpu doctor` probing the plugin (its own ListAndWatch stream, closed after the
// first list) all along, through kubelet restarts, with one probe forced into the window between
// kgpu's Register and the kubelet's stream: still one Register and one stream per kubelet.
TEST_F(LifecycleTest, DoctorProbesDuringRegistrationCauseNoSecondRegister) {
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    const std::map<std::string, size_t> want = {{kGpu, 4}};
    ASSERT_TRUE(settled(want)) << counts(want);
    const std::string sock = dir_.path() + "/" + kSocket;
    std::atomic<int> answered{0};
    std::jthread doctor([&](std::stop_token stop) {  // joined on every way out of the test
        while (!stop.stop_requested()) {
            if (kgpu::doctor::probe_device_list(sock, 1000)) ++answered;
            std::this_thread::sleep_for(2ms);
        }
    });
    for (int i = 0; i < 3; ++i) {
        kubelet_->hold_streams(true);
        ASSERT_TRUE(kubelet_->restart());
        ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->held_streams() >= 1; }, 20s)) << counts(want);
        // The plugin logs "registered" once it has the answer: its stream grace runs from before then.
        ASSERT_TRUE(kubelet_->wait_until(
            [&] { return count(plugin_->err(), "registered nvidia.com/gpu") >= static_cast<size_t>(i) + 2; }, 20s));
        const auto registered_by = std::chrono::steady_clock::now();
        const int before = answered;
        ASSERT_TRUE(kubelet_->wait_until([&] { return answered > before + 1; }, 20s));  // probes in the window
        kubelet_->hold_streams(false);
        ASSERT_TRUE(settled(want)) << "after kubelet restart " << i + 1 << ":\n" << counts(want);
        // Nothing registers again. A probe taken for the kubelet's stream would bring a Register
        // when it closes (inside the hold) plus the backoff (100 ms): watched for 400 ms from the
        // registration. The last restart also waits out the stream grace (500 ms): 700 ms.
        const auto watch = i < 2 ? 400ms : 700ms;
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(registered_by + watch - std::chrono::steady_clock::now());
        EXPECT_FALSE(kubelet_->wait_until([&] { return kubelet_->register_calls(kGpu) > 1; }, std::max(left, 0ms)))
            << "after kubelet restart " << i + 1 << ":\n" << counts(want);
        EXPECT_TRUE(settled(want)) << counts(want);
    }
    doctor.request_stop();
    doctor.join();
    EXPECT_GT(answered.load(), 6);
}

// Item 4, natural order: NVIDIA's plugin runs, kgpu registers last, NVIDIA's DaemonSet is deleted.
TEST_F(LifecycleTest, ReplacingNvidiasPluginKgpuRegisteredLast) {
    FakeDevicePlugin nvidia(dir_.path(), kGpu, {"GPU-a", "GPU-b"});
    ASSERT_TRUE(nvidia.start());
    ASSERT_TRUE(nvidia.register_with(kubelet_->socket_path()).ok());
    ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->allocatable(kGpu) == 2; }, 20s));
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->endpoint(kGpu) == kSocket; }, 20s));
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [](const Devices& d) { return d.size() == 4; }, 20s));
    nvidia.stop();
    // The kubelet dropped kgpu's client when NVIDIA's stream ended: kgpu registers again.
    ASSERT_TRUE(kgpu_serves_gpus_again())
        << counts({{kGpu, 4}});
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {{id("1")}}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "1");
    EXPECT_EQ(count(plugin_->err(), "nvidia-gpu.sock"), 1u) << plugin_->err();  // warned once
}

// Item 4, other order: kgpu runs, NVIDIA's plugin registers last, then goes away.
TEST_F(LifecycleTest, ReplacingNvidiasPluginNvidiaRegisteredLast) {
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    ASSERT_TRUE(settled({{kGpu, 4}})) << counts({{kGpu, 4}});
    FakeDevicePlugin nvidia(dir_.path(), kGpu, {"GPU-a", "GPU-b"});
    ASSERT_TRUE(nvidia.start());
    ASSERT_TRUE(nvidia.register_with(kubelet_->socket_path()).ok());
    ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->endpoint(kGpu) == "nvidia-gpu.sock"; }, 20s));
    nvidia.stop();
    ASSERT_TRUE(kgpu_serves_gpus_again())
        << counts({{kGpu, 4}});
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {{id("2")}}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "2");
}

// NVIDIA's plugin registered last and was then killed (SIGKILL, OOM): its socket file stays, so
// no directory event says it went, and the kubelet dropped the resource with its stream. kgpu
// sees that nobody listens on that socket any more and registers again.
TEST_F(LifecycleTest, NvidiasPluginKilledLeavingItsSocketKgpuServesAgain) {
    env_["KGPU_FOREIGN_PROBE_MS"] = "100";  // seen dead sooner than the 1 s of production
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    ASSERT_TRUE(settled({{kGpu, 4}})) << counts({{kGpu, 4}});
    FakeDevicePlugin nvidia(dir_.path(), kGpu, {"GPU-a", "GPU-b"});
    ASSERT_TRUE(nvidia.start());
    ASSERT_TRUE(nvidia.register_with(kubelet_->socket_path()).ok());
    ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->endpoint(kGpu) == "nvidia-gpu.sock"; }, 20s));
    nvidia.kill();
    ASSERT_TRUE(std::filesystem::exists(nvidia.socket_path()));  // what SIGKILL leaves
    ASSERT_TRUE(kgpu_serves_gpus_again())
        << counts({{kGpu, 4}}) << plugin_->err();
    EXPECT_THAT(plugin_->err(), HasSubstr("is gone or no longer answers"));
}

// The directory event comes at the other plugin's bind(); a look before its listen() finds a
// socket that refuses connections. kgpu waits for the next probe instead of taking it as gone
// and registering at once: that Register could land before the other plugin's, and then nothing
// would watch the other plugin, so its death would leave the resource unserved. (Seen once in
// NvidiasPluginKilledLeavingItsSocketKgpuServesAgain under load, the late way round.)
TEST_F(LifecycleTest, AnotherPluginSeenBeforeItListensIsStillWatched) {
    // Room for this test to listen before kgpu takes the socket as gone, however loaded the
    // machine, and past the waits below: a probe (every 100 ms) must see it listen.
    env_["KGPU_FOREIGN_GRACE_MS"] = "60000";
    env_["KGPU_FOREIGN_PROBE_MS"] = "100";
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    ASSERT_TRUE(settled({{kGpu, 4}})) << counts({{kGpu, 4}});
    FakeDevicePlugin nvidia(aux_.path(), kGpu, {"GPU-a", "GPU-b"});  // served outside the plugin directory
    ASSERT_TRUE(nvidia.start());
    const std::string path = dir_.path() + "/nvidia-gpu.sock";
    LateListener other(path, nvidia.socket_path());
    ASSERT_TRUE(other.bound());
    // kgpu has looked at it (it says so either way).
    ASSERT_TRUE(kubelet_->wait_until(
        [&] {
            const std::string err = plugin_->err();
            return count(err, "(nvidia-gpu.sock) refuses connections") + count(err, "socket for nvidia.com/gpu came and went") > 0;
        },
        20s))
        << plugin_->err();
    EXPECT_THAT(plugin_->err(), HasSubstr("(nvidia-gpu.sock) refuses connections: taken as gone if it still does in 60000 ms"));
    ASSERT_TRUE(other.listen());
    FakeDevicePlugin announce(dir_.path(), kGpu, {});  // never started: only its Register, endpoint nvidia-gpu.sock
    ASSERT_TRUE(announce.register_with(kubelet_->socket_path()).ok());
    ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->endpoint(kGpu) == "nvidia-gpu.sock" && kubelet_->allocatable(kGpu) == 2; }, 20s))
        << counts({{kGpu, 4}});
    // A look (every foreign_probe) finds it listening: warned about once.
    EXPECT_TRUE(kubelet_->wait_until([&] { return count(plugin_->err(), "another device plugin serves nvidia.com/gpu") == 1; }, 20s))
        << plugin_->err();
    EXPECT_EQ(kubelet_->register_calls(kGpu), 2) << "kgpu registered again while the other plugin started";
    other.kill();
    nvidia.kill();
    ASSERT_TRUE(std::filesystem::exists(path));
    ASSERT_TRUE(kgpu_serves_gpus_again())
        << counts({{kGpu, 4}}) << plugin_->err();
    EXPECT_THAT(plugin_->err(), HasSubstr("is gone or no longer answers"));
}

// Item 3: Register runs off the control loop. The kubelet accepts the connection and never
// answers; SIGHUP, health changes and SIGTERM are handled while that Register still hangs (the
// plugin's Register deadline is seconds away, so none of them waited for it).
// Issue #23 item 7: a kubelet restart as the real one does it. The old kubelet exits first (its
// streams end; kubelet.sock stays behind, refusing connections), and only later does the new one
// empty the directory and serve kubelet.sock again. kgpu sends no Register to the dead socket: its
// log says once per restart that it waits, then shows one registration, and no warning. (Before,
// it retried the stale socket with backoff, 100 ms doubling, a warning per distinct failure.)
TEST_F(LifecycleTest, AKubeletThatExitedIsWaitedForNotRetriedOnItsStaleSocket) {
    start("t4x4.yaml");
    // The kubelet opens its stream before the plugin reads the answer to its Register: a kubelet
    // stopped in between cancels that call (the plugin then waits for the next kubelet, rightly,
    // but this test counts log lines). Each stop waits for the plugin to have seen it registered.
    auto registered_seen = [&](size_t n) {
        return kgpu::test::eventually([&] { return count(plugin_->err(), "registered nvidia.com/gpu") >= n; });
    };
    ASSERT_TRUE(settled({{kGpu, 4}})) << counts({{kGpu, 4}});
    for (size_t i = 1; i <= 2; ++i) {
        ASSERT_TRUE(registered_seen(i)) << plugin_->err();
        kubelet_->stop();
        ASSERT_TRUE(kgpu::test::eventually([&] { return count(plugin_->err(), "no kubelet listens on") >= i; }))
            << plugin_->err();
        // The old code's retries came 100, 300 and 700 ms after the stream ended: none may go out
        // (two of them would fall in this window).
        std::this_thread::sleep_for(400ms);
        ASSERT_TRUE(kubelet_->restart());
        ASSERT_TRUE(settled({{kGpu, 4}})) << "after kubelet restart " << i << ":\n" << counts({{kGpu, 4}});
    }
    ASSERT_TRUE(registered_seen(3)) << plugin_->err();
    const std::string err = plugin_->err();
    EXPECT_EQ(count(err, "registered nvidia.com/gpu"), 3u) << err;
    EXPECT_EQ(count(err, "no kubelet listens on"), 2u) << err;
    EXPECT_EQ(count(err, "retrying with backoff"), 0u) << err;
    EXPECT_EQ(count(err, " warn "), 0u) << err;
}

// The kubelet takes our Register (its stream opens) and exits before answering: the call ends
// CANCELLED, kubelet.sock gone. That is a kubelet gone like any other: the plugin says it waits,
// retries nothing and registers once with the next kubelet. (Before, the directory event of the
// socket's removal counted as "something changed meanwhile": a warning that it retries with
// backoff, and the wait not said again for a later exit.)
TEST_F(LifecycleTest, AKubeletThatExitsBeforeAnsweringARegisterItTookIsWaitedFor) {
    kubelet_->hold_answers(true);
    start("t4x4.yaml");
    ASSERT_TRUE(kubelet_->wait_until(
        [&] { return kubelet_->held_answers() == 1 && kubelet_->devices(kGpu).size() == 4; }, 20s))
        << plugin_->err();
    kubelet_->stop();
    ASSERT_TRUE(kgpu::test::eventually([&] { return count(plugin_->err(), "no kubelet listens on") >= 1; }))
        << plugin_->err();
    kubelet_->hold_answers(false);
    ASSERT_TRUE(kubelet_->restart());
    ASSERT_TRUE(settled({{kGpu, 4}})) << counts({{kGpu, 4}});
    ASSERT_TRUE(kgpu::test::eventually([&] { return count(plugin_->err(), "registered nvidia.com/gpu") >= 1; }))
        << plugin_->err();
    const std::string err = plugin_->err();
    EXPECT_EQ(count(err, "registered nvidia.com/gpu"), 1u) << err;
    EXPECT_EQ(count(err, "no kubelet listens on"), 1u) << err;
    EXPECT_EQ(count(err, "retrying with backoff"), 0u) << err;
    EXPECT_EQ(count(err, " warn "), 0u) << err;
}

TEST_F(LifecycleTest, HungKubeletBlocksNeitherSighupNorHealthNorSigterm) {
    kubelet_->hang_register(true);
    const std::string cfg = aux_.path() + "/config.yaml";
    std::ofstream(cfg) << "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: uuid\n";
    start("t4x4.yaml", {"--config-file", cfg});
    ASSERT_TRUE(kubelet_->wait_until([&] { return kubelet_->hung_registers() == 1; }, 20s)) << plugin_->err();
    PluginWatcher watcher(dir_.path() + "/" + kSocket);
    const std::string replica = id("1") + "::0";
    ASSERT_TRUE(watcher.wait([&](const auto& d) { return d.size() == 4 && !d.contains(replica); }));
    // A SIGHUP that changes the served devices (time-slicing: 2 replicas per GPU).
    std::ofstream(cfg) << "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n";
    plugin_->signal(SIGHUP);
    EXPECT_TRUE(watcher.wait([&](const auto& d) { return d.contains(replica) && d.size() == 8; }));
    event("xid 1 94");
    EXPECT_TRUE(watcher.wait([&](const auto& d) { return d.contains(replica) && d.at(replica) == "Unhealthy"; }));
    EXPECT_EQ(kubelet_->abandoned_registers(), 0) << "the plugin gave up a Register before handling these";
    EXPECT_EQ(kubelet_->hung_registers(), 1);
    plugin_->signal(SIGTERM);
    EXPECT_EQ(plugin_->wait(10000), 0);
    EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/" + kSocket));
    EXPECT_THAT(plugin_->err(), ::testing::Not(HasSubstr("Deadline Exceeded")));
}

// Item 5: a GPU with a reset pending (XID 48 before the restart: remapped rows pending) is
// Unhealthy in the very first list the restarted plugin sends.
TEST_F(LifecycleTest, FirstListAfterRestartCarriesHealthAsProbed) {
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    ASSERT_TRUE(kubelet_->wait_registered(kGpu, 1, 20s));
    event("xid 1 48");
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [&](const Devices& d) { return d.at(id("1")).health == "Unhealthy"; }, 20s));
    plugin_->signal(SIGTERM);
    ASSERT_EQ(plugin_->wait(10000), 0);
    ASSERT_TRUE(kubelet_->restart());
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    ASSERT_TRUE(kubelet_->wait_registered(kGpu, 2, 20s));
    const auto lists = kubelet_->messages(kGpu);
    ASSERT_FALSE(lists.empty());
    ASSERT_TRUE(lists.front().contains(id("1")));
    EXPECT_EQ(lists.front().at(id("1")).health, "Unhealthy");
    EXPECT_EQ(lists.front().at(id("0")).health, "Healthy");
}

// Item 6: SIGTERM ends every stream, removes every socket and exits promptly. The target is
// 200 ms (measured in bench/); the bound here is 5x that so a busy machine does not fail it,
// and still well under the 1.2-2.1 s seen before.
TEST_F(LifecycleTest, SigtermExitsPromptlyWithStreamsClosedAndSocketsRemoved) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed"});
    std::map<std::string, size_t> want = {{kGpu, 2}, {kMig1g, 9}, {kMig2g, 1}, {kMig3g, 1}};
    ASSERT_TRUE(settled(want)) << counts(want);
    const auto t0 = std::chrono::steady_clock::now();
    plugin_->signal(SIGTERM);
    ASSERT_EQ(plugin_->wait(10000), 0);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    EXPECT_LT(ms.count(), 1000);
    for (const auto& [r, size] : want) EXPECT_TRUE(kubelet_->stream_ended(r)) << r;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path()))
        EXPECT_FALSE(e.path().filename().string().starts_with("kgpu-")) << e.path();
}

// Issue #14 item 8: with umask 000 neither the plugin's socket nor a directory it creates is
// world-writable.
TEST_F(LifecycleTest, SocketAndCreatedDirectoriesAreNotWorldWritableUnderUmask000) {
    const std::string dp = dir_.path() + "/sub/device-plugins";
    const std::string cdi = dir_.path() + "/cdi/spec";
    // No kubelet there, only its directory: the plugin serves its socket and keeps retrying.
    std::filesystem::create_directories(dp);
    std::filesystem::permissions(dir_.path() + "/sub", std::filesystem::perms(0750));
    std::filesystem::permissions(dp, std::filesystem::perms(0750));
    const mode_t old = ::umask(0);
    start("t4x4.yaml", {"--device-list-strategy", "cdi-annotations", "--cdi-spec-dir", cdi}, dp);
    ::umask(old);
    const std::string sock = dp + "/" + kSocket;
    ASSERT_TRUE(kubelet_->wait_until([&] { return std::filesystem::exists(sock); }, 20s)) << plugin_->err();
    ASSERT_TRUE(kubelet_->wait_until(
        [&] { return std::filesystem::exists(cdi + "/k8s.device-plugin.nvidia.com-gpu.json"); }, 20s));
    auto mode = [](const std::string& p) {
        struct stat st {};
        EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
        return st.st_mode & 07777;
    };
    for (const std::string& d : {dir_.path() + "/sub", dp, dir_.path() + "/cdi", cdi})
        EXPECT_EQ(mode(d) & 0002, 0u) << d << " mode " << std::oct << mode(d);
    EXPECT_EQ(mode(sock) & 0002, 0u) << sock << " mode " << std::oct << mode(sock);
    EXPECT_EQ(mode(cdi + "/k8s.device-plugin.nvidia.com-gpu.json"), 0644u);
}

// Issue #23: run by hand on a host without a kubelet, the plugin does not create the kubelet's
// device-plugin directory; it says the directory is missing, waits for it, and serves once the
// kubelet has made it. SIGTERM while it waits is a clean exit.
TEST_F(LifecycleTest, WaitsForTheKubeletsDirectoryInsteadOfCreatingIt) {
    const std::string dp = dir_.path() + "/later/device-plugins";
    env_["KGPU_INIT_RETRY_MS"] = "20";  // it looks for the directory that often (500 ms in production)
    start("t4x4.yaml", {}, dp);
    ASSERT_TRUE(kubelet_->wait_until([&] { return plugin_->err().find("does not exist") != std::string::npos; }, 20s))
        << plugin_->err();
    EXPECT_THAT(plugin_->err(), HasSubstr(dp));
    EXPECT_THAT(plugin_->err(), HasSubstr("kubelet"));
    EXPECT_TRUE(plugin_->running());
    EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/later")) << "the plugin made the kubelet's directory";

    // The kubelet starts: its directory and its socket appear, and the plugin registers.
    std::filesystem::create_directories(dp);
    FakeKubelet late(dp);
    ASSERT_TRUE(late.start());
    EXPECT_TRUE(late.wait_devices(kGpu, [](const Devices& d) { return d.size() == 4; }, 20s)) << plugin_->err();

    // A second plugin waiting for a directory that never comes stops on SIGTERM.
    ChildProcess waiting({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir_.path() + "/never/device-plugins",
                          "--nvml-library", KGPU_SIM_LIBRARY, "--cdi-spec-dir", aux_.path() + "/cdi2"},
                         {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}, {"KGPU_INIT_RETRY_MS", "20"}});
    ASSERT_TRUE(kubelet_->wait_until([&] { return waiting.err().find("does not exist") != std::string::npos; }, 20s))
        << waiting.err();
    waiting.signal(SIGTERM);
    EXPECT_EQ(waiting.wait(10000), 0) << waiting.err();
    EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/never"));
}

// Issue #23: run as non-root on a directory it may not write, the plugin's own message is what
// the user reads: gRPC's raw `chttp2_server.cc` lines go through kgpu's log at debug level.
// Once nothing has happened for 10 s, the pages start-up brought in go back to the kernel
// (common/memory.h); serving and health go on, faulting back what they run.
TEST_F(LifecycleTest, StartUpPagesGoBackOnceSettledAndServingGoesOn) {
    env_["KGPU_SETTLE_MS"] = "300";  // 10 s in production
    start("dgx-h100.yaml", {"--log-level", "debug"});
    ASSERT_TRUE(settled({{kGpu, 8}})) << counts({{kGpu, 8}});
    ASSERT_TRUE(kubelet_->wait_until([&] { return plugin_->err().find("settled: resident set ") != std::string::npos; }, 30s));
    const std::string err = plugin_->err();
    unsigned long before = 0, after = 0;
    ASSERT_EQ(std::sscanf(err.c_str() + err.find("settled: resident set "), "settled: resident set %lu -> %lu KiB", &before, &after), 2);
    EXPECT_LT(after + 1024, before) << "less than 1 MiB given back";
    v1beta1::AllocateResponse resp;
    EXPECT_TRUE(kubelet_->allocate(kGpu, {{id("0")}}, &resp).ok());
    event("xid 1 48");
    EXPECT_TRUE(kubelet_->wait_devices(kGpu, [&](const Devices& d) { return d.count(id("1")) && d.at(id("1")).health == "Unhealthy"; },
                                       10s));
}

TEST_F(LifecycleTest, GrpcsOwnLogLinesGoThroughKgpusLog) {
    TempDir base;
    std::filesystem::permissions(base.path(), std::filesystem::perms(0755));
    const std::string dp = base.path() + "/device-plugins";
    std::filesystem::create_directories(dp);
    std::filesystem::permissions(dp, std::filesystem::perms(0555));
    std::vector<std::string> argv;
    if (::geteuid() == 0) {  // root writes anywhere: run the plugin as nobody
        if (!std::filesystem::exists("/usr/bin/setpriv")) GTEST_SKIP() << "running as root without setpriv";
        argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
    }
    for (const bool debug : {false, true}) {
        SCOPED_TRACE(debug ? "--log-level debug" : "default log level");
        auto args = argv;
        args.insert(args.end(), {KGPU_BINARY, "device-plugin", "--device-plugin-path", dp, "--nvml-library",
                                 KGPU_SIM_LIBRARY, "--cdi-spec-dir", base.path() + "/cdi"});
        if (debug) args.insert(args.end(), {"--log-level", "debug"});
        ChildProcess p(args, {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
        ASSERT_TRUE(kubelet_->wait_until([&] { return p.err().find("cannot serve nvidia.com/gpu") != std::string::npos; },
                                         20s))
            << p.err();
        p.signal(SIGTERM);
        p.wait(10000);
        const std::string err = p.err();
        EXPECT_THAT(err, HasSubstr("bind failed"));
        if (!debug) {
            EXPECT_THAT(err, ::testing::Not(HasSubstr("chttp2"))) << err;
        } else {
            EXPECT_THAT(err, HasSubstr(" debug grpc: ")) << err;
            EXPECT_THAT(err, HasSubstr("(chttp2_server.cc:")) << err;
        }
        // Every line is kgpu's ("<time> <level> ..." or the indented config dump).
        std::istringstream lines(err);
        for (std::string l; std::getline(lines, l);)
            EXPECT_FALSE(l.size() > 1 && l[0] == 'E' && std::isdigit(static_cast<unsigned char>(l[1]))) << l;
    }
}

}  // namespace
