// Rendezvous store: connects to the c10d::TCPStore the way torch.distributed's env:// does, so a worker finds
// its peers under meshrun, under torchrun and when started by hand.
//   - TORCHELASTIC_USE_AGENT_STORE=True (set by torchrun and meshrun): the launcher hosts the store at
//     MASTER_ADDR:MASTER_PORT and every rank is a client.
//   - otherwise rank 0 hosts the store (multi-tenant server on MASTER_PORT) and the others are clients.
//   - a single process with no MASTER_ADDR gets an in-process HashStore.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "meshtrain/comm/world_info.h"

namespace meshtrain::comm {

using StorePtr = c10::intrusive_ptr<c10d::Store>;

struct StoreEndpoint {
  std::string master_addr;       // MASTER_ADDR; empty: no store needed (single process)
  std::uint16_t master_port = 0; // MASTER_PORT
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE == "True": the launcher hosts the store
  int restart_count = 0;         // TORCHELASTIC_RESTART_COUNT: which attempt of the job this is
};

// A string as the bytes a c10d store holds.
inline std::vector<uint8_t> store_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The message of an exception from a c10d store call: a c10::Error's without the C++ stack frames it carries
// (eight "frame #" lines that say nothing to a user), any other exception's what().
std::string store_error_text(const std::exception& e);

// Throws UserError for a missing MASTER_ADDR/MASTER_PORT when world_size > 1, or a port outside 1..65535.
StoreEndpoint store_endpoint_from_env(const WorldInfo& world, const EnvLookup& env = process_env());

// Connects (or hosts, on rank 0 without an agent store) within `timeout`; rank 0 hosting waits for all
// WORLD_SIZE workers. Throws Error naming the endpoint when the store cannot be reached in time.
StorePtr connect_store(const WorldInfo& world, const StoreEndpoint& ep, std::chrono::milliseconds timeout);

// connect_store(world_info_from_env(), store_endpoint_from_env(...), timeout).
StorePtr connect_store_from_env(std::chrono::milliseconds timeout);

}  // namespace meshtrain::comm
