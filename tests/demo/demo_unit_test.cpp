// The demo's parts in-process (so the sanitizer build covers them): where it looks for the
// simulator and fixtures, the fake host, child processes, the HTTP client, and the kubelet
// emulator against a minimal device plugin written here with the generated gRPC code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "demo/host.h"
#include "demo/http.h"
#include "demo/kubelet.h"
#include "demo/locate.h"
#include "demo/process.h"
#include "support/expect.h"
#include "support/files.h"
#include "support/process.h"

namespace demo = kgpu::demo;
namespace fs = std::filesystem;
using kgpu::test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

void touch(const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
}

TEST(DemoLocate, BuildTreeThenInstallTreeThenFlag) {
    TempDir d;
    const fs::path root = d.path();
    const fs::path build_exe = root / "build/kgpu";
    touch(root / "build/sim/libnvidia-ml.so.1");
    touch(root / "build/sim/nodes/dgx-h100.yaml");
    auto sim = demo::find_sim_library(build_exe, std::nullopt);
    ASSERT_TRUE(sim) << sim.error().message;
    EXPECT_EQ(sim->path, root / "build/sim/libnvidia-ml.so.1");
    auto node = demo::find_node(build_exe, std::nullopt);
    ASSERT_TRUE(node);
    EXPECT_EQ(node->path, root / "build/sim/nodes/dgx-h100.yaml");

    const fs::path installed_exe = root / "prefix/bin/kgpu";
    touch(root / "prefix/lib/kgpu/libnvidia-ml.so.1");
    touch(root / "prefix/share/kgpu/nodes/t4x4.yaml");
    sim = demo::find_sim_library(installed_exe, std::nullopt);
    ASSERT_TRUE(sim);
    EXPECT_EQ(sim->path, root / "prefix/lib/kgpu/libnvidia-ml.so.1");
    for (const char* name : {"t4x4", "t4x4.yaml"}) {
        node = demo::find_node(installed_exe, std::string(name));
        ASSERT_TRUE(node) << name;
        EXPECT_EQ(node->path, root / "prefix/share/kgpu/nodes/t4x4.yaml");
    }
    // A path wins over names; the flag's library must exist.
    node = demo::find_node(installed_exe, (root / "build/sim/nodes/dgx-h100.yaml").string());
    ASSERT_TRUE(node);
    EXPECT_EQ(node->path, root / "build/sim/nodes/dgx-h100.yaml");
    auto bad = demo::find_sim_library(installed_exe, (root / "nope.so").string());
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("--nvml-library: " + (root / "nope.so").string() + " is not a file"));
}

TEST(DemoLocate, ErrorsListEveryPlaceTried) {
    TempDir d;
    const fs::path exe = fs::path(d.path()) / "bin/kgpu";
    auto sim = demo::find_sim_library(exe, std::nullopt);
    ASSERT_FALSE(sim);
    EXPECT_THAT(sim.error().message, HasSubstr((fs::path(d.path()) / "bin/sim/libnvidia-ml.so.1").string()));
    EXPECT_THAT(sim.error().message, HasSubstr((fs::path(d.path()) / "lib/kgpu/libnvidia-ml.so.1").string()));
    auto node = demo::find_node(exe, std::string("no-such"));
    ASSERT_FALSE(node);
    EXPECT_THAT(node.error().message, HasSubstr((fs::path(d.path()) / "bin/sim/nodes/no-such.yaml").string()));
    EXPECT_THAT(node.error().message, HasSubstr((fs::path(d.path()) / "share/kgpu/nodes/no-such.yaml").string()));
    // The configure-time source tree is the last resort for fixtures.
    auto dirs = demo::fixture_dirs(exe);
    ASSERT_EQ(dirs.size(), 3u);
    EXPECT_EQ(dirs[2], fs::path(KGPU_SOURCE_DIR) / "sim/nodes");
}

