// CpuCommunicator: connection setup, the op thread and the choice of algorithm per op; see cpu_communicator.h.
// The algorithms themselves live in ring.cpp and direct.cpp, the socket loop in transfer.cpp.
#include "meshtrain/comm/cpu_communicator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include "comm/cpu/cpu_work.h"
#include "comm/cpu/direct.h"
#include "comm/cpu/ring.h"
#include "comm/cpu/shm_all_reduce.h"
#include "comm/cpu/transfer.h"
#include "comm/diagnostics/op_ledger.h"
#include "comm/reduce_kernels.h"
#include "meshtrain/comm/attempt_key.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::comm {

namespace {

constexpr std::uint32_t kHelloMagic = 0x6d744331;  // "mtC1"

struct Hello {
  std::uint32_t magic;
  std::int32_t rank;
  std::int32_t size;
  std::uint32_t group_hash;
};

std::uint32_t fnv1a(const std::string& s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}


std::string advertise_host(const CpuCommOptions& o) {
  if (!o.host.empty()) return o.host;
  const auto env = process_env();
  if (auto h = env("MESHTRAIN_COMM_HOST")) return *h;
  if (auto m = env("MASTER_ADDR")) {
    auto port = env_int(env, "MASTER_PORT").value_or(29500);
    std::string a = local_address_towards(*m, static_cast<std::uint16_t>(port));
    if (!a.empty()) return a;
  }
  return "127.0.0.1";
}

void check_tensor(const at::Tensor& t, const char* op, const char* name) {
  MT_USER_CHECK(t.defined(), op, ": `", name, "` is an undefined tensor");
  MT_USER_CHECK(t.device().is_cpu(), op, ": `", name, "` is on ", t.device().str(),
                "; the CPU communicator takes CPU tensors");
  MT_USER_CHECK(t.is_contiguous(), op, ": `", name, "` must be contiguous (call .contiguous())");
  check_supported_dtype(t.scalar_type(), cat(op, ": `", name, "`"));
}

class CpuCommunicator final : public Communicator, public std::enable_shared_from_this<CpuCommunicator> {
 public:
  CpuCommunicator(StorePtr store, int rank, int size, std::string group, CpuCommOptions opts)
      : store_(std::move(store)), group_(std::move(group)), opts_(std::move(opts)) {
    MT_USER_CHECK(size >= 1 && rank >= 0 && rank < size, "CPU communicator '", group_, "': rank ", rank,
                  " is not in [0, ", size, ")");
    links_.rank = rank;
    links_.size = size;
    if (auto v = env_int(process_env(), "MESHTRAIN_CPU_COMM_CHECK")) opts_.check_ops = *v != 0;
    if (auto v = env_int(process_env(), "MESHTRAIN_CPU_COMM_SMALL_BYTES")) {
      opts_.small_message_bytes = static_cast<std::size_t>(std::max(0LL, *v));
    }
    if (auto v = env_int(process_env(), "MESHTRAIN_CPU_COMM_UNIX")) opts_.same_host_unix = *v != 0;
    if (auto v = env_int(process_env(), "MESHTRAIN_CPU_COMM_SHM")) opts_.same_host_shm = *v != 0;
    if (auto v = env_int(process_env(), "MESHTRAIN_CPU_COMM_SHM_SEGMENT")) {
      MT_USER_CHECK(*v >= 4096 && *v % 64 == 0, "MESHTRAIN_CPU_COMM_SHM_SEGMENT=", *v,
                    ": valid a multiple of 64 bytes, at least 4096");
      shm_segment_bytes_ = static_cast<std::size_t>(*v);
    }
    if (auto v = env_int(process_env(), "MESHTRAIN_CPU_COMM_SOCKET_BUFFER")) {
      opts_.socket_buffer_bytes = static_cast<std::size_t>(std::max(0LL, *v));
    }
    connect_peers();
    ledger_ = std::make_unique<OpLedger>(store_, group_, rank, size);
    thread_ = std::thread([this] { run_ops(); });
  }

