#include "meshtrain/launch/endpoint.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

bool is_ipv6(const std::string& s) {
  in6_addr a{};
  return ::inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

// RFC 1123 host names and dotted IPv4 share one alphabet; a label never starts or ends with '-'.
bool is_host_name(const std::string& s) {
  if (s.empty() || s.size() > 253 || s.front() == '.' || s.back() == '.') return false;
  size_t label = 0;
  char prev = '.';
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    if (!ok || (c == '.' && (prev == '.' || prev == '-')) || (c == '-' && prev == '.')) return false;
    label = c == '.' ? 0 : label + 1;
    if (label > 63) return false;
    prev = c;
  }
  return prev != '-';
}

std::string forms_hint() { return "HOST, HOST:PORT, [IPV6] or [IPV6]:PORT"; }

}  // namespace

int parse_port(const std::string& text, const std::string& flag, bool any_free) {
  const bool digits = !text.empty() && text.size() <= 5 &&
                      std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
  const long v = digits ? std::stol(text) : -1;
  const long lo = any_free ? 0 : 1;
  MT_USER_CHECK(v >= lo && v <= 65535, "meshrun: ", flag, " '", text, "' is not a TCP port (", lo, "..65535",
                any_free ? "; 0 = any free port" : "", ")");
  return static_cast<int>(v);
}

std::string parse_host(const std::string& text, const std::string& flag) {
  std::string h = text;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
    MT_USER_CHECK(is_ipv6(h), "meshrun: ", flag, " '", text, "': '", h, "' in brackets is not an IPv6 address");
    return h;
  }
  MT_USER_CHECK(is_host_name(h) || is_ipv6(h), "meshrun: ", flag, " '", text,
                "' is not a host name, an IPv4 address or an IPv6 address");
  return h;
}

Endpoint parse_endpoint(const std::string& text, const std::string& flag, bool any_free_port) {
  Endpoint ep;
  MT_USER_CHECK(!text.empty(), "meshrun: ", flag, " is empty; give ", forms_hint());
  if (text.front() == '[') {
    const auto close = text.find(']');
    MT_USER_CHECK(close != std::string::npos, "meshrun: ", flag, " '", text, "' has no closing ']'; give ",
                  forms_hint());
    ep.host = parse_host(text.substr(0, close + 1), flag);
    const std::string rest = text.substr(close + 1);
    if (rest.empty()) return ep;
    MT_USER_CHECK(rest[0] == ':', "meshrun: ", flag, " '", text, "': expected ':PORT' after ']'; give ",
                  forms_hint());
    ep.port = parse_port(rest.substr(1), flag, any_free_port);
    return ep;
  }
  const auto colons = std::count(text.begin(), text.end(), ':');
  if (colons > 1) {  // only a bare IPv6 address has several colons; with a port it must be bracketed
    MT_USER_CHECK(is_ipv6(text), "meshrun: ", flag, " '", text, "' is not valid; give ", forms_hint(),
                  " (an IPv6 address with a port goes in brackets)");
    ep.host = text;
    return ep;
  }
  const auto colon = text.find(':');
  MT_USER_CHECK(colon != 0, "meshrun: ", flag, " '", text, "' has no host; give ", forms_hint());
  ep.host = parse_host(text.substr(0, colon), flag);
  if (colon != std::string::npos) ep.port = parse_port(text.substr(colon + 1), flag, any_free_port);
  return ep;
}

}  // namespace meshtrain::launch
