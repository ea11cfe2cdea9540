// The rendezvous store's wire protocol: c10d::TCPStore's (torch/csrc/distributed/c10d/TCPStoreBackend.hpp and
// TCPStoreLibUvBackend.cpp, torch 2.11), which stock PyTorch clients speak, plus one message of meshrun's own
// (HELLO) that every connection must send first. One home for the constants the client (store_client.h),
// the server (store_server.h) and the relay (store_relay.h) share.
//
// c10d's format: a one-byte query type, integers in host byte order, strings and byte values as a uint64
// length then the bytes. TCPStore clients put "/" in front of every key.
//
// HELLO (meshrun's): kHello, uint64 token length + token bytes, uint8 role (PeerRole), int32 node rank. The
// server answers one byte, kHelloAccepted, or closes the connection (and says why in one line on its side).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace meshtrain::launch {

// c10d::detail::QueryType; the order is the protocol.
enum class StoreQuery : uint8_t {
  VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY, APPEND, MULTI_GET, MULTI_SET,
  CANCEL_WAIT, PING, QUEUE_PUSH, QUEUE_POP, QUEUE_LEN, LIST_KEYS,
  HELLO = 0xA5,  // meshrun's: far from c10d's range, so a future query type cannot collide with it
};

constexpr uint32_t kStoreValidationMagic = 0x3C85F7CE;  // c10d::detail::validationMagicNumber
constexpr uint8_t kStoreCheckReady = 0, kStoreCheckNotReady = 1;      // CheckResponseType
constexpr uint8_t kStoreStopWaiting = 0, kStoreWaitCanceled = 1;      // WaitResponseType
constexpr uint8_t kHelloAccepted = 0x5A;

// Who a connection speaks for, said in its HELLO; the server decides from it which keys the connection may
// touch (store_key_policy.h).
enum class PeerRole : uint8_t {
  Launcher = 0,  // a node's launcher (node_coordinator.h): the "meshrun/" keys
  Workers = 1,   // a worker of a node, through that node's relay: every key but the "meshrun/" ones
};

// Hard limits of the server; a request over one is malformed (one line, connection closed).
constexpr size_t kStoreMaxKeyBytes = 64 * 1024;
constexpr size_t kStoreMaxValueBytes = 16 * 1024 * 1024;
constexpr uint64_t kStoreMaxKeysPerRequest = 100000;  // c10d's MAX_KEY_COUNT order of magnitude
constexpr size_t kStoreMaxRequestBytes = 64 * 1024 * 1024;  // a MULTI_SET of several values
constexpr size_t kStoreMaxTokenBytes = 1024;

// c10d's encoding, appended to a message being built: an integer in host byte order; a string or byte value as
// its uint64 length then its bytes. The client and the server both write with these.
template <typename T>
void store_put_value(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
inline void store_put_bytes(std::string& b, const std::string& s) {
  store_put_value<uint64_t>(b, s.size());
  b += s;
}

}  // namespace meshtrain::launch
