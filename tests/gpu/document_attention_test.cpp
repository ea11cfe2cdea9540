// Packed documents on CUDA (model/documents.h): under bf16 autocast attention runs as variable-length flash
// attention over the documents' cumulative lengths (no mask), and the loss and gradients equal those of the
// documents run one by one (plain causal flash attention) within bf16 rounding; in fp32 (no autocast) the
// masked SDPA runs and agrees within fp32 rounding. Exit code 77 (skipped) without a GPU.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "meshtrain/core/config.h"
#include "meshtrain/model/documents.h"
#include "meshtrain/model/transformer.h"
#include "support/autograd_graph.h"
#include "support/gpu_test_main.h"

using namespace meshtrain;
using testing_support::graph_has;
using testing_support::graph_names;

namespace {

ModelConfig tiny() {
  ModelConfig m;
  m.family = Family::llama;
  m.vocab_size = 96;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 64;  // head dim 16: a size flash attention takes
  m.d_ff = 128;
  m.max_seq_len = 64;
  m.tie_embeddings = false;
  return m;
}

at::Tensor doc_targets(const at::Tensor& doc) {
  auto t = doc.roll(-1, 0).clone();
  t[-1] = -100;
  return t;
}

struct Outcome {
  double loss;
  std::vector<at::Tensor> grads;
  bool varlen;
  std::string nodes;  // the packed graph's node names, for the message when varlen is not as expected
};

Outcome run(model::Transformer& net, bool bf16, bool packed_run, const std::vector<at::Tensor>& docs) {
  for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
  at::autocast::set_autocast_enabled(at::kCUDA, bf16);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  int64_t N = 0, T = 0;
  for (const auto& d : docs) N += d.size(0) - 1, T += d.size(0);
  Outcome r{0, {}, false, ""};
  if (packed_run) {
    auto tokens = at::cat(docs).unsqueeze(0).cuda();
    std::vector<at::Tensor> tg, pos;
    for (const auto& d : docs) tg.push_back(doc_targets(d)), pos.push_back(at::arange(d.size(0), at::kLong));
    auto docs_ = model::documents_from_positions(at::cat(pos).unsqueeze(0).cuda());
    auto l = net->loss(tokens, at::cat(tg).unsqueeze(0).cuda(), &docs_);
    const auto names = graph_names(l);
    r.varlen = graph_has(names, "FlashAttentionBackward");  // _flash_attention_forward's node
    for (const auto& n : names) r.nodes += n + " ";
    l.backward();
    r.loss = l.item<double>();
  } else {
    for (const auto& d : docs) {
      auto l = net->loss(d.unsqueeze(0).cuda(), doc_targets(d).unsqueeze(0).cuda()) *
               (static_cast<double>(d.size(0) - 1) / N);
      l.backward();
      r.loss += l.item<double>();
    }
  }
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  for (auto& p : net->parameters()) r.grads.push_back(p.grad().to(at::kFloat).clone());
  return r;
}

}  // namespace

TEST(DocumentAttentionGpu, PackedEqualsOneByOne) {
  at::manual_seed(0);
  model::Transformer net(tiny(), at::TensorOptions().device(at::kCUDA));
  net->init_weights(3);
  std::vector<at::Tensor> docs;
  for (int64_t n : {9, 17, 5, 21, 12}) docs.push_back(at::randint(0, 96, {n}, at::kLong));
  for (bool bf16 : {true, false}) {
    const Outcome want = run(net, bf16, false, docs), got = run(net, bf16, true, docs);
    EXPECT_EQ(got.varlen, bf16) << "varlen flash attention runs exactly under bf16; the graph: " << got.nodes;
    const double tol = bf16 ? 2e-2 : 1e-5;
    EXPECT_NEAR(got.loss, want.loss, tol * std::abs(want.loss)) << (bf16 ? "bf16" : "fp32");
    for (size_t i = 0; i < got.grads.size(); ++i) {
      const double scale = want.grads[i].abs().max().item<double>();
      const double diff = (got.grads[i] - want.grads[i]).abs().max().item<double>();
      EXPECT_LE(diff, (bf16 ? 5e-2 : 1e-4) * scale + 1e-7) << (bf16 ? "bf16" : "fp32") << " parameter " << i;
    }
  }
}

int main(int argc, char** argv) { return meshtrain::testing_support::run_gpu_tests(argc, argv); }
