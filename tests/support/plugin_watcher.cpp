#include "support/plugin_watcher.h"

#include <grpcpp/grpcpp.h>

namespace kgpu::test {

using namespace std::chrono_literals;

PluginWatcher::PluginWatcher(std::string socket) : socket_(std::move(socket)) {
    thread_ = std::thread([this] { run(); });
}

PluginWatcher::~PluginWatcher() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
        if (ctx_) ctx_->TryCancel();
    }
    thread_.join();
}

void PluginWatcher::run() {
    auto stub = v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel("unix://" + socket_, grpc::InsecureChannelCredentials()));
    for (;;) {
        grpc::ClientContext ctx;
        {
            std::lock_guard lk(mu_);
            if (stop_) return;
            ctx_ = &ctx;
        }
        v1beta1::Empty empty;
        auto reader = stub->ListAndWatch(&ctx, empty);
        v1beta1::ListAndWatchResponse resp;
        while (reader->Read(&resp)) {
            std::lock_guard lk(mu_);
            latest_.clear();
            for (const auto& d : resp.devices()) latest_[d.id()] = d.health();
            ++messages_;
        }
        reader->Finish();
        {
            std::lock_guard lk(mu_);
            ctx_ = nullptr;
            if (stop_) return;
        }
        std::this_thread::sleep_for(10ms);
    }
}

bool PluginWatcher::wait(const std::function<bool(const Devices&)>& pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        {
            std::lock_guard lk(mu_);
            if (messages_ > 0 && pred(latest_)) return true;
        }
        std::this_thread::sleep_for(1ms);
    }
    return false;
}

PluginWatcher::Devices PluginWatcher::latest() {
    std::lock_guard lk(mu_);
    return latest_;
}

}  // namespace kgpu::test
