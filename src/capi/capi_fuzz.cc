// Fuzzes the C API's entry points that take bytes from outside (files, stores, other processes):
// kvc_inspect_json, kvc_decode and kvc_kv_from_llama_state, then kvc_encode of whatever parsed
// with a codec and a level string taken from the input; and those that take descriptions of the
// caller's memory (kvc_kv_from_arrays, kvc_kv_to_arrays: shape, strides, size) over heap buffers
// of exactly the size described, so a sanitizer sees any access past it. Whatever the input,
// every call returns a status (an exception or an abort would end the caller's process), every
// error message is one line of valid UTF-8, and every JSON it returns parses.
//   byte 0: mode (0 inspect, 1 decode, 2 state -> encode -> decode, 3 arrays); then the mode's
//   input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kvcodec/kvcodec.h"

namespace {

bool OneValidLine(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) return false;
  }
  // nlohmann rejects invalid UTF-8 when it serialises with the default (strict) handler.
  try {
    (void)nlohmann::json(std::string(s)).dump();
  } catch (...) {
    return false;
  }
  return true;
}

void CheckStatus(kvc_status s) {
  if (s != KVC_OK && !OneValidLine(kvc_last_error())) std::abort();
}

void CheckJson(char* json) {
  if (json == nullptr || !nlohmann::json::accept(json)) std::abort();
  kvc_free(json);
}

void Inspect(const uint8_t* data, size_t size) {
  char* json = nullptr;
  const kvc_status s = kvc_inspect_json(data, size, &json);
  CheckStatus(s);
  if (s == KVC_OK) CheckJson(json);
}

void DecodeToState(const uint8_t* data, size_t size) {
  kvc_kv* kv = nullptr;
  const kvc_status s = kvc_decode(data, size, nullptr, &kv);
  CheckStatus(s);
  if (s != KVC_OK) return;
  uint8_t* state = nullptr;
  size_t state_size = 0;
  const kvc_status t = kvc_kv_to_llama_state(kv, &state, &state_size);
  CheckStatus(t);
  if (t == KVC_OK) kvc_free(state);
  kvc_kv_free(kv);
}

// [heads-1: 1][codec: 1][level length: 1][level bytes][state bytes]
void EncodeFromState(const uint8_t* data, size_t size) {
  if (size < 3) return;
  static const char* const kCodecs[] = {"raw", "quant", "cachegen", "video", "kvtc", "no-such-codec"};
  const uint32_t heads = 1 + data[0] % 4;
  const char* codec = kCodecs[data[1] % (sizeof kCodecs / sizeof kCodecs[0])];
  const size_t level_len = std::min<size_t>(data[2], size - 3);
  const std::string level(reinterpret_cast<const char*>(data + 3), level_len);
  data += 3 + level_len;
  size -= 3 + level_len;

  kvc_kv* kv = nullptr;
  const kvc_status s = kvc_kv_from_llama_state(data, size, heads, &kv);
  CheckStatus(s);
  if (s != KVC_OK) return;
  const uint8_t fingerprint[16] = {};
  uint8_t* encoded = nullptr;
  size_t encoded_size = 0;
  // An empty level string means the codec's default.
  const kvc_status e = kvc_encode(kv, 0, 0, codec, level.empty() ? nullptr : level.c_str(), nullptr, fingerprint,
                                  &encoded, &encoded_size);
  CheckStatus(e);
  if (e == KVC_OK) {
    // What the library wrote it must read back, with the shape it was given.
    kvc_kv* back = nullptr;
    if (kvc_decode(encoded, encoded_size, fingerprint, &back) != KVC_OK) {
      std::fprintf(stderr, "capi_fuzz: %s encoded what it cannot decode: %s\n", codec, kvc_last_error());
      std::abort();
    }
    kvc_shape a, b;
    kvc_kv_shape(kv, &a);
    kvc_kv_shape(back, &b);
    if (a.n_layers != b.n_layers || a.n_tokens != b.n_tokens || a.n_kv_heads != b.n_kv_heads ||
        a.head_dim != b.head_dim) {
      std::abort();
    }
    kvc_kv_free(back);
    Inspect(encoded, encoded_size);
    kvc_free(encoded);
  }
  kvc_kv_free(kv);
}

// Reads the fuzz input as fields, 0 past its end.
struct FieldReader {
  const uint8_t* data;
  size_t size;
  uint8_t U8() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  // A stride: mostly small, the extremes reachable (int16 -1 and +-32767 stand for the int64 ones).
  int64_t Stride() {
    const auto v = static_cast<int16_t>(U16());
    if (v == std::numeric_limits<int16_t>::max()) return std::numeric_limits<int64_t>::max();
    if (v == std::numeric_limits<int16_t>::min()) return std::numeric_limits<int64_t>::min();
    return v;
  }
};