constexpr const char* kInfo = R"({
  "schema": "kgpu.info/v1", "driver_version": "550.54.15", "cuda_version": "12.4", "gpu_count": 3,
  "gpus": [
    {"index": 0, "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "name": "T", "minor": 0, "pci_bus_id": "00000000:18:00.0", "numa_node": 0, "state": "ok"},
    {"index": 1, "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000", "name": "T", "minor": 1, "pci_bus_id": "00000000:2A:00.0", "numa_node": null, "state": "ok"},
    {"index": 2, "uuid": "GPU-cccccccc-0000-0000-0000-000000000000", "name": "T", "minor": 4, "pci_bus_id": "00000000:DB:00.0", "numa_node": 1, "state": "ok"}
  ],
  "topology": {"matrix": [["X", "NV4", "SYS"], ["NV4", "X", "SYS"], ["SYS", "SYS", "X"]], "pairs": []},
  "warnings": []
})";

TEST(DemoHost, ParsesInfoJson) {
    auto n = demo::parse_info_json(kInfo);
    ASSERT_TRUE(n) << n.error().message;
    ASSERT_EQ(n->gpus.size(), 3u);
    EXPECT_EQ(n->driver_version, "550.54.15");
    EXPECT_EQ(n->gpus[1].numa, std::nullopt);
    EXPECT_EQ(n->gpus[2].minor, 4);
    EXPECT_EQ(n->by_id("GPU-bbbbbbbb-0000-0000-0000-000000000000")->index, 1);
    EXPECT_EQ(n->by_id("2")->index, 2);
    EXPECT_EQ(n->by_id("GPU-nope"), nullptr);
    EXPECT_EQ(n->connection(0, 1), "NV4");
    EXPECT_TRUE(demo::SimNode::is_nvlink(n->connection(1, 0)));
    EXPECT_FALSE(demo::SimNode::is_nvlink(n->connection(0, 2)));
    EXPECT_EQ(n->connection(0, 9), "?");
    EXPECT_FALSE(demo::parse_info_json("not json"));
    EXPECT_FALSE(demo::parse_info_json(R"({"driver_version": "1"})"));
}

TEST(DemoHost, RejectsBusIdsThatLeaveSysfs) {
    // The bus id names a directory of the fake host: a fixture must not make it write elsewhere.
    for (const char* bad : {"../../../etc", "00000000:18:00.0/../../x", "a/b", ""}) {
        std::string text = std::regex_replace(std::string(kInfo), std::regex("00000000:2A:00.0"), bad);
        auto n = demo::parse_info_json(text);
        ASSERT_FALSE(n) << bad;
        EXPECT_THAT(n.error().message, HasSubstr("pci_bus_id")) << bad;
    }
}

TEST(DemoHost, FakeHostHasWhatDoctorReads) {
    TempDir d;
    auto n = demo::parse_info_json(kInfo);
    ASSERT_TRUE(n);
    demo::HostPaths p{fs::path(d.path()) / "host"};
    ::umask(022);
    ASSERT_TRUE(demo::write_fake_host(p, *n));
    for (const char* dev : {"nvidiactl", "nvidia0", "nvidia1", "nvidia4", "nvidia-uvm", "nvidia-uvm-tools"}) {
        struct stat st {};
        ASSERT_EQ(::stat((p.root / "dev" / dev).c_str(), &st), 0) << dev;
        EXPECT_EQ(st.st_mode & 0777, 0666u) << dev;
    }
    EXPECT_TRUE(fs::exists(p.root / "sys/bus/pci/devices/0000:db:00.0/vendor"));
    std::ifstream v(p.root / "proc/driver/nvidia/version");
    std::string version((std::istreambuf_iterator<char>(v)), std::istreambuf_iterator<char>());
    EXPECT_THAT(version, HasSubstr("Kernel Module  550.54.15 "));
    EXPECT_TRUE(fs::is_directory(p.device_plugins()));
    EXPECT_TRUE(fs::is_directory(p.pod_resources_socket().parent_path()));
    // The kernel's XID line in the form doctor (and everyone grepping dmesg) parses.
    std::string line = demo::kernel_xid_line(n->gpus[2], 94);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex(R"(NVRM: Xid \(PCI:([0-9a-f:]+)\): ([0-9]+))"))) << line;
    EXPECT_EQ(m[1], "0000:db:00");
    EXPECT_EQ(m[2], "94");
}

