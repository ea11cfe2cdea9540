// run_paged_chunks(): sequences computed through the model's paged forward (model/paged_forward.h) in steps of
// chunks, each step one ragged batch of every sequence's next chunk, over physical blocks handed out scrambled.
// The unit test (tests/unit/serve/paged_forward_test.cpp) and its GPU variant compare the result with the plain
// full-sequence forward. Header-only; tests/ is on every test binary's include path.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "meshtrain/model/paged_forward.h"
#include "meshtrain/model/paged_prefill_index.h"

namespace meshtrain::testing_support {

// One sequence: its tokens and the physical blocks its table lists.
struct PagedSeq {
  std::vector<int64_t> tokens;
  std::vector<int64_t> blocks;
};

// Positions [start, start + num_tokens) of sequence `seq`.
struct PagedPiece {
  size_t seq;
  int64_t start, num_tokens;
};

// The ragged batch of `pieces` on `device`, every row's logits asked for. Its leading single-token pieces are
// its decodes (num_decodes), which go through the decode kernel where one exists; with `prefill_index` the
// pieces after them carry the index flash's variable-length kernel reads (model/paged_prefill_index.h).
inline model::PagedBatch paged_test_batch(const std::vector<PagedSeq>& seqs, const std::vector<PagedPiece>& pieces,
                                          int64_t bs, const at::Device& device = at::kCPU,
                                          bool prefill_index = false) {
  std::vector<int64_t> tokens, positions, slots;
  std::vector<int32_t> tables, context_lens;
  size_t max_blocks = 0;
  for (const auto& s : seqs) max_blocks = std::max(max_blocks, s.blocks.size());
  model::PagedBatch b;
  for (const PagedPiece& p : pieces) {
    const PagedSeq& s = seqs[p.seq];
    b.chunks.push_back({static_cast<int64_t>(tokens.size()), p.num_tokens, p.start + p.num_tokens});
    context_lens.push_back(static_cast<int32_t>(p.start + p.num_tokens));
    if (p.num_tokens == 1 && b.num_decodes == static_cast<int64_t>(b.chunks.size()) - 1) ++b.num_decodes;
    for (int64_t pos = p.start; pos < p.start + p.num_tokens; ++pos) {
      tokens.push_back(s.tokens[static_cast<size_t>(pos)]);
      positions.push_back(pos);
      slots.push_back(s.blocks[static_cast<size_t>(pos / bs)] * bs + pos % bs);
    }
    for (size_t i = 0; i < max_blocks; ++i)
      tables.push_back(i < s.blocks.size() ? static_cast<int32_t>(s.blocks[i]) : 0);
  }
  auto dev = [&](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).to(device); };
  b.tokens = dev(tokens);
  b.positions = dev(positions);
  b.slots = dev(slots);
  auto dev32 = [&](const std::vector<int32_t>& v) { return at::tensor(v, at::kInt).to(device); };
  b.block_tables = dev32(tables).view({static_cast<int64_t>(pieces.size()), -1});
  b.context_lens = dev32(context_lens);
  b.sample_rows = at::arange(static_cast<int64_t>(tokens.size()), at::TensorOptions(at::kLong).device(device));
  if (prefill_index)
    model::set_paged_prefill_index(
        b, model::paged_prefill_index(b.chunks, static_cast<size_t>(b.num_decodes), tables,
                                      static_cast<int64_t>(max_blocks), bs),
        device);
  return b;
}

// Each sequence's random tokens [T] (CPU) and its paged logits [T, V] (fp32, CPU), put together from the steps;
// how many of the steps' chunks were decodes (single tokens, laid first in their step's batch).
struct PagedRun {
  std::vector<at::Tensor> tokens, logits;
  int64_t decodes = 0;
};

// Sequences of `lengths` tokens (drawn from `seed`); cuts[i] are sequence i's chunk lengths, step k running the
// k-th chunk of every sequence that has one, its single-token chunks first (as the engine lays decodes). Blocks
// of `bs` tokens are handed out in reverse order, round robin between the sequences, so no sequence's blocks are
// contiguous or in order.
inline PagedRun run_paged_chunks(model::TransformerImpl& net, int64_t bs, const std::vector<int64_t>& lengths,
                                 const std::vector<std::vector<int64_t>>& cuts, uint64_t seed,
                                 bool prefill_index = false) {
  const auto device = net.head_weight().device();
  at::manual_seed(seed);
  std::vector<PagedSeq> seqs(lengths.size());
  PagedRun run;
  int64_t num_blocks = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    run.tokens.push_back(at::randint(net.config().vocab_size, {lengths[i]}, at::kLong));
    seqs[i].tokens.assign(run.tokens[i].data_ptr<int64_t>(), run.tokens[i].data_ptr<int64_t>() + lengths[i]);
    num_blocks += (lengths[i] + bs - 1) / bs;
  }
  std::vector<int64_t> free_blocks(static_cast<size_t>(num_blocks));
  std::iota(free_blocks.rbegin(), free_blocks.rend(), 0);
  for (size_t i = 0; !free_blocks.empty(); i = (i + 1) % seqs.size())
    if (static_cast<int64_t>(seqs[i].blocks.size()) * bs < lengths[i]) {
      seqs[i].blocks.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
  auto cache = model::make_paged_cache(net, num_blocks, bs);
  std::vector<int64_t> done(seqs.size(), 0);
  std::vector<std::vector<at::Tensor>> parts(seqs.size());
  size_t steps = 0;
  for (const auto& c : cuts) steps = std::max(steps, c.size());
  for (size_t step = 0; step < steps; ++step) {
    std::vector<PagedPiece> pieces;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (step < cuts[i].size()) pieces.push_back({i, done[i], cuts[i][step]});
    std::stable_partition(pieces.begin(), pieces.end(), [](const PagedPiece& p) { return p.num_tokens == 1; });
    const auto batch = paged_test_batch(seqs, pieces, bs, device, prefill_index);
    run.decodes += batch.num_decodes;
    const auto logits = model::paged_logits(net, batch, cache).cpu();
    for (size_t p = 0; p < pieces.size(); ++p) {
      parts[pieces[p].seq].push_back(logits.narrow(0, batch.chunks[p].query_start, pieces[p].num_tokens));
      done[pieces[p].seq] += pieces[p].num_tokens;
    }
  }
  for (auto& p : parts) run.logits.push_back(at::cat(p, 0));
  return run;
}

}  // namespace meshtrain::testing_support
