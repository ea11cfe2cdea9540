// DataSource: one entry of data.train or data.val — a shard file or glob, with an optional sampling weight.
//
// data.train and data.val are lists (core/config.h). Each entry is `PATTERN` or `PATTERN:WEIGHT`, the weight
// after the last ':' where that text reads as a number (YAML may also give an entry as {path: P, weight: W},
// which the loader folds into the same string). Several training sources are a mixture: each is drawn in
// proportion to its weight — or, where no entry has one, to its windows (its tokens), as one glob over all of
// them would be (docs/data.md "Several sources"). Validation sources carry no weight: each is evaluated whole.
//
//   for (const DataSource& s : parse_data_sources(cfg.data.train)) use(s.pattern, s.weight);
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain {

struct DataSource {
  std::string pattern;   // a file or a glob
  double weight = 0;     // the sampling weight given, or 0 where none was (any given one is checked > 0)
  bool weighted = false; // a weight was written (`PATTERN:WEIGHT`)
  bool operator==(const DataSource&) const = default;
};

// "a/*.bin:0.7" → {"a/*.bin", 0.7, true}; "b.bin" → {"b.bin", 0, false}. No checks (validate_data_sources).
DataSource parse_data_source(const std::string& entry);
std::vector<DataSource> parse_data_sources(const StringList& entries);

// The rules on one data key's entries, each a UserError "WHERE: KEY: …" naming the entry: none empty; with
// `weights_allowed` every weight > 0 and either every entry weighted or none; without, no weight at all
// (data.val); `synthetic` (data.train only) alone.
void validate_data_sources(const StringList& entries, const std::string& where, const std::string& key,
                           bool weights_allowed);

// Whether data.train asks for random tokens (the one entry `synthetic`).
bool is_synthetic_data(const StringList& train);

}  // namespace meshtrain
