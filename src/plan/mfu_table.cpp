// Measured MFU by shape and its interpolation (mfu_table.h).
#include "meshtrain/plan/mfu_table.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

MfuTable MfuTable::builtin() {
  MfuTable t;
  // docs/PERFORMANCE.md, "Fused CUDA kernels", H200, 2026-12-02: meshtrain (fused) rows.
  t.rows_ = {
      {Family::gpt2, 768, 32 * 1024, 0.208, "H200 bench train gpt2-124m b32 T1024"},
      {Family::llama, 2048, 8 * 2048, 0.493, "H200 bench train llama3.2-1b b8 T2048"},
      {Family::llama, 4096, 4 * 2048, 0.497, "H200 bench train llama3.1-8b (8 layers) b4 T2048"},
  };
  return t;
}

MfuTable MfuTable::from_json_file(const std::string& path) {
  std::ifstream f(path);
  MT_USER_CHECK(f.good(), "--mfu: cannot read '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw UserError(cat(path, ": not JSON (", e.what(), ")"));
  }
  MT_USER_CHECK(j.is_array() && !j.empty(), path, ": expected a non-empty list of {family, d_model, tokens, mfu}");
  MfuTable t;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& r = j[i];
    MT_USER_CHECK(r.is_object() && r.contains("family") && r.contains("d_model") && r.contains("mfu"), path,
                  ": entry ", i, " needs family, d_model and mfu");
    const Family family = parse_enum<Family>(r["family"].get<std::string>(), cat(path, ": entry ", i, ": family"));
    MfuRow row{family, r["d_model"].get<int64_t>(), r.value("tokens", int64_t{0}), r["mfu"].get<double>(),
               r.value("source", path)};
    MT_USER_CHECK(row.mfu > 0 && row.mfu <= 1 && row.d_model > 0, path, ": entry ", i, ": mfu ", row.mfu,
                  " and d_model ", row.d_model, "; valid: 0 < mfu ≤ 1, d_model > 0");
    t.rows_.push_back(row);
  }
  return t;
}

double MfuTable::lookup(const ModelConfig& m, std::string* why) const {
  std::vector<const MfuRow*> same;
  for (const auto& r : rows_)
    if (r.family == m.family) same.push_back(&r);
  if (same.empty())
    for (const auto& r : rows_) same.push_back(&r);
  MT_CHECK(!same.empty(), "MfuTable: no rows");
  // The nearest row below and above in log2(d_model).
  const double x = std::log2(static_cast<double>(m.d_model));
  const MfuRow *lo = nullptr, *hi = nullptr;
  for (const MfuRow* r : same) {
    const double rx = std::log2(static_cast<double>(r->d_model));
    if (rx <= x && (!lo || rx > std::log2(static_cast<double>(lo->d_model)))) lo = r;
    if (rx >= x && (!hi || rx < std::log2(static_cast<double>(hi->d_model)))) hi = r;
  }
  if (!lo) lo = hi;
  if (!hi) hi = lo;
  double mfu = lo->mfu;
  if (lo != hi) {
    const double a = std::log2(static_cast<double>(lo->d_model)), b = std::log2(static_cast<double>(hi->d_model));
    mfu = lo->mfu + (hi->mfu - lo->mfu) * (x - a) / (b - a);
  }
  if (why) *why = lo == hi ? lo->source : lo->source + " .. " + hi->source;
  return mfu;
}

}  // namespace meshtrain::plan
