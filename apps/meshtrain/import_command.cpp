// meshtrain import HF_DIR|FILE.gguf OUT_DIR: a Hugging Face Llama/GPT-2 or a GGUF Llama as a meshtrain checkpoint
// + config.
#include <cstdio>
#include <filesystem>

#include "cli.h"
#include "commands.h"
#include "meshtrain/ckpt/gguf_files.h"
#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

int cmd_import(int argc, char** argv) {
  cxxopts::Options o("meshtrain import",
                     "Turn a Hugging Face Llama or GPT-2 model directory (config.json + safetensors) into a "
                     "meshtrain checkpoint (fp32 weights) and a config YAML to fine-tune or sample from. A GGUF file (llama.cpp, "
                     "Ollama; llama architecture, any of F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K) is "
                     "dequantized, its tokenizer and chat template written beside the checkpoint. HF_DIR may be org/name from "
                     "the local Hugging Face cache (offline; generate, eval, serve and checkpoint.init_from read such "
                     "a directory in place, without importing it).");
  o.add_options()("h,help", "show this help")("args", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"args"});
  o.positional_help("HF_DIR|FILE.gguf OUT_DIR");
  auto r = parse(o, argc, argv);
  const auto args = strings(r, "args");
  MT_USER_CHECK(args.size() == 2, "meshtrain import: expected HF_DIR (or FILE.gguf) and OUT_DIR, got ", args.size(),
                " arguments (see --help)");
  // A directory is a Hugging Face model; a file, a GGUF file.
  const bool gguf = std::filesystem::is_regular_file(args[0]);
  auto res = gguf ? ckpt::import_gguf(args[0], args[1]) : ckpt::import_hf(args[0], args[1]);
  std::printf("imported %s (%s, %lld tensors) into %s; config: %s\n", args[0].c_str(), enum_c_str(res.family),
              static_cast<long long>(res.tensors), res.checkpoint.c_str(), res.config_yaml.c_str());
  std::string copied;
  for (const auto& f : res.tokenizer_files) copied += (copied.empty() ? "" : ", ") + f;
  if (!copied.empty()) std::printf("tokenizer files beside it: %s\n", copied.c_str());
  return 0;
}

}  // namespace meshtrain::cli
