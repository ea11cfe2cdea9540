// Restart coordination between the launchers of a multi-node job (see node_coordinator.h for the keys).
#include "meshtrain/launch/node_coordinator.h"

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::launch {
namespace {

const std::string kEpochKey = "meshrun/epoch";

using Clock = std::chrono::steady_clock;

std::string key(const char* what, int round) { return cat("meshrun/", what, "/", round); }

// "node 1", "nodes 1, 3": the nodes of `missing` for a one-line message.
std::string name_nodes(const std::vector<int>& missing) {
  std::string out = missing.size() == 1 ? "node " : "nodes ";
  for (size_t i = 0; i < missing.size(); ++i) out += cat(i ? ", " : "", missing[i]);
  return out;
}

// "0,1,3" → {0, 1, 3}. Read defensively (anyone with the job's token can write the key): anything but ascending
// node numbers below `nnodes` is a UserError naming the key.
std::vector<int> parse_members(const std::string& key, const std::string& text, int nnodes) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const bool digits = !item.empty() && item.size() < 6 && item.find_first_not_of("0123456789") == std::string::npos;
    const int n = digits ? std::stoi(item) : -1;
    MT_USER_CHECK(digits && n < nnodes && (out.empty() || n > out.back()), "meshrun: ", key, " at the store is '",
                  text, "', not ascending node numbers below ", nnodes);
    out.push_back(n);
    at = comma + 1;
  }
  return out;
}

}  // namespace

bool Membership::has(int node) const { return std::find(nodes.begin(), nodes.end(), node) != nodes.end(); }

int Membership::rank_of(int node) const {
  return static_cast<int>(std::find(nodes.begin(), nodes.end(), node) - nodes.begin());
}

NodeCoordinator::NodeCoordinator(const std::string& host, int port, int nnodes, int min_nodes, int node_rank,
                                 int nproc_per_node, std::chrono::milliseconds timeout, const std::string& token)
    : nnodes_(nnodes), min_nodes_(min_nodes), node_rank_(node_rank), nproc_(nproc_per_node), timeout_(timeout) {
  for (int n = 0; n < nnodes_; ++n) members_.nodes.push_back(n);
  client_ = std::make_unique<StoreClient>(host, port, StoreCredentials{token, PeerRole::Launcher, node_rank}, timeout);
  client_->set(cat("meshrun/nproc/", node_rank_), std::to_string(nproc_));
  if (node_rank_ == 0) {
    std::random_device rd;
    client_->set(kEpochKey, log::sprintf("%08x%08x", rd(), rd()));
  }
}

