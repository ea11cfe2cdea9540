#include "cli.h"

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "meshtrain/ckpt/source_model.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"

namespace meshtrain::cli {

cxxopts::ParseResult parse(cxxopts::Options& o, int argc, char** argv) {
  auto r = o.parse(argc, argv);
  if (r.count("help")) {
    std::cout << o.help() << std::endl;
    std::exit(0);
  }
  return r;
}

std::vector<std::string> strings(const cxxopts::ParseResult& r, const std::string& name) {
  return r.count(name) ? r[name].as<std::vector<std::string>>() : std::vector<std::string>{};
}

std::vector<std::string> split_commas(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    std::stringstream ss(v);
    for (std::string part; std::getline(ss, part, ',');) {
      const size_t b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
      if (b != std::string::npos) out.push_back(part.substr(b, e - b + 1));
    }
  }
  return out;
}

Config load_run_config(const std::string& path, const std::vector<std::string>& sets) {
  Config cfg = load_config(path, sets);
  if (const std::string from = ckpt::adopt_source_model(cfg); !from.empty() && comm::world_info_from_env().rank == 0)
    log::info("%s", from.c_str());
  return cfg;
}

Config load_resolved(const std::vector<std::string>& positional, const std::vector<std::string>& sets,
                     int world_size) {
  MT_USER_CHECK(positional.size() == 1, "expected exactly one CONFIG file (.yaml, .yml or .json), got ",
                positional.size());
  Config cfg = load_run_config(positional[0], sets);
  resolve(cfg, world_size);
  validate(cfg, world_size);
  check_inputs_exist(cfg);
  return cfg;
}

void write_json_option(const cxxopts::ParseResult& r, const std::string& text) {
  if (!r.count("json")) return;
  const std::string path = r["json"].as<std::string>();
  try {
    write_file_atomic(path, text);  // a run killed while writing leaves the old file or the new one, never a part
  } catch (const std::exception&) {
    throw UserError(cat("--json: cannot write ", path, " (its directory must exist and be writable)"));
  }
}

}  // namespace meshtrain::cli
