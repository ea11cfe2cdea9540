#include "meshtrain/ckpt/host_checkpoints.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/ckpt/resume_candidates.h"
#include "meshtrain/comm/communicator_factory.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

// The two files of a one-rank step directory, in the order they travel.
const char* const kFiles[] = {"meta.json", "rank_00000.safetensors"};

// Room for `n` bytes in a tensor the CPU communicator sends (it takes no 1-byte dtypes): int32 words.
at::Tensor byte_buffer(int64_t n) { return at::empty({(n + 3) / 4}, at::kInt); }
char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

int64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

// The files of `dir` one after the other, and their sizes; sizes {0, 0} where `dir` is "" or incomplete.
at::Tensor pack(const std::string& dir, at::Tensor& sizes) {
  sizes = at::zeros({2}, at::kLong);
  if (dir.empty()) return byte_buffer(0);
  const int64_t a = file_size_or_zero(fs::path(dir) / kFiles[0]), b = file_size_or_zero(fs::path(dir) / kFiles[1]);
  if (a == 0 || b == 0) return byte_buffer(0);
  at::Tensor bytes = byte_buffer(a + b);
  for (int i = 0; i < 2; ++i) {
    std::ifstream in(fs::path(dir) / kFiles[i], std::ios::binary);
    in.read(bytes_of(bytes) + (i ? a : 0), i ? b : a);
    if (!in) return sizes.zero_(), byte_buffer(0);
  }
  sizes[0] = a;
  sizes[1] = b;
  return bytes;
}

// Writes what `pack` made as the step directory `dir`: into <dir>.tmp, then renamed (a reader never sees half).
void unpack(const at::Tensor& bytes, const at::Tensor& sizes, const std::string& dir) {
  const int64_t a = sizes[0].item<int64_t>(), b = sizes[1].item<int64_t>();
  const std::string tmp = dir + ".tmp";
  remove_tree(tmp);
  fs::create_directories(tmp);
  for (int i = 0; i < 2; ++i) {
    std::ofstream out(fs::path(tmp) / kFiles[i], std::ios::binary);
    out.write(bytes_of(bytes) + (i ? a : 0), i ? b : a);
    MT_CHECK(out.good(), "could not write ", (fs::path(tmp) / kFiles[i]).string());
  }
  remove_tree(dir);
  fs::rename(tmp, dir);
}

// Removes the step directories under `dir` older than `keep_from`, keeping the newest 2 whatever it says and never
// more than the newest 3 (a rank whose snapshots keep failing holds `keep_from` back).
void prune_steps(const std::string& dir, int64_t keep_from) {
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const auto& e : fs::directory_iterator(dir))
    if (const int64_t s = step_of_dir_name(e.path().filename().string()); s >= 0) steps.emplace_back(s, e.path());
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + 2 < steps.size(); ++i)
    if (steps[i].first < keep_from || i + 3 < steps.size()) remove_tree(steps[i].second);
}

bool holds(const at::Tensor& table, int rank, int first_col, int64_t step) {
  return table[rank][first_col].item<int64_t>() == step || table[rank][first_col + 1].item<int64_t>() == step;
}

}  // namespace

std::unique_ptr<HostCheckpoints> HostCheckpoints::open(std::string root, const comm::WorldInfo& world,
                                                       std::string layout, std::chrono::milliseconds timeout) {
  comm::CommPtr comm;
  if (world.world_size > 1) {
    comm::CommSetup setup{.backend = CommBackend::cpu, .timeout = timeout, .group = "host_checkpoints"};
    comm = comm::make_communicator(world, setup);
  }
  return std::make_unique<HostCheckpoints>(std::move(root), world, std::move(layout), std::move(comm));
}

HostCheckpoints::HostCheckpoints(std::string root, const comm::WorldInfo& world, std::string layout,
                                 comm::CommPtr comm)
    : root_(std::move(root)), layout_(std::move(layout)), world_(world), comm_(std::move(comm)) {
  MT_CHECK(world.world_size % world.local_world_size == 0, "in-memory checkpoints: world size ", world.world_size,
           " is not a multiple of the ranks per node (", world.local_world_size, ")");
  nodes_ = world.world_size / world.local_world_size;
  own_dir_ = (fs::path(root_) / log::sprintf("rank_%05d", world.rank)).string();
  replica_dir_ = (fs::path(root_) / log::sprintf("replica_%05d", source())).string();
  fs::create_directories(own_dir_);
  if (replicates()) fs::create_directories(replica_dir_);
  own_ = std::make_unique<CheckpointManager>(own_dir_, /*keep=*/0, nullptr);  // pruned by finish_snapshot
  own_->save_own_blocks_only();
}

HostCheckpoints::~HostCheckpoints() {
  if (worker_.joinable()) worker_.join();
}

int HostCheckpoints::peer() const { return (world_.rank + world_.local_world_size) % world_.world_size; }

int HostCheckpoints::source() const {
  return (world_.rank - world_.local_world_size + world_.world_size) % world_.world_size;
}

bool HostCheckpoints::sends_first() const { return (world_.rank / world_.local_world_size) % 2 == 0; }

int64_t HostCheckpoints::newest_own() const {
  const auto own = steps_in(own_dir_);
  return own.empty() ? -1 : own.front();
}

