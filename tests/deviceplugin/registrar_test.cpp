// The registrar on its own (registrar.h) against the fake kubelet, over real gRPC on unix sockets:
// the races the end-to-end tests cannot aim at.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "deviceplugin/registrar.h"
#include "deviceplugin/server.h"
#include "support/fake_kubelet.h"
#include "support/process.h"

using namespace std::chrono_literals;
using kgpu::deviceplugin::Registrar;
using kgpu::deviceplugin::ResourceServer;
using kgpu::test::FakeKubelet;
using kgpu::test::TempDir;

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";

v1beta1::ListAndWatchResponse two_gpus() {
    v1beta1::ListAndWatchResponse list;
    for (const char* id : {"GPU-0", "GPU-1"}) {
        auto* d = list.add_devices();
        d->set_id(id);
        d->set_health("Healthy");
    }
    return list;
}

// Issue #12 item 3 / review item 8: a stop() that lands after a Register was picked but before it
// was sent (here: while it gives the kubelet time to see the end of our earlier stream) sends no
// Register at all. Before, the Register went out anyway and stop() waited for its deadline on a
// kubelet that never answers.
TEST(RegistrarTest, StopDuringTheSettleBeforeARegisterSendsNoRegister) {
    TempDir dir;
    FakeKubelet kubelet(dir.path());
    ASSERT_TRUE(kubelet.start());
    Registrar* self = nullptr;
    kgpu::deviceplugin::Handlers h;
    h.stream_ended = [&self](std::uint64_t id, bool by_peer) {
        if (self) self->stream_ended(kGpu, id, by_peer);
    };
    auto server = std::make_shared<ResourceServer>(kGpu, dir.path() + "/kgpu-nvidia-com-gpu.sock", h);
    server->publish(two_gpus());
    ASSERT_TRUE(server->start());
    Registrar::Options o;
    o.kubelet_socket = kubelet.socket_path();
    o.plugin_dir = dir.path();
    o.settle = 60s;                // the window stop() lands in
    o.register_timeout = 3000ms;   // what the old code waited out before stop() returned
    Registrar registrar(o);
    self = &registrar;
    registrar.start();
    registrar.add(server);
    ASSERT_TRUE(kubelet.wait_until([&] { return kubelet.open_streams(kGpu) == 1 && registrar.registered(kGpu); }, 20s));
    // The kubelet will not answer the next Register; the other plugin's socket "came and went",
    // so the registrar registers again: it ends our stream first and settles.
    kubelet.hang_register(true);
    registrar.directory_changed("nvidia-gpu.sock");
    ASSERT_TRUE(kubelet.wait_until([&] { return kubelet.open_streams(kGpu) == 0; }, 20s));
    std::this_thread::sleep_for(50ms);  // into the settle wait (it wakes on stop either way)
    registrar.stop();
    self = nullptr;
    EXPECT_EQ(kubelet.register_calls(kGpu), 1) << "a Register went out after stop()";
    EXPECT_EQ(kubelet.hung_registers(), 0);
    kubelet.hang_register(false);
    server->stop();
}

}  // namespace
