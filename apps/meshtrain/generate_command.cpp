// meshtrain generate CHECKPOINT [--prompt TEXT] …: sample text from a checkpoint of a byte-level model.
#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include <iostream>

#include "cli.h"
#include "commands.h"
#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/model/generate.h"

namespace meshtrain::cli {

int cmd_generate(int argc, char** argv) {
  cxxopts::Options o("meshtrain generate", "Sample text from a checkpoint of a byte-level model.");
  o.add_options()("prompt", "text to continue", cxxopts::value<std::string>()->default_value("\n"))(
      "tokens", "tokens to generate", cxxopts::value<int64_t>()->default_value("200"))(
      "temperature", "sampling temperature; 0 = greedy", cxxopts::value<double>()->default_value("0.8"))(
      "top-k", "sample among the k most likely tokens; 0 = all", cxxopts::value<int64_t>()->default_value("40"))(
      "seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("1337"))("h,help", "show this help")(
      "checkpoint", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("checkpoint") == 1, "meshtrain generate: expected one CHECKPOINT directory");
  const std::string dir = ckpt::resolve_checkpoint_dir(strings(r, "checkpoint")[0]);
  const ckpt::CheckpointMeta meta = ckpt::read_meta(dir);
  // The config is meta.json's own (format 2); earlier trainers kept it in the state.
  const nlohmann::json& cj = !meta.config.empty() ? meta.config : meta.state.value("config", meta.config);
  MT_USER_CHECK(!cj.empty(), dir, ": checkpoint carries no config");
  Config cfg = parse_config(cj.dump(), dir + "/meta.json", /*json=*/true);
  model::Transformer net(cfg.model);
  // The model's tensors only (never the optimizer state); one that meta.json lacks is named.
  std::vector<ShardedTensor> wanted;
  for (auto& item : net->named_parameters())
    wanted.push_back({"model." + item.key(), item.value().sizes().vec(),
                      std::vector<int64_t>(static_cast<size_t>(item.value().dim()), 0), item.value(), true});
  ckpt::load_into(dir, wanted);
  auto out = model::generate(net, data::encode_bytes(r["prompt"].as<std::string>()),
                             {.max_new_tokens = r["tokens"].as<int64_t>(), .temperature = r["temperature"].as<double>(),
                              .top_k = r["top-k"].as<int64_t>(), .seed = r["seed"].as<uint64_t>()});
  std::cout << data::decode_bytes(out) << std::endl;
  return 0;
}

}  // namespace meshtrain::cli
