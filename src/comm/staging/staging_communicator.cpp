// StagingCommunicator; see staging_communicator.h.
#include "comm/staging/staging_communicator.h"

#include <ATen/ATen.h>

#include "comm/staging/staging_work.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {
namespace {

class StagingCommunicator final : public Communicator {
 public:
  StagingCommunicator(CommPtr inner, c10::Device caller) : inner_(std::move(inner)), caller_(caller) {
    MT_CHECK(inner_, "staging communicator: no backend to wrap");
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  c10::Device device() const override { return inner_->device(); }
  bool takes(const c10::Device& d) const override { return d == caller_ || inner_->takes(d); }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op) override {
    if (!staged(t)) return inner_->all_reduce(t, op);
    if (size() == 1) return done();  // the reduction of one contribution is itself
    at::Tensor h = to_host(t, true);
    return std::make_shared<StagingWork>(inner_->all_reduce(h, op), Pairs{{t, h}}, Keep{});
  }

  WorkPtr all_gather_into(at::Tensor& out, const at::Tensor& in) override {
    return out_of_place(out, in, [this](at::Tensor& o, const at::Tensor& i) { return inner_->all_gather_into(o, i); });
  }

  WorkPtr reduce_scatter_into(at::Tensor& out, const at::Tensor& in, ReduceOp op) override {
    return out_of_place(out, in,
                        [this, op](at::Tensor& o, const at::Tensor& i) { return inner_->reduce_scatter_into(o, i, op); });
  }

  WorkPtr all_to_all(at::Tensor& out, const at::Tensor& in) override {
    return out_of_place(out, in, [this](at::Tensor& o, const at::Tensor& i) { return inner_->all_to_all(o, i); });
  }

  WorkPtr broadcast(at::Tensor& t, int root) override {
    if (!staged(t)) return inner_->broadcast(t, root);
    if (size() == 1) return done();
    // Only the root's values travel, and only the others' change.
    const bool mine = rank() == root;
    at::Tensor h = to_host(t, mine);
    return std::make_shared<StagingWork>(inner_->broadcast(h, root), mine ? Pairs{} : Pairs{{t, h}}, Keep{h});
  }

  WorkPtr send(const at::Tensor& t, int dst) override {
    if (!staged(t)) return inner_->send(t, dst);
    at::Tensor h = to_host(t, true);
    return std::make_shared<StagingWork>(inner_->send(h, dst), Pairs{}, Keep{h});
  }

  WorkPtr recv(at::Tensor& t, int src) override {
    if (!staged(t)) return inner_->recv(t, src);
    at::Tensor h = to_host(t, false);
    return std::make_shared<StagingWork>(inner_->recv(h, src), Pairs{{t, h}}, Keep{});
  }

  void barrier() override { inner_->barrier(); }

  std::shared_ptr<Communicator> split(int color, int key) override {
    auto sub = inner_->split(color, key);
    return sub ? make_staging_communicator(std::move(sub), caller_) : nullptr;
  }

 private:
  using Pairs = std::vector<std::pair<at::Tensor, at::Tensor>>;
  using Keep = std::vector<at::Tensor>;

  // Undefined tensors pass through, so the backend names them in its own error.
  bool staged(const at::Tensor& t) const {
    return t.defined() && (!inner_->takes(t.device()) || !t.is_contiguous());
  }

  static WorkPtr done() { return std::make_shared<StagingWork>(nullptr, Pairs{}, Keep{}); }

  // A contiguous host buffer shaped like `t`; `copy`: filled from `t`. The copy is queued on the current
  // stream and the host waits for it (non_blocking false), so it runs after `t`'s producers there.
  static at::Tensor to_host(const at::Tensor& t, bool copy) {
    at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
    if (copy) h.copy_(t);
    return h;
  }

  template <class Op>
  WorkPtr out_of_place(at::Tensor& out, const at::Tensor& in, Op op) {
    if (!staged(out) && !staged(in)) return op(out, in);
    if (size() == 1 && out.numel() == in.numel()) {
      // One rank: every out-of-place op is a copy (all_to_all's chunk 0, reduce_scatter's whole input).
      if (!out.is_same(in)) out.copy_(in.reshape(out.sizes()));
      return done();
    }
    at::Tensor hi = staged(in) ? to_host(in, true) : in;
    at::Tensor ho = staged(out) ? to_host(out, false) : out;
    Pairs back;
    if (staged(out)) back.emplace_back(out, ho);
    return std::make_shared<StagingWork>(op(ho, hi), std::move(back), Keep{hi});
  }

  CommPtr inner_;
  c10::Device caller_;
};

}  // namespace

CommPtr make_staging_communicator(CommPtr inner, c10::Device caller) {
  return std::make_shared<StagingCommunicator>(std::move(inner), caller);
}

}  // namespace meshtrain::comm
