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
//   epoch      text     a random id node 0's launcher gives its store as it starts (only node 0 may write it): a
//                       launcher that lost the store tells a new one (node 0 replaced) from the one it lost
//
// Elastic jobs (--nnodes MIN:MAX) agree on each round's members too:
//   join/<r>/<n>  "1"   set by node n as it joins round r
//   decide/<r>  counter the first launcher done waiting for join/<r> (all MAX, or --rdzv-timeout with at least MIN)
//                       gets 1 and writes members/<r>: the nodes whose join/<r>/<n> it saw
//   members/<r> text    "0,1,3": the round's nodes; their place in it is their rank in the round (GROUP_RANK)
// A launcher that joins a round it was already a member of (join/<r> past nnodes; elastic: members/<r> decided
// with this node in it) is a replaced node's: Membership::running says so.
// The round's end counts only its members, and a member that does not finish it within the timeout is left out of
// the next round while at least MIN remain (the round then counts as failed: its workers lost peers). A node
// that joins a round after its members were decided is not in it: it reports a failure so the job restarts, and
// joins the next round.
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

// The nodes of one round, ascending (node 0, which hosts the store, always among them).
struct Membership {
  std::vector<int> nodes;
  // The round was already running with this node in it when this launcher joined: it replaces the node's
  // launcher of that round (killed with its node), and its workers replace the node's lost workers.
  bool running = false;
  bool has(int node) const;
  int rank_of(int node) const;  // its place among the round's nodes
};

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
  // `min_nodes` < `nnodes`: elastic (above).
  NodeCoordinator(const std::string& host, int port, int nnodes, int min_nodes, int node_rank, int nproc_per_node,
                  std::chrono::milliseconds timeout, const std::string& token);

  // Every launcher calls this before starting round r; returns the round's members once all nnodes have joined
  // (elastic: once they are decided). UserError after the timeout (naming how many joined; elastic: fewer than
  // min_nodes) or when the nodes disagree on --nproc-per-node. `interrupted` is polled while waiting and returns
  // a signal number to give up with (0 = keep waiting).
  Membership join(int round, const std::function<int()>& interrupted);
  // The store's epoch (above), waiting up to the timeout for node 0 to set it; UserError when it does not.
  std::string store_epoch();
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
  // The nodes of the round that have not set end/<round>/<n>.
  std::vector<int> unfinished(int round);
  // Elastic: the round's members as the first launcher done waiting decided them.
  Membership agree_members(int round);
  // A finish() that timed out: the outcome, which an elastic job with enough nodes left restarts without them.
  RoundOutcome unfinished_outcome(int round, int signal, int64_t seen);
  std::unique_ptr<StoreClient> client_;
  int nnodes_, min_nodes_, node_rank_, nproc_;
  Membership members_;  // of the round last joined
  int finished_ = 0;  // how many nodes had finished the last round finish() waited for
  std::chrono::milliseconds timeout_;
};

}  // namespace meshtrain::launch
