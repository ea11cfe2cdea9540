// A client of the rendezvous store (store_protocol.h: c10d::TCPStore's wire protocol after meshrun's HELLO),
// without LibTorch. The launchers of a multi-node job talk to node 0's store through it to coordinate
// restarts (node_coordinator.h). Only the commands the launcher needs: ADD, SET, GET (after WAIT), CHECK.
// Keys get TCPStore's "/" prefix, so a key set here is the same key PyTorch's TCPStore client sees. Tested
// against the real server (tests/unit/launch/store_client_test.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "meshtrain/launch/store_protocol.h"

namespace meshtrain::launch {

// What a connection says in its HELLO: the job's token and whom it speaks for (store_key_policy.h).
struct StoreCredentials {
  std::string token;
  PeerRole role = PeerRole::Launcher;
  int node = 0;
};

// The connection to the store broke (its host gone, a reset): the store, and every key in it, may be gone.
class StoreLost : public Error {
 public:
  using Error::Error;
};

class StoreClient {
 public:
  // Connects to host:port, retrying refused or unreachable connections (the server may not be up yet) until
  // `connect_timeout`, and says HELLO with `who`; throws UserError naming host:port when it never answers or
  // refuses the token. Each later request may take up to `op_timeout` (a dead server, or one that closed the
  // connection over a refused key, is an Error naming host:port).
  StoreClient(const std::string& host, int port, const StoreCredentials& who,
              std::chrono::milliseconds connect_timeout,
              std::chrono::milliseconds op_timeout = std::chrono::seconds(60));
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;
  ~StoreClient();

  // Adds `delta` to the integer at `key` (created as 0) and returns the new value; add(key, 0) reads it.
  int64_t add(const std::string& key, int64_t delta);
  void set(const std::string& key, const std::string& value);
  // Waits (server side) until `key` exists, then returns its value.
  std::string get(const std::string& key);
  bool check(const std::string& key);

  const std::string& endpoint() const { return endpoint_; }
  // This end's address of the connection ("10.0.0.2"): the interface this node reaches the store through.
  std::string local_address() const;

 private:
  void send_all(const std::string& bytes);
  void recv_all(void* data, size_t n);
  int fd_ = -1;
  std::string endpoint_;  // "host:port", for messages
};

}  // namespace meshtrain::launch
