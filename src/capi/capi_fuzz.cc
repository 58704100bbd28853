// Fuzzes the C API's entry points that take bytes from outside (files, stores, other processes):
// kvc_inspect_json, kvc_decode and kvc_kv_from_llama_state, then kvc_encode of whatever parsed
// with a codec and a level string taken from the input. Whatever the bytes, every call returns a
// status (an exception or an abort would end the caller's process), every error message is one
// line of valid UTF-8, and every JSON it returns parses.
//   byte 0: mode (0 inspect, 1 decode, 2 state -> encode -> decode); then the mode's input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 3;
  // A NULL pointer with size 0 is how an empty file arrives: exercise it too.
  const uint8_t* rest = size > 1 ? data + 1 : nullptr;
  switch (mode) {
    case 0:
      Inspect(rest, size - 1);
      break;
    case 1:
      DecodeToState(rest, size - 1);
      break;
    default:
      EncodeFromState(rest, size - 1);
      break;
  }
  return 0;
}