SaveStats HostCheckpoints::save_async(int64_t step, std::vector<ShardedTensor> blocks, const SaveInfo& info,
                                      int64_t keep_from, std::function<void()> ready) {
  const auto t0 = std::chrono::steady_clock::now();
  wait();
  SaveStats stats;
  // After a failed swap the ring is broken (a peer is gone): a newer own copy would prune one its replica still
  // matches, leaving a restart no step that every rank reaches. The next attempt makes them anew.
  if (ring_broken_) return stats;
  for (auto& b : blocks) b.write = true;  // every block this rank holds: no other rank's copy is at hand
  try {
    stats = ready ? own_->save_staged_async(step, blocks, info, std::move(ready))
                  : own_->save_async(step, blocks, info);
  } catch (const std::exception& e) {
    log::warn("in-memory checkpoint of step %lld not taken: %s", static_cast<long long>(step), e.what());
  }
  stats.blocked_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  worker_ = std::thread([this, step, keep_from] { finish_snapshot(step, keep_from); });
  return stats;
}

void HostCheckpoints::wait() {
  if (worker_.joinable()) worker_.join();
}

void HostCheckpoints::finish_snapshot(int64_t step, int64_t keep_from) {
  std::string written;
  try {
    own_->wait();
    written = own_->step_dir(step);
    prune_steps(own_dir_, keep_from);
  } catch (const std::exception& e) {
    log::warn("in-memory checkpoint of step %lld not written: %s", static_cast<long long>(step), e.what());
  }
  if (!replicates()) return;
  try {
    swap(peer(), written, source(), (fs::path(replica_dir_) / step_dir_name(step)).string());
    prune_steps(replica_dir_, keep_from);
  } catch (const std::exception& e) {
    ring_broken_ = true;
    log::warn("in-memory checkpoint of step %lld: replica exchange failed (%s); no more in-memory checkpoints in "
              "this attempt", static_cast<long long>(step), e.what());
  }
}

void HostCheckpoints::swap(int to, const std::string& send_dir, int from, const std::string& recv_dir) {
  at::Tensor out_sizes, in_sizes = at::zeros({2}, at::kLong);
  at::Tensor out = to >= 0 ? pack(send_dir, out_sizes) : at::Tensor();
  auto send_sizes = [&] { if (to >= 0) comm_->send(out_sizes, to)->wait(); };
  auto recv_sizes = [&] { if (from >= 0) comm_->recv(in_sizes, from)->wait(); };
  at::Tensor in;
  auto send_bytes = [&] { if (to >= 0 && out.numel() > 0) comm_->send(out, to)->wait(); };
  auto recv_bytes = [&] {
    const int64_t n = in_sizes[0].item<int64_t>() + in_sizes[1].item<int64_t>();
    if (from < 0 || n == 0) return;
    in = byte_buffer(n);
    comm_->recv(in, from)->wait();
  };
  if (sends_first()) {
    send_sizes(), recv_sizes(), send_bytes(), recv_bytes();
  } else {
    recv_sizes(), send_sizes(), recv_bytes(), send_bytes();
  }
  if (in.defined()) unpack(in, in_sizes, recv_dir);
}

std::vector<int64_t> HostCheckpoints::steps_in(const std::string& dir) const {
  std::vector<int64_t> out;
  for (const std::string& step_dir : find_resume_candidates(dir).usable) {
    const CheckpointMeta meta = read_meta(step_dir);
    if (meta.mesh.value("layout", std::string()) == layout_ && meta.mesh.value("world_size", 0) == world_.world_size)
      out.push_back(meta.step);
    if (out.size() == 2) break;
  }
  return out;
}

std::optional<HostCheckpoints::Restored> HostCheckpoints::restore(int64_t at_least) {
  // Each rank's row: the steps of its own copies, then of the replica it holds (−1: none).
  at::Tensor mine = at::full({4}, -1, at::kLong);
  const auto own = steps_in(own_dir_);
  const auto held = replicates() ? steps_in(replica_dir_) : std::vector<int64_t>{};
  for (size_t i = 0; i < own.size(); ++i) mine[static_cast<int64_t>(i)] = own[i];
  for (size_t i = 0; i < held.size(); ++i) mine[static_cast<int64_t>(2 + i)] = held[i];
  at::Tensor table = at::empty({world_.world_size, 4}, at::kLong);
  if (comm_) comm_->all_gather_into(table, mine)->wait();
  else table[0].copy_(mine);
  const int W = world_.world_size, L = world_.local_world_size;
  // Rank q reaches step s through its own copy, or through the replica its peer q + L holds.
  auto reaches = [&](int q, int64_t s) { return holds(table, q, 0, s) || (replicates() && holds(table, (q + L) % W, 2, s)); };
  std::set<int64_t, std::greater<>> steps;
  for (int q = 0; q < W; ++q)
    for (int c = 0; c < 2; ++c)
      if (table[q][c].item<int64_t>() >= at_least) steps.insert(table[q][c].item<int64_t>());
  for (int64_t s : steps) {
    bool all = true;
    for (int q = 0; q < W && all; ++q) all = reaches(q, s);
    if (!all) continue;
    Restored r{(fs::path(own_dir_) / step_dir_name(s)).string(), s, 0};
    for (int q = 0; q < W; ++q) r.from_replicas += holds(table, q, 0, s) ? 0 : 1;
    if (r.from_replicas > 0) {
      const bool i_need = !holds(table, world_.rank, 0, s), source_needs = !holds(table, source(), 0, s);
      swap(source_needs ? source() : -1, (fs::path(replica_dir_) / step_dir_name(s)).string(), i_need ? peer() : -1,
           r.dir);
    }
    return r;
  }
  return std::nullopt;
}

}  // namespace meshtrain::ckpt
