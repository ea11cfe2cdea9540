// Host and port as the user spells them on meshrun's command line and in PET_* variables: one parser, so a
// port is range-checked wherever it is read (`--master-port 99999` must not wrap to 34463 in htons) and a
// host:port pair is split one way everywhere (IPv6 addresses in brackets, as torchrun documents).
#pragma once

#include <optional>
#include <string>

namespace meshtrain::launch {

struct Endpoint {
  std::string host;         // without brackets: "::1", "node-0", "10.0.0.1"
  std::optional<int> port;  // absent when the text had none
};

// A decimal TCP port. `flag` names where it came from ("--master-port", "PET_MASTER_PORT"). Valid:
// 1..65535, and 0 when `any_free` (the store then binds any free port). Throws UserError otherwise.
int parse_port(const std::string& text, const std::string& flag, bool any_free);

// A host name, IPv4 address, or IPv6 address (bare or in brackets). Throws UserError naming `flag`.
std::string parse_host(const std::string& text, const std::string& flag);

// HOST, HOST:PORT, [IPV6] or [IPV6]:PORT; a bare IPv6 address (several colons) is a host without a port.
// Throws UserError naming `flag` and the accepted forms.
Endpoint parse_endpoint(const std::string& text, const std::string& flag, bool any_free_port);

}  // namespace meshtrain::launch
