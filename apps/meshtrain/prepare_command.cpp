// meshtrain prepare TEXT --out PREFIX: byte-level (vocab 256) llm.c token shards from a text file.
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/prepare.h"

namespace meshtrain::cli {

int cmd_prepare(int argc, char** argv) {
  cxxopts::Options o("meshtrain prepare", "Write byte-level (vocab 256) llm.c token shards from a text file.");
  o.add_options()("out", "output prefix: writes PREFIX_train.bin and PREFIX_val.bin", cxxopts::value<std::string>())(
      "val-fraction", "share of the text (its end) kept for validation",
      cxxopts::value<double>()->default_value("0.05"))("h,help", "show this help")(
      "text", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"text"});
  o.positional_help("TEXT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("text") == 1, "meshtrain prepare: expected one TEXT file");
  MT_USER_CHECK(r.count("out"), "meshtrain prepare: --out PREFIX is required");
  auto res = data::prepare_bytes(strings(r, "text")[0], r["out"].as<std::string>(), r["val-fraction"].as<double>());
  std::printf("wrote %s (%lld tokens) and %s (%lld tokens)\n", res.train_path.c_str(),
              static_cast<long long>(res.train_tokens), res.val_path.c_str(), static_cast<long long>(res.val_tokens));
  return 0;
}

}  // namespace meshtrain::cli
