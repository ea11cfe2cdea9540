#include "parallel/pipeline/pipeline_links.h"

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {
namespace {

comm::WorkPtr send_on(const comm::CommPtr& c, const at::Tensor& t, const char* what) {
  MT_CHECK(c, "pipeline: no link to ", what);
  return c->send(t, 1 - c->rank());
}

comm::WorkPtr recv_on(const comm::CommPtr& c, at::Tensor& t, const char* what) {
  MT_CHECK(c, "pipeline: no link from ", what);
  return c->recv(t, 1 - c->rank());
}

}  // namespace

PipelineLinks::PipelineLinks(const comm::CommPtr& pp, bool wrap) {
  const int P = pp->size(), r = pp->rank();
  // Pair j joins rank j (sender of activations, key 0) and rank j + 1 (key 1): one split for its activations,
  // one for its gradients. Ranks outside the pair pass color −1 and get nothing.
  for (int j = 0; j < (wrap ? P : P - 1); ++j) {
    const int next = (j + 1) % P;
    const bool lower = r == j, upper = r == next;
    const int color = lower || upper ? 0 : -1, key = lower ? 0 : 1;
    comm::CommPtr act = pp->split(color, key);
    comm::CommPtr grad = pp->split(color, key);
    if (lower) {
      act_out_ = act;
      grad_in_ = grad;
    }
    if (upper) {
      act_in_ = act;
      grad_out_ = grad;
    }
  }
}

comm::WorkPtr PipelineLinks::send_activation(const at::Tensor& t) { return send_on(act_out_, t, "the next stage"); }
comm::WorkPtr PipelineLinks::recv_activation(at::Tensor& t) { return recv_on(act_in_, t, "the previous stage"); }
comm::WorkPtr PipelineLinks::send_gradient(const at::Tensor& t) { return send_on(grad_out_, t, "the previous stage"); }
comm::WorkPtr PipelineLinks::recv_gradient(at::Tensor& t) { return recv_on(grad_in_, t, "the next stage"); }

}  // namespace meshtrain::parallel