TEST(DemoProcess, ExitCodeLogEnvironmentAndSignalMask) {
    TempDir d;
    // The demo blocks SIGINT/SIGTERM for its signalfd: children must not inherit that.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &block, &old);
    ::setenv("KGPU_DEMO_TEST_DROP", "1", 1);
    demo::SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "echo \"kept=$KGPU_DEMO_TEST_SET dropped=${KGPU_DEMO_TEST_DROP:-none}\"; grep SigBlk /proc/self/status; exit 3"};
    o.set_env = {{"KGPU_DEMO_TEST_SET", "yes"}};
    o.unset_env = {"KGPU_DEMO_TEST_DROP"};
    o.log_path = d.path() + "/sh.log";
    auto rc = demo::run_to_completion(o, std::chrono::seconds(30), nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::unsetenv("KGPU_DEMO_TEST_DROP");
    ASSERT_TRUE(rc) << rc.error().message;
    EXPECT_EQ(*rc, 3);
    std::ifstream f(o.log_path);
    std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_THAT(log, HasSubstr("kept=yes dropped=none"));
    EXPECT_THAT(log, HasSubstr("SigBlk:\t0000000000000000"));
}

TEST(DemoProcess, StopEscalatesAndTimeoutsStop) {
    TempDir d;
    demo::SpawnOptions o;
    // Ignores SIGTERM (an ignored signal stays ignored across exec): needs the SIGKILL. exec, so
    // the SIGKILL reaches the sleep itself and no orphan is left.
    o.argv = {"/bin/sh", "-c", "trap '' TERM; exec sleep 30"};
    o.log_path = d.path() + "/stubborn.log";
    auto c = demo::Child::spawn(o);
    ASSERT_TRUE(c);
    // The shell has set its trap and exec'ed the sleep (its name in /proc), so SIGTERM is ignored.
    const std::string comm = "/proc/" + std::to_string(c->pid()) + "/comm";
    ASSERT_TRUE(kgpu::test::eventually([&] { return kgpu::test::slurp(comm) == "sleep\n"; })) << kgpu::test::slurp(comm);
    EXPECT_FALSE(c->poll());
    pid_t pid = c->pid();
    EXPECT_EQ(c->stop(std::chrono::milliseconds(200)), 128 + SIGKILL);
    EXPECT_NE(::kill(pid, 0), 0);

    o.argv = {"/bin/sleep", "30"};
    auto t = demo::run_to_completion(o, std::chrono::milliseconds(200), nullptr);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code, kgpu::Code::timeout);
    std::atomic<bool> cancel{true};
    auto cancelled = demo::run_to_completion(o, std::chrono::seconds(30), [&] { return cancel.load(); });
    ASSERT_FALSE(cancelled);
    EXPECT_EQ(cancelled.error().code, kgpu::Code::unavailable);

    o.argv = {d.path() + "/does-not-exist"};
    auto missing = demo::run_to_completion(o, std::chrono::seconds(30), nullptr);
    ASSERT_TRUE(missing);
    EXPECT_EQ(*missing, 127);
}

TEST(DemoProcess, ChildrenHaveTheirOwnProcessGroup) {
    // A terminal's Ctrl-C goes to the foreground process group: only the demo may get it.
    TempDir d;
    demo::SpawnOptions o;
    o.argv = {"/bin/sleep", "30"};
    o.log_path = d.path() + "/sleep.log";
    auto c = demo::Child::spawn(o);
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(::getpgid(c->pid()), c->pid());
    EXPECT_NE(::getpgid(c->pid()), ::getpgrp());
    c->stop(std::chrono::milliseconds(0));
}

