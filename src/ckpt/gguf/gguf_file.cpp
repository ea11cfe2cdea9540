// The GGUF container (gguf_file.h): the reader checks every length against the file's size before it
// allocates, so a damaged file is one clear error, never a huge allocation or a read past the end.
#include "meshtrain/ckpt/gguf/gguf_file.h"

#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt::gguf {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;

// Sequential little-endian reads from the header, each one checked against the file's size.
struct HeaderCursor {
  std::ifstream& in;
  const std::string& path;
  uint64_t size;

  void need(uint64_t n, const char* what) {
    const auto pos = static_cast<uint64_t>(in.tellg());
    MT_USER_CHECK(in.good() && pos + n <= size, path, ": truncated GGUF file (", what, " at byte ", pos, " needs ", n,
                  " bytes, the file has ", size, ")");
  }
  template <class T>
  T pod(const char* what) {
    need(sizeof(T), what);
    T v;
    in.read(reinterpret_cast<char*>(&v), sizeof(T));
    return v;
  }
  std::string str(const char* what) {
    const auto n = pod<uint64_t>(what);
    need(n, what);
    std::string s(n, '\0');
    in.read(s.data(), static_cast<std::streamsize>(n));
    return s;
  }
  nlohmann::json scalar(ValueType t, const std::string& key) {
    switch (t) {
      case ValueType::U8: return pod<uint8_t>("a value");
      case ValueType::I8: return pod<int8_t>("a value");
      case ValueType::U16: return pod<uint16_t>("a value");
      case ValueType::I16: return pod<int16_t>("a value");
      case ValueType::U32: return pod<uint32_t>("a value");
      case ValueType::I32: return pod<int32_t>("a value");
      case ValueType::F32: return pod<float>("a value");
      case ValueType::Bool: return pod<uint8_t>("a value") != 0;
      case ValueType::String: return str("a string value");
      case ValueType::U64: return pod<uint64_t>("a value");
      case ValueType::I64: return pod<int64_t>("a value");
      case ValueType::F64: return pod<double>("a value");
      case ValueType::Array: break;
    }
    throw UserError(cat(path, ": metadata key '", key, "' has value type ", static_cast<uint32_t>(t),
                        ", not one of GGUF's (0-12; arrays of arrays are not read)"));
  }
  Value value(const std::string& key) {
    Value v;
    v.type = static_cast<ValueType>(pod<uint32_t>("a value type"));
    if (v.type != ValueType::Array) {
      v.value = scalar(v.type, key);
      return v;
    }
    v.elem = static_cast<ValueType>(pod<uint32_t>("an array type"));
    const auto n = pod<uint64_t>("an array length");
    MT_USER_CHECK(n <= size, path, ": metadata key '", key, "' claims ", n, " elements (damaged file)");
    v.value = nlohmann::json::array();
    for (uint64_t i = 0; i < n; ++i) v.value.push_back(scalar(v.elem, key));
    return v;
  }
};

// Little-endian appends (x86 and ARM both store so).
struct Bytes {
  std::string out;
  template <class T>
  void pod(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out += s;
  }
  void scalar(ValueType t, const nlohmann::json& v) {
    switch (t) {
      case ValueType::U8: pod(v.get<uint8_t>()); break;
      case ValueType::I8: pod(v.get<int8_t>()); break;
      case ValueType::U16: pod(v.get<uint16_t>()); break;
      case ValueType::I16: pod(v.get<int16_t>()); break;
      case ValueType::U32: pod(v.get<uint32_t>()); break;
      case ValueType::I32: pod(v.get<int32_t>()); break;
      case ValueType::F32: pod(v.get<float>()); break;
      case ValueType::Bool: pod<uint8_t>(v.get<bool>() ? 1 : 0); break;
      case ValueType::String: str(v.get<std::string>()); break;
      case ValueType::U64: pod(v.get<uint64_t>()); break;
      case ValueType::I64: pod(v.get<int64_t>()); break;
      case ValueType::F64: pod(v.get<double>()); break;
      case ValueType::Array: MT_CHECK(false, "gguf: arrays of arrays are not written");
    }
  }
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufReader::GgufReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  MT_USER_CHECK(in_.good(), path, ": cannot open (no such file?)");
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  MT_USER_CHECK(!ec, path, ": cannot read its size: ", ec.message());
  HeaderCursor c{in_, path, size};
  MT_USER_CHECK(size >= 4 && c.pod<uint32_t>("the magic") == kGgufMagic, path,
                ": not a GGUF file (the first 4 bytes are not \"GGUF\")");
  const auto version = c.pod<uint32_t>("the version");
  MT_USER_CHECK(version == 2 || version == 3, path, ": GGUF version ", version, " is not supported (valid: 2, 3)");
  const auto n_tensors = c.pod<uint64_t>("the tensor count"), n_kv = c.pod<uint64_t>("the metadata count");
  MT_USER_CHECK(n_tensors <= size && n_kv <= size, path, ": the header claims ", n_tensors, " tensors and ", n_kv,
                " metadata keys (damaged file)");
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("a metadata key");
    metadata_[key] = c.value(key);
  }
  uint64_t alignment = kDefaultAlignment;
  if (has("general.alignment")) alignment = static_cast<uint64_t>(integer("general.alignment"));
  MT_USER_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, path, ": general.alignment ", alignment,
                " is not a power of two");
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.str("a tensor name");
    const auto n_dims = c.pod<uint32_t>("a tensor's dimension count");
    MT_USER_CHECK(n_dims >= 1 && n_dims <= 4, path, ": tensor '", t.name, "' has ", n_dims, " dimensions (valid: 1-4)");
    for (uint32_t d = 0; d < n_dims; ++d) t.ne.push_back(static_cast<int64_t>(c.pod<uint64_t>("a tensor dimension")));
    const auto type = c.pod<uint32_t>("a tensor type");
    const auto info = ggml_type_info(type);
    MT_USER_CHECK(info, path, ": tensor '", t.name, "' has ggml type ", type, " (", ggml_type_name(type),
                  "), which meshtrain cannot dequantize (valid: ", ggml_readable_type_names(), ")");
    t.type = info->type;
    MT_USER_CHECK(t.ne[0] % info->block == 0 && t.numel() >= 0, path, ": tensor '", t.name, "' rows of ", t.ne[0],
                  " values are not whole ", info->name, " blocks of ", info->block);
    t.bytes = ggml_bytes(t.type, t.numel());
    t.offset = c.pod<uint64_t>("a tensor offset");
    tensors_.push_back(std::move(t));
  }
  const uint64_t data_start = align_up(static_cast<uint64_t>(in_.tellg()), alignment);
  for (TensorInfo& t : tensors_) {
    t.offset += data_start;
    MT_USER_CHECK(t.offset + t.bytes <= size, path, ": truncated GGUF file (tensor '", t.name, "' needs bytes ",
                  t.offset, "-", t.offset + t.bytes, ", the file has ", size, ")");
  }
}

