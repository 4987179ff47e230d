// zipcomm-file: parsing and validation of a .safetensors file, and its split into segments that cover the
// file exactly (raw bytes, or one float tensor that can become a zipcomm stream).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <zipcomm/format.hpp>

#include "json_lite.hpp"

namespace zipcomm_file {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct SafeTensor {
  std::string name;
  std::string dtype;     // safetensors dtype string ("BF16", "I64", ...)
  uint64_t elements = 0;
  uint64_t begin = 0;    // absolute byte offsets in the file
  uint64_t end = 0;
  bool is_float = false;  // BF16 / F16 / F32 / F8_E4M3 / F8_E5M2: coded as a zipcomm stream
  zipcomm::DType zdtype = zipcomm::DType::bf16;
};

struct SafeFile {
  uint64_t header_len = 0;  // N of the 8-byte prefix
  uint64_t data_start = 0;  // 8 + N
  std::vector<SafeTensor> tensors;  // sorted by begin
};

/// Size in bytes of one element of a safetensors dtype; 0 if unknown.
inline uint64_t safetensors_elem_size(const std::string& d) {
  static const struct {
    const char* name;
    uint64_t size;
  } table[] = {{"BOOL", 1}, {"U8", 1},    {"I8", 1},    {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
               {"I16", 2},  {"U16", 2},   {"F16", 2},   {"BF16", 2},    {"I32", 4},     {"U32", 4},
               {"F32", 4},  {"I64", 8},   {"U64", 8},   {"F64", 8},     {"C64", 8}};
  for (const auto& e : table)
    if (d == e.name) return e.size;
  return 0;
}

inline uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/// Parses and validates the header of a safetensors file of `size` bytes. Throws Error on anything wrong.
inline SafeFile parse_safetensors(const uint8_t* data, uint64_t size) {
  SafeFile f;
  if (size < 8) throw Error("safetensors: truncated file (" + std::to_string(size) + " bytes, need at least 8)");
  f.header_len = read_le64(data);
  if (f.header_len > size - 8)
    throw Error("safetensors: header length " + std::to_string(f.header_len) + " exceeds the file (" +
                std::to_string(size) + " bytes)");
  f.data_start = 8 + f.header_len;
  const uint64_t data_bytes = size - f.data_start;
  JsonValue root;
  try {
    root = parse_json(reinterpret_cast<const char*>(data + 8), size_t(f.header_len));
  } catch (const JsonError& e) {
    throw Error(std::string("safetensors header: ") + e.what());
  }
  if (root.kind != JsonValue::Kind::object) throw Error("safetensors header: top level is not a JSON object");
  std::vector<std::string> names;
  for (const auto& m : root.members) {
    const std::string& name = m.first;
    const JsonValue& v = m.second;
    names.push_back(name);
    if (name == "__metadata__") {
      if (v.kind != JsonValue::Kind::object) throw Error("safetensors header: __metadata__ is not an object");
      for (const auto& mm : v.members)
        if (mm.second.kind != JsonValue::Kind::string)
          throw Error("safetensors header: __metadata__ value '" + mm.first + "' is not a string");
      continue;
    }
    const std::string where = "safetensors tensor '" + name + "': ";
    if (v.kind != JsonValue::Kind::object) throw Error(where + "entry is not an object");
    const JsonValue* dt = v.find("dtype");
    const JsonValue* shape = v.find("shape");
    const JsonValue* offs = v.find("data_offsets");
    if (!dt || dt->kind != JsonValue::Kind::string) throw Error(where + "missing or non-string \"dtype\"");
    if (!shape || shape->kind != JsonValue::Kind::array) throw Error(where + "missing or non-array \"shape\"");
    if (!offs || offs->kind != JsonValue::Kind::array || offs->items.size() != 2)
      throw Error(where + "\"data_offsets\" must be an array of two integers");
    SafeTensor t;
    t.name = name;
    t.dtype = dt->s;
    const uint64_t es = safetensors_elem_size(t.dtype);
    if (es == 0) throw Error(where + "unknown dtype \"" + t.dtype + "\"");
    uint64_t elems = 1;
    for (const auto& d : shape->items) {
      if (d.kind != JsonValue::Kind::number || !d.is_uint)
        throw Error(where + "shape entries must be non-negative integers");
      if (d.u != 0 && elems > UINT64_MAX / d.u) throw Error(where + "shape overflows");
      elems *= d.u;
    }
    for (const auto& o : offs->items)
      if (o.kind != JsonValue::Kind::number || !o.is_uint)
        throw Error(where + "data_offsets must be non-negative integers");
    const uint64_t b = offs->items[0].u, e = offs->items[1].u;
    if (b > e) throw Error(where + "data_offsets begin > end");
    if (e > data_bytes)
      throw Error(where + "data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                  ") out of range (data section is " + std::to_string(data_bytes) + " bytes)");
    const uint64_t len = e - b;
    if (len % es) throw Error(where + "size " + std::to_string(len) + " is not a multiple of the element size " +
                              std::to_string(es) + " of " + t.dtype);
    if (elems > UINT64_MAX / es || elems * es != len)
      throw Error(where + "shape has " + std::to_string(elems) + " elements but data_offsets span " +
                  std::to_string(len / es));
    t.elements = elems;
    t.begin = f.data_start + b;
    t.end = f.data_start + e;
    if (t.dtype == "BF16") t.is_float = true, t.zdtype = zipcomm::DType::bf16;
    if (t.dtype == "F16") t.is_float = true, t.zdtype = zipcomm::DType::fp16;
    if (t.dtype == "F32") t.is_float = true, t.zdtype = zipcomm::DType::fp32;
    if (t.dtype == "F8_E4M3") t.is_float = true, t.zdtype = zipcomm::DType::fp8_e4m3;  // torch.float8_e4m3fn
    if (t.dtype == "F8_E5M2") t.is_float = true, t.zdtype = zipcomm::DType::fp8_e5m2;
    f.tensors.push_back(t);
  }
  std::sort(names.begin(), names.end());
  for (size_t i = 1; i < names.size(); ++i)
    if (names[i] == names[i - 1]) throw Error("safetensors header: duplicate key '" + names[i] + "'");
  std::stable_sort(f.tensors.begin(), f.tensors.end(), [](const SafeTensor& a, const SafeTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < f.tensors.size(); ++i)
    if (f.tensors[i].begin < f.tensors[i - 1].end)
      throw Error("safetensors: tensors '" + f.tensors[i - 1].name + "' and '" + f.tensors[i].name + "' overlap");
  return f;
}

/// One piece of the original file: raw bytes, or a float tensor (index into SafeFile::tensors).
struct Segment {
  uint64_t offset = 0, length = 0;
  int tensor = -1;  // >= 0: float tensor stored as a zipcomm stream
};

/// Splits the file into consecutive non-empty segments covering [0, size): float tensors become their own
/// segments, everything between them (prefix, JSON header, other tensors, padding) is merged into raw ones.
inline std::vector<Segment> segments_of(const SafeFile& f, uint64_t size) {
  std::vector<Segment> out;
  uint64_t pos = 0;
  auto raw_to = [&](uint64_t end) {
    if (end > pos) out.push_back(Segment{pos, end - pos, -1});
    pos = end > pos ? end : pos;
  };
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const SafeTensor& t = f.tensors[i];
    if (!t.is_float || t.end == t.begin) continue;
    raw_to(t.begin);
    out.push_back(Segment{t.begin, t.end - t.begin, int(i)});
    pos = t.end;
  }
  raw_to(size);
  return out;
}

}  // namespace zipcomm_file
