// What a training checkpoint holds, as this rank's blocks (core/sharded_tensor.h), and how it is put back.
// Names are the same under every layout, so a checkpoint saved by one layout resumes under any other:
//   model.<param>                  the parameter's block this rank holds (whole, an FSDP/ZeRO row chunk, a
//                                  tensor-parallel block — whatever ParallelModel::sharded_parameters says)
//   optim.<param>.exp_avg          AdamW moments: the same block as the parameter (the optimizer updates the
//   optim.<param>.exp_avg_sq       parameter's local storage, so its state has the local shape)
//   optim.<param>.step             the step counter (a scalar, replicated)
//   rng.rank_<R>.<stream>          rank R's generator states ("cpu", "cuda", "synthetic"): per rank, since
//                                  each rank's streams differ
// Saving gathers nothing: every rank writes its own blocks, and blocks that several ranks hold are spread
// over them (ckpt/replica_writers.h). Loading reads the blocks this rank needs from whatever layout saved them
// (ckpt/checkpoint_reader.h). The data loader's position goes into meta.json's state.data:
//   {"epoch": E, "cursor": C}                                   one source
//   {"epoch": 0, "cursor": DEALT, "sources": [{"epoch", "cursor"}, …]}   a mixture: each source's too
#pragma once

#include <ATen/core/Generator.h>

#include <string>
#include <utility>
#include <vector>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/core/sharded_tensor.h"
#include "meshtrain/parallel/parallel_model.h"
#include "meshtrain/train/optimizer.h"

namespace meshtrain::train {

// This rank's named generators ("cpu", "cuda", "synthetic").
using RngStreams = std::vector<std::pair<std::string, at::Generator>>;

// "model.<param>" blocks: the live parameters (loading writes into them), or the fp32 master where `opt`
// holds it apart from a compute-dtype parameter (optimizer offload; opt->parameters_changed() after loading).
std::vector<ShardedTensor> model_blocks(const parallel::ParallelModel& par, const Optimizer* opt = nullptr);
// "optim.<param>.*" blocks of the optimizer's live state, laid out like `model`'s blocks.
std::vector<ShardedTensor> optimizer_blocks(const std::vector<ShardedTensor>& model, const Optimizer& opt);
// Snapshots of this rank's generator states.
std::vector<ShardedTensor> rng_blocks(int rank, const RngStreams& streams);

// Puts the generator states back. The saved run's rank `rank` if it had one; otherwise (the world grew) a
// stream this run cannot continue exactly: "cpu" takes rank 0's state, the others are reseeded from
// `reseed` + rank, and the returned note says so ("" when every stream was restored).
std::string restore_rng(const std::string& dir, const ckpt::CheckpointMeta& meta, int rank, RngStreams& streams,
                        uint64_t reseed);

// The loader's position as state.data holds it, and back (the saved one already checked by type: read_meta).
nlohmann::json data_position_json(const data::LoaderState& st);
data::LoaderState loader_state_from(const nlohmann::json& position);

}  // namespace meshtrain::train