TEST(DemoProcess, CancellationWinsOverAnExitSeenWithIt) {
    // The interruption and the child's exit become visible together (a child that got the same
    // SIGINT): run_to_completion must report the interruption, not the exit. Here "cancelled"
    // turns true exactly when the child has exited (is a zombie, not yet reaped).
    TempDir d;
    const std::string marker = d.path() + "/pid";
    demo::SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "echo $$ > '" + marker + ".tmp' && mv '" + marker + ".tmp' '" + marker + "' && exec true"};
    o.log_path = d.path() + "/sh.log";
    auto rc = demo::run_to_completion(o, std::chrono::seconds(60), [&] {
        std::ifstream m(marker);
        std::string pid;
        if (!(m >> pid)) return false;
        std::ifstream st("/proc/" + pid + "/stat");
        std::string stat((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
        auto paren = stat.rfind(')');
        return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
    });
    ASSERT_FALSE(rc) << "exit " << *rc;
    EXPECT_EQ(rc.error().code, kgpu::Code::unavailable);
}

TEST(DemoHttp, ReadsTheExportersAddressFromItsReadyFile) {
    auto none = demo::parse_ready_address("");
    ASSERT_TRUE(none);
    EXPECT_FALSE(*none);
    auto ok = demo::parse_ready_address("127.0.0.1:40123\n");
    ASSERT_TRUE(ok) << ok.error().message;
    ASSERT_TRUE(*ok);
    EXPECT_EQ((*ok)->host, "127.0.0.1");
    EXPECT_EQ((*ok)->port, 40123);
    for (const char* bad : {"127.0.0.1:0\n", "127.0.0.1:65536\n", "127.0.0.1:99999999999999999999999999\n"}) {
        auto r = demo::parse_ready_address(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_THAT(r.error().message, HasSubstr("'127.0.0.1:")) << bad;
    }
    // Anything but one address and its newline (a log line, no newline yet) is not it.
    for (const char* bad : {"t INFO exporter: listening on 127.0.0.1:80\n", "127.0.0.1:80", "[::1]:80\n"}) {
        auto r = demo::parse_ready_address(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_THAT(r.error().message, HasSubstr("expected '<ipv4>:<port>'")) << bad;
    }
}

TEST(DemoHttp, GetsBodyAndStatus) {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::listen(s, 4);
    socklen_t len = sizeof a;
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    const int port = ntohs(a.sin_port);
    std::string request;
    std::thread server([&] {
        int c = ::accept(s, nullptr, nullptr);
        char buf[4096];
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n > 0) request.assign(buf, static_cast<size_t>(n));
        std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n# TYPE x gauge\nx 1\n";
        [[maybe_unused]] auto w = ::send(c, resp.data(), resp.size(), 0);
        ::close(c);
    });
    auto r = demo::http_get("127.0.0.1", port, "/metrics", std::chrono::seconds(10));
    server.join();
    ::close(s);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "# TYPE x gauge\nx 1\n");
    EXPECT_THAT(r->headers, HasSubstr("Content-Type: text/plain"));
    EXPECT_THAT(request, HasSubstr("GET /metrics HTTP/1.0\r\n"));
    // Nobody listening: an io error naming the address.
    auto refused = demo::http_get("127.0.0.1", port, "/metrics", std::chrono::seconds(5));
    ASSERT_FALSE(refused);
    EXPECT_THAT(refused.error().message, HasSubstr("127.0.0.1:" + std::to_string(port)));
}

TEST(DemoHttp, ResponsesHaveABound) {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::listen(s, 4);
    socklen_t len = sizeof a;
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    const int port = ntohs(a.sin_port);
    std::thread server([&] {
        int c = ::accept(s, nullptr, nullptr);
        char buf[4096];
        [[maybe_unused]] auto n = ::recv(c, buf, sizeof buf, 0);
        std::string resp = "HTTP/1.1 200 OK\r\n\r\n" + std::string(1 << 20, 'x');  // 1 MiB body
        for (size_t off = 0; off < resp.size();) {
            ssize_t w = ::send(c, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
            if (w <= 0) break;  // the client gave up: expected
            off += static_cast<size_t>(w);
        }
        ::close(c);
    });
    auto r = demo::http_get("127.0.0.1", port, "/metrics", std::chrono::seconds(30), 64 * 1024);
    server.join();
    ::close(s);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, kgpu::Code::io);
    EXPECT_THAT(r.error().message, HasSubstr("exceeds 65536 bytes"));
}

// A minimal device plugin: two devices, a ListAndWatch that sends the list again on every
// set_health(), preferred allocation = the last `size` available IDs, Allocate = the env var.
class MiniPlugin final : public v1beta1::DevicePlugin::Service {
public:
    grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*, v1beta1::DevicePluginOptions* o) override {
        o->set_get_preferred_allocation_available(true);
        return grpc::Status::OK;
    }
    grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                              grpc::ServerWriter<v1beta1::ListAndWatchResponse>* w) override {
        int sent = -1;
        while (!ctx->IsCancelled() && !stopping) {
            std::unique_lock lk(mu);
            if (sent != generation) {
                v1beta1::ListAndWatchResponse r;
                for (const auto& [id, h] : health) {
                    auto* d = r.add_devices();
                    d->set_id(id);
                    d->set_health(h);
                }
                sent = generation;
                lk.unlock();
                if (!w->Write(r)) break;
                continue;
            }
            cv.wait_for(lk, std::chrono::milliseconds(20));
        }
        return grpc::Status::OK;
    }
    grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* req,
                                        v1beta1::PreferredAllocationResponse* out) override {
        const auto& c = req->container_requests(0);
        auto* r = out->add_container_responses();
        for (int i = c.available_deviceids_size() - c.allocation_size(); i < c.available_deviceids_size(); ++i)
            r->add_deviceids(c.available_deviceids(i));
        return grpc::Status::OK;
    }
    grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req, v1beta1::AllocateResponse* out) override {
        for (const auto& c : req->container_requests()) {
            std::string ids;
            for (const auto& id : c.devices_ids()) ids += (ids.empty() ? "" : ",") + id;
            if (ids.find("bad") != std::string::npos) return {grpc::StatusCode::INVALID_ARGUMENT, "unknown device bad"};
            (*out->add_container_responses()->mutable_envs())["NVIDIA_VISIBLE_DEVICES"] = ids;
        }
        return grpc::Status::OK;
    }
    void set_health(const std::string& id, const std::string& h) {
        std::lock_guard lk(mu);
        health[id] = h;
        ++generation;
        cv.notify_all();
    }
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::string> health{{"GPU-0", "Healthy"}, {"GPU-1", "Healthy"}};
    int generation = 0;
    std::atomic<bool> stopping{false};
};

