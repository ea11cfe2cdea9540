// NcclCommunicator: ops, split, watchdog; see nccl_communicator.h. Setup (unique id through the store,
// non-blocking init) is in nccl_bootstrap.cpp. Compiled only with MESHTRAIN_WITH_CUDA.
#ifdef MESHTRAIN_WITH_CUDA

#include "comm/nccl/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/diagnostics/op_ledger.h"
#include "comm/nccl/nccl_bootstrap.h"
#include "comm/nccl/nccl_setup_summary.h"
#include "comm/nccl/nccl_work.h"
#include "comm/reduce_kernels.h"  // reduce_op_name
#include "meshtrain/comm/comm_timeout_error.h"
#include "meshtrain/comm/wait_clock.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/log.h"

namespace meshtrain::comm {

namespace {

using Clock = std::chrono::steady_clock;

class NcclCommunicator;

// Every live NCCL communicator of the process: when one fails, the others are aborted too (they share the
// peers, and a rank stuck in one group would otherwise hang in the next).
std::mutex g_registry_mu;
std::vector<std::weak_ptr<NcclCommunicator>> g_registry;

class NcclCommunicator final : public Communicator, public std::enable_shared_from_this<NcclCommunicator> {
 public:
  NcclCommunicator(StorePtr store, std::string group, int rank, int size, int device, NcclCommOptions opts,
                   ncclComm_t comm)
      : store_(std::move(store)), group_(std::move(group)), rank_(rank), size_(size), device_(device),
        opts_(opts), ledger_(store_, group_, rank, size), comm_(comm) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    int lo = 0, hi = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    // Highest priority: communication kernels should not queue behind compute kernels waiting for SMs.
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, hi));
    watchdog_ = std::thread([this] { watchdog(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(wd_mu_);
      stop_ = true;
    }
    wd_cv_.notify_all();
    watchdog_.join();
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (comm_ != nullptr) {
      // Finalize flushes the ops still queued; bounded like everything else, abort if it does not finish.
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) r = nccl_wait_ready(comm_, Clock::now() + opts_.timeout);
      if (r == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        log::warn("NCCL group '%s': finalize did not complete (%s); aborting", group_.c_str(), ncclGetErrorString(r));
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    release_inflight_when_drained();
    cudaStreamDestroy(stream_);
  }

  void register_self() {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    std::erase_if(g_registry, [](const auto& w) { return w.expired(); });
    g_registry.push_back(weak_from_this());
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  c10::Device device() const override { return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_)); }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op) override {
    const ncclDataType_t dt = check(t, "all_reduce", "tensor");
    if (t.numel() == 0) return done();
    void* p = t.data_ptr();
    const auto n = static_cast<std::size_t>(t.numel());
    return issue(cat("all_reduce(", reduce_op_name(op), ")"), -1, {t}, t, [=](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(p, p, n, dt, nccl_op(op), c, s);
    });
  }

  WorkPtr all_gather_into(at::Tensor& out, const at::Tensor& in) override {
    const ncclDataType_t dt = check(out, "all_gather_into", "out");
    check_same(out, in, "all_gather_into");
    MT_USER_CHECK(out.numel() == in.numel() * size_, "all_gather_into: `out` has ", out.numel(),
                  " elements, needs size(", size_, ") × in(", in.numel(), ") = ", in.numel() * size_);
    if (in.numel() == 0) return done();
    const void* src = in.data_ptr();
    void* dst = out.data_ptr();
    const auto n = static_cast<std::size_t>(in.numel());
    return issue("all_gather", -1, {out, in}, in, [=](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(src, dst, n, dt, c, s);
    });
  }

  WorkPtr reduce_scatter_into(at::Tensor& out, const at::Tensor& in, ReduceOp op) override {
    const ncclDataType_t dt = check(out, "reduce_scatter_into", "out");
    check_same(out, in, "reduce_scatter_into");
    MT_USER_CHECK(in.numel() == out.numel() * size_, "reduce_scatter_into: `in` has ", in.numel(),
                  " elements, needs size(", size_, ") × out(", out.numel(), ") = ", out.numel() * size_);
    if (out.numel() == 0) return done();
    const void* src = in.data_ptr();
    void* dst = out.data_ptr();
    const auto n = static_cast<std::size_t>(out.numel());
    return issue(cat("reduce_scatter(", reduce_op_name(op), ")"), -1, {out, in}, in,
                 [=](ncclComm_t c, cudaStream_t s) { return ncclReduceScatter(src, dst, n, dt, nccl_op(op), c, s); });
  }