std::string NodeCoordinator::store_epoch() {
  const auto deadline = Clock::now() + timeout_;
  while (!client_->check(kEpochKey)) {
    MT_USER_CHECK(Clock::now() < deadline, "meshrun: node 0's launcher did not set up the store at ", endpoint(),
                  " within ", std::chrono::duration<double>(timeout_).count(), " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return client_->get(kEpochKey);
}

bool NodeCoordinator::wait_count(const std::string& k, std::chrono::milliseconds timeout,
                                 const std::function<int()>& interrupted, int& signal, int64_t& seen,
                                 int64_t target) {
  const auto deadline = Clock::now() + timeout;
  if (target <= 0) target = nnodes_;
  signal = 0;
  while (true) {
    seen = client_->add(k, 0);
    if (seen >= target) return true;
    if (interrupted && (signal = interrupted()) != 0) return false;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Membership NodeCoordinator::join(int round, const std::function<int()>& interrupted) {
  const bool elastic = min_nodes_ < nnodes_;
  const bool decided = elastic && client_->check(key("members", round));
  if (elastic) client_->set(cat(key("join", round), "/", node_rank_), "1");
  const bool past_all = client_->add(key("join", round), 1) > nnodes_;
  int sig = 0;
  int64_t seen = 0;
  if (!wait_count(key("join", round), timeout_, interrupted, sig, seen) && (sig || !elastic || seen < min_nodes_)) {
    if (sig) throw UserError(cat("meshrun: interrupted while waiting for the other nodes (round ", round, ")"));
    throw UserError(cat("meshrun: only ", seen, " of ", elastic ? cat(min_nodes_, "..") : std::string(), nnodes_,
                        " nodes joined round ", round,
                        " at the rendezvous store ", endpoint(), " within ",
                        std::chrono::duration<double>(timeout_).count(),
                        " s; start meshrun on every node with the same --nnodes, --master-addr and --master-port "
                        "(--rdzv-timeout sets the wait)"));
  }
  if (round == 0 && node_rank_ != 0) {
    std::string theirs = client_->get("meshrun/nproc/0");
    MT_USER_CHECK(theirs == std::to_string(nproc_), "meshrun: node ", node_rank_, " has --nproc-per-node ",
                  nproc_, " but node 0 has ", theirs, "; every node must run the same number of workers");
  }
  if (elastic) members_ = agree_members(round);
  members_.running = elastic ? decided && members_.has(node_rank_) : past_all;
  return members_;
}

Membership NodeCoordinator::agree_members(int round) {
  const std::string members = key("members", round);
  if (client_->add(key("decide", round), 1) == 1) {
    std::string list;
    for (int n = 0; n < nnodes_; ++n)
      if (client_->check(cat(key("join", round), "/", n))) list += cat(list.empty() ? "" : ",", n);
    client_->set(members, list);
  }
  const auto deadline = Clock::now() + timeout_;
  while (!client_->check(members)) {
    MT_USER_CHECK(Clock::now() < deadline, "meshrun: the members of round ", round, " were not decided within ",
                  std::chrono::duration<double>(timeout_).count(), " s (the deciding launcher is gone)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Membership m{parse_members(members, client_->get(members), nnodes_)};
  MT_USER_CHECK(m.has(0), "meshrun: round ", round, "'s members (", client_->get(members), ") leave out node 0, "
                "which hosts the store");
  return m;
}

bool NodeCoordinator::failed(int round) { return client_->add(key("fail", round), 0) > 0; }

void NodeCoordinator::report(int round, int exit_code, bool stop, const std::string& cause) {
  if (client_->add(key("fail", round), 1) == 1)
    client_->set(key("cause", round), format_failure_cause(exit_code, stop, cause));
}

std::vector<int> NodeCoordinator::unfinished(int round) {
  std::vector<int> missing;
  for (int n : members_.nodes)
    if (!client_->check(cat(key("end", round), "/", n))) missing.push_back(n);
  return missing;
}

RoundOutcome NodeCoordinator::finish(int round, const std::function<int()>& interrupted) {
  client_->set(cat(key("end", round), "/", node_rank_), "1");  // who finished, for the message below
  client_->add(key("end", round), 1);
  int sig = 0;
  int64_t seen = 0;
  RoundOutcome out;
  const int64_t members = static_cast<int64_t>(members_.nodes.size());
  const bool all = wait_count(key("end", round), timeout_, interrupted, sig, seen, members);
  finished_ = static_cast<int>(std::min<int64_t>(seen, members));
  if (!all) return unfinished_outcome(round, sig, seen);
  if (client_->add(key("fail", round), 0) == 0) return out;
  // The first reporter sets cause/<r> before it stops its workers, so before it counts itself in end/<r>.
  out.failed = true;
  out.cause = parse_failure_cause(key("cause", round), client_->get(key("cause", round)));
  return out;
}

RoundOutcome NodeCoordinator::unfinished_outcome(int round, int signal, int64_t seen) {
  RoundOutcome out;
  out.failed = out.cause.stop = true;
  out.cause.exit_code = signal ? 128 + signal : 1;
  if (signal) {
    out.cause.text = cat("this launcher was interrupted while waiting for the other nodes to finish round ", round);
    return out;
  }
  const std::string lost = name_nodes(unfinished(round));
  out.cause.text = cat(lost, " did not finish round ", round, " within ", std::chrono::duration<double>(timeout_).count(),
                       " s (only ", seen, " of ", members_.nodes.size(), " did): lost, frozen or cut off from the "
                       "rendezvous store");
  // Elastic: the nodes that finished go on without the others while there are enough of them.
  if (min_nodes_ < nnodes_ && seen >= min_nodes_) {
    out.cause.stop = false;
    out.cause.text += cat("; the job goes on with the ", seen, " node(s) left (--nnodes ", min_nodes_, ":", nnodes_, ")");
  }
  return out;
}

void NodeCoordinator::leave(int round) {
  try {
    client_->add(key("exit", round), 1);
    if (node_rank_ != 0) return;
    int sig = 0;
    int64_t seen = 0;
    // Only the nodes that finished the round will come to leave it: one that did not is gone or cut off, and
    // waiting for it would only delay this exit (finished_ is nnodes_ unless finish() timed out).
    if (!wait_count(key("exit", round), std::chrono::seconds(30), nullptr, sig, seen, finished_))
      log::warn("meshrun: %lld of %d launchers left cleanly; stopping the store anyway",
                static_cast<long long>(seen), finished_);
  } catch (const Error& e) {
    log::warn("%s", e.what());  // a node that is gone cannot be waited for; exiting is still right
  }
}

}  // namespace meshtrain::launch
