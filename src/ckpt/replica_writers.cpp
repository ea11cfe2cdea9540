#include "meshtrain/ckpt/replica_writers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "meshtrain/ckpt/gather_strings.h"
#include "meshtrain/core/error.h"

namespace meshtrain::ckpt {
namespace {

// A block's identity across ranks.
using BlockKey = std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>;

uint64_t nbytes(const at::Tensor& t) { return static_cast<uint64_t>(t.numel()) * t.element_size(); }

}  // namespace

uint64_t assign_replica_writers(std::vector<ShardedTensor>& blocks, comm::Communicator* comm) {
  uint64_t mine = 0;
  if (!comm || comm->size() == 1) {
    for (auto& b : blocks) {
      b.write = true;
      mine += nbytes(b.local);
    }
    return mine;
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& b : blocks) list.push_back({b.name, b.offsets, b.local.sizes().vec(), nbytes(b.local)});
  const auto all = all_gather_strings(*comm, list.dump());

  // Every block of every rank: its holders (ascending rank) and size.
  struct Holders {
    std::vector<int> ranks;
    uint64_t bytes = 0;
  };
  std::map<BlockKey, Holders> by_block;
  for (size_t r = 0; r < all.size(); ++r)
    for (const auto& e : nlohmann::json::parse(all[r])) {
      auto& h = by_block[{e[0].get<std::string>(), e[1].get<std::vector<int64_t>>(), e[2].get<std::vector<int64_t>>()}];
      h.ranks.push_back(static_cast<int>(r));
      h.bytes = e[3].get<uint64_t>();
    }

  // Longest-processing-time greedy: sole holders first (no choice), then replicated blocks largest first.
  std::vector<uint64_t> load(all.size(), 0);
  std::map<BlockKey, int> writer;
  std::vector<std::pair<const BlockKey*, const Holders*>> shared;
  for (const auto& [key, h] : by_block) {
    if (h.ranks.size() == 1) {
      writer[key] = h.ranks[0];
      load[static_cast<size_t>(h.ranks[0])] += h.bytes;
    } else {
      shared.emplace_back(&key, &h);
    }
  }
  // Ties in size keep the map's (name, offsets, shape) order, so every rank sorts identically.
  std::stable_sort(shared.begin(), shared.end(), [](const auto& a, const auto& b) { return a.second->bytes > b.second->bytes; });
  for (const auto& [key, h] : shared) {
    int best = h->ranks[0];
    for (int r : h->ranks)
      if (load[static_cast<size_t>(r)] < load[static_cast<size_t>(best)]) best = r;
    writer[*key] = best;
    load[static_cast<size_t>(best)] += h->bytes;
  }

  for (auto& b : blocks) {
    b.write = writer.at({b.name, b.offsets, b.local.sizes().vec()}) == comm->rank();
    if (b.write) mine += nbytes(b.local);
  }
  return mine;
}

}  // namespace meshtrain::ckpt
