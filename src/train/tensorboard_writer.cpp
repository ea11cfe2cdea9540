#include "meshtrain/train/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "meshtrain/core/crc32.h"
#include "meshtrain/core/error.h"

namespace meshtrain::train {
namespace {

// Protocol-buffer wire format: a key is (field number << 3 | wire type); 0 varint, 1 fixed64, 2 length-
// delimited, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>((field << 3) | wire_type)); }

template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian hosts (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));  // int64: two's complement as a 64-bit varint
  return e;
}

uint32_t masked_crc(const void* p, size_t n) {
  const uint32_t c = crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void flatten(const std::string& prefix, const nlohmann::json& j, std::vector<std::pair<std::string, double>>& out) {
  if (j.is_number() || j.is_boolean()) {
    out.emplace_back(prefix, j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>());
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(prefix.empty() ? it.key() : prefix + "/" + it.key(), it.value(), out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) flatten(prefix + "/" + std::to_string(i), j[i], out);
  }
}

}  // namespace

std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record) {
  std::vector<std::pair<std::string, double>> out;
  for (auto it = record.begin(); it != record.end(); ++it)
    if (it.key() != "step") flatten(it.key(), it.value(), out);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MT_USER_CHECK(!ec, what, ": cannot create directory '", dir, "': ", ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = cat(dir, "/events.out.tfevents.", std::time(nullptr), ".", host, ".", ::getpid());
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  MT_USER_CHECK(fd_ >= 0, what, ": cannot create '", path_, "': ", std::strerror(errno));
  std::string e = event_header(static_cast<double>(std::time(nullptr)), 0);
  put_bytes(e, 3, "brain.Event:2");
  write_record(e);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                                    double wall_time) {
  std::string summary;
  for (const auto& [tag, v] : scalars) {
    std::string value;
    put_bytes(value, 1, tag);
    put_key(value, 2, 5);
    put_fixed(value, static_cast<float>(v));
    put_bytes(summary, 1, value);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::add_record(const nlohmann::json& record, double wall_time) {
  if (!record.contains("step")) return;
  const auto scalars = tensorboard_scalars(record);
  if (!scalars.empty()) add_scalars(record["step"].get<int64_t>(), scalars, wall_time);
}

void TensorBoardWriter::add_text(int64_t step, const std::string& tag, const std::string& text, double wall_time) {
  std::string tensor;  // a scalar string tensor: no dimensions in its (empty) shape
  put_key(tensor, 1, 0);
  put_varint(tensor, 7);  // DT_STRING
  put_bytes(tensor, 2, "");
  put_bytes(tensor, 8, text);
  std::string plugin, metadata, value, summary;
  put_bytes(plugin, 1, "text");
  put_bytes(metadata, 1, plugin);
  put_bytes(value, 1, tag);
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  put_bytes(summary, 1, value);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::add_hparams(const std::vector<std::pair<std::string, nlohmann::json>>& hparams,
                                    double wall_time) {
  // HParamsPluginData { int32 version = 1; SessionStartInfo session_start_info = 3; }
  // SessionStartInfo { map<string, google.protobuf.Value> hparams = 1; double start_time_secs = 5; }
  // google.protobuf.Value { double number_value = 2; string string_value = 3; bool bool_value = 4; }
  std::string start;
  for (const auto& [name, v] : hparams) {
    std::string value, entry;
    if (v.is_boolean()) {
      put_key(value, 4, 0);
      put_varint(value, v.get<bool>() ? 1 : 0);
    } else if (v.is_number()) {
      put_key(value, 2, 1);
      put_fixed(value, v.get<double>());
    } else {
      put_bytes(value, 3, v.is_string() ? v.get<std::string>() : v.dump());
    }
    put_bytes(entry, 1, name);
    put_bytes(entry, 2, value);
    put_bytes(start, 1, entry);
  }
  put_key(start, 5, 1);
  put_fixed(start, wall_time);
  std::string content;
  put_key(content, 1, 0);
  put_varint(content, 0);
  put_bytes(content, 3, start);
  // The plugin reads its data from the metadata; the value still needs a tensor for TensorBoard to keep it:
  // a float scalar 0 (TensorProto { dtype = 1 (DT_FLOAT); tensor_shape = 2; float_val = 5 }).
  std::string tensor;
  put_key(tensor, 1, 0);
  put_varint(tensor, 1);
  put_bytes(tensor, 2, "");
  std::string zero;
  put_fixed(zero, 0.0f);
  put_bytes(tensor, 5, zero);
  std::string plugin, metadata, value, summary;
  put_bytes(plugin, 1, "hparams");
  put_bytes(plugin, 2, content);
  put_bytes(metadata, 1, plugin);
  put_bytes(value, 1, "_hparams_/session_start_info");
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  put_bytes(summary, 1, value);
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string rec;
  put_fixed(rec, static_cast<uint64_t>(data.size()));
  put_fixed(rec, masked_crc(rec.data(), 8));
  rec += data;
  put_fixed(rec, masked_crc(data.data(), data.size()));
  // One write(2): a crash never leaves half a record behind a whole one (see the header).
  const ssize_t n = ::write(fd_, rec.data(), rec.size());
  SYS_CHECK(n, "write ", path_);
  MT_CHECK(static_cast<size_t>(n) == rec.size(), "short write to ", path_, " (", n, " of ", rec.size(), " bytes)");
}

}  // namespace meshtrain::train
