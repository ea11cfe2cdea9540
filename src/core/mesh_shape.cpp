// MeshShape: row-major rank layout over named dims; see mesh_shape.h.
#include "meshtrain/core/mesh_shape.h"

#include <algorithm>
#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

constexpr const char* kNames[kNumDims] = {"pp", "dp", "fsdp", "tp"};

std::string valid_dims() {
  std::string s;
  for (int i = 0; i < kNumDims; ++i) s += cat(i ? ", " : "", kNames[i]);
  return s;
}

}  // namespace

const char* dim_name(Dim d) {
  const int i = static_cast<int>(d);
  MT_CHECK(i >= 0 && i < kNumDims, "dim_name: bad dim ", i);
  return kNames[i];
}

std::optional<Dim> parse_dim(std::string_view name) {
  for (int i = 0; i < kNumDims; ++i) {
    if (name == kNames[i]) return static_cast<Dim>(i);
  }
  return std::nullopt;
}

std::vector<Dim> MeshShape::parse_order(const std::string& order) {
  // Every broken order gets the same head (what is valid) and a tail saying what is wrong with this one.
  const auto refuse = [&](const std::string& why) {
    throw UserError(cat("parallel.order: given '", order, "'; valid a permutation of ", valid_dims(),
                        " joined by '-' (default pp-dp-fsdp-tp): ", why));
  };
  std::vector<Dim> dims;
  std::stringstream ss(order);
  for (std::string part; std::getline(ss, part, '-');) {
    const auto d = parse_dim(part);
    if (!d) refuse(cat("'", part, "' is not a mesh dim"));
    if (std::find(dims.begin(), dims.end(), *d) != dims.end()) refuse(cat("'", part, "' appears twice"));
    dims.push_back(*d);
  }
  if (!order.empty() && order.back() == '-') refuse("it ends in '-'");
  if (static_cast<int>(dims.size()) != kNumDims) refuse(cat("it names ", dims.size(), " of the ", kNumDims, " dims"));
  return dims;
}

MeshShape::MeshShape(std::vector<Dim> order, std::array<int, kNumDims> sizes)
    : order_(std::move(order)), sizes_(sizes) {
  std::vector<Dim> sorted = order_;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = static_cast<int>(sorted.size()) == kNumDims;
  for (int i = 0; permutation && i < kNumDims; ++i) permutation = sorted[static_cast<std::size_t>(i)] == static_cast<Dim>(i);
  MT_CHECK(permutation, "mesh order '", order_string(), "' must name each of ", valid_dims(), " exactly once");
  world_ = 1;
  for (int i = 0; i < kNumDims; ++i) {
    const int n = sizes_[static_cast<std::size_t>(i)];
    MT_CHECK(n >= 1, "mesh: ", kNames[i], " of size ", n);
    world_ *= n;
  }
}

MeshShape MeshShape::from_config(const ParallelConfig& p, int world_size) {
  MT_USER_CHECK(world_size >= 1, "mesh: world size ", world_size, " must be ≥ 1");
  const std::vector<Dim> order = parse_order(p.order);
  for (auto [name, v] : {std::pair{"pp", p.pp}, {"fsdp", p.fsdp}, {"tp", p.tp}}) {
    MT_USER_CHECK(v >= 1, "parallel.", name, ": given ", v, "; valid ≥ 1");
  }
  MT_USER_CHECK(p.dp >= 0, "parallel.dp: given ", p.dp, "; valid ≥ 0 (0 = derived from the world size)");
  const int64_t inner = p.pp * p.fsdp * p.tp;
  int64_t dp = p.dp;
  if (dp == 0) {
    MT_USER_CHECK(world_size % inner == 0, "parallel: world size ", world_size, " is not divisible by pp(", p.pp,
                  ") × fsdp(", p.fsdp, ") × tp(", p.tp, ") = ", inner, " (dp = 0 takes dp = world size / that)");
    dp = world_size / inner;
  }
  MT_USER_CHECK(dp * inner == world_size, "parallel: dp(", dp, ") × fsdp(", p.fsdp, ") × tp(", p.tp, ") × pp(", p.pp,
                ") = ", dp * inner, " ≠ world size ", world_size);
  std::array<int, kNumDims> sizes{};
  sizes[static_cast<std::size_t>(Dim::pp)] = static_cast<int>(p.pp);
  sizes[static_cast<std::size_t>(Dim::dp)] = static_cast<int>(dp);
  sizes[static_cast<std::size_t>(Dim::fsdp)] = static_cast<int>(p.fsdp);
  sizes[static_cast<std::size_t>(Dim::tp)] = static_cast<int>(p.tp);
  return MeshShape(order, sizes);
}

int MeshShape::size(DimSet dims) const {
  int n = 1;
  for (int i = 0; i < kNumDims; ++i) {
    if (dims.has(static_cast<Dim>(i))) n *= sizes_[static_cast<std::size_t>(i)];
  }
  return n;
}

std::string MeshShape::order_string() const {
  std::string s;
  for (std::size_t i = 0; i < order_.size(); ++i) s += cat(i ? "-" : "", dim_name(order_[i]));
  return s;
}

std::string MeshShape::describe() const {
  std::string s;
  for (std::size_t i = 0; i < order_.size(); ++i) s += cat(i ? " × " : "", dim_name(order_[i]), size(order_[i]));
  return cat(s, " (order ", order_string(), ")");
}

MeshShape::Coord MeshShape::coord(int rank) const {
  MT_CHECK(rank >= 0 && rank < world_, "mesh: rank ", rank, " is not in [0, ", world_, ")");
  Coord c{};
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {  // innermost varies fastest
    const int n = size(*it);
    c[static_cast<std::size_t>(*it)] = rank % n;
    rank /= n;
  }
  return c;
}

int MeshShape::rank_of(const Coord& c) const {
  int rank = 0;
  for (Dim d : order_) {
    const int x = c[static_cast<std::size_t>(d)];
    MT_CHECK(x >= 0 && x < size(d), "mesh: coordinate ", x, " outside ", dim_name(d), " of size ", size(d));
    rank = rank * size(d) + x;
  }
  return rank;
}

std::vector<int> MeshShape::group(int rank, DimSet dims) const {
  const Coord base = coord(rank);
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(size(dims)));
  // Enumerate the coordinates in `dims` (outer first, in mesh order) with every other coordinate fixed.
  std::vector<Dim> free;
  for (Dim d : order_) {
    if (dims.has(d)) free.push_back(d);
  }
  for (int i = 0; i < size(dims); ++i) {
    Coord c = base;
    int rest = i;
    for (auto it = free.rbegin(); it != free.rend(); ++it) {
      c[static_cast<std::size_t>(*it)] = rest % size(*it);
      rest /= size(*it);
    }
    out.push_back(rank_of(c));
  }
  return out;
}

int MeshShape::group_index(int rank, DimSet dims) const {
  const Coord c = coord(rank);
  int idx = 0;
  for (Dim d : order_) {
    if (!dims.has(d)) idx = idx * size(d) + c[static_cast<std::size_t>(d)];
  }
  return idx;
}

int MeshShape::index_in_group(int rank, DimSet dims) const {
  const Coord c = coord(rank);
  int idx = 0;
  for (Dim d : order_) {
    if (dims.has(d)) idx = idx * size(d) + c[static_cast<std::size_t>(d)];
  }
  return idx;
}

}  // namespace meshtrain
