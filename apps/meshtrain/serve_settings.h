// The serve.* keys as `meshtrain serve` takes them (docs/serving.md "Settings"): the checkpoint's recorded serve
// section, or --config FILE's; --set serve.KEY=VALUE on top; then the flags of the same names (--port for
// serve.port, --drain-timeout for serve.drain_timeout_s), whose help is the key's own doc.
#pragma once

#include <cxxopts.hpp>

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::cli {

// Which serve.* flags a command takes: all of them (`meshtrain serve`), or those that size and run the engine —
// gpu_memory_fraction, blocks, block_size, max_running, max_step_tokens, cuda_graphs (`meshtrain generate --input`,
// which listens on no port).
enum class ServeFlags { all, engine };

// The serve.* flags (`which`), --config and --set, added to `o`.
void add_serve_flags(cxxopts::Options& o, ServeFlags which = ServeFlags::all);
// The names of the flags add_serve_flags(which) adds (--config and --set among them).
std::vector<std::string> serve_flag_names(ServeFlags which);

// --set's serve.* overrides, checked to name serve keys only (the model's keys belong to the checkpoint); what
// the checkpoint is opened with.
std::vector<std::string> serve_overrides(const cxxopts::ParseResult& r);

// Each serve flag's value and --set's keys checked alone, before the checkpoint is read: UserError
// "--FLAG: serve.KEY: given X; valid Y".
void check_serve_flags(const cxxopts::ParseResult& r);

// The serve section in force: `recorded` (the checkpoint's config with serve_overrides applied) unless --config
// names a file, whose serve section (with the same overrides) replaces it; then the flags, which check_serve_flags
// must have passed first. The section before the flags is checked against config_validate.cpp's rules: UserError
// "FILE: serve.KEY: given X; valid Y".
ServeConfig serve_settings(const cxxopts::ParseResult& r, const Config& recorded);

}  // namespace meshtrain::cli
