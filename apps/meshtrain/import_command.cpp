// meshtrain import HF_DIR OUT_DIR: a Hugging Face Llama/GPT-2 as a meshtrain checkpoint + config.
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

int cmd_import(int argc, char** argv) {
  cxxopts::Options o("meshtrain import",
                     "Turn a Hugging Face Llama or GPT-2 model directory (config.json + safetensors) into a "
                     "meshtrain checkpoint (fp32 weights) and a config YAML to fine-tune or sample from.");
  o.add_options()("h,help", "show this help")("args", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"args"});
  o.positional_help("HF_DIR OUT_DIR");
  auto r = parse(o, argc, argv);
  const auto args = strings(r, "args");
  MT_USER_CHECK(args.size() == 2, "meshtrain import: expected HF_DIR and OUT_DIR, got ", args.size(),
                " arguments (see --help)");
  auto res = ckpt::import_hf(args[0], args[1]);
  std::printf("imported %s (%s, %lld tensors) into %s; config: %s\n", args[0].c_str(), enum_c_str(res.family),
              static_cast<long long>(res.tensors), res.checkpoint.c_str(), res.config_yaml.c_str());
  std::string copied;
  for (const auto& f : res.tokenizer_files) copied += (copied.empty() ? "" : ", ") + f;
  if (!copied.empty()) std::printf("tokenizer files copied beside it: %s\n", copied.c_str());
  return 0;
}

}  // namespace meshtrain::cli
