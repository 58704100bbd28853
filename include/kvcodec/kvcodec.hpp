// Thin C++ layer over the kvcodec C API: RAII handles and std types. Header-only; it adds no
// behaviour of its own, so the C API stays the one contract (kvcodec.h: ownership, defaults, the
// JSON schemas of the *Json functions' text).
//
// Ownership: Model, Session, Sampler, Store and Kv own their handle (move-only) and free it when
// destroyed; what the library hands back as a buffer (text, JSON, bytes, tokens, keys) is copied
// into a std::string or std::vector and the buffer freed at once. As in C, a Session must be
// destroyed before the Model it was made of; get() lends the raw handle, which stays the object's.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kvcodec/kvcodec.h"

namespace kvcodec {

struct Error {
  kvc_status code = KVC_OK;
  std::string message;
};

// A value or the error that prevented it.
template <typename T>
class Outcome {
 public:
  Outcome(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Outcome(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return std::holds_alternative<T>(v_); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  const Error& error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

inline Error LastError(kvc_status code) { return {code, kvc_last_error()}; }

struct Freer {
  void operator()(void* p) const { kvc_free(p); }
};

inline std::string TakeString(char* s) {
  std::unique_ptr<char, Freer> owned(s);
  return s ? std::string(s) : std::string();
}

inline std::vector<uint8_t> TakeBytes(uint8_t* p, size_t n) {
  std::unique_ptr<uint8_t, Freer> owned(p);
  return std::vector<uint8_t>(p, p + n);
}

struct KvDeleter {
  void operator()(kvc_kv* kv) const { kvc_kv_free(kv); }
};
using Kv = std::unique_ptr<kvc_kv, KvDeleter>;

inline kvc_shape Shape(const Kv& kv) {
  kvc_shape s;
  kvc_kv_shape(kv.get(), &s);
  return s;
}

class Model {
 public:
  static Outcome<Model> Load(const std::string& path) {
    kvc_model* m = nullptr;
    if (kvc_status s = kvc_model_load(path.c_str(), &m); s != KVC_OK) return LastError(s);
    return Model(m);
  }
  std::vector<uint8_t> Fingerprint() const {
    std::vector<uint8_t> fp(16);
    kvc_model_fingerprint(m_.get(), fp.data());
    return fp;
  }
  Outcome<std::string> InfoJson() const {
    char* json = nullptr;
    if (kvc_status s = kvc_model_info_json(m_.get(), &json); s != KVC_OK) return LastError(s);
    return TakeString(json);
  }
  Outcome<std::vector<int32_t>> Tokenize(const std::string& text, bool add_bos) const {
    int32_t* tokens = nullptr;
    size_t n = 0;
    if (kvc_status s = kvc_model_tokenize(m_.get(), text.data(), text.size(), add_bos, &tokens, &n); s != KVC_OK)
      return LastError(s);
    std::unique_ptr<int32_t, Freer> owned(tokens);
    return std::vector<int32_t>(tokens, tokens + n);
  }
  Outcome<std::string> Detokenize(const std::vector<int32_t>& tokens) const {
    char* text = nullptr;
    if (kvc_status s = kvc_model_detokenize(m_.get(), tokens.data(), tokens.size(), &text); s != KVC_OK)
      return LastError(s);
    return TakeString(text);
  }
  bool IsEndOfGeneration(int32_t token) const { return kvc_model_is_end_of_generation(m_.get(), token) != 0; }
  const kvc_model* get() const { return m_.get(); }

 private:
  struct Deleter {
    void operator()(kvc_model* m) const { kvc_model_free(m); }
  };
  explicit Model(kvc_model* m) : m_(m) {}
  std::unique_ptr<kvc_model, Deleter> m_;
};

class Session {
 public:
  static Outcome<Session> Create(const Model& model, const kvc_session_params& params) {
    kvc_session* s = nullptr;
    if (kvc_status st = kvc_session_create(model.get(), &params, &s); st != KVC_OK) return LastError(st);
    return Session(s);
  }
  std::optional<Error> Eval(const std::vector<int32_t>& tokens) {
    if (kvc_status s = kvc_session_eval(s_.get(), tokens.data(), tokens.size()); s != KVC_OK) return LastError(s);
    return std::nullopt;
  }
  Outcome<Kv> Extract() const {
    kvc_kv* kv = nullptr;
    if (kvc_status s = kvc_session_extract(s_.get(), &kv); s != KVC_OK) return LastError(s);
    return Kv(kv);
  }
  std::optional<Error> Restore(const Kv& kv) {
    if (kvc_status s = kvc_session_restore(s_.get(), kv.get()); s != KVC_OK) return LastError(s);
    return std::nullopt;
  }
  // A copy of the last evaluated token's logits.
  Outcome<std::vector<float>> Logits() const {
    const float* logits = nullptr;
    size_t n = 0;
    if (kvc_status s = kvc_session_logits(s_.get(), &logits, &n); s != KVC_OK) return LastError(s);
    return std::vector<float>(logits, logits + n);
  }
  // Decodes a .kvc chunk of this session's model onto the end of its sequence.
  std::optional<Error> DecodeAppend(const std::vector<uint8_t>& chunk) {
    if (kvc_status s = kvc_session_decode_append(s_.get(), chunk.data(), chunk.size()); s != KVC_OK)
      return LastError(s);
    return std::nullopt;
  }
  const kvc_session* get() const { return s_.get(); }
  kvc_session* get() { return s_.get(); }

 private:
  struct Deleter {
    void operator()(kvc_session* s) const { kvc_session_free(s); }
  };
  explicit Session(kvc_session* s) : s_(s) {}
  std::unique_ptr<kvc_session, Deleter> s_;
};

class Sampler {
 public:
  static Outcome<Sampler> Create(const Model& model, const kvc_sampler_params& params) {
    kvc_sampler* s = nullptr;
    if (kvc_status st = kvc_sampler_create(model.get(), &params, &s); st != KVC_OK) return LastError(st);
    return Sampler(s);
  }
  static kvc_sampler_params Greedy() {
    kvc_sampler_params p;
    kvc_sampler_default_params(&p);
    return p;
  }
  Outcome<int32_t> Next(const Session& session) {
    int32_t token = 0;
    if (kvc_status s = kvc_sampler_next(s_.get(), session.get(), &token); s != KVC_OK) return LastError(s);
    return token;
  }

 private:
  struct Deleter {
    void operator()(kvc_sampler* s) const { kvc_sampler_free(s); }
  };
  explicit Sampler(kvc_sampler* s) : s_(s) {}
  std::unique_ptr<kvc_sampler, Deleter> s_;
};

class Store {
 public:
  // url empty: the embedded default.
  static Outcome<Store> Open(const std::string& url, const kvc_store_params* params = nullptr) {
    kvc_store_params defaults;
    kvc_store_default_params(&defaults);
    kvc_store* s = nullptr;
    if (kvc_status st = kvc_store_open(url.empty() ? nullptr : url.c_str(), params ? params : &defaults, &s);
        st != KVC_OK) {
      return LastError(st);
    }
    return Store(s);
  }
  std::optional<Error> Put(const std::string& name, const std::vector<uint8_t>& bytes) {
    if (kvc_status s = kvc_store_put(s_.get(), name.c_str(), bytes.data(), bytes.size()); s != KVC_OK)
      return LastError(s);
    return std::nullopt;
  }
  Outcome<std::vector<uint8_t>> Get(const std::string& name) {
    uint8_t* out = nullptr;
    size_t n = 0;
    if (kvc_status s = kvc_store_get(s_.get(), name.c_str(), &out, &n); s != KVC_OK) return LastError(s);
    return TakeBytes(out, n);
  }
  Outcome<bool> Exists(const std::string& name) {
    int exists = 0;
    if (kvc_status s = kvc_store_exists(s_.get(), name.c_str(), &exists); s != KVC_OK) return LastError(s);
    return exists != 0;
  }
  std::optional<Error> Delete(const std::string& name) {
    if (kvc_status s = kvc_store_delete(s_.get(), name.c_str()); s != KVC_OK) return LastError(s);
    return std::nullopt;
  }
  kvc_store* get() { return s_.get(); }

 private:
  struct Deleter {
    void operator()(kvc_store* s) const { kvc_store_free(s); }
  };
  explicit Store(kvc_store* s) : s_(s) {}
  std::unique_ptr<kvc_store, Deleter> s_;
};

inline kvc_reuse_params DefaultReuseParams() {
  kvc_reuse_params p;
  kvc_reuse_default_params(&p);
  return p;
}

// Restores the prompt's longest stored prefix into an empty session; evaluate
// tokens[result.tokens_restored..] next.
inline Outcome<kvc_reuse_result> ReuseRestore(Session& session, Store& store, const std::vector<int32_t>& tokens,
                                              const kvc_reuse_params& params = DefaultReuseParams()) {
  kvc_reuse_result result;
  if (kvc_status s = kvc_reuse_restore(session.get(), store.get(), tokens.data(), tokens.size(), &params, &result);
      s != KVC_OK) {
    return LastError(s);
  }
  return result;
}

// Stores the session's chunks from first_chunk on; the number stored.
inline Outcome<uint32_t> ReuseStore(Session& session, Store& store, const std::vector<int32_t>& tokens,
                                    uint32_t first_chunk, const kvc_reuse_params& params = DefaultReuseParams()) {
  uint32_t stored = 0;
  if (kvc_status s =
          kvc_reuse_store(session.get(), store.get(), tokens.data(), tokens.size(), first_chunk, &params, &stored);
      s != KVC_OK) {
    return LastError(s);
  }
  return stored;
}

inline Outcome<std::vector<kvc_chunk_key>> ChunkKeys(const std::vector<uint8_t>& fingerprint,
                                                     const std::vector<int32_t>& tokens, uint32_t chunk_tokens = 0) {
  if (fingerprint.size() != 16) return Error{KVC_INVALID_ARGUMENT, "a model fingerprint is 16 bytes"};
  kvc_chunk_key* keys = nullptr;
  size_t n = 0;
  if (kvc_status s = kvc_chunk_keys(fingerprint.data(), tokens.data(), tokens.size(), chunk_tokens, &keys, &n);
      s != KVC_OK) {
    return LastError(s);
  }
  std::unique_ptr<kvc_chunk_key, Freer> owned(keys);
  return std::vector<kvc_chunk_key>(keys, keys + n);
}

inline Outcome<std::string> ChunkObjectName(const kvc_chunk_key& key, const std::string& codec,
                                            const std::string& level) {
  char* name = nullptr;
  if (kvc_status s = kvc_chunk_object_name(&key, codec.c_str(), level.c_str(), &name); s != KVC_OK) return LastError(s);
  return TakeString(name);
}

inline Outcome<std::vector<uint8_t>> Encode(const Kv& kv, const std::string& codec, const std::string& level,
                                            const std::string& params, const std::vector<uint8_t>& fingerprint,
                                            uint32_t token_begin = 0, uint32_t n_tokens = 0) {
  uint8_t* out = nullptr;
  size_t n = 0;
  const uint8_t zero[16] = {};
  kvc_status s = kvc_encode(kv.get(), token_begin, n_tokens, codec.c_str(), level.empty() ? nullptr : level.c_str(),
                            params.empty() ? nullptr : params.c_str(),
                            fingerprint.size() == 16 ? fingerprint.data() : zero, &out, &n);
  if (s != KVC_OK) return LastError(s);
  return TakeBytes(out, n);
}

inline Outcome<Kv> Decode(const std::vector<uint8_t>& bytes, const std::vector<uint8_t>* expected_fingerprint) {
  kvc_kv* kv = nullptr;
  kvc_status s = kvc_decode(
      bytes.data(), bytes.size(),
      expected_fingerprint && expected_fingerprint->size() == 16 ? expected_fingerprint->data() : nullptr, &kv);
  if (s != KVC_OK) return LastError(s);
  return Kv(kv);
}

inline Outcome<Kv> KvFromLlamaState(const std::vector<uint8_t>& bytes, uint32_t n_kv_heads) {
  kvc_kv* kv = nullptr;
  if (kvc_status s = kvc_kv_from_llama_state(bytes.data(), bytes.size(), n_kv_heads, &kv); s != KVC_OK)
    return LastError(s);
  return Kv(kv);
}

inline Outcome<std::vector<uint8_t>> KvToLlamaState(const Kv& kv) {
  uint8_t* out = nullptr;
  size_t n = 0;
  if (kvc_status s = kvc_kv_to_llama_state(kv.get(), &out, &n); s != KVC_OK) return LastError(s);
  return TakeBytes(out, n);
}

// The layout kvc_kv_to_llama_state writes V in: true transposed (a context without flash
// attention), false as K (with it). kvc_kv_llama_v_trans says which caches start with which.
inline bool LlamaVTrans(const Kv& kv) { return kvc_kv_llama_v_trans(kv.get()) == 1; }
inline std::optional<Error> SetLlamaVTrans(Kv& kv, bool v_trans) {
  if (kvc_status s = kvc_kv_set_llama_v_trans(kv.get(), v_trans ? 1 : 0); s != KVC_OK) return LastError(s);
  return std::nullopt;
}
inline bool KeysOnly(const Kv& kv) { return kvc_kv_keys_only(kv.get()) != 0; }

// K or V of `shape` packed [layer][token][head][channel] in `data`, as a kvc_kv_array.
inline kvc_kv_array DenseArray(const kvc_shape& shape, void* data) {
  kvc_kv_array a{};
  a.data = data;
  a.dim_stride = 1;
  a.head_stride = shape.head_dim;
  a.token_stride = int64_t{shape.n_kv_heads} * shape.head_dim;
  a.layer_stride = a.token_stride * shape.n_tokens;
  a.size = static_cast<size_t>(a.layer_stride) * shape.n_layers * (shape.dtype == KVC_F32 ? 4 : 2);
  return a;
}

// A copy of the caller's K and V (kvc_kv_array: any strides) as a cache; v nullptr: keys alone.
inline Outcome<Kv> KvFromArrays(const kvc_shape& shape, const kvc_kv_array& k, const kvc_kv_array* v) {
  kvc_kv* kv = nullptr;
  if (kvc_status s = kvc_kv_from_arrays(&shape, &k, v, &kv); s != KVC_OK) return LastError(s);
  return Kv(kv);
}

// The cache into the caller's arrays, as `dtype`; v nullptr exactly for a cache of keys alone.
inline std::optional<Error> KvToArrays(const Kv& kv, kvc_dtype dtype, const kvc_kv_array& k, const kvc_kv_array* v) {
  if (kvc_status s = kvc_kv_to_arrays(kv.get(), dtype, &k, v); s != KVC_OK) return LastError(s);
  return std::nullopt;
}

inline Outcome<std::string> InspectJson(const std::vector<uint8_t>& bytes) {
  char* json = nullptr;
  if (kvc_status s = kvc_inspect_json(bytes.data(), bytes.size(), &json); s != KVC_OK) return LastError(s);
  return TakeString(json);
}

inline Outcome<std::string> CodecsJson() {
  char* json = nullptr;
  if (kvc_status s = kvc_codecs_json(&json); s != KVC_OK) return LastError(s);
  return TakeString(json);
}

inline std::optional<Error> LoadCalibration(const std::string& path) {
  if (kvc_status s = kvc_calibration_load(path.c_str()); s != KVC_OK) return LastError(s);
  return std::nullopt;
}

inline Outcome<std::string> QualityFloorJson(const std::string& model, const std::string& profile,
                                             const std::string& calibration, double max_ppl_delta, double min_top1) {
  char* json = nullptr;
  if (kvc_status s =
          kvc_quality_floor_json(model.c_str(), profile.empty() ? nullptr : profile.c_str(),
                                 calibration.empty() ? nullptr : calibration.c_str(), max_ppl_delta, min_top1, &json);
      s != KVC_OK) {
    return LastError(s);
  }
  return TakeString(json);
}

inline Outcome<std::string> RunJson(const kvc_run_params& params) {
  char* json = nullptr;
  if (kvc_status s = kvc_run_json(&params, &json); s != KVC_OK) return LastError(s);
  return TakeString(json);
}

}  // namespace kvcodec
