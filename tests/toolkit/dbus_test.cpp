// The D-Bus client (toolkit/dbus.h) against a real dbus-daemon (Debian's, started by the test on
// a private socket): the daemon checks authentication and every message's marshalling before it
// routes it, so a reply proves the wire format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "support/process.h"
#include "toolkit/dbus.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::HasSubstr;

namespace {

struct Bus {
    test::TempDir dir;
    std::unique_ptr<test::ChildProcess> daemon;
    std::string socket;
    std::string start() {
        if (::access("/usr/bin/dbus-daemon", X_OK) != 0) return "no dbus-daemon (scripts/setup --all installs it)";
        socket = dir.path() + "/bus";
        const std::string conf = dir.write("bus.conf", R"(<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=)" + socket + R"(</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow send_destination="*"/><allow receive_sender="*"/><allow own="*"/><allow user="*"/></policy>
</busconfig>
)");
        daemon = std::make_unique<test::ChildProcess>(std::vector<std::string>{"/usr/bin/dbus-daemon", "--nofork", "--config-file", conf});
        for (int i = 0; i < 500 && !std::filesystem::exists(socket); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return std::filesystem::exists(socket) ? "" : "dbus-daemon did not start: " + daemon->err();
    }
};

TEST(Dbus, CallsTheRealDaemon) {
    Bus bus;
    if (auto e = bus.start(); e.starts_with("no ")) GTEST_SKIP() << e;
    else ASSERT_EQ(e, "");
    // The socket file appears at bind(); the daemon may not accept on it yet: ask again briefly.
    auto id = dbus_call(bus.socket, {"org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId", {}});
    for (int i = 0; i < 100 && !id; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        id = dbus_call(bus.socket, {"org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId", {}});
    }
    ASSERT_TRUE(id) << id.error().message;
    EXPECT_EQ(id->size(), 32u);  // the bus's UUID in hex
    auto owner = dbus_call(bus.socket, {"org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                        "GetNameOwner", {"org.freedesktop.DBus"}});
    ASSERT_TRUE(owner) << owner.error().message;
    EXPECT_EQ(*owner, "org.freedesktop.DBus");
    // RestartUnit is marshalled and routed; no systemd on this bus, so the bus answers the error.
    auto restart = systemd_restart_unit(bus.socket, "containerd.service");
    ASSERT_FALSE(restart);
    EXPECT_THAT(restart.error().message, HasSubstr("org.freedesktop.DBus.Error.ServiceUnknown"));
    EXPECT_THAT(restart.error().message, HasSubstr("RestartUnit"));
}

TEST(Dbus, NoBusIsAClearError) {
    auto r = systemd_restart_unit("/nonexistent/system_bus_socket", "containerd.service");
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("/nonexistent/system_bus_socket"));
}

TEST(Dbus, MessageLayout) {
    const std::string m = dbus_encode_call({"d.e", "/p", "i.f", "M", {"a"}}, 7);
    EXPECT_EQ(m[0], 'l');
    EXPECT_EQ(m[1], 1);  // METHOD_CALL
    EXPECT_EQ(m[3], 1);  // protocol version
    EXPECT_EQ(m.substr(m.size() - 6), std::string("\x01\0\0\0a\0", 6));  // the body: string "a"
}

}  // namespace