// One array: [layers mode: 1][4 strides: 2 each][size: 2], over `storage` (exactly size bytes,
// NULL when 0, as an empty vector's data may be) and per-layer pointers into it.
kvc_kv_array ReadArray(FieldReader& r, uint32_t n_layers, std::vector<uint8_t>& storage, std::vector<void*>& layers) {
  kvc_kv_array a{};
  const bool per_layer = (r.U8() & 1) != 0;
  a.layer_stride = r.Stride();
  a.token_stride = r.Stride();
  a.head_stride = r.Stride();
  a.dim_stride = r.Stride();
  a.size = r.U16();
  storage.assign(a.size, 0x5A);
  if (per_layer) {
    // Each layer its own size / n_layers bytes of the one buffer.
    const size_t each = n_layers == 0 ? 0 : a.size / n_layers;
    for (uint32_t l = 0; l < n_layers; ++l) layers.push_back(storage.data() + size_t{l} * each);
    a.layers = layers.data();
    a.size = each;
  } else {
    a.data = storage.data();
  }
  return a;
}

static_assert(sizeof(kvc_dtype) == sizeof(int), "a kvc_dtype is read from an int's bytes");

// [layers, heads, dim, tokens: 1 each][dtype: 1][keys only: 1][pos_begin: 1][K][V][K out][V out][out dtype: 1]
void Arrays(const uint8_t* data, size_t size) {
  FieldReader r{data, size};
  kvc_shape shape{};
  shape.n_layers = r.U8() % 4;  // 0 included: refused
  shape.n_kv_heads = r.U8() % 5;
  shape.head_dim = r.U8() % 9;
  shape.n_tokens = r.U8() % 17;
  const int dtype = static_cast<int8_t>(r.U8());  // any bits: unknown ones are refused
  std::memcpy(&shape.dtype, &dtype, sizeof dtype);
  const bool keys_only = (r.U8() & 1) != 0;
  shape.pos_begin = static_cast<int8_t>(r.U8());
  // n_layers pointers are read only once the shape is accepted: lists as long as it says.
  std::vector<uint8_t> k_bytes, v_bytes, ko_bytes, vo_bytes;
  std::vector<void*> k_layers, v_layers, ko_layers, vo_layers;
  const kvc_kv_array k = ReadArray(r, shape.n_layers, k_bytes, k_layers);
  const kvc_kv_array v = ReadArray(r, shape.n_layers, v_bytes, v_layers);
  kvc_kv* kv = nullptr;
  const kvc_status s = kvc_kv_from_arrays(&shape, &k, keys_only ? nullptr : &v, &kv);
  CheckStatus(s);
  if (s != KVC_OK) return;
  // Accepted: what was read survives a lossless codec.
  const uint8_t fingerprint[16] = {};
  uint8_t* encoded = nullptr;
  size_t encoded_size = 0;
  if (kvc_encode(kv, 0, 0, "planes", nullptr, nullptr, fingerprint, &encoded, &encoded_size) != KVC_OK) {
    std::fprintf(stderr, "capi_fuzz: planes refused a cache kvc_kv_from_arrays made: %s\n", kvc_last_error());
    std::abort();
  }
  kvc_kv* back = nullptr;
  if (kvc_decode(encoded, encoded_size, fingerprint, &back) != KVC_OK) std::abort();
  kvc_free(encoded);
  const kvc_kv_array ko = ReadArray(r, shape.n_layers, ko_bytes, ko_layers);
  const kvc_kv_array vo = ReadArray(r, shape.n_layers, vo_bytes, vo_layers);
  kvc_dtype out_dtype;
  const int raw_out = static_cast<int8_t>(r.U8());
  std::memcpy(&out_dtype, &raw_out, sizeof raw_out);
  const std::vector<uint8_t> ko_before = ko_bytes, vo_before = vo_bytes;
  const kvc_status t = kvc_kv_to_arrays(kv, out_dtype, &ko, keys_only ? nullptr : &vo);
  CheckStatus(t);
  if (t != KVC_OK && (ko_bytes != ko_before || vo_bytes != vo_before)) {
    std::fprintf(stderr, "capi_fuzz: kvc_kv_to_arrays wrote into the arrays and then failed\n");
    std::abort();
  }
  if (t == KVC_OK) {
    // The decoded copy fills the same destinations with the same bytes.
    const std::vector<uint8_t> ko_first = ko_bytes, vo_first = vo_bytes;
    if (kvc_kv_to_arrays(back, out_dtype, &ko, keys_only ? nullptr : &vo) != KVC_OK || ko_bytes != ko_first ||
        vo_bytes != vo_first) {
      std::fprintf(stderr, "capi_fuzz: planes did not give back the cache it was given\n");
      std::abort();
    }
  }
  kvc_kv_free(back);
  kvc_kv_free(kv);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // Modulo 4: the corpus's first bytes, 0..2, keep their modes.
  const uint8_t mode = data[0] % 4;
  // A NULL pointer with size 0 is how an empty file arrives: exercise it too.
  const uint8_t* rest = size > 1 ? data + 1 : nullptr;
  switch (mode) {
    case 0:
      Inspect(rest, size - 1);
      break;
    case 1:
      DecodeToState(rest, size - 1);
      break;
    case 2:
      EncodeFromState(rest, size - 1);
      break;
    default:
      Arrays(rest, size - 1);
      break;
  }
  return 0;
}
