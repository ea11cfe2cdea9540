// A client of c10d::TCPStore's wire protocol, without LibTorch. meshrun itself never links LibTorch (loading
// it costs ~0.4 s, most of a launch): the store is served by the meshrun-store helper (store_server.h), and
// the launchers of a multi-node job talk to it through this client to coordinate restarts
// (node_coordinator.h). Only the commands the launcher needs: ADD, SET, GET (after WAIT), CHECK.
//
// The protocol is c10d's (torch/csrc/distributed/c10d/TCPStore.cpp, TCPStoreBackend.hpp, torch 2.11): a
// one-byte QueryType, integers in host byte order, strings as a uint64 length then the bytes. Keys get
// TCPStore's "/" prefix, so a key set here is the same key PyTorch's TCPStore client sees. Tested against the
// real server (tests/unit/launch/store_client_test.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace meshtrain::launch {

class StoreClient {
 public:
  // Connects to host:port, retrying refused or unreachable connections (the server may not be up yet) until
  // `connect_timeout`; throws UserError naming host:port when it never answers. Each later request may
  // take up to `op_timeout` (a dead server is an Error naming host:port).
  StoreClient(const std::string& host, int port, std::chrono::milliseconds connect_timeout,
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

 private:
  void send_all(const std::string& bytes);
  void recv_all(void* data, size_t n);
  int fd_ = -1;
  std::string endpoint_;  // "host:port", for messages
};

}  // namespace meshtrain::launch