const TensorInfo* GgufReader::find(const std::string& name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

int64_t GgufReader::integer(const std::string& key) const {
  auto it = metadata_.find(key);
  MT_USER_CHECK(it != metadata_.end(), path_, ": metadata key '", key, "' is missing");
  MT_USER_CHECK(it->second.value.is_number_integer(), path_, ": metadata key '", key, "' is not an integer (",
                it->second.value.dump().substr(0, 80), ")");
  return it->second.value.get<int64_t>();
}

double GgufReader::number(const std::string& key) const {
  auto it = metadata_.find(key);
  MT_USER_CHECK(it != metadata_.end(), path_, ": metadata key '", key, "' is missing");
  MT_USER_CHECK(it->second.value.is_number(), path_, ": metadata key '", key, "' is not a number");
  return it->second.value.get<double>();
}

std::string GgufReader::string(const std::string& key) const {
  auto it = metadata_.find(key);
  MT_USER_CHECK(it != metadata_.end(), path_, ": metadata key '", key, "' is missing");
  MT_USER_CHECK(it->second.value.is_string(), path_, ": metadata key '", key, "' is not a string");
  return it->second.value.get<std::string>();
}

std::vector<uint8_t> GgufReader::read(const TensorInfo& t) const {
  std::vector<uint8_t> out(t.bytes);
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(t.offset));
  in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(t.bytes));
  MT_USER_CHECK(in_.good(), path_, ": cannot read tensor '", t.name, "' (", t.bytes, " bytes at ", t.offset, ")");
  return out;
}

void write_gguf(const std::string& path, const Metadata& metadata, const std::vector<TensorToWrite>& tensors,
                const std::function<void(size_t)>& on_tensor) {
  Bytes h;
  h.pod(kGgufMagic);
  h.pod<uint32_t>(3);
  h.pod<uint64_t>(tensors.size());
  h.pod<uint64_t>(metadata.size());
  for (const auto& [key, v] : metadata) {
    h.str(key);
    h.pod(static_cast<uint32_t>(v.type));
    if (v.type != ValueType::Array) {
      h.scalar(v.type, v.value);
      continue;
    }
    h.pod(static_cast<uint32_t>(v.elem));
    h.pod<uint64_t>(v.value.size());
    for (const auto& e : v.value) h.scalar(v.elem, e);
  }
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    h.str(t.name);
    h.pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    int64_t n = 1;
    for (int64_t d : t.ne) {
      h.pod<uint64_t>(static_cast<uint64_t>(d));
      n *= d;
    }
    h.pod(static_cast<uint32_t>(t.type));
    h.pod<uint64_t>(offset);
    offset = align_up(offset + ggml_bytes(t.type, n), kDefaultAlignment);
  }
  h.out.resize(align_up(h.out.size(), kDefaultAlignment), '\0');

  const std::string tmp = path + ".tmp";
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MT_USER_CHECK(out.good(), tmp, ": cannot write");
    out.write(h.out.data(), static_cast<std::streamsize>(h.out.size()));
    const std::string pad(kDefaultAlignment, '\0');
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::vector<uint8_t> bytes = tensors[i].bytes();
      int64_t n = 1;
      for (int64_t d : tensors[i].ne) n *= d;
      MT_CHECK(bytes.size() == ggml_bytes(tensors[i].type, n), "gguf: tensor '", tensors[i].name, "' gave ",
               bytes.size(), " bytes");
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      out.write(pad.data(), static_cast<std::streamsize>(align_up(bytes.size(), kDefaultAlignment) - bytes.size()));
      if (on_tensor) on_tensor(i);
    }
    out.flush();
    MT_USER_CHECK(out.good(), tmp, ": write failed (disk full?)");
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);  // no partial file left behind, under either name
    throw;
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
  fsync_path(fs::absolute(path).parent_path().string());
}

}  // namespace meshtrain::ckpt::gguf