  WorkPtr broadcast(at::Tensor& t, int root) override {
    const ncclDataType_t dt = check(t, "broadcast", "tensor");
    MT_USER_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of group '", group_,
                  "' (size ", size_, ")");
    if (t.numel() == 0) return done();
    void* p = t.data_ptr();
    const auto n = static_cast<std::size_t>(t.numel());
    return issue(cat("broadcast(root ", root, ")"), -1, {t}, t, [=](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(p, p, n, dt, root, c, s);
    });
  }

  WorkPtr send(const at::Tensor& t, int dst) override {
    const ncclDataType_t dt = check(t, "send", "tensor");
    check_peer(dst, "send", "dst");
    if (t.numel() == 0) return done();
    const void* p = t.data_ptr();
    const auto n = static_cast<std::size_t>(t.numel());
    return issue(cat("send(to ", dst, ")"), dst, {t}, t,
                 [=](ncclComm_t c, cudaStream_t s) { return ncclSend(p, n, dt, dst, c, s); });
  }

  WorkPtr recv(at::Tensor& t, int src) override {
    const ncclDataType_t dt = check(t, "recv", "tensor");
    check_peer(src, "recv", "src");
    if (t.numel() == 0) return done();
    void* p = t.data_ptr();
    const auto n = static_cast<std::size_t>(t.numel());
    return issue(cat("recv(from ", src, ")"), src, {t}, t,
                 [=](ncclComm_t c, cudaStream_t s) { return ncclRecv(p, n, dt, src, c, s); });
  }

  WorkPtr all_to_all(at::Tensor& out, const at::Tensor& in) override {
    const ncclDataType_t dt = check(out, "all_to_all", "out");
    check_same(out, in, "all_to_all");
    MT_USER_CHECK(out.numel() == in.numel() && in.numel() % size_ == 0, "all_to_all: `in` (", in.numel(),
                  " elements) and `out` (", out.numel(), ") must have equal sizes divisible by size(", size_, ")");
    MT_USER_CHECK(!out.is_same(in), "all_to_all: `out` and `in` must be different tensors");
    if (in.numel() == 0) return done();
    const char* src = static_cast<const char*>(in.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    const auto chunk = static_cast<std::size_t>(in.numel() / size_);
    const std::size_t chunk_bytes = chunk * in.element_size();
    const int P = size_;
    // One NCCL group of P sends and P receives: NCCL runs them concurrently, so no ordering can deadlock.
    return issue("all_to_all", -1, {out, in}, in, [=](ncclComm_t c, cudaStream_t s) {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      for (int p = 0; p < P && r == ncclSuccess; ++p) {
        r = ncclSend(src + chunk_bytes * p, chunk, dt, p, c, s);
        if (r == ncclSuccess) r = ncclRecv(dst + chunk_bytes * p, chunk, dt, p, c, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }

  void barrier() override {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    if (!barrier_buf_.defined()) {
      barrier_buf_ = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device_));
    }
    auto w = all_reduce(barrier_buf_, ReduceOp::Sum);
    std::static_pointer_cast<NcclWork>(w)->synchronize();  // the one host-blocking op, by contract
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    throw_if_broken("split");
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t child = nullptr;
    const std::uint64_t n = split_count_++;
    NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &cfg), comm_);
    // Non-blocking: both the parent and the new communicator report when the split is done.
    const auto deadline = Clock::now() + opts_.timeout;
    ncclResult_t r = nccl_wait_ready(comm_, deadline, &abort_requested_);
    if (r == ncclSuccess && child != nullptr) r = nccl_wait_ready(child, deadline, &abort_requested_);
    if (r != ncclSuccess) {
      if (child != nullptr) ncclCommAbort(child);
      throw Error(cat("NCCL group '", group_, "' rank ", rank_, ": split(color ", color, ", key ", key, ") ",
                      r == ncclInProgress ? cat("did not finish within ", opts_.timeout.count(), " ms")
                                          : nccl_error_text(r, comm_)));
    }
    if (color < 0) return nullptr;
    int child_rank = 0, child_size = 0;
    NCCL_CHECK(ncclCommUserRank(child, &child_rank), child);
    NCCL_CHECK(ncclCommCount(child, &child_size), child);
    auto c = std::make_shared<NcclCommunicator>(store_, cat(group_, "/split", n, "/color", color), child_rank,
                                                child_size, device_, opts_, child);
    c->register_self();
    return c;
  }

  // Called on the other communicators of the process when one fails.
  void abort_because(const std::string& why) { fail(why, false, /*cascade=*/false); }

 private:
  struct InFlight {
    std::shared_ptr<NcclOpStatus> status;
    CudaEvent start{true};       // recorded on the comm stream just before the NCCL call
    std::vector<at::Tensor> tensors;  // kept alive until the end event has completed
    std::string op;
    OpLedger::Op entry;
    Clock::time_point issued;
    bool started = false;
  };

  std::string describe(const std::string& op, std::uint64_t seq) const {
    return cat("NCCL ", op, " seq ", seq, " in group '", group_, "' (rank ", rank_, " of ", size_, ", cuda:",
               device_, ")");
  }

  ncclDataType_t check(const at::Tensor& t, const char* op, const char* name) const {
    MT_USER_CHECK(t.defined(), op, ": `", name, "` is an undefined tensor");
    MT_USER_CHECK(t.is_cuda() && t.device().index() == device_, op, ": `", name, "` is on ", t.device().str(),
                  "; the NCCL communicator of group '", group_, "' takes tensors on cuda:", device_);
    MT_USER_CHECK(t.is_contiguous(), op, ": `", name, "` must be contiguous (call .contiguous())");
    return nccl_dtype(t.scalar_type(), cat(op, ": `", name, "`"));
  }

  void check_same(const at::Tensor& out, const at::Tensor& in, const char* op) const {
    check(in, op, "in");
    MT_USER_CHECK(out.scalar_type() == in.scalar_type(), op, ": `out` is ", c10::toString(out.scalar_type()),
                  " but `in` is ", c10::toString(in.scalar_type()));
  }

  void check_peer(int peer, const char* op, const char* name) const {
    MT_USER_CHECK(peer >= 0 && peer < size_ && peer != rank_, op, ": ", name, "=", peer,
                  " must be another rank of group '", group_, "' (size ", size_, ", this rank ", rank_, ")");
  }

  static WorkPtr done() {
    auto s = std::make_shared<NcclOpStatus>();
    s->state = NcclOpStatus::kDone;
    return std::make_shared<NcclWork>(std::move(s));
  }

  // nccl_mu_ held.
  void throw_if_broken(const std::string& op) {
    const std::string broken = ledger_.broken();
    if (broken.empty()) return;
    const std::string msg = cat("NCCL ", op, " in group '", group_, "': not issued, the communicator was aborted: ",
                                broken);
    if (ledger_.broken_by_timeout()) throw CommTimeoutError(msg);
    throw Error(msg);
  }

  template <class Call>
  WorkPtr issue(std::string op, int peer, std::vector<at::Tensor> tensors, const at::Tensor& rec_t, Call call) {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    throw_if_broken(op);
    const auto dev = static_cast<c10::DeviceIndex>(device_);
    const c10::cuda::CUDAGuard guard(dev);
    InFlight f;
    f.entry = ledger_.issue(op, peer, rec_t);  // under nccl_mu_: numbered in issue order
    const std::uint64_t seq = f.entry.seq;
    ledger_.arrived(f.entry);
    try {
      f.status = std::make_shared<NcclOpStatus>();
      f.status->device = device_;
      f.status->end.emplace(/*timing=*/true);
      // The comm stream waits for what the caller has queued so far (the inputs' producers), nothing more.
      CudaEvent ready;
      ready.record(c10::cuda::getCurrentCUDAStream(dev).stream());
      CUDA_CHECK(cudaStreamWaitEvent(stream_, ready.get(), 0));
      f.start.record(stream_);
      NCCL_CHECK(call(comm_, stream_), comm_);
      // Non-blocking communicator: the enqueue itself may still be in progress.
      const ncclResult_t r = nccl_wait_ready(comm_, Clock::now() + opts_.timeout, &abort_requested_);
      if (r != ncclSuccess) {
        throw Error(cat(describe(op, seq), ": ", r == ncclInProgress ? "enqueue did not finish" : nccl_error_text(r, comm_)));
      }
      f.status->end->record(stream_);
      // No recordStream: the tensors stay referenced in inflight_ until the end event has completed, so the
      // allocator cannot reuse their memory early. recordStream would also make the allocator record events
      // on this stream whenever those blocks are freed later, which fails once the communicator (and with it
      // the stream) is gone.
    } catch (...) {
      ledger_.failed(f.entry, false);
      throw;
    }
    f.tensors = std::move(tensors);
    f.op = std::move(op);
    f.issued = Clock::now();
    auto work = std::make_shared<NcclWork>(f.status);
    std::lock_guard<std::mutex> il(inflight_mu_);
    inflight_.push_back(std::move(f));
    return work;
  }

  // Drops the tensors of the ops in flight once the comm stream has drained (after finalize or abort its
  // kernels exit). If it does not drain within the timeout the tensors are leaked on purpose: handing their
  // memory back to the allocator while a kernel may still write into it would corrupt whatever reuses it.
  void release_inflight_when_drained() {
    std::deque<InFlight> ops;
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      ops.swap(inflight_);
    }
    if (ops.empty()) return;
    const auto deadline = Clock::now() + opts_.timeout;
    auto pause = std::chrono::microseconds(50);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;  // `ops` goes out of scope: the memory is free to reuse
      if (q != cudaErrorNotReady || Clock::now() > deadline) break;
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
    }
    (void)cudaGetLastError();
    log::warn("NCCL group '%s': the communication stream did not drain; keeping the %zu buffers of its last ops "
              "allocated", group_.c_str(), ops.size());
    [[maybe_unused]] auto* leaked = new std::deque<InFlight>(std::move(ops));  // deliberately, see above
  }

  void watchdog() {
    try {
      CUDA_CHECK(cudaSetDevice(device_));  // event queries from this thread
    } catch (const std::exception& e) {
      log::error("NCCL group '%s': watchdog cannot select cuda:%d: %s", group_.c_str(), device_, e.what());
      return;
    }
    std::unique_lock<std::mutex> lock(wd_mu_);
    while (!wd_cv_.wait_for(lock, opts_.watchdog_period, [this] { return stop_; })) {
      lock.unlock();
      try {
        watch_once();
      } catch (const std::exception& e) {
        fail(cat("NCCL group '", group_, "': watchdog: ", e.what()), false, true);
      }
      lock.lock();
    }
  }

  void watch_once() {
    if (!ledger_.broken().empty()) return;
    ncclResult_t async = ncclSuccess;
    {
      // try_lock: an issuing thread holds nccl_mu_ only briefly (its own wait is bounded); never stall on it.
      std::unique_lock<std::mutex> nl(nccl_mu_, std::try_to_lock);
      if (nl.owns_lock() && comm_ != nullptr) ncclCommGetAsyncError(comm_, &async);
    }
    std::string stuck_op;
    std::uint64_t stuck_seq = 0;
    int stuck_peer = -1;
    bool timed_out = false;
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      // Ops complete in issue order on the one comm stream: reap from the front, stop at the first pending one.
      while (!inflight_.empty()) {
        InFlight& f = inflight_.front();
        if (!f.started && f.start.query()) {
          f.started = true;
          ledger_.started(f.entry);
        }
        if (f.status->end->query()) {
          // The op's time on the GPU, waiting for peers included: a straggler's peers spend longest here.
          float ms = 0;
          if (cudaEventElapsedTime(&ms, f.start.get(), f.status->end->get()) == cudaSuccess) add_device_wait(ms / 1e3);
          f.status->state = NcclOpStatus::kDone;
          ledger_.completed(f.entry);
          inflight_.pop_front();  // releases the tensors
          continue;
        }
        stuck_op = f.op;
        stuck_seq = f.entry.seq;
        stuck_peer = f.entry.peer;
        timed_out = Clock::now() - f.issued > opts_.timeout;
        break;
      }
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      fail(cat(stuck_op.empty() ? cat("NCCL group '", group_, "'") : describe(stuck_op, stuck_seq),
               ": asynchronous NCCL error: ", nccl_error_text(async, nullptr)),
           false, true);
    } else if (timed_out) {
      std::string who = stuck_peer >= 0 ? cat("peer rank ", stuck_peer) : ledger_.not_arrived(stuck_seq);
      if (who.empty()) who = "every rank had issued it (stuck inside NCCL: a failed link or peer process?)";
      fail(cat(describe(stuck_op, stuck_seq), " timed out: not complete ", opts_.timeout.count(),
               " ms after it was issued; ", who),
           true, true);
    }
  }

  // Aborts this communicator: every op in flight fails with `why`, later ops throw; the flight recorder is
  // written and (cascade) the other ranks are asked for theirs and this process's other communicators aborted.
  void fail(const std::string& why, bool timed_out, bool cascade) {
    if (!ledger_.break_with(why, timed_out)) return;
    abort_requested_ = true;  // ends an issuing thread's wait, so that it releases nccl_mu_
    log::error("%s", why.c_str());
    {
      // Fail the Works before the abort: aborted kernels exit and complete their end events, and a waiter
      // must see the failure rather than a "completed" op with garbage in it.
      std::lock_guard<std::mutex> lock(inflight_mu_);
      bool first = true;
      for (InFlight& f : inflight_) {
        f.status->fail(why, timed_out);
        ledger_.failed(f.entry, first && timed_out);
        first = false;
      }
    }
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    if (cascade) cascade_failure(why);
    release_inflight_when_drained();  // last: may wait for the aborted kernels to exit
  }

  // Writes the flight recorder, asks the other ranks for theirs, aborts this process's other communicators.
  void cascade_failure(const std::string& why) {
    ledger_.report(why, cat("rank ", rank_, ": ", why));
    std::vector<std::shared_ptr<NcclCommunicator>> others;
    {
      std::lock_guard<std::mutex> lock(g_registry_mu);
      for (auto& w : g_registry) {
        auto c = w.lock();
        if (c && c.get() != this) others.push_back(std::move(c));
      }
    }
    for (auto& c : others) c->abort_because(cat("aborted because NCCL group '", group_, "' failed: ", why));
  }

  StorePtr store_;
  std::string group_;
  int rank_, size_, device_;
  NcclCommOptions opts_;
  OpLedger ledger_;  // numbers, flight recorder, progress board, broken state (why it was aborted)
  at::Tensor barrier_buf_;
  std::uint64_t split_count_ = 0;

  std::mutex nccl_mu_;  // comm_, issuing in sequence order, every NCCL call on comm_ but ncclCommGetAsyncError
  ncclComm_t comm_ = nullptr;  // null after an abort
  cudaStream_t stream_ = nullptr;
  std::atomic<bool> abort_requested_{false};

  std::mutex inflight_mu_;
  std::deque<InFlight> inflight_;

  std::mutex wd_mu_;
  std::condition_variable wd_cv_;
  bool stop_ = false;
  std::thread watchdog_;  // last: started when everything above is initialised
};

}  // namespace

CommPtr make_nccl_communicator(StorePtr store, int rank, int size, const std::string& group_name, int device,
                               const NcclCommOptions& options) {
  ncclComm_t comm = nccl_init_rank(store, rank, size, group_name, device, options.timeout);
  auto c = std::make_shared<NcclCommunicator>(std::move(store), group_name, rank, size, device, options, comm);
  c->register_self();
  // Once per run: what NCCL was resolved to (version, transports, algorithm choice), on rank 0.
  static std::once_flag logged;
  std::call_once(logged, [&] {
    if (rank != 0) return;
    const WorldInfo w = world_info_from_env();
    NcclSetupInputs in = nccl_setup_inputs_here(w.local_world_size, std::max(1, w.world_size / std::max(1, w.local_world_size)));
    NCCL_CHECK(ncclGetVersion(&in.version_code), nullptr);
    log::info("%s", describe_nccl_setup(in).c_str());
  });
  return c;
}

}  // namespace meshtrain::comm

#endif  // MESHTRAIN_WITH_CUDA
