// meshtrain export CHECKPOINT --format hf OUT_DIR: a checkpoint (any layout) as a Hugging Face model directory;
// a LoRA run's adapters merged into it, or (--adapters) alone in PEFT's layout.
// meshtrain export CHECKPOINT --gguf OUT.gguf [--type T]: a Llama checkpoint as one llama.cpp file.
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "meshtrain/ckpt/gguf_files.h"
#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/ckpt/lora_export.h"
#include "meshtrain/core/byte_size.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/join.h"

namespace meshtrain::cli {

namespace {

int export_gguf_file(const cxxopts::ParseResult& r, const std::vector<std::string>& args) {
  MT_USER_CHECK(args.size() == 1, "meshtrain export --gguf: expected CHECKPOINT only, got ", args.size(),
                " arguments (see --help)");
  MT_USER_CHECK(!r.count("format") && !r.count("adapters"), "meshtrain export: --gguf writes a merged GGUF file; it "
                "takes neither --format nor --adapters");
  const ckpt::GgufExportOptions opts{.type = r["type"].as<std::string>(),
                                     .base = r.count("base") ? r["base"].as<std::string>() : "",
                                     .tokenizer = r.count("tokenizer") ? r["tokenizer"].as<std::string>() : ""};
  const std::string out = r["gguf"].as<std::string>();
  const auto res = ckpt::export_gguf(args[0], out, opts);
  std::string types;
  for (const auto& [name, n] : res.types) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  std::printf("wrote %s: %lld tensors (%s), %.1f MB; tokenizer from %s\n", out.c_str(),
              static_cast<long long>(res.tensors), types.c_str(), static_cast<double>(res.bytes) / 1e6,
              res.tokenizer.c_str());
  return 0;
}

}  // namespace

int cmd_export(int argc, char** argv) {
  cxxopts::Options o("meshtrain export",
                     std::string("Write a checkpoint (any layout) as a Hugging Face model directory: config.json + "
                     "model.safetensors, or model-0000K-of-0000N.safetensors + model.safetensors.index.json above "
                     "--max-shard-size. Loadable by transformers (LlamaForCausalLM, GPT2LMHeadModel), vLLM, TGI. "
                     "A LoRA checkpoint (model.lora_rank > 0) is written merged (W + alpha/r · B A); with "
                     "--adapters, its adapters alone in PEFT's layout (adapter_config.json + "
                     "adapter_model.safetensors, for peft.PeftModel.from_pretrained over the base). A LoRA run started from "
                     "checkpoint.init_from saves only its adapters: the merged export reads the base from the "
                     "path its meta.json records, or from --base. With --gguf OUT.gguf instead of a directory: one "
                     "llama.cpp / Ollama file (Llama only): the architecture keys, the tokenizer and chat template "
                     "(--tokenizer, default the tokenizer.json beside the checkpoint), the weights as --type." +
                         std::string(kModelArgumentHelp)));
  o.add_options()("format", "output format; valid: hf", cxxopts::value<std::string>()->default_value("hf"))(
      "gguf", "write one GGUF file here instead (llama.cpp, Ollama; Llama only)", cxxopts::value<std::string>())(
      "type", "--gguf tensor type: f32 | f16 | bf16 | q8_0 | q4_0 | q4_k_m (docs/checkpoints.md \"GGUF\")",
      cxxopts::value<std::string>()->default_value("f16"))(
      "tokenizer", "--gguf: the tokenizer.json (or its directory) to carry; default: the one beside the checkpoint",
      cxxopts::value<std::string>())(
      "dtype", "tensor dtype: keep | fp32 | bf16 | fp16", cxxopts::value<std::string>()->default_value("keep"))(
      "adapters", "LoRA checkpoint: write only its adapters, in PEFT's layout (fp32)")(
      "base", "adapters-only LoRA checkpoint: its base, a checkpoint or a Hugging Face directory (default: the path "
              "recorded in its meta.json)",
      cxxopts::value<std::string>())(
      "max-shard-size", "largest safetensors file (K/M/G suffixes)",
      cxxopts::value<std::string>()->default_value("5G"))("h,help", "show this help")(
      "args", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"args"});
  o.positional_help("CHECKPOINT OUT_DIR  |  CHECKPOINT --gguf OUT.gguf");
  auto r = parse(o, argc, argv);
  const auto args = strings(r, "args");
  if (r.count("gguf")) return export_gguf_file(r, args);
  MT_USER_CHECK(!r.count("type") && !r.count("tokenizer"), "meshtrain export: --type and --tokenizer go with --gguf "
                "OUT.gguf (the Hugging Face export takes --dtype and copies the tokenizer files beside the checkpoint)");
  MT_USER_CHECK(args.size() == 2, "meshtrain export: expected CHECKPOINT and OUT_DIR, got ", args.size(),
                " arguments (see --help)");
  MT_USER_CHECK(r["format"].as<std::string>() == "hf", "meshtrain export: --format: given '",
                r["format"].as<std::string>(), "'; valid hf (the default), or --gguf OUT.gguf for llama.cpp");
  const size_t shard = parse_bytes("--max-shard-size", r["max-shard-size"].as<std::string>());
  MT_USER_CHECK(shard > 0, "--max-shard-size must be > 0");
  if (r.count("adapters")) {
    const auto res = ckpt::export_peft(args[0], args[1]);
    std::printf("wrote %s: %lld LoRA adapter tensors, %.1f MB (PEFT layout)\n", args[1].c_str(),
                static_cast<long long>(res.tensors), static_cast<double>(res.bytes) / 1e6);
    return 0;
  }
  const std::string base = r.count("base") ? r["base"].as<std::string>() : "";
  auto res = ckpt::export_hf(args[0], args[1],
                             {.dtype = r["dtype"].as<std::string>(), .max_shard_bytes = shard, .base = base});
  std::printf("wrote %s: %lld tensors, %.1f MB in %d file(s)\n", args[1].c_str(), static_cast<long long>(res.tensors),
              static_cast<double>(res.bytes) / 1e6, res.files);
  if (res.tokenizer_files.empty())
    std::printf("no tokenizer.json beside the checkpoint, its run or the model it started from: the export has "
                "no tokenizer (copy the model's tokenizer files into %s)\n", args[1].c_str());
  else
    std::printf("tokenizer files copied: %s\n", join(res.tokenizer_files, ", ").c_str());
  return 0;
}

}  // namespace meshtrain::cli
