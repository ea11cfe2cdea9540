#include "meshtrain/parallel/tp/tp_cross_entropy.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "meshtrain/core/error.h"
#include "parallel/tp/tp_collectives.h"

namespace meshtrain::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_start, const comm::CommPtr& tp) {
    auto x = logits.to(at::kFloat);  // [N, rows]
    const int64_t rows = x.size(1);
    auto max = std::get<0>(x.max(1));  // [N]
    if (tp->size() > 1) max = detail::all_reduce(max, *tp, comm::ReduceOp::Max);
    auto shifted = x - max.unsqueeze(1);
    auto exp = shifted.exp();
    auto inside = targets.ge(vocab_start).logical_and_(targets.lt(vocab_start + rows));  // [N] bool
    auto local = (targets - vocab_start).masked_fill_(inside.logical_not(), 0);
    auto target_logit = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill_(inside.logical_not(), 0.0);
    // Sum-exp and the target logit reduced together: one collective instead of two.
    auto sums = at::stack({exp.sum(1), target_logit}, 0);  // [2, N]
    if (tp->size() > 1) sums = detail::all_reduce(sums, *tp);
    auto sum_exp = sums[0];
    ctx->save_for_backward({exp.div_(sum_exp.unsqueeze(1)), local, inside});  // softmax of this rank's block
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return sum_exp.log() - sums[1];  // [N]
  }

  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    const auto& softmax = saved[0];
    const auto& local = saved[1];
    const auto& inside = saved[2];
    // d loss_i / d logit_ij = softmax_ij - [j is i's target]; only the rank holding the target subtracts.
    auto grad = softmax.scatter_add(1, local.unsqueeze(1), inside.to(at::kFloat).neg().unsqueeze(1));
    grad.mul_(g[0].unsqueeze(1));
    return {grad.to(static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt())), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_start,
                                        const comm::CommPtr& tp) {
  MT_CHECK(logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0),
           "vocab_parallel_cross_entropy: logits [N, rows] and targets [N] expected, got ", logits.sizes(), " and ",
           targets.sizes());
  return VocabParallelCrossEntropy::apply(logits, targets, vocab_start, tp);
}

}  // namespace meshtrain::parallel
