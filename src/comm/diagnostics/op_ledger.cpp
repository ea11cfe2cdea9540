// OpLedger; see op_ledger.h.
#include "comm/diagnostics/op_ledger.h"

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

OpLedger::OpLedger(StorePtr store, std::string group, int rank, int size)
    : group_(std::move(group)), rank_(rank), size_(size) {
  p2p_seq_.assign(static_cast<std::size_t>(size), 0);
  if (size > 1 && store) {
    board_ = std::make_unique<ProgressBoard>(store, group_, rank, size, [](const std::string& reason) {
      FlightRecorder::process().dump_if_first(cat("requested by another rank: ", reason));
    });
  }
}

OpLedger::Op OpLedger::issue(const std::string& op, int peer, const at::Tensor& t) {
  FlightRecorder::Entry e;
  e.group = group_;
  e.group_rank = rank_;
  e.group_size = size_;
  e.op = op;
  e.peer = peer;
  if (t.defined()) {
    e.dtype = c10::toString(t.scalar_type());
    e.numel = t.numel();
    e.bytes = static_cast<std::int64_t>(t.nbytes());
  }
  std::lock_guard<std::mutex> lock(mu_);
  e.seq = peer < 0 ? next_seq_++ : p2p_seq_.at(static_cast<std::size_t>(peer))++;
  Op out{.seq = e.seq, .rec_id = 0, .peer = peer};
  out.rec_id = FlightRecorder::process().issued(std::move(e));
  return out;
}

void OpLedger::started(const Op& op) { FlightRecorder::process().started(op.rec_id); }

void OpLedger::arrived(const Op& op) {
  if (board_ && op.peer < 0) board_->arrived(op.seq);
}

void OpLedger::completed(const Op& op) {
  FlightRecorder::process().ended(op.rec_id, FlightRecorder::State::Completed);
  if (board_ && op.peer < 0) board_->completed(op.seq);
}

void OpLedger::failed(const Op& op, bool timed_out) {
  FlightRecorder::process().ended(op.rec_id, timed_out ? FlightRecorder::State::TimedOut : FlightRecorder::State::Failed);
}

bool OpLedger::break_with(const std::string& why, bool timed_out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) return false;
  broken_ = why.empty() ? "unknown error" : why;
  broken_timeout_ = timed_out;
  return true;
}

std::string OpLedger::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

bool OpLedger::broken_by_timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_timeout_;
}

void OpLedger::report(const std::string& why, const std::string& request) {
  FlightRecorder::process().dump(why);
  if (board_) board_->request_dumps(request);
}

std::string OpLedger::not_arrived(std::uint64_t seq) { return board_ ? board_->not_arrived(seq) : ""; }

}  // namespace meshtrain::comm
