#include "meshtrain/serve/http/prometheus_text.h"

#include <sstream>

namespace meshtrain::serve::http {
namespace {

std::string header(const std::string& name, const char* type, const std::string& help) {
  return "# HELP meshtrain_" + name + ' ' + help + "\n# TYPE meshtrain_" + name + ' ' + type + '\n';
}

}  // namespace

std::string prometheus_metric(const std::string& name, const char* type, const std::string& help, int64_t value) {
  return header(name, type, help) + "meshtrain_" + name + ' ' + std::to_string(value) + '\n';
}

std::string prometheus_gauge(const std::string& name, const std::string& help, double value) {
  std::ostringstream s;
  s.precision(6);
  s << header(name, "gauge", help) << "meshtrain_" << name << ' ' << value << '\n';
  return s.str();
}

std::string prometheus_histogram(const std::string& name, const std::string& help, const LatencyHistogram& h) {
  std::ostringstream s;
  s << header(name, "histogram", help);
  for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i)
    s << "meshtrain_" << name << "_bucket{le=\"" << LatencyHistogram::kBounds[i] << "\"} " << h.cumulative(i) << '\n';
  s << "meshtrain_" << name << "_bucket{le=\"+Inf\"} " << h.count() << '\n';
  s.precision(17);
  s << "meshtrain_" << name << "_sum " << h.sum() << "\nmeshtrain_" << name << "_count " << h.count() << '\n';
  return s.str();
}

}  // namespace meshtrain::serve::http
