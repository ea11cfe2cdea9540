#include "serve_settings.h"

#include "cli.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {
namespace {

// Each flag and the key it sets. A flag's name is its key's with '-' for '_', except where the flag is older
// than the key; serve.cuda_graphs' flag takes on|off as it always has.
struct ServeFlag {
  const char* flag;
  const char* key;
  bool engine;  // sizes or runs the engine (ServeFlags::engine)
};
constexpr ServeFlag kServeFlags[] = {
    {"host", "host", false},
    {"port", "port", false},
    {"gpu-memory-fraction", "gpu_memory_fraction", true},
    {"blocks", "blocks", true},
    {"block-size", "block_size", true},
    {"max-running", "max_running", true},
    {"max-waiting", "max_waiting", false},
    {"max-step-tokens", "max_step_tokens", true},
    {"max-body", "max_body", false},
    {"cuda-graphs", "cuda_graphs", true},
    {"drain-timeout", "drain_timeout_s", false},
};

bool taken(const ServeFlag& s, ServeFlags which) { return which == ServeFlags::all || s.engine; }

const FieldInfo& serve_field(const char* key) {
  const FieldInfo* f = find_config_field("serve", key);
  MT_CHECK(f != nullptr, "serve flag for unknown key serve.", key);
  return *f;
}

// The flag's value typed as its key is.
FieldValue flag_value(const cxxopts::ParseResult& r, const ServeFlag& s, const FieldInfo& f) {
  switch (f.type) {
    case FieldType::Int: return r[s.flag].as<int64_t>();
    case FieldType::Double: return r[s.flag].as<double>();
    case FieldType::Bool: {
      const std::string v = r[s.flag].as<std::string>();
      MT_USER_CHECK(v == "on" || v == "off", "--", s.flag, " ", v, ": expected on or off");
      return v == "on";
    }
    default: return r[s.flag].as<std::string>();
  }
}

}  // namespace

void add_serve_flags(cxxopts::Options& o, ServeFlags which) {
  for (const ServeFlag& s : kServeFlags) {
    if (!taken(s, which)) continue;
    const FieldInfo& f = serve_field(s.key);
    const bool on_off = f.type == FieldType::Bool;
    const FieldValue def = f.default_value();
    const std::string fallback = on_off ? (std::get<bool>(def) ? "on" : "off") : format_field_value(def);
    const std::string help =
        cat(f.doc, on_off ? ": on or off" : "", " (serve.", s.key, "; default: the config's, else ", fallback, ")");
    switch (f.type) {
      case FieldType::Int: o.add_options()(s.flag, help, cxxopts::value<int64_t>()); break;
      case FieldType::Double: o.add_options()(s.flag, help, cxxopts::value<double>()); break;
      default: o.add_options()(s.flag, help, cxxopts::value<std::string>()); break;  // strings, and on|off
    }
  }
  o.add_options()("config", "a YAML or JSON config whose serve section replaces the checkpoint's recorded one "
                  "(its other sections are not read)", cxxopts::value<std::string>())(
      "set", "a serve key on top of the config: serve.KEY=VALUE (repeatable; `meshtrain config --docs` lists them)",
      cxxopts::value<std::vector<std::string>>());
}

std::vector<std::string> serve_flag_names(ServeFlags which) {
  std::vector<std::string> names{"config", "set"};
  for (const ServeFlag& s : kServeFlags)
    if (taken(s, which)) names.emplace_back(s.flag);
  return names;
}

std::vector<std::string> serve_overrides(const cxxopts::ParseResult& r) {
  std::vector<std::string> sets = strings(r, "set");
  for (const std::string& s : sets)
    MT_USER_CHECK(s.rfind("serve.", 0) == 0, "--set ", s, ": only serve.KEY=VALUE here (the model's keys are the "
                  "checkpoint's)");
  return sets;
}

void check_serve_flags(const cxxopts::ParseResult& r) {
  (void)serve_overrides(r);
  for (const ServeFlag& s : kServeFlags) {
    if (!r.count(s.flag)) continue;
    // Every serve rule is a bound on one key, so a flag's value is checked alone, over the defaults.
    Config alone;
    alone.source = cat("--", s.flag);
    const FieldInfo& f = serve_field(s.key);
    f.set(alone, flag_value(r, s, f));
    validate_serve(alone);
  }
}

ServeConfig serve_settings(const cxxopts::ParseResult& r, const Config& recorded) {
  Config cfg = r.count("config") ? load_config(r["config"].as<std::string>(), serve_overrides(r)) : recorded;
  validate_serve(cfg);
  for (const ServeFlag& s : kServeFlags) {
    if (!r.count(s.flag)) continue;
    const FieldInfo& f = serve_field(s.key);
    f.set(cfg, flag_value(r, s, f));
  }
  return cfg.serve;
}

}  // namespace meshtrain::cli
