// Fake single-process backend; see fake_communicator.h.
#include "meshtrain/comm/fake_communicator.h"

#include <ATen/ATen.h>

#include "comm/reduce_kernels.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {

namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

void check(const at::Tensor& t, const char* op) {
  MT_USER_CHECK(t.defined() && t.is_contiguous(), op, ": tensors must be defined and contiguous");
  check_supported_dtype(t.scalar_type(), op);
}

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(int rank, int size) : rank_(rank), size_(size) {
    MT_USER_CHECK(size >= 1 && rank >= 0 && rank < size, "fake communicator: rank ", rank, " is not in [0, ", size,
                  ")");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "fake"; }
  // It computes on the tensors where they are, so every device is its own.
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  bool takes(const c10::Device&) const override { return true; }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    if (op == ReduceOp::Sum) t.mul_(size_);
    return done();
  }
  WorkPtr all_gather_into(at::Tensor& out, const at::Tensor& in) override {
    check(out, "all_gather_into");
    check(in, "all_gather_into");
    MT_USER_CHECK(out.numel() == in.numel() * size_ && out.scalar_type() == in.scalar_type(),
                  "all_gather_into: `out` needs size(", size_, ") × in(", in.numel(), ") elements of in's dtype");
    out.view({size_, in.numel()}).copy_(in.reshape({1, in.numel()}));
    return done();
  }
  WorkPtr reduce_scatter_into(at::Tensor& out, const at::Tensor& in, ReduceOp op) override {
    check(out, "reduce_scatter_into");
    check(in, "reduce_scatter_into");
    MT_USER_CHECK(in.numel() == out.numel() * size_ && out.scalar_type() == in.scalar_type(),
                  "reduce_scatter_into: `in` needs size(", size_, ") × out(", out.numel(), ") elements of out's dtype");
    out.view({-1}).copy_(in.reshape({-1}).narrow(0, rank_ * out.numel(), out.numel()));
    if (op == ReduceOp::Sum) out.mul_(size_);
    return done();
  }
  WorkPtr broadcast(at::Tensor& t, int root) override {
    check(t, "broadcast");
    MT_USER_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not in [0, ", size_, ")");
    return done();
  }
  WorkPtr send(const at::Tensor& t, int dst) override {
    check(t, "send");
    check_peer(dst, "send");
    return done();
  }
  WorkPtr recv(at::Tensor& t, int src) override {
    check(t, "recv");
    check_peer(src, "recv");
    return done();
  }
  WorkPtr all_to_all(at::Tensor& out, const at::Tensor& in) override {
    check(out, "all_to_all");
    check(in, "all_to_all");
    MT_USER_CHECK(out.numel() == in.numel() && in.numel() % size_ == 0 && out.scalar_type() == in.scalar_type(),
                  "all_to_all: `in` and `out` need equal sizes divisible by size(", size_, ") and one dtype");
    const int64_t chunk = in.numel() / size_;
    out.view({size_, chunk}).copy_(in.reshape({-1}).narrow(0, rank_ * chunk, chunk).reshape({1, chunk}));
    return done();
  }
  void barrier() override {}
  std::shared_ptr<Communicator> split(int, int) override {
    throw UserError(
        "split() on the fake backend: it cannot know the other ranks' colors; create one fake per group with "
        "make_fake_communicator(rank_in_group, group_size)");
  }

 private:
  void check_peer(int peer, const char* op) const {
    MT_USER_CHECK(peer >= 0 && peer < size_ && peer != rank_, op, ": peer ", peer, " must be another rank in [0, ",
                  size_, ")");
  }
  static WorkPtr done() { return std::make_shared<DoneWork>(); }
  int rank_;
  int size_;
};

}  // namespace

CommPtr make_fake_communicator(int rank, int size) { return std::make_shared<FakeCommunicator>(rank, size); }

}  // namespace meshtrain::comm
