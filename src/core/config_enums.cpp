// What the config's enumerations resolve to where a value depends on more than its spelling; see
// config_enums.h.
#include "meshtrain/core/config_enums.h"

#include <algorithm>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

Dtype compute_dtype(const TrainConfig& t, bool cuda) {
  switch (t.dtype) {
    case ComputeDtype::automatic: return cuda ? Dtype::bf16 : Dtype::fp32;
    case ComputeDtype::fp32: return Dtype::fp32;
    case ComputeDtype::bf16: return Dtype::bf16;
  }
  throw Error("bad train.dtype");
}

std::vector<LoraTarget> lora_targets(const ModelConfig& m) {
  std::vector<LoraTarget> out;
  if (m.lora_rank == 0) return out;
  const std::string given = format_field_value(m.lora_targets);
  const std::string valid = cat("; valid projections among ", join_spellings(enum_spellings<LoraTarget>()),
                                " (e.g. [q, v] or q,v; PEFT's q_proj … down_proj too)");
  for (const std::string& name : m.lora_targets) {
    // PEFT's target_modules spell them q_proj … down_proj (Llama's module names): the same projections.
    const bool peft = name.size() > 5 && name.compare(name.size() - 5, 5, "_proj") == 0;
    const std::optional<LoraTarget> t = enum_from<LoraTarget>(peft ? name.substr(0, name.size() - 5) : name);
    MT_USER_CHECK(t, "model.lora_targets: given ", given, " ('", name, "' is no projection)", valid);
    MT_USER_CHECK(std::find(out.begin(), out.end(), *t) == out.end(), "model.lora_targets: given ", given, " ('",
                  name, "' twice)", valid);
    out.push_back(*t);
  }
  MT_USER_CHECK(!out.empty(), "model.lora_targets: given [] with model.lora_rank ", m.lora_rank, valid);
  return out;
}

}  // namespace meshtrain
