#include "meshtrain/data/prepare.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/data/token_shard.h"

namespace meshtrain::data {

PrepareResult prepare_bytes(const std::string& text_path, const std::string& out_prefix, double val_fraction) {
  MT_USER_CHECK(val_fraction >= 0 && val_fraction <= 0.5, "--val-fraction: given ", val_fraction,
                "; valid: 0 to 0.5");
  std::ifstream in(text_path, std::ios::binary);
  MT_USER_CHECK(in, text_path, ": cannot open text file");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  MT_USER_CHECK(!text.empty(), text_path, ": empty text file");

  size_t split = text.size() - static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  if (val_fraction > 0) {
    size_t nl = text.rfind('\n', split);
    if (nl != std::string::npos && nl > 0) split = nl + 1;
  }
  auto to_tokens = [](std::string_view s) {
    std::vector<uint16_t> t(s.size());
    for (size_t i = 0; i < s.size(); ++i) t[i] = static_cast<uint8_t>(s[i]);
    return t;
  };
  auto parent = std::filesystem::path(out_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);

  PrepareResult r;
  r.train_path = out_prefix + "_train.bin";
  r.val_path = out_prefix + "_val.bin";
  auto train = to_tokens(std::string_view(text).substr(0, split));
  auto val = to_tokens(std::string_view(text).substr(split));
  write_llmc_shard(r.train_path, train);
  write_llmc_shard(r.val_path, val);
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  return r;
}

}  // namespace meshtrain::data