  ~CpuCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // the op thread drains the queue first, so no issued Work is left unfinished
  }

  int rank() const override { return links_.rank; }
  int size() const override { return links_.size; }
  std::string backend_name() const override { return "cpu"; }
  c10::Device device() const override { return c10::Device(c10::kCPU); }

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce", "tensor");
    at::Tensor t = tensor;  // the task holds a reference: the storage lives until the op is done
    return enqueue(cat("all_reduce(", reduce_op_name(op), ")"), sig(t), [this, t, op](const OpContext& ctx) {
      const std::size_t numel = static_cast<std::size_t>(t.numel());
      const std::size_t nbytes = numel * t.element_size();
      if (size() == 1) {
        return;  // sum/avg/max/min of one contribution is itself
      }
      if (nbytes <= opts_.small_message_bytes) {
        direct::all_reduce(links_, t.data_ptr(), numel, t.scalar_type(), op, ctx);
      } else if (all_local_ && opts_.same_host_shm) {
        // Every rank takes this branch for the same op (same size, same all_local_), so the lazy, collective
        // arena set-up happens at the same point in every rank's op stream.
        if (!arena_) arena_ = ShmArena::create(links_, ctx, shm_segment_bytes_);
        arena_->all_reduce(links_, t.data_ptr(), numel, t.scalar_type(), op, ctx);
      } else {
        ring::all_reduce(links_, t.data_ptr(), numel, t.scalar_type(), op, ctx);
      }
    }, -1, t);
  }

  WorkPtr all_gather_into(at::Tensor& out, const at::Tensor& in) override {
    check_tensor(out, "all_gather_into", "out");
    check_tensor(in, "all_gather_into", "in");
    MT_USER_CHECK(out.scalar_type() == in.scalar_type(), "all_gather_into: `out` is ",
                  c10::toString(out.scalar_type()), " but `in` is ", c10::toString(in.scalar_type()));
    MT_USER_CHECK(out.numel() == in.numel() * size(), "all_gather_into: `out` has ", out.numel(),
                  " elements, needs size(", size(), ") × in(", in.numel(), ") = ", in.numel() * size());
    at::Tensor o = out;
    at::Tensor i = in;
    return enqueue("all_gather", sig(i), [this, o, i](const OpContext& ctx) {
      const std::size_t es = i.element_size();
      const std::size_t n = static_cast<std::size_t>(i.numel());
      char* base = static_cast<char*>(o.data_ptr());
      if (n > 0 && base + n * es * rank() != i.data_ptr()) {
        std::memcpy(base + n * es * rank(), i.data_ptr(), n * es);
      }
      ring::all_gather(links_, base, n * static_cast<std::size_t>(size()), es, ctx);
    }, -1, i);
  }

  WorkPtr reduce_scatter_into(at::Tensor& out, const at::Tensor& in, ReduceOp op) override {
    check_tensor(out, "reduce_scatter_into", "out");
    check_tensor(in, "reduce_scatter_into", "in");
    MT_USER_CHECK(out.scalar_type() == in.scalar_type(), "reduce_scatter_into: `out` is ",
                  c10::toString(out.scalar_type()), " but `in` is ", c10::toString(in.scalar_type()));
    MT_USER_CHECK(in.numel() == out.numel() * size(), "reduce_scatter_into: `in` has ", in.numel(),
                  " elements, needs size(", size(), ") × out(", out.numel(), ") = ", out.numel() * size());
    at::Tensor o = out;
    at::Tensor i = in;
    return enqueue(cat("reduce_scatter(", reduce_op_name(op), ")"), sig(o), [this, o, i, op](const OpContext& ctx) {
      const std::size_t es = i.element_size();
      const std::size_t n = static_cast<std::size_t>(o.numel());
      if (n == 0) return;
      // The ring reduces in place, and `in` is the caller's: work on a copy.
      const std::size_t total = n * es * static_cast<std::size_t>(size());
      char* work = links_.scratch.get(1, total);  // slot 0 is the ring's receive buffer
      std::memcpy(work, i.data_ptr(), total);
      ring::reduce_scatter(links_, work, n * static_cast<std::size_t>(size()), i.scalar_type(), op, ctx);
      char* mine = work + n * es * static_cast<std::size_t>(rank());
      if (op == ReduceOp::Avg) divide_by(mine, n, i.scalar_type(), size());
      std::memcpy(o.data_ptr(), mine, n * es);
    }, -1, i);
  }

  WorkPtr broadcast(at::Tensor& tensor, int root) override {
    check_tensor(tensor, "broadcast", "tensor");
    MT_USER_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of group '", group_,
                  "' (size ", size(), ")");
    at::Tensor t = tensor;
    return enqueue(cat("broadcast(root ", root, ")"), sig(t), [this, t, root](const OpContext& ctx) {
      const std::size_t nbytes = static_cast<std::size_t>(t.numel()) * t.element_size();
      if (nbytes <= opts_.small_message_bytes) {
        direct::broadcast(links_, t.data_ptr(), nbytes, root, ctx);
      } else {
        ring::broadcast(links_, t.data_ptr(), nbytes, root, ctx);
      }
    }, -1, t);
  }

  WorkPtr send(const at::Tensor& tensor, int dst) override {
    check_tensor(tensor, "send", "tensor");
    check_peer(dst, "send", "dst");
    at::Tensor t = tensor;
    return enqueue(cat("send(to ", dst, ")"), cat("p2p ", sig(t)), [this, t, dst](const OpContext& ctx) {
      Transfer tr = Transfer::send(dst, links_.to(dst), t.data_ptr(), t.numel() * t.element_size());
      run_transfers({&tr, 1}, ctx);
    }, dst, t);
  }

  WorkPtr recv(at::Tensor& tensor, int src) override {
    check_tensor(tensor, "recv", "tensor");
    check_peer(src, "recv", "src");
    at::Tensor t = tensor;
    return enqueue(cat("recv(from ", src, ")"), cat("p2p ", sig(t)), [this, t, src](const OpContext& ctx) {
      Transfer tr = Transfer::recv(src, links_.to(src), t.data_ptr(), t.numel() * t.element_size());
      run_transfers({&tr, 1}, ctx);
    }, src, t);
  }

  WorkPtr all_to_all(at::Tensor& out, const at::Tensor& in) override {
    check_tensor(out, "all_to_all", "out");
    check_tensor(in, "all_to_all", "in");
    MT_USER_CHECK(out.scalar_type() == in.scalar_type(), "all_to_all: `out` is ", c10::toString(out.scalar_type()),
                  " but `in` is ", c10::toString(in.scalar_type()));
    MT_USER_CHECK(out.numel() == in.numel() && in.numel() % size() == 0, "all_to_all: `in` (", in.numel(),
                  " elements) and `out` (", out.numel(), ") must have equal sizes divisible by size(", size(), ")");
    MT_USER_CHECK(!out.is_same(in), "all_to_all: `out` and `in` must be different tensors");
    at::Tensor o = out;
    at::Tensor i = in;
    return enqueue("all_to_all", sig(i), [this, o, i](const OpContext& ctx) {
      const std::size_t chunk = static_cast<std::size_t>(i.numel() / size()) * i.element_size();
      direct::all_to_all(links_, o.data_ptr(), i.data_ptr(), chunk, ctx);
    }, -1, i);
  }

  void barrier() override {
    enqueue("barrier", "", [this](const OpContext& ctx) { direct::barrier(links_, ctx); })->wait();
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    // Every rank learns every (color, key) through this communicator itself, so split is ordered with the
    // other collectives and needs no extra store round trips; the new group then connects through the store.
    const std::uint64_t n = split_count_++;
    at::Tensor mine = at::empty({2}, at::kLong);
    mine[0] = static_cast<int64_t>(color);
    mine[1] = static_cast<int64_t>(key);
    at::Tensor all = at::empty({2 * size()}, at::kLong);
    all_gather_into(all, mine)->wait();
    if (color < 0) return nullptr;
    const int64_t* v = all.data_ptr<int64_t>();
    std::vector<std::pair<int64_t, int>> members;  // (key, parent rank)
    for (int p = 0; p < size(); ++p) {
      if (v[2 * p] == color) members.emplace_back(v[2 * p + 1], p);
    }
    std::sort(members.begin(), members.end());
    int new_rank = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i].second == rank()) new_rank = static_cast<int>(i);
    }
    return make_cpu_communicator(store_, new_rank, static_cast<int>(members.size()),
                                 cat(group_, "/split", n, "/color", color), opts_);
  }

 private:
  using Fn = std::function<void(const OpContext&)>;
  struct Task {
    std::string op;
    std::string sig;  // what the other ranks' matching op must agree on (dtype, numel), for check_ops
    OpLedger::Op entry;
    Fn fn;
    std::shared_ptr<CpuWork> work;
  };

  static std::string sig(const at::Tensor& t) { return cat(c10::toString(t.scalar_type()), "[", t.numel(), "]"); }

  // Opt-in desync detection (CpuCommOptions::check_ops): before the op, every rank it involves exchanges
  // (seq, op, dtype, numel); a mismatch is an error naming both sides instead of silently mixed-up bytes.
  void verify(const Task& task, const OpContext& ctx) {
    struct Record {
      std::uint64_t magic;
      std::uint64_t seq;
      char text[112];
    };
    static_assert(sizeof(Record) == 128);
    Record mine{};
    mine.magic = 0x6d7443686b303031ull;
    mine.seq = task.entry.seq;
    const int peer = task.entry.peer;
    const std::string text = peer < 0 ? cat(task.op, " ", task.sig) : task.sig;
    std::strncpy(mine.text, text.c_str(), sizeof mine.text - 1);
    std::vector<Record> theirs(static_cast<std::size_t>(size()));
    std::vector<Transfer> ts;
    for (int p = 0; p < size(); ++p) {
      if (p == rank() || (peer >= 0 && p != peer)) continue;
      ts.push_back(Transfer::send(p, links_.to(p), &mine, sizeof mine));
      ts.push_back(Transfer::recv(p, links_.to(p), &theirs[static_cast<std::size_t>(p)], sizeof(Record)));
    }
    run_transfers(ts, ctx);
    for (int p = 0; p < size(); ++p) {
      if (p == rank() || (peer >= 0 && p != peer)) continue;
      const Record& t = theirs[static_cast<std::size_t>(p)];
      const std::string other(t.text, strnlen(t.text, sizeof t.text));
      MT_CHECK(t.magic == mine.magic && t.seq == mine.seq && other == text, ctx.describe(),
               ": ops out of step with rank ", p, ": this rank runs '", text, "' (seq ", mine.seq, "), rank ", p,
               " runs '", other, "' (seq ", t.seq, ")");
    }
  }

  void check_peer(int peer, const char* op, const char* name) const {
    MT_USER_CHECK(peer >= 0 && peer < size() && peer != rank(), op, ": ", name, "=", peer,
                  " must be another rank of group '", group_, "' (size ", size(), ", this rank ", rank(), ")");
  }

  // `t`: the tensor whose dtype and size the flight recorder notes (undefined for barrier).
  WorkPtr enqueue(std::string op, std::string signature, Fn fn, int peer = -1, const at::Tensor& t = {}) {
    auto work = std::make_shared<CpuWork>();
    {
      std::lock_guard<std::mutex> lock(mu_);  // numbered in queue order
      const OpLedger::Op entry = ledger_->issue(op, peer, t);
      queue_.push_back(Task{std::move(op), std::move(signature), entry, std::move(fn), work});
    }
    cv_.notify_one();
    return work;
  }

  // The op thread: the only code that touches the sockets after construction, so ops never interleave on a
  // connection and run in issue order.
  void run_ops() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and drained
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      run_one(task);
    }
  }

  // One op on the op thread: its ledger entry followed through, a failure breaking the communicator.
  void run_one(Task& task) {
    OpContext ctx;
    ctx.op = task.op;
    ctx.seq = task.entry.seq;
    ctx.group = group_;
    ctx.rank = rank();
    ctx.size = size();
    ctx.timeout = opts_.timeout;
    ctx.deadline = Clock::now() + opts_.timeout;
    if (const std::string broken = ledger_->broken(); !broken.empty()) {
      ledger_->failed(task.entry, false);
      task.work->finish(std::make_exception_ptr(
          Error(cat(ctx.describe(), ": not run, the communicator is broken by an earlier error: ", broken))));
      return;
    }
    ledger_->started(task.entry);
    ledger_->arrived(task.entry);
    try {
      if (opts_.check_ops && size() > 1) verify(task, ctx);
      task.fn(ctx);
      ledger_->completed(task.entry);
      task.work->finish(nullptr);
    } catch (const std::exception& e) {
      // The byte streams to the peers are now at unknown positions: nothing later can be trusted.
      const bool timed_out = dynamic_cast<const CommTimeoutError*>(&e) != nullptr;
      ledger_->break_with(e.what(), timed_out);
      ledger_->failed(task.entry, timed_out);
      // Dump before the caller sees the error (it may exit at once), then ask the other ranks for theirs.
      ledger_->report(e.what(), cat("rank ", rank(), " of group '", group_, "': ", e.what()));
      task.work->finish(std::current_exception());
    } catch (...) {
      ledger_->break_with("unknown exception", false);
      ledger_->failed(task.entry, false);
      task.work->finish(std::current_exception());
    }
  }

  void tune(Socket& s) const {
    if (opts_.socket_buffer_bytes > 0) s.set_buffer_sizes(static_cast<int>(opts_.socket_buffer_bytes));
  }

  void connect_peers() {
    const int r = rank();
    const int n = size();
    links_.sockets.resize(static_cast<std::size_t>(n));
    if (n == 1) return;
    const Deadline deadline = Clock::now() + opts_.timeout;
    const std::string prefix = cat("meshtrain/cpu_comm/", attempt_key(), "/", group_, "/addr/");
    const std::uint32_t group_hash = fnv1a(group_);

    // Listen before publishing, so a peer that reads our address can connect at once. Peers on this host (same
    // boot id, hostname and network namespace) use a Unix socket instead of TCP over loopback.
    Socket listener = Socket::listen_any(0);
    const std::string host = advertise_host(opts_);
    const std::string host_key = opts_.same_host_unix ? same_host_key() : "";
    Socket unix_listener;
    std::string unix_name = "-";
    if (!host_key.empty()) {
      unix_name = cat("meshtrain-", ::getpid(), "-", reinterpret_cast<std::uintptr_t>(this), "-", group_hash);
      unix_listener = Socket::listen_unix(unix_name);
    }
    // Value: "<host> <port> <unix name or -> <host key>" (the key last: it may contain spaces).
    store_->set(prefix + std::to_string(r),
                store_bytes(cat(host, " ", listener.local_port(), " ", unix_name, " ", host_key)));

    // Connect to every lower rank; accept every higher one. Each pair thus has exactly one connection.
    for (int p = 0; p < r; ++p) {
      const std::string key = prefix + std::to_string(p);
      try {
        store_->wait({key}, std::chrono::milliseconds(std::max(1, ms_until(deadline))));
      } catch (const std::exception& e) {
        throw CommTimeoutError(cat("CPU communicator '", group_, "' rank ", r, " of ", n, ": rank ", p,
                                   " did not publish its address within ", opts_.timeout.count(),
                                   " ms (did it create this group?)"));
      }
      const auto raw = store_->get(key);
      const std::string addr(raw.begin(), raw.end());
      std::istringstream fields(addr);
      std::string peer_host, peer_unix, peer_key;
      int peer_port_i = 0;
      fields >> peer_host >> peer_port_i >> peer_unix;
      std::getline(fields >> std::ws, peer_key);
      MT_CHECK(!peer_host.empty() && peer_port_i > 0 && !peer_unix.empty(), "bad address '", addr,
               "' under store key ", key);
      const auto peer_port = static_cast<std::uint16_t>(peer_port_i);
      Socket s;
      try {
        if (!host_key.empty() && peer_key == host_key && peer_unix != "-") {
          s = Socket::connect_unix(peer_unix, deadline);
        } else {
          s = Socket::connect(peer_host, peer_port, deadline);
        }
      } catch (const std::exception& e) {
        throw Error(cat("CPU communicator '", group_, "' rank ", r, ": cannot connect to rank ", p, " at ", peer_host,
                        ":", peer_port, " (set MESHTRAIN_COMM_HOST if that address is wrong): ", e.what()));
      }
      Hello hello{kHelloMagic, r, n, group_hash};
      send_all(s, &hello, sizeof hello, deadline, cat("hello to rank ", p));
      tune(s);
      links_.sockets[static_cast<std::size_t>(p)] = std::move(s);
    }
    for (int i = r + 1; i < n; ++i) {
      Socket s = Socket::accept_either(listener, unix_listener, deadline, cat("CPU communicator '", group_, "' rank ", r, ": ", n - i,
                                               " higher rank(s)"));
      Hello hello{};
      recv_all(s, &hello, sizeof hello, deadline, "hello from a peer");
      MT_CHECK(hello.magic == kHelloMagic && hello.group_hash == group_hash && hello.size == n &&
                   hello.rank > r && hello.rank < n && !links_.sockets[static_cast<std::size_t>(hello.rank)].valid(),
               "CPU communicator '", group_, "' rank ", r, ": unexpected hello (rank ", hello.rank, ", size ",
               hello.size, "); two groups with the same name?");
      tune(s);
      links_.sockets[static_cast<std::size_t>(hello.rank)] = std::move(s);
    }
    // All peers on Unix sockets ⇔ every rank shares this host (host keys are equal pairwise, hence for all).
    all_local_ = true;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      int domain = 0;
      socklen_t len = sizeof domain;
      const Socket& s = links_.sockets[static_cast<std::size_t>(p)];
      if (::getsockopt(s.fd(), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) all_local_ = false;
    }
    log::debug("cpu communicator '%s': rank %d of %d connected (%s:%u)", group_.c_str(), r, n, host.c_str(),
               static_cast<unsigned>(listener.local_port()));
  }

  StorePtr store_;
  std::string group_;
  CpuCommOptions opts_;
  PeerLinks links_;
  std::uint64_t split_count_ = 0;
  bool all_local_ = false;            // every peer on this host (set once in connect_peers)
  std::unique_ptr<ShmArena> arena_;   // op thread only; created by the first large all_reduce
  std::size_t shm_segment_bytes_ = ShmArena::kDefaultSegmentBytes;  // env MESHTRAIN_CPU_COMM_SHM_SEGMENT
  std::unique_ptr<OpLedger> ledger_;  // numbers, flight recorder, progress board, broken state

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

CommPtr make_cpu_communicator(StorePtr store, int rank, int size, const std::string& group_name,
                              const CpuCommOptions& options) {
  MT_USER_CHECK(store || size == 1, "make_cpu_communicator('", group_name, "'): a store is needed for size ", size);
  MT_USER_CHECK(!group_name.empty(), "make_cpu_communicator: the group name must not be empty");
  MT_USER_CHECK(options.timeout.count() > 0, "make_cpu_communicator('", group_name, "'): timeout must be > 0 ms");
  return std::make_shared<CpuCommunicator>(std::move(store), rank, size, group_name, options);
}

CommPtr make_cpu_communicator(StorePtr store, int rank, int size, const std::string& group_name,
                              std::chrono::milliseconds timeout) {
  CpuCommOptions o;
  o.timeout = timeout;
  return make_cpu_communicator(std::move(store), rank, size, group_name, o);
}

}  // namespace meshtrain::comm
