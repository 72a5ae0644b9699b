// A ListAndWatch client of our own, straight on a device plugin's socket (no kubelet involved):
// what the plugin publishes, whatever the kubelet does. Reconnects when the stream ends (e.g. the
// plugin ended it before registering again).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "deviceplugin_v1beta1.grpc.pb.h"

namespace kgpu::test {

class PluginWatcher {
public:
    using Devices = std::map<std::string, std::string>;  // ID -> health
    explicit PluginWatcher(std::string socket);
    ~PluginWatcher();
    PluginWatcher(const PluginWatcher&) = delete;
    PluginWatcher& operator=(const PluginWatcher&) = delete;

    // Polls every millisecond until the latest list satisfies `pred` or the timeout passes.
    bool wait(const std::function<bool(const Devices&)>& pred,
              std::chrono::milliseconds timeout = std::chrono::seconds(20));
    Devices latest();

private:
    void run();
    std::string socket_;
    std::mutex mu_;
    bool stop_ = false;
    grpc::ClientContext* ctx_ = nullptr;  // the stream being read (guarded by mu_)
    Devices latest_;
    int messages_ = 0;
    std::thread thread_;
};

}  // namespace kgpu::test
