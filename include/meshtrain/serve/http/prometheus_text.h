// Prometheus' text exposition format (version 0.0.4) for /metrics: one gauge or counter, or one histogram with
// its `_bucket{le="..."}` lines, `_sum` and `_count`; every name is prefixed `meshtrain_`.
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/serve/engine/latency_histogram.h"

namespace meshtrain::serve::http {

// `type` is "gauge" or "counter".
std::string prometheus_metric(const std::string& name, const char* type, const std::string& help, int64_t value);
// A gauge with a fractional value (a rate), printed to 6 significant digits.
std::string prometheus_gauge(const std::string& name, const std::string& help, double value);
std::string prometheus_histogram(const std::string& name, const std::string& help, const LatencyHistogram& h);

}  // namespace meshtrain::serve::http
