// connect_with_retry: a TCP connection to a peer that may not be listening yet — the rendezvous store of a
// node still starting (launch/store_client.h), a rank of the CPU backend still setting up (comm/cpu/socket.h).
// Name lookup and connect are both retried (a refused connection, an unreachable host, DNS not yet up) until
// the deadline; every attempt is bounded by it too, so the call never outlives it by more than one pause.
#pragma once

#include <chrono>
#include <string>

#include "meshtrain/core/clock.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

// The deadline passed with no connection. what(): "cannot connect to HOST:PORT within 2.5 s: Connection
// refused"; reason(): the last attempt's failure alone ("Connection refused"), for callers that word their own.
class ConnectError : public Error {
 public:
  ConnectError(const std::string& what, std::string reason) : Error(what), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// Connects to host:port (IPv4 or IPv6, whatever the name resolves to), pausing `retry_every` between rounds of
// attempts. Returns the connected socket's descriptor, owned by the caller (wrap it at once), non-blocking and
// with TCP_NODELAY set (both sides of meshtrain's connections send small requests and wait for the answer).
// Throws ConnectError at the deadline.
[[nodiscard]] int connect_with_retry(const std::string& host, int port, Clock::time_point deadline,
                                     std::chrono::milliseconds retry_every = std::chrono::milliseconds(20));

}  // namespace meshtrain
