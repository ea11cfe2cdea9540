// Rendezvous store from the env:// contract; see store.h.
#include "meshtrain/comm/store.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

StoreEndpoint store_endpoint_from_env(const WorldInfo& world, const EnvLookup& env) {
  StoreEndpoint ep;
  auto addr = env("MASTER_ADDR");
  auto port = env_int(env, "MASTER_PORT");
  auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
  ep.use_agent_store = agent && *agent == "True";  // torch compares with str(True) exactly
  auto restart = env_int(env, "TORCHELASTIC_RESTART_COUNT");
  if (restart) {
    MT_USER_CHECK(*restart >= 0, "TORCHELASTIC_RESTART_COUNT=", *restart, " must be ≥ 0");
    ep.restart_count = static_cast<int>(*restart);
  }
  if (world.world_size > 1 || addr || port) {
    MT_USER_CHECK(addr.has_value(), "environment variable MASTER_ADDR is not set (WORLD_SIZE=", world.world_size,
                  "); run under meshrun or torchrun, or set MASTER_ADDR and MASTER_PORT");
    MT_USER_CHECK(port.has_value(), "environment variable MASTER_PORT is not set (MASTER_ADDR=", *addr,
                  "); run under meshrun or torchrun, or set it to a free TCP port");
    MT_USER_CHECK(*port >= 1 && *port <= 65535, "MASTER_PORT=", *port, " is not a TCP port (1..65535)");
    ep.master_addr = *addr;
    ep.master_port = static_cast<std::uint16_t>(*port);
  }
  return ep;
}

std::string store_error_text(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

StorePtr connect_store(const WorldInfo& world, const StoreEndpoint& ep, std::chrono::milliseconds timeout) {
  if (ep.master_addr.empty()) {
    MT_USER_CHECK(world.world_size == 1, "WORLD_SIZE=", world.world_size, " needs MASTER_ADDR and MASTER_PORT");
    return c10::make_intrusive<c10d::HashStore>();
  }
  c10d::TCPStoreOptions opts;
  opts.port = ep.master_port;
  opts.isServer = !ep.use_agent_store && world.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(world.world_size);
  // As torch's default wait_for_workers=True: every process counts itself in, and a hosting rank 0 waits until
  // all WORLD_SIZE have (so the server outlives no one's first request).
  opts.waitWorkers = true;
  opts.timeout = timeout;
  opts.multiTenant = opts.isServer;  // as torch's _create_c10d_store: other groups may share the port's store
  try {
    return c10::make_intrusive<c10d::TCPStore>(ep.master_addr, opts);
  } catch (const c10::Error& e) {
    throw Error(cat("rank ", world.rank, "/", world.world_size, ": cannot ",
                    opts.isServer ? "host" : "reach", " the rendezvous store at ", ep.master_addr, ":",
                    ep.master_port, " (MASTER_ADDR:MASTER_PORT", ep.use_agent_store ? ", launcher's store" : "",
                    ") within ", timeout.count(), " ms: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(cat("rank ", world.rank, "/", world.world_size, ": cannot ",
                    opts.isServer ? "host" : "reach", " the rendezvous store at ", ep.master_addr, ":",
                    ep.master_port, " (MASTER_ADDR:MASTER_PORT", ep.use_agent_store ? ", launcher's store" : "",
                    ") within ", timeout.count(), " ms: ", e.what()));
  }
}

StorePtr connect_store_from_env(std::chrono::milliseconds timeout) {
  const auto env = process_env();
  const WorldInfo world = world_info_from_env(env);
  return connect_store(world, store_endpoint_from_env(world, env), timeout);
}

}  // namespace meshtrain::comm
