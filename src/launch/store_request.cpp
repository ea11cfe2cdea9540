// Bounded parsing of the store's requests (see store_request.h).
#include "meshtrain/launch/store_request.h"

#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

// A cursor over the received bytes. Every read says whether the bytes are there; lengths are checked against
// their limit before the bytes are waited for, so a huge length is refused at once.
class RequestReader {
 public:
  RequestReader(const char* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  bool read(T& v) {
    if (size_ - pos_ < sizeof(T)) return false;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // false: incomplete, or (with `problem` set) over `limit`.
  bool read_string(std::string& s, size_t limit, const char* what, std::string& problem) {
    uint64_t len = 0;
    if (!read(len)) return false;
    if (len > limit) {
      problem = cat(what, " of ", len, " bytes (at most ", limit, ")");
      return false;
    }
    if (size_ - pos_ < len) return false;
    s.assign(data_ + pos_, len);
    pos_ += len;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

ParseStatus incomplete_or_bad(const std::string& problem) {
  return problem.empty() ? ParseStatus::Incomplete : ParseStatus::Malformed;
}

// The key counts of CHECK, WAIT, MULTI_GET and MULTI_SET.
bool read_key_count(RequestReader& r, uint64_t& n, std::string& problem) {
  if (!r.read(n)) return false;
  if (n > kStoreMaxKeysPerRequest) {
    problem = cat("a request for ", n, " keys (at most ", kStoreMaxKeysPerRequest, ")");
    return false;
  }
  return true;
}

bool read_keys(RequestReader& r, StoreRequest& out, bool with_values, std::string& problem) {
  uint64_t n = 0;
  if (!read_key_count(r, n, problem)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    std::string k, v;
    if (!r.read_string(k, kStoreMaxKeyBytes, "a key", problem)) return false;
    if (with_values && !r.read_string(v, kStoreMaxValueBytes, "a value", problem)) return false;
    if (r.pos() > kStoreMaxRequestBytes) {
      problem = cat("a request of more than ", kStoreMaxRequestBytes, " bytes");
      return false;
    }
    out.keys.push_back(std::move(k));
    if (with_values) out.values.push_back(std::move(v));
  }
  return true;
}

bool read_key_and_values(RequestReader& r, StoreRequest& out, int nvalues, std::string& problem) {
  std::string k;
  if (!r.read_string(k, kStoreMaxKeyBytes, "a key", problem)) return false;
  out.keys.push_back(std::move(k));
  for (int i = 0; i < nvalues; ++i) {
    std::string v;
    if (!r.read_string(v, kStoreMaxValueBytes, "a value", problem)) return false;
    out.values.push_back(std::move(v));
  }
  return true;
}

bool read_hello(RequestReader& r, StoreRequest& out, std::string& problem) {
  uint8_t role = 0;
  if (!r.read_string(out.token, kStoreMaxTokenBytes, "a token", problem) || !r.read(role) || !r.read(out.node))
    return false;
  if (role > static_cast<uint8_t>(PeerRole::Workers)) {
    problem = cat("HELLO with an unknown role ", int(role));
    return false;
  }
  out.role = static_cast<PeerRole>(role);
  return true;
}

// The request's body after its query byte; false = incomplete or (problem set) malformed.
bool read_body(RequestReader& r, StoreRequest& out, std::string& problem) {
  switch (out.query) {
    case StoreQuery::VALIDATE:
    case StoreQuery::PING: return r.read(out.number);
    case StoreQuery::SET:
    case StoreQuery::APPEND:
    case StoreQuery::QUEUE_PUSH: return read_key_and_values(r, out, 1, problem);
    case StoreQuery::COMPARE_SET: return read_key_and_values(r, out, 2, problem);
    case StoreQuery::GET:
    case StoreQuery::DELETE_KEY:
    case StoreQuery::QUEUE_POP:
    case StoreQuery::QUEUE_LEN: return read_key_and_values(r, out, 0, problem);
    case StoreQuery::ADD: return read_key_and_values(r, out, 0, problem) && r.read(out.delta);
    case StoreQuery::CHECK:
    case StoreQuery::WAIT:
    case StoreQuery::MULTI_GET: return read_keys(r, out, false, problem);
    case StoreQuery::MULTI_SET: return read_keys(r, out, true, problem);
    case StoreQuery::GETNUMKEYS:
    case StoreQuery::CANCEL_WAIT: return true;
    case StoreQuery::HELLO: return read_hello(r, out, problem);
    case StoreQuery::LIST_KEYS: break;
  }
  problem = cat("unsupported ", store_query_name(static_cast<uint8_t>(out.query)));
  return false;
}

bool known_query(uint8_t q) {
  return q <= static_cast<uint8_t>(StoreQuery::LIST_KEYS) || q == static_cast<uint8_t>(StoreQuery::HELLO);
}

}  // namespace

std::string store_query_name(uint8_t q) {
  static const char* const names[] = {"VALIDATE", "SET", "COMPARE_SET", "GET", "ADD", "CHECK", "WAIT",
                                      "GETNUMKEYS", "DELETE_KEY", "APPEND", "MULTI_GET", "MULTI_SET",
                                      "CANCEL_WAIT", "PING", "QUEUE_PUSH", "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS"};
  if (q < sizeof(names) / sizeof(names[0])) return names[q];
  if (q == static_cast<uint8_t>(StoreQuery::HELLO)) return "HELLO";
  return cat("query type ", int(q));
}

ParseStatus parse_store_request(const char* data, size_t size, StoreRequest& out, size_t& consumed,
                                std::string& problem) {
  RequestReader r(data, size);
  uint8_t q = 0;
  if (!r.read(q)) return ParseStatus::Incomplete;
  if (!known_query(q)) {
    problem = cat("unknown ", store_query_name(q));
    return ParseStatus::Malformed;
  }
  out = StoreRequest{};
  out.query = static_cast<StoreQuery>(q);
  problem.clear();
  if (!read_body(r, out, problem)) return incomplete_or_bad(problem);
  consumed = r.pos();
  return ParseStatus::Complete;
}

}  // namespace meshtrain::launch
