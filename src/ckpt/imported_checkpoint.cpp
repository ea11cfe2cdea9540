// The checkpoint and config.yaml an import writes (imported_checkpoint.h).
#include "meshtrain/ckpt/imported_checkpoint.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {

ImportResult write_imported_checkpoint(Config cfg, const std::map<std::string, at::Tensor>& tensors,
                                       const std::string& out_dir, const std::string& source) {
  // fp32: meshtrain trains on fp32 master weights whatever the file's dtype.
  std::map<std::string, at::Tensor> model;
  for (const auto& [name, t] : tensors) model["model." + name] = t.to(at::kFloat).contiguous();
  Config saved = cfg;
  saved.checkpoint.init_from = fs::absolute(out_dir).string();
  resolve(cfg, 1);
  const nlohmann::json cfg_json = nlohmann::json::parse(to_json(cfg));
  CheckpointManager m(out_dir, 0, nullptr);
  m.show_progress("import: write");
  ImportResult res;
  res.checkpoint = m.save(0, model, {{"config", cfg_json}, {"imported_from", source}});
  res.config_yaml = (fs::path(out_dir) / "config.yaml").string();
  // Only what the source determines, and its weights as init_from: resolved values (parallel.dp,
  // checkpoint.dir, …) would pin this machine's world size and run directory on every later run.
  write_file_atomic(res.config_yaml,
                    cat("# Imported from ", source, " by `meshtrain import`: the model section is what\n"
                        "# that model determines and checkpoint.init_from its weights; every other key keeps meshtrain's\n"
                        "# default (docs/config.md) until you uncomment it here or pass --set section.key=value.\n"
                        "# Training needs data.train at least.\n",
                        to_yaml_template(saved, {"model", "checkpoint.init_from"})));
  res.family = cfg.model.family;
  res.tensors = static_cast<int64_t>(model.size());
  return res;
}

}  // namespace meshtrain::ckpt
