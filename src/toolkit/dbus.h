// A minimal D-Bus client over a unix socket (the system bus of the host): SASL EXTERNAL, Hello,
// one method call with string arguments, its reply. Enough for `kgpu runtime install
// --restart-mode systemd` to ask systemd to restart containerd without a systemctl binary in the
// image (the wire format is the D-Bus specification's, little-endian).
#pragma once

#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::toolkit {

struct DbusCall {
    std::string destination, path, interface, member;
    std::vector<std::string> args;  // each marshalled as 's'
};

// Calls `call` on the bus at `socket`; returns the reply's first string argument ("" when the
// reply has none). Errors: the socket cannot be reached, authentication fails, or the reply is a
// D-Bus error (the message carries its name and text, e.g. "org.freedesktop.DBus.Error.ServiceUnknown: ...").
Result<std::string> dbus_call(const std::string& socket, const DbusCall& call, int timeout_ms = 30000);

// systemd's org.freedesktop.systemd1.Manager.RestartUnit(unit, "replace"); returns the job path.
Result<std::string> systemd_restart_unit(const std::string& socket, const std::string& unit);

// The bytes of a METHOD_CALL message (exposed for tests).
std::string dbus_encode_call(const DbusCall& call, unsigned serial);

}  // namespace kgpu::toolkit
