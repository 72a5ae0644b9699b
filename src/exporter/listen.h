// The exporter's listening socket and client addresses (internal to src/exporter; the address
// syntax, parse_listen_address, is http.h's).
#pragma once

#include <sys/socket.h>

#include <string>
#include <utility>

#include "common/error.h"
#include "exporter/http.h"

namespace kgpu::exporter {

// A non-blocking listening socket for `a` (`text` names it in errors): with no host, IPv6 with
// IPv4 mapped, or IPv4 alone where the host has no IPv6; else the first address the host
// resolves to that binds. Errors: io, naming `text` and why.
Result<int> listen_on(const ListenAddress& a, unsigned backlog, const std::string& text);

// "1.2.3.4:5" or "[::1]:5".
std::string numeric(const sockaddr_storage& ss);

// The client as the per-peer limit counts it: an IPv4 address (also when mapped into IPv6), or
// an IPv6 /64 (one host commonly holds a whole /64). Returns the key and a printable form.
std::pair<std::string, std::string> peer_of(const sockaddr_storage& ss);

}  // namespace kgpu::exporter
