// Measured MFU by shape and its interpolation (mfu_table.h).
#include "meshtrain/plan/mfu_table.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/model_size.h"
#include "meshtrain/plan/gpu_spec.h"

namespace meshtrain::plan {

namespace {

// Trained parameters of a preset, with `layers` blocks where given.
double preset_params(const std::string& preset, int64_t layers = 0) {
  ModelConfig m;
  apply_model_preset(preset, m);
  if (layers > 0) m.n_layer = layers;
  return static_cast<double>(model_size(m).params);
}

// A row's MFU with its parameter passes taken out of its step time, at its own GPU's memory bandwidth.
double compute_mfu(const MfuRow& r, double pass_bytes_per_param, double pass_efficiency) {
  const double rate = gpu_spec(r.gpu).hbm_bytes_s * pass_efficiency;
  const double pass_s = rate > 0 ? r.params * pass_bytes_per_param / rate : 0;
  if (r.params <= 0 || r.step_s <= 0 || pass_s >= r.step_s) return r.mfu;
  return std::min(1.0, r.mfu * r.step_s / (r.step_s - pass_s));
}

}  // namespace

MfuTable MfuTable::builtin() {
  MfuTable t;
  // docs/PERFORMANCE.md, "Fused CUDA kernels", H200, 2026-12-02: meshtrain (fused) rows; the step times are
  // the same shapes' in "`meshtrain plan` against measured peaks", 2026-12-03.
  t.rows_ = {
      {Family::gpt2, 768, 32 * 1024, 0.208, "H200 bench train gpt2-124m b32 T1024", preset_params("gpt2-124m"), 0.127},
      {Family::llama, 2048, 8 * 2048, 0.493, "H200 bench train llama3.2-1b b8 T2048", preset_params("llama3.2-1b"),
       0.265},
      {Family::llama, 4096, 4 * 2048, 0.497, "H200 bench train llama3.1-8b (8 layers) b4 T2048",
       preset_params("llama3.1-8b", 8), 0.235},
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
               r.value("source", path), r.value("params", 0.0), r.value("step_s", 0.0),
               r.value("gpu", std::string("h200-141gb"))};
    gpu_spec(row.gpu, cat(path, ": entry ", i, ": gpu"));  // a UserError naming the valid GPUs
    MT_USER_CHECK(row.mfu > 0 && row.mfu <= 1 && row.d_model > 0, path, ": entry ", i, ": mfu ", row.mfu,
                  " and d_model ", row.d_model, "; valid: 0 < mfu ≤ 1, d_model > 0");
    MT_USER_CHECK(row.params >= 0 && row.step_s >= 0, path, ": entry ", i, ": params ", row.params, " and step_s ",
                  row.step_s, "; valid: ≥ 0 (0: unknown)");
    t.rows_.push_back(row);
  }
  return t;
}

double MfuTable::lookup(const ModelConfig& m, std::string* why, double pass_bytes_per_param,
                        double pass_efficiency) const {
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
  const double lo_mfu = compute_mfu(*lo, pass_bytes_per_param, pass_efficiency),
               hi_mfu = compute_mfu(*hi, pass_bytes_per_param, pass_efficiency);
  double mfu = lo_mfu;
  if (lo != hi) {
    const double a = std::log2(static_cast<double>(lo->d_model)), b = std::log2(static_cast<double>(hi->d_model));
    mfu = lo_mfu + (hi_mfu - lo_mfu) * (x - a) / (b - a);
  }
  if (why) *why = lo == hi ? lo->source : lo->source + " .. " + hi->source;
  return mfu;
}

}  // namespace meshtrain::plan
