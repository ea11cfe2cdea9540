// One request of the rendezvous store's wire protocol (store_protocol.h), parsed from a connection's bytes
// with every length checked against the hard limits before anything is allocated: a peer's garbage (a 2^63
// length, 2^40 keys, an unknown query type) is a one-line `problem`, never an exception or a huge buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/launch/store_protocol.h"

namespace meshtrain::launch {

struct StoreRequest {
  StoreQuery query = StoreQuery::VALIDATE;
  std::vector<std::string> keys;    // every key the request names, in order
  std::vector<std::string> values;  // SET/APPEND/QUEUE_PUSH: one; COMPARE_SET: expected, desired; MULTI_SET:
                                    // one per key
  int64_t delta = 0;                // ADD
  uint32_t number = 0;              // VALIDATE: the magic; PING: the nonce
  std::string token;                // HELLO
  PeerRole role = PeerRole::Workers;
  int32_t node = -1;
};

enum class ParseStatus { Incomplete, Complete, Malformed };

// Parses the request at the start of data[0, size). Complete: `out` filled, `consumed` bytes used.
// Incomplete: more bytes are needed (nothing is kept). Malformed: `problem` says what was wrong, in words.
ParseStatus parse_store_request(const char* data, size_t size, StoreRequest& out, size_t& consumed,
                                std::string& problem);

// The query's name as c10d spells it ("SET", "HELLO"), or "query type N" for an unknown one.
std::string store_query_name(uint8_t query);

}  // namespace meshtrain::launch