grpc::Status register_with(const std::string& kubelet_sock, const std::string& version, const std::string& resource,
                           const std::string& endpoint = "mini.sock") {
    auto ch = grpc::CreateChannel("unix://" + kubelet_sock, grpc::InsecureChannelCredentials());
    auto stub = v1beta1::Registration::NewStub(ch);
    v1beta1::RegisterRequest req;
    req.set_version(version);
    req.set_endpoint(endpoint);
    req.set_resource_name(resource);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1beta1::Empty e;
    return stub->Register(&ctx, req, &e);
}

TEST(DemoKubelet, RegistersWatchesAllocatesAndListsPods) {
    TempDir d;
    demo::KubeletEmulator k(d.path(), d.path() + "/pod-resources.sock");
    ASSERT_TRUE(k.start());
    MiniPlugin plugin;
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + d.path() + "/mini.sock", grpc::InsecureServerCredentials());
    b.RegisterService(&plugin);
    auto server = b.BuildAndStart();
    ASSERT_TRUE(server);

    // The kubelet's checks: API version and a resource name with a domain.
    EXPECT_EQ(register_with(k.kubelet_socket(), "v1alpha", "example.com/gpu").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(register_with(k.kubelet_socket(), "v1beta1", "gpu").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    // The endpoint is a file name in the plugin directory, never a path out of it.
    for (const char* ep : {"../mini.sock", "/tmp/mini.sock", "sub/mini.sock", "..", ""})
        EXPECT_EQ(register_with(k.kubelet_socket(), "v1beta1", "example.com/gpu", ep).error_code(),
                  grpc::StatusCode::INVALID_ARGUMENT)
            << ep;
    ASSERT_TRUE(register_with(k.kubelet_socket(), "v1beta1", "example.com/gpu").ok());
    auto reg = k.wait_registered("example.com/gpu", std::chrono::seconds(30), nullptr);
    ASSERT_TRUE(reg);
    EXPECT_EQ(reg->endpoint, "mini.sock");
    EXPECT_TRUE(reg->preferred_allocation);
    auto first = k.wait_devices("example.com/gpu", [](const demo::DeviceList& l) { return l.healthy() == 2; },
                                std::chrono::seconds(30), nullptr);
    ASSERT_TRUE(first);

    plugin.set_health("GPU-1", "Unhealthy");
    auto seven = k.wait_devices("example.com/gpu", [](const demo::DeviceList& l) { return l.healthy() == 1; },
                                std::chrono::seconds(30), nullptr);
    ASSERT_TRUE(seven);
    EXPECT_GT(seven->update, first->update);

    auto pref = k.prefer("example.com/gpu", {"GPU-0", "GPU-1"}, 1);
    ASSERT_TRUE(pref) << pref.error().message;
    EXPECT_THAT(*pref, ElementsAre("GPU-1"));
    auto alloc = k.allocate("example.com/gpu", {"GPU-0", "GPU-1"});
    ASSERT_TRUE(alloc) << alloc.error().message;
    EXPECT_EQ(alloc->envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-0,GPU-1");
    auto refused = k.allocate("example.com/gpu", {"bad"});
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, kgpu::Code::invalid_argument);
    EXPECT_THAT(refused.error().message, HasSubstr("unknown device bad"));
    EXPECT_FALSE(k.prefer("other.com/gpu", {"x"}, 1));

    // PodResources: List reports the admitted pod; GetAllocatableResources the Healthy devices.
    k.add_pod({"default", "p", "c", "example.com/gpu", {"GPU-0"}});
    auto ch = grpc::CreateChannel("unix://" + k.pod_resources_socket(), grpc::InsecureChannelCredentials());
    auto pr = v1::PodResourcesLister::NewStub(ch);
    {
        grpc::ClientContext ctx;
        v1::ListPodResourcesResponse resp;
        ASSERT_TRUE(pr->List(&ctx, v1::ListPodResourcesRequest{}, &resp).ok());
        ASSERT_EQ(resp.pod_resources_size(), 1);
        EXPECT_EQ(resp.pod_resources(0).namespace_(), "default");
        EXPECT_EQ(resp.pod_resources(0).containers(0).devices(0).device_ids(0), "GPU-0");
        EXPECT_EQ(k.pod_resources_calls(), 1);
    }
    {
        grpc::ClientContext ctx;
        v1::AllocatableResourcesResponse resp;
        ASSERT_TRUE(pr->GetAllocatableResources(&ctx, v1::AllocatableResourcesRequest{}, &resp).ok());
        ASSERT_EQ(resp.devices_size(), 1);
        EXPECT_THAT(std::vector<std::string>(resp.devices(0).device_ids().begin(), resp.devices(0).device_ids().end()),
                    ElementsAre("GPU-0"));
    }
    // stop() with the ListAndWatch stream still open returns (the stream is cancelled and joined).
    k.stop();
    plugin.stopping = true;
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server->Wait();
}

TEST(DemoKubelet, WaitsGiveUpOnCancel) {
    TempDir d;
    demo::KubeletEmulator k(d.path(), d.path() + "/pr.sock");
    ASSERT_TRUE(k.start());
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(k.wait_registered("example.com/gpu", std::chrono::seconds(60), [] { return true; }));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

}  // namespace
