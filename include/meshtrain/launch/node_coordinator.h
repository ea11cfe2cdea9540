// Keeps the launchers of a multi-node job in step through the rendezvous store, so that a failure on any
// node restarts the whole job on every node (a worker group is only restartable as a whole: its peers on
// the other nodes would otherwise wait forever in a collective). Rounds are numbered like attempts
// (TORCHELASTIC_RESTART_COUNT); every key is under "meshrun/":
//
//   join/<r>   counter  each launcher adds 1 before starting round r's workers; all wait for nnodes
//   fail/<r>   counter  a launcher whose worker failed (or that got a stop signal) adds 1; the others poll
//                       it every --monitor-interval and stop their workers when it becomes non-zero
//   cause/<r>  text     set by the first reporter: "<exit code>\t<stop 0|1>\t<description>" (failure_cause.h:
//                       read defensively, since anyone who reaches the store can write it)
//   end/<r>    counter  each launcher adds 1 once its workers of round r are gone; all wait for nnodes,
//                       then read fail/<r>: 0 = success everywhere, else everyone restarts (or, with no
//                       restarts left or after a stop signal, exits with the cause's code)
//   end/<r>/<n> "1"     set by node n just before it counts itself in end/<r>: when the wait times out, the
//                       nodes without it are named ("node 1 did not finish round 0 within 600 s")
//   exit/<r>   counter  each launcher adds 1 before exiting; node 0 (which hosts the store) waits for all
//                       that finished the round, so the store outlives the others' last reads (a node that
//                       never finished it is gone: nobody waits for it)
//   nproc/<n>  text     node n's --nproc-per-node, checked against node 0's at the first join
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/launch/failure_cause.h"
#include "meshtrain/launch/store_client.h"

namespace meshtrain::launch {

struct RoundOutcome {
  bool failed = false;  // some node reported a failure or a stop (or the round could not be agreed)
  // When failed: the cause as read from the store (its exit code 128+N for signal N, stop: nobody
  // restarts, text "rank 3 on node 1 (host h, pid p): exit code 7"), or a problem with the record.
  FailureCause cause;
};

class NodeCoordinator {
 public:
  // Connects to node 0's store as this node's launcher, with the job's `token` (UserError naming host:port
  // after `timeout`, or when the store refuses the token) and publishes this node's worker count.
  NodeCoordinator(const std::string& host, int port, int nnodes, int node_rank, int nproc_per_node,
                  std::chrono::milliseconds timeout, const std::string& token);

  // Every launcher calls this before starting round r; returns when all nnodes have. UserError after the
  // timeout (naming how many joined) or when the nodes disagree on --nproc-per-node. `interrupted` is polled
  // while waiting and returns a signal number to give up with (0 = keep waiting).
  void join(int round, const std::function<int()>& interrupted);
  // Whether another node has reported a failure in round r (cheap: one request).
  bool failed(int round);
  // Reports a local failure (or stop) in round r; only the first reporter's cause is kept.
  void report(int round, int exit_code, bool stop, const std::string& cause);
  // Once this node's workers of round r are gone: waits for every node, then says how the round went.
  RoundOutcome finish(int round, const std::function<int()>& interrupted);
  // Before this launcher exits after round r; node 0 waits (bounded) for the others to leave too.
  void leave(int round);

  const std::string& endpoint() const { return client_->endpoint(); }
  // The interface this node reaches the store through (StoreClient::local_address).
  std::string local_address() const { return client_->local_address(); }

 private:
  // Polls `key` until it reaches `target` (0: nnodes_); false on timeout. Returns early with the signal from
  // `interrupted`.
  bool wait_count(const std::string& key, std::chrono::milliseconds timeout,
                  const std::function<int()>& interrupted, int& signal, int64_t& seen, int64_t target = 0);
  // The nodes that have not set end/<round>/<n>.
  std::vector<int> unfinished(int round);
  std::unique_ptr<StoreClient> client_;
  int nnodes_, node_rank_, nproc_;
  int finished_ = 0;  // how many nodes had finished the last round finish() waited for
  std::chrono::milliseconds timeout_;
};

}  // namespace meshtrain::launch
