// MeshShape: the arithmetic of a device mesh, with no communicator attached. The job's ranks are laid out
// row-major over named dims in the order of `parallel.order` ("pp-dp-fsdp-tp": pp outermost, tp innermost,
// so the ranks of one tp group are consecutive). It is the one home of the rules on parallel.order and on the
// world-size product: validate() (config.h) reports them through from_config before any worker starts;
// comm::Mesh (comm/mesh.h) adds the communicators; placement (comm/placement.h) uses the shape alone to know
// which local ranks form a tp group.
//
//   rank = ((c_pp · dp + c_dp) · fsdp + c_fsdp) · tp + c_tp          for the default order
//
// A group "along dims D" is the set of ranks that share every coordinate outside D (the tp group of rank 5 in
// pp1·dp2·fsdp1·tp4 is ranks 4..7). Within the group, ranks are ordered by their coordinates in D, outer first.
#pragma once

#include <array>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain {

// Mesh dims. Extending: add the enumerator before kNumDims, its name in dim_name(), and a config field.
enum class Dim : int { pp = 0, dp, fsdp, tp, kNumDims };
constexpr int kNumDims = static_cast<int>(Dim::kNumDims);

const char* dim_name(Dim d);                         // "pp", "dp", "fsdp", "tp"
std::optional<Dim> parse_dim(std::string_view name); // inverse of dim_name; nullopt if unknown

// A set of dims, e.g. {Dim::dp, Dim::fsdp} for HSDP's replicate-and-shard group.
class DimSet {
 public:
  DimSet() = default;
  DimSet(Dim d) { add(d); }  // NOLINT(google-explicit-constructor): a single dim is a set of one
  DimSet(std::initializer_list<Dim> dims) {
    for (Dim d : dims) add(d);
  }
  void add(Dim d) { bits_ |= 1u << static_cast<unsigned>(d); }
  bool has(Dim d) const { return (bits_ >> static_cast<unsigned>(d)) & 1u; }
  bool empty() const { return bits_ == 0; }
  unsigned bits() const { return bits_; }
  bool operator==(const DimSet&) const = default;

 private:
  unsigned bits_ = 0;
};

class MeshShape {
 public:
  // `order` outermost first (each dim exactly once); `sizes` indexed by Dim, each ≥ 1. A caller's contract,
  // not the user's input (from_config checks that): Error when broken.
  MeshShape(std::vector<Dim> order, std::array<int, kNumDims> sizes);

  // From parallel.{pp,dp,fsdp,tp,order}; dp = 0 means world_size / (pp × fsdp × tp). Throws UserError with
  // the arithmetic when the product is not the world size ("parallel: dp(2) × fsdp(1) × tp(4) × pp(1) = 8 ≠
  // world size 6") or dp cannot be derived, and parse_order's for a bad order.
  static MeshShape from_config(const ParallelConfig& p, int world_size);
  // Parses an order string such as "pp-dp-fsdp-tp" (every dim exactly once). UserError "parallel.order: given
  // 'pp-dp-dp-tp'; valid a permutation of pp, dp, fsdp, tp joined by '-' (default pp-dp-fsdp-tp): 'dp' appears
  // twice".
  static std::vector<Dim> parse_order(const std::string& order);

  int size(Dim d) const { return sizes_[static_cast<std::size_t>(d)]; }
  int size(DimSet dims) const;  // product of the sizes in `dims`
  int world_size() const { return world_; }
  const std::vector<Dim>& order() const { return order_; }
  std::string order_string() const;  // "pp-dp-fsdp-tp"
  std::string describe() const;      // "pp1 × dp2 × fsdp1 × tp4 (order pp-dp-fsdp-tp)"

  using Coord = std::array<int, kNumDims>;  // indexed by Dim
  Coord coord(int rank) const;
  int rank_of(const Coord& c) const;

  // The ranks of `rank`'s group along `dims`, in group order (ascending global rank, as it happens).
  std::vector<int> group(int rank, DimSet dims) const;
  // Which group along `dims` `rank` is in (0 … world/size(dims) - 1) and its index inside it: the color
  // and key that Communicator::split needs.
  int group_index(int rank, DimSet dims) const;
  int index_in_group(int rank, DimSet dims) const;

  bool operator==(const MeshShape&) const = default;

 private:
  std::vector<Dim> order_;
  std::array<int, kNumDims> sizes_{};
  int world_ = 1;
};

}  // namespace meshtrain
