// The C API over the C++ library. Converts Status to kvc_status + a thread-local message and
// copies results into malloc'd buffers the caller frees with kvc_free().
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>

#include "base/hash.h"
#include "base/thread_pool.h"
#include "base/utf8.h"
#include "capi_support.h"
#include "codecs/codec.h"
#include "codecs/kvc_inspect.h"
#include "kv_arrays.h"
#include "kvcodec/kvcodec.h"
#include "libav/video_decoder.h"
#include "llama/chunk_state_json.h"
#include "llama/llama_session.h"
#include "llama/llama_state.h"
#include "llama/model_files.h"
#include "llama/token_sampler.h"
#include "reuse/model_profile.h"
#include "reuse/prefix_reuse.h"
#include "reuse/reuse_setup.h"
#include "reuse/run_job.h"
#include "serve/completion_server.h"
#include "store/chunk_key.h"
#include "store/store.h"
#include "transform_coding/calibration_registry.h"
#include "transform_coding/kvcal.h"

struct kvc_model {
  std::unique_ptr<kvc::LlamaModel> model;
};
struct kvc_session {
  std::unique_ptr<kvc::LlamaSession> session;
  const kvc::LlamaModel* model = nullptr;
  // The reuse path's workers, made on first use and kept: no threads started per call.
  std::unique_ptr<kvc::ThreadPool> pool;
  int32_t pool_fetch_threads = -1;
  // V untransposed in its llama.cpp state: what the caches it gives out are written back as.
  bool flash_attn = false;
};
struct kvc_store {
  std::unique_ptr<kvc::Store> store;
};
struct kvc_kv {
  kvc::KvCache cache;
  // How kvc_kv_to_llama_state lays out V: the source state's, else llama.cpp's default layout.
  bool llama_v_trans = true;
};
struct kvc_sampler {
  std::unique_ptr<kvc::TokenSampler> sampler;
  uint32_t n_vocab = 0;
};
struct kvc_server {
  std::unique_ptr<kvc::CompletionServer> server;
};

using namespace kvc::capi;  // NOLINT(google-build-using-namespace): this file is the C API

extern "C" {

const char* kvc_version(void) { return KVCODEC_VERSION; }  // project()'s, set by CMake
const char* kvc_last_error(void) { return g_last_error.c_str(); }
void kvc_free(void* p) { std::free(p); }

namespace {
// The registry's codecs live for the whole process, so their strings can be handed out as they are.
const kvc::CodecInfo* CodecInfoNamed(const char* codec) {
  if (codec == nullptr) return nullptr;
  const kvc::Codec* c = kvc::FindCodec(codec);
  return c == nullptr ? nullptr : &c->info();
}
}  // namespace

size_t kvc_codec_count(void) { return kvc::AllCodecs().size(); }

const char* kvc_codec_name(size_t index) {
  const std::vector<const kvc::Codec*> all = kvc::AllCodecs();
  return index < all.size() ? all[index]->info().name.c_str() : nullptr;
}

const char* kvc_codec_description(const char* codec) {
  const kvc::CodecInfo* info = CodecInfoNamed(codec);
  return info == nullptr ? nullptr : info->description.c_str();
}

size_t kvc_codec_level_count(const char* codec) {
  const kvc::CodecInfo* info = CodecInfoNamed(codec);
  return info == nullptr ? 0 : info->levels.size();
}

const char* kvc_codec_level(const char* codec, size_t index) {
  const kvc::CodecInfo* info = CodecInfoNamed(codec);
  return info == nullptr || index >= info->levels.size() ? nullptr : info->levels[index].c_str();
}

const char* kvc_codec_default_level(const char* codec) {
  const kvc::CodecInfo* info = CodecInfoNamed(codec);
  return info == nullptr ? nullptr : info->default_level.c_str();
}

int kvc_codec_needs_calibration(const char* codec) {
  const kvc::CodecInfo* info = CodecInfoNamed(codec);
  return info != nullptr && info->needs_calibration ? 1 : 0;
}

kvc_status kvc_codecs_json(char** out_json) {
  return Guard([&]() -> kvc_status {
    if (out_json == nullptr) return NullArgument("out_json");
    *out_json = CopyString(kvc::CodecListJson());
    return KVC_OK;
  });
}

kvc_status kvc_model_load(const char* path, kvc_model** out) {
  return Guard([&]() -> kvc_status {
    if (path == nullptr || out == nullptr) return NullArgument("path or out");
    auto model = kvc::LlamaModel::Load(path);
    if (!model.ok()) return Fail(model.status());
    *out = new kvc_model{std::move(model).value()};
    return KVC_OK;
  });
}

void kvc_model_free(kvc_model* model) {
  GuardVoid([&] { delete model; });
}

void kvc_model_fingerprint(const kvc_model* model, uint8_t out[16]) {
  if (model == nullptr || out == nullptr) return;
  std::memcpy(out, model->model->fingerprint().data(), 16);
}

kvc_status kvc_model_info_json(const kvc_model* model, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (model == nullptr || out_json == nullptr) return NullArgument("model or out_json");
    const kvc::ModelInfo& i = model->model->info();
    nlohmann::ordered_json j = {{"path", model->model->path()},
                                {"architecture", i.architecture},
                                {"n_layers", i.n_layers},
                                {"n_heads", i.n_heads},
                                {"n_kv_heads", i.n_kv_heads},
                                {"head_dim", i.head_dim},
                                {"n_vocab", i.n_vocab},
                                {"n_ctx_train", i.n_ctx_train},
                                {"rope_type", kvc::RopeTypeName(i.rope.type)},
                                {"rope_freq_base", i.rope.freq_base},
                                {"rope_n_rot", i.rope.n_rot},
                                {"rope_freq_scale", i.rope.freq_scale},
                                {"fingerprint", kvc::HexString(model->model->fingerprint())}};
    *out_json = CopyString(kvc::DumpReport(j));
    return KVC_OK;
  });
}

kvc_status kvc_model_tokenize(const kvc_model* model, const char* text, size_t len, int add_bos, int32_t** out_tokens,
                              size_t* out_n) {
  return Guard([&]() -> kvc_status {
    if (model == nullptr || text == nullptr || out_tokens == nullptr || out_n == nullptr)
      return NullArgument("argument");
    auto tokens = model->model->Tokenize(std::string_view(text, len), add_bos != 0);
    if (!tokens.ok()) return Fail(tokens.status());
    *out_tokens = reinterpret_cast<int32_t*>(
        CopyBytes(std::span(reinterpret_cast<const uint8_t*>(tokens->data()), tokens->size() * sizeof(int32_t))));
    *out_n = tokens->size();
    return KVC_OK;
  });
}

void kvc_session_default_params(kvc_session_params* params) {
  *params = kvc_session_params{};
  params->n_ctx = 2048;
  params->n_batch = 512;
  params->cache_type = KVC_F16;
}

kvc_status kvc_session_create(const kvc_model* model, const kvc_session_params* params, kvc_session** out) {
  return Guard([&]() -> kvc_status {
    if (model == nullptr || params == nullptr || out == nullptr) return NullArgument("model, params or out");
    if (!ValidDType(params->cache_type)) return Fail(kvc::InvalidArgument("invalid cache_type"));
    auto session = kvc::LlamaSession::Create(*model->model, ToSessionOptions(*params));
    if (!session.ok()) return Fail(session.status());
    auto* created = new kvc_session{std::move(session).value(), model->model.get()};
    created->flash_attn = params->flash_attn != 0;
    *out = created;
    return KVC_OK;
  });
}

void kvc_session_free(kvc_session* session) {
  GuardVoid([&] { delete session; });
}

kvc_status kvc_session_eval(kvc_session* session, const int32_t* tokens, size_t n) {
  return Guard([&]() -> kvc_status {
    if (session == nullptr || tokens == nullptr) return NullArgument("session or tokens");
    kvc::Status s = session->session->Eval(std::span(tokens, n), false);
    return s.ok() ? KVC_OK : Fail(s);
  });
}

kvc_status kvc_session_extract(const kvc_session* session, kvc_kv** out) {
  return Guard([&]() -> kvc_status {
    if (session == nullptr || out == nullptr) return NullArgument("session or out");
    auto kv = session->session->ExtractKv();
    if (!kv.ok()) return Fail(kv.status());
    *out = new kvc_kv{std::move(kv).value(), !session->flash_attn};
    return KVC_OK;
  });
}

kvc_status kvc_session_restore(kvc_session* session, const kvc_kv* kv) {
  return Guard([&]() -> kvc_status {
    if (session == nullptr || kv == nullptr) return NullArgument("session or kv");
    kvc::Status s = session->session->RestoreKv(kv->cache);
    return s.ok() ? KVC_OK : Fail(s);
  });
}

kvc_status kvc_session_logits(const kvc_session* session, const float** out_logits, size_t* out_n_vocab) {
  return Guard([&]() -> kvc_status {
    if (session == nullptr || out_logits == nullptr || out_n_vocab == nullptr) return NullArgument("argument");
    auto logits = session->session->LastLogits();
    if (!logits.ok()) return Fail(logits.status());
    *out_logits = logits->data();
    *out_n_vocab = logits->size();
    return KVC_OK;
  });
}

void kvc_sampler_default_params(kvc_sampler_params* params) {
  if (params == nullptr) return;
  const kvc::SamplingParams defaults;
  *params = kvc_sampler_params{};
  params->temperature = defaults.temperature;
  params->top_p = defaults.top_p;
  params->top_k = defaults.top_k;
  params->min_p = defaults.min_p;
  params->presence_penalty = defaults.presence_penalty;
  params->frequency_penalty = defaults.frequency_penalty;
}

}  // extern "C"

namespace {

// The one conversion of the C sampling fields (kvc_sampler_create, kvc_run_json), unchecked:
// kvc_sampler_create checks them, RunJob does for kvc_run_json. top_p 0, as in a struct of
// zeros, is "off".
kvc::SamplingParams ToSamplingParams(const kvc_sampler_params& c) {
  kvc::SamplingParams p;
  p.temperature = c.temperature;
  p.top_p = c.top_p == 0 ? 1.0f : c.top_p;
  p.top_k = c.top_k;
  p.min_p = c.min_p;
  p.presence_penalty = c.presence_penalty;
  p.frequency_penalty = c.frequency_penalty;
  if (c.has_seed != 0) p.seed = c.seed;
  return p;
}

}  // namespace

extern "C" {

kvc_status kvc_sampler_create(const kvc_model* model, const kvc_sampler_params* params, kvc_sampler** out) {
  return Guard([&]() -> kvc_status {
    if (model == nullptr || params == nullptr || out == nullptr) return NullArgument("model, params or out");
    const kvc::SamplingParams p = ToSamplingParams(*params);
    if (kvc::Status s = kvc::CheckSamplingParams(p); !s.ok()) return Fail(s);  // where they come in
    const kvc::ModelInfo& info = model->model->info();
    // Penalties count every generated token a context of the model's trained length can hold.
    auto sampler = kvc::TokenSampler::Create(p, info.n_vocab, info.n_ctx_train);
    if (!sampler.ok()) return Fail(sampler.status());
    *out = new kvc_sampler{std::move(sampler).value(), info.n_vocab};
    return KVC_OK;
  });
}

void kvc_sampler_free(kvc_sampler* sampler) {
  GuardVoid([&] { delete sampler; });
}

kvc_status kvc_sampler_next(kvc_sampler* sampler, const kvc_session* session, int32_t* out_token) {
  return Guard([&]() -> kvc_status {
    if (sampler == nullptr || session == nullptr || out_token == nullptr) return NullArgument("argument");
    auto logits = session->session->LastLogits();
    if (!logits.ok()) return Fail(logits.status());
    if (logits->size() != sampler->n_vocab) {
      return Fail(kvc::InvalidArgument("the sampler was made for a model with another vocabulary"));
    }
    *out_token = sampler->sampler->Sample(*logits);
    return KVC_OK;
  });
}

int kvc_model_is_end_of_generation(const kvc_model* model, int32_t token) {
  if (model == nullptr || token < 0 || static_cast<uint32_t>(token) >= model->model->info().n_vocab) return 0;
  return model->model->IsEndOfGeneration(token) ? 1 : 0;
}

kvc_status kvc_model_detokenize(const kvc_model* model, const int32_t* tokens, size_t n, char** out_text) {
  return Guard([&]() -> kvc_status {
    if (model == nullptr || out_text == nullptr || (tokens == nullptr && n > 0)) return NullArgument("argument");
    const uint32_t n_vocab = model->model->info().n_vocab;
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
        return Fail(kvc::InvalidArgument(
            kvc::FormatMessage("token %zu is %d, outside the vocabulary (%u)", i, tokens[i], n_vocab)));
      }
    }
    const std::string text = n == 0 ? std::string() : model->model->Detokenize(std::span(tokens, n));
    *out_text = CopyString(kvc::ToValidUtf8(text));
    return KVC_OK;
  });
}

void kvc_kv_free(kvc_kv* kv) {
  GuardVoid([&] { delete kv; });
}

void kvc_kv_shape(const kvc_kv* kv, kvc_shape* out) {
  if (out == nullptr) return;
  if (kv == nullptr) {
    *out = kvc_shape{};
    return;
  }
  const kvc::KvShape& s = kv->cache.shape();
  *out =
      kvc_shape{s.n_layers,           s.n_kv_heads, s.head_dim, s.n_tokens, static_cast<kvc_dtype>(kv->cache.dtype()),
                kv->cache.pos_begin()};
}

kvc_status kvc_kv_from_llama_state(const uint8_t* data, size_t size, uint32_t n_kv_heads, kvc_kv** out) {
  return Guard([&]() -> kvc_status {
    if (MissingInput(data, size) || out == nullptr) return NullArgument("data or out");
    kvc::LlamaStateLayout layout;
    auto kv = kvc::ParseLlamaSeqState(std::span(data, size), n_kv_heads, &layout);
    if (!kv.ok()) return Fail(kv.status());
    *out = new kvc_kv{std::move(kv).value(), layout.v_trans};
    return KVC_OK;
  });
}

kvc_status kvc_kv_to_llama_state(const kvc_kv* kv, uint8_t** out, size_t* out_size) {
  return Guard([&]() -> kvc_status {
    if (kv == nullptr || out == nullptr || out_size == nullptr) return NullArgument("argument");
    kvc::LlamaStateLayout layout;
    layout.dtype = kv->cache.dtype();
    layout.v_trans = kv->llama_v_trans;
    auto blob = kvc::BuildLlamaSeqState(kv->cache, layout);
    if (!blob.ok()) return Fail(blob.status());
    *out = CopyBytes(*blob);
    *out_size = blob->size();
    return KVC_OK;
  });
}

int kvc_kv_llama_v_trans(const kvc_kv* kv) {
  if (kv == nullptr) return -1;
  return kv->llama_v_trans ? 1 : 0;
}

kvc_status kvc_kv_set_llama_v_trans(kvc_kv* kv, int v_trans) {
  return Guard([&]() -> kvc_status {
    if (kv == nullptr) return NullArgument("kv");
    if (v_trans != 0 && v_trans != 1) {
      return Fail(kvc::InvalidArgument(kvc::FormatMessage("v_trans is %d: 0 or 1", v_trans)));
    }
    kv->llama_v_trans = v_trans == 1;
    return KVC_OK;
  });
}

int kvc_kv_keys_only(const kvc_kv* kv) { return kv != nullptr && kv->cache.shape().keys_only ? 1 : 0; }

}  // extern "C"

namespace {

// A kvc_dtype as C code may hand it over: any bits at all. Read as its underlying integer, since
// a C++ load of an enum value outside its range is itself undefined.
std::optional<kvc::DType> DTypeOf(const kvc_dtype& dtype) {
  std::underlying_type_t<kvc_dtype> raw;
  std::memcpy(&raw, &dtype, sizeof raw);
  const auto value = static_cast<int64_t>(raw);
  if (value < KVC_F32 || value > KVC_BF16) return std::nullopt;
  return static_cast<kvc::DType>(value);
}

kvc::Status UnknownDType(const char* what, const kvc_dtype& dtype) {
  std::underlying_type_t<kvc_dtype> raw;
  std::memcpy(&raw, &dtype, sizeof raw);
  return kvc::InvalidArgument(kvc::FormatMessage("%s %lld is not a kvc_dtype (KVC_F32, KVC_F16 or KVC_BF16)", what,
                                                 static_cast<long long>(raw)));
}

}  // namespace

extern "C" {

kvc_status kvc_kv_from_arrays(const kvc_shape* shape, const kvc_kv_array* k, const kvc_kv_array* v, kvc_kv** out) {
  return Guard([&]() -> kvc_status {
    if (shape == nullptr || k == nullptr || out == nullptr) return NullArgument("shape, k or out");
    const std::optional<kvc::DType> dtype = DTypeOf(shape->dtype);
    if (!dtype) return Fail(UnknownDType("shape.dtype", shape->dtype));
    kvc::KvShape s{shape->n_layers, shape->n_kv_heads, shape->head_dim, shape->n_tokens};
    s.keys_only = v == nullptr;
    // A cache of no tokens encodes to nothing and restores nothing: the caller's mistake.
    if (s.n_tokens == 0) return Fail(kvc::InvalidArgument("shape.n_tokens is 0"));
    if (kvc::Status valid = kvc::ValidateShape(s, *dtype); !valid.ok()) return Fail(valid.WithContext("shape"));
    if (shape->pos_begin < 0) {
      return Fail(kvc::InvalidArgument(
          kvc::FormatMessage("shape.pos_begin is %d: positions start at 0 or later", shape->pos_begin)));
    }
    if (int64_t{shape->pos_begin} + s.n_tokens > INT32_MAX) {
      return Fail(
          kvc::InvalidArgument(kvc::FormatMessage("positions [%d, +%u) overflow int32", shape->pos_begin, s.n_tokens)));
    }
    const size_t elem = kvc::DTypeSize(*dtype);
    auto k_layout = CheckArray("k", *k, s, elem, /*writing=*/false);
    if (!k_layout.ok()) return Fail(k_layout.status());
    std::optional<ArrayLayout> v_layout;
    if (v != nullptr) {
      auto checked = CheckArray("v", *v, s, elem, /*writing=*/false);
      if (!checked.ok()) return Fail(checked.status());
      v_layout = std::move(checked).value();
    }
    auto cache = kvc::KvCache::CreateForOverwrite(s, *dtype, shape->pos_begin);  // every value written below
    if (!cache.ok()) return Fail(cache.status());
    CopyIntoCache(*k_layout, kvc::KvKind::kKey, &*cache);
    if (v_layout) CopyIntoCache(*v_layout, kvc::KvKind::kValue, &*cache);
    *out = new kvc_kv{std::move(cache).value()};
    return KVC_OK;
  });
}

kvc_status kvc_kv_to_arrays(const kvc_kv* kv, kvc_dtype dtype, const kvc_kv_array* k, const kvc_kv_array* v) {
  return Guard([&]() -> kvc_status {
    if (kv == nullptr || k == nullptr) return NullArgument("kv or k");
    const std::optional<kvc::DType> to = DTypeOf(dtype);
    if (!to) return Fail(UnknownDType("dtype", dtype));
    const kvc::KvShape& s = kv->cache.shape();
    if (s.keys_only && v != nullptr) return Fail(kvc::InvalidArgument("v is given, but the cache holds keys alone"));
    if (!s.keys_only && v == nullptr) return Fail(kvc::InvalidArgument("v is NULL, but the cache holds V"));
    const size_t elem = kvc::DTypeSize(*to);
    auto k_layout = CheckArray("k", *k, s, elem, /*writing=*/true);
    if (!k_layout.ok()) return Fail(k_layout.status());
    std::optional<ArrayLayout> v_layout;
    if (v != nullptr) {
      auto checked = CheckArray("v", *v, s, elem, /*writing=*/true);
      if (!checked.ok()) return Fail(checked.status());
      if (kvc::Status distinct = CheckDistinct(*k_layout, *checked); !distinct.ok()) return Fail(distinct);
      v_layout = std::move(checked).value();
    }
    // Converted before the first write, so a failure (memory) leaves the arrays untouched.
    std::optional<kvc::KvCache> converted;
    if (*to != kv->cache.dtype()) {
      auto c = kv->cache.ConvertTo(*to);
      if (!c.ok()) return Fail(c.status());
      converted = std::move(c).value();
    }
    const kvc::KvCache& source = converted ? *converted : kv->cache;
    CopyFromCache(source, kvc::KvKind::kKey, *k_layout);
    if (v_layout) CopyFromCache(source, kvc::KvKind::kValue, *v_layout);
    return KVC_OK;
  });
}

kvc_status kvc_encode(const kvc_kv* kv, uint32_t token_begin, uint32_t n_tokens, const char* codec_name,
                      const char* level, const char* codec_params, const uint8_t fingerprint[16], uint8_t** out,
                      size_t* out_size) {
  return Guard([&]() -> kvc_status {
    if (kv == nullptr || codec_name == nullptr || fingerprint == nullptr || out == nullptr || out_size == nullptr) {
      return NullArgument("argument");
    }
    const kvc::Codec* codec = kvc::FindCodec(codec_name);
    if (codec == nullptr) return Fail(kvc::InvalidArgument(std::string("unknown codec '") + codec_name + "'"));
    const uint32_t total = kv->cache.shape().n_tokens;
    if (token_begin > total) return Fail(kvc::InvalidArgument("token_begin beyond the cache"));
    auto view = kv->cache.View(token_begin, n_tokens == 0 ? total - token_begin : n_tokens);
    if (!view.ok()) return Fail(view.status());
    kvc::EncodeOptions options;
    if (level != nullptr) options.level = level;
    auto params = ParseParams(codec_params);
    if (!params.ok()) return Fail(params.status());
    options.params = std::move(params).value();
    kvc::ModelFingerprint fp;
    std::memcpy(fp.data(), fingerprint, 16);
    const kvc::CodecContext context{&Calibrations(), &fp, nullptr};
    auto bytes = kvc::EncodeKvc(*codec, *view, options, fp, token_begin, context);
    if (!bytes.ok()) return Fail(bytes.status());
    *out = CopyBytes(*bytes);
    *out_size = bytes->size();
    return KVC_OK;
  });
}

kvc_status kvc_decode(const uint8_t* data, size_t size, const uint8_t* expected_fingerprint, kvc_kv** out) {
  return Guard([&]() -> kvc_status {
    if (MissingInput(data, size) || out == nullptr) return NullArgument("data or out");
    kvc::ModelFingerprint fp;
    if (expected_fingerprint != nullptr) std::memcpy(fp.data(), expected_fingerprint, 16);
    const kvc::CodecContext context{&Calibrations(), expected_fingerprint ? &fp : nullptr, nullptr};
    auto kv = kvc::DecodeKvc(std::span(data, size), expected_fingerprint ? &fp : nullptr, context);
    if (!kv.ok()) return Fail(kv.status());
    *out = new kvc_kv{std::move(kv).value()};
    return KVC_OK;
  });
}

kvc_status kvc_session_decode_append(kvc_session* session, const uint8_t* data, size_t size) {
  return Guard([&]() -> kvc_status {
    if (session == nullptr || MissingInput(data, size)) return NullArgument("session or data");
    const kvc::ModelFingerprint& fp = session->model->fingerprint();
    const kvc::CodecContext context{&Calibrations(), &fp, nullptr};
    auto kv = kvc::DecodeKvc(std::span(data, size), &fp, context);
    if (!kv.ok()) return Fail(kv.status());
    kvc::Status s = session->session->AppendKv(kv->View());
    return s.ok() ? KVC_OK : Fail(s);
  });
}

void kvc_store_default_params(kvc_store_params* params) {
  if (params == nullptr) return;
  const kvc::StoreOptions defaults;
  *params = kvc_store_params{};
  params->capacity_bytes = defaults.capacity_bytes;
  params->timeout_ms = defaults.timeout_ms;
}

kvc_status kvc_store_open(const char* url, const kvc_store_params* params, kvc_store** out) {
  return Guard([&]() -> kvc_status {
    if (params == nullptr || out == nullptr) return NullArgument("params or out");
    kvc::StoreOptions options;
    options.capacity_bytes = params->capacity_bytes;
    if (params->timeout_ms != 0) options.timeout_ms = params->timeout_ms;
    if (params->secret != nullptr) options.secret = params->secret;
    auto store = kvc::OpenStore(url == nullptr ? kvc::DefaultStoreUrl() : std::string(url), options);
    if (!store.ok()) return Fail(store.status());
    *out = new kvc_store{std::move(store).value()};
    return KVC_OK;
  });
}

void kvc_store_free(kvc_store* store) {
  GuardVoid([&] { delete store; });
}

kvc_status kvc_store_put(kvc_store* store, const char* name, const uint8_t* data, size_t size) {
  return Guard([&]() -> kvc_status {
    if (store == nullptr || name == nullptr || MissingInput(data, size)) return NullArgument("store, name or data");
    kvc::Status s = store->store->Put(name, std::span(data, size));
    return s.ok() ? KVC_OK : Fail(s);
  });
}

kvc_status kvc_store_get(kvc_store* store, const char* name, uint8_t** out, size_t* out_size) {
  return Guard([&]() -> kvc_status {
    if (store == nullptr || name == nullptr || out == nullptr || out_size == nullptr) return NullArgument("argument");
    auto bytes = store->store->Get(name);
    if (!bytes.ok()) return Fail(bytes.status());
    *out = CopyBytes(*bytes);
    *out_size = bytes->size();
    return KVC_OK;
  });
}

kvc_status kvc_store_exists(kvc_store* store, const char* name, int* out_exists) {
  return Guard([&]() -> kvc_status {
    if (store == nullptr || name == nullptr || out_exists == nullptr) return NullArgument("argument");
    auto exists = store->store->Exists(name);
    if (!exists.ok()) return Fail(exists.status());
    *out_exists = *exists ? 1 : 0;
    return KVC_OK;
  });
}

kvc_status kvc_store_delete(kvc_store* store, const char* name) {
  return Guard([&]() -> kvc_status {
    if (store == nullptr || name == nullptr) return NullArgument("store or name");
    kvc::Status s = store->store->Delete(name);
    return s.ok() ? KVC_OK : Fail(s);
  });
}

kvc_status kvc_chunk_keys(const uint8_t fingerprint[16], const int32_t* tokens, size_t n_tokens, uint32_t chunk_tokens,
                          kvc_chunk_key** out_keys, size_t* out_n) {
  return Guard([&]() -> kvc_status {
    if (fingerprint == nullptr || (tokens == nullptr && n_tokens > 0) || out_keys == nullptr || out_n == nullptr) {
      return NullArgument("argument");
    }
    kvc::ModelFingerprint fp;
    std::memcpy(fp.data(), fingerprint, fp.size());
    const std::vector<kvc::ChunkKey> keys =
        kvc::ChunkKeys(fp, std::span(tokens, n_tokens), chunk_tokens == 0 ? kvc::kDefaultChunkTokens : chunk_tokens);
    static_assert(sizeof(kvc_chunk_key) == sizeof(kvc::ChunkKey));
    *out_keys = reinterpret_cast<kvc_chunk_key*>(
        CopyBytes(std::span(reinterpret_cast<const uint8_t*>(keys.data()), keys.size() * sizeof(kvc::ChunkKey))));
    *out_n = keys.size();
    return KVC_OK;
  });
}

kvc_status kvc_chunk_object_name(const kvc_chunk_key* key, const char* codec, const char* level, char** out_name) {
  return Guard([&]() -> kvc_status {
    if (key == nullptr || codec == nullptr || level == nullptr || out_name == nullptr) return NullArgument("argument");
    kvc::ChunkKey k;
    std::memcpy(k.data(), key->bytes, k.size());
    const std::string name = kvc::ChunkObjectName(k, codec, level);
    if (kvc::Status s = kvc::CheckObjectName(name); !s.ok()) return Fail(s);
    *out_name = CopyString(name);
    return KVC_OK;
  });
}

void kvc_reuse_default_params(kvc_reuse_params* params) {
  if (params == nullptr) return;
  *params = kvc_reuse_params{};
  params->chunk_tokens = kvc::kDefaultChunkTokens;
  SetDefaultQuality(params);
}

namespace {

kvc::ThreadPool& SessionPool(kvc_session& session, int32_t fetch_threads) {
  if (session.pool == nullptr || session.pool_fetch_threads != fetch_threads) {
    session.pool = std::make_unique<kvc::ThreadPool>(kvc::FetchPoolThreads(fetch_threads));
    session.pool_fetch_threads = fetch_threads;
  }
  return *session.pool;
}

// What both halves of the reuse path start from: the arguments checked (once, by the reuse
// set-up), the chunk size, the prompt's reusable chunk keys, the model's quality floor and, for
// a store, what new chunks are stored as.
struct ReuseInputs {
  uint32_t chunk_tokens = 0;
  std::vector<kvc::ChunkKey> keys;
  kvc::ReusePlan plan;
  std::span<const int32_t> tokens;
  // Every token but the last, whose logits give the first generated token: whole chunks and a tail.
  std::span<const int32_t> Reusable() const { return tokens.first(tokens.empty() ? 0 : tokens.size() - 1); }
};

// `codec`: what new chunks are stored as (kvc_reuse_store; NULL or "": kvtc where a calibration
// for the model is loaded, quant otherwise); nullopt: nothing is stored (kvc_reuse_restore).
kvc::Result<ReuseInputs> PrepareReuse(const kvc::LlamaModel& model, const kvc_reuse_params& p, const int32_t* tokens,
                                      size_t n_tokens, std::optional<const char*> codec) {
  if (tokens == nullptr && n_tokens > 0) return kvc::InvalidArgument("tokens is NULL");
  if (!(p.recompute_chunk_s >= 0) || !std::isfinite(p.recompute_chunk_s)) {
    return kvc::InvalidArgument("recompute_chunk_s must be a finite, non-negative number of seconds");
  }
  kvc::ReuseSetupOptions o;
  o.codec.clear();
  if (codec.has_value()) {
    o.codec = *codec != nullptr ? *codec : "";
    if (o.codec.empty()) o.codec = Calibrations().FindForModel(model.fingerprint()) != nullptr ? "kvtc" : "quant";
  }
  if (p.profile_path != nullptr) o.profile = p.profile_path;
  o.quality = ToQualityLimits(p.max_ppl_delta, p.min_top1);
  o.chunk_tokens = p.chunk_tokens == 0 ? kvc::kDefaultChunkTokens : p.chunk_tokens;
  o.link_gbps = p.link_gbps;
  o.fetch_threads = p.fetch_threads;
  ReuseInputs in;
  ASSIGN_OR_RETURN(in.plan, kvc::PlanReuse(model, Calibrations(), o));
  in.chunk_tokens = o.chunk_tokens;
  in.tokens = std::span(tokens, n_tokens);
  in.keys = kvc::ReusableChunkKeys(model.fingerprint(), in.tokens, in.chunk_tokens);
  return in;
}

}  // namespace

kvc_status kvc_reuse_restore(kvc_session* session, kvc_store* store, const int32_t* tokens, size_t n_tokens,
                             const kvc_reuse_params* params, kvc_reuse_result* out) {
  return Guard([&]() -> kvc_status {
    if (session == nullptr || store == nullptr || params == nullptr || out == nullptr) return NullArgument("argument");
    if (session->session->n_cached() != 0) return Fail(kvc::InvalidArgument("reuse restores into an empty session"));
    const kvc::LlamaModel& model = *session->model;
    auto in = PrepareReuse(model, *params, tokens, n_tokens, std::nullopt);
    if (!in.ok()) return Fail(in.status());
    const uint32_t chunk_tokens = in->chunk_tokens;
    kvc::LinkShaper link(kvc::LinkShaper::GbpsToBytesPerSecond(params->link_gbps));
    kvc::FetchOptions options = kvc::ReuseFetchOptions(params->link_gbps, params->recompute_chunk_s, chunk_tokens,
                                                       model.info(), in->plan.floor, *store->store);
    options.pool = &SessionPool(*session, params->fetch_threads);
    const kvc::CodecContext context{&Calibrations(), &model.fingerprint(), nullptr};
    auto restored = kvc::RestoreStoredPrefix(*store->store, *session->session, model.fingerprint(), in->keys,
                                             in->Reusable(), chunk_tokens, context, link, options);
    if (!restored.ok()) {
      session->session->Clear();  // a refused restore leaves nothing trustworthy behind
      return Fail(restored.status());
    }
    const kvc::PrefixRestore& r = *restored;
    *out = kvc_reuse_result{};
    out->chunks_found = r.chunks_found;
    out->chunks_restored = r.chunks_fetched;
    out->tokens_restored = r.chunks_fetched * chunk_tokens + r.tail_tokens;
    out->damaged = r.damaged ? 1 : 0;
    out->bytes_fetched = r.bytes;
    out->lookup_s = r.lookup_s;
    out->fetch_s = r.fetch_s;
    out->decode_s = r.decode_s;
    out->restore_s = r.restore_s;
    return KVC_OK;
  });
}

kvc_status kvc_reuse_store(kvc_session* session, kvc_store* store, const int32_t* tokens, size_t n_tokens,
                           uint32_t first_chunk, const kvc_reuse_params* params, uint32_t* out_chunks_stored) {
  return Guard([&]() -> kvc_status {
    if (session == nullptr || store == nullptr || params == nullptr || out_chunks_stored == nullptr) {
      return NullArgument("argument");
    }
    const kvc::LlamaModel& model = *session->model;
    auto in = PrepareReuse(model, *params, tokens, n_tokens, params->codec);
    if (!in.ok()) return Fail(in.status());
    const uint32_t chunk_tokens = in->chunk_tokens;
    const std::vector<kvc::ChunkKey>& keys = in->keys;
    if (static_cast<uint64_t>(keys.size()) * chunk_tokens > session->session->n_cached()) {
      return Fail(kvc::InvalidArgument(
          kvc::FormatMessage("the session holds %u tokens, fewer than the %zu chunks of the tokens given",
                             session->session->n_cached(), keys.size())));
    }
    *out_chunks_stored = 0;
    // The reusable tokens the session holds: whole chunks, then a tail.
    const std::span<const int32_t> held =
        in->Reusable().first(std::min<size_t>(in->Reusable().size(), session->session->n_cached()));
    if (first_chunk >= keys.size() && held.size() == keys.size() * chunk_tokens) return KVC_OK;
    const kvc::CodecContext context{&Calibrations(), &model.fingerprint(),
                                    &SessionPool(*session, params->fetch_threads)};
    auto stored = kvc::StoreSessionChunks(*store->store, *session->session, held, held.size(),
                                          std::min<uint32_t>(first_chunk, static_cast<uint32_t>(keys.size())),
                                          chunk_tokens, in->plan.rungs, model.fingerprint(), context);
    if (!stored.ok()) return Fail(stored.status());
    *out_chunks_stored = stored->chunks;
    return KVC_OK;
  });
}

kvc_status kvc_inspect_json(const uint8_t* data, size_t size, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (MissingInput(data, size) || out_json == nullptr) return NullArgument("data or out_json");
    // A state chunk object (its token object or its boundary object) by its magic, else a .kvc.
    const std::span<const uint8_t> bytes(data, size);
    auto report = kvc::LooksLikeChunkState(bytes) ? kvc::InspectChunkStateJson(bytes) : kvc::InspectKvcJson(bytes);
    if (!report.ok()) return Fail(report.status());
    *out_json = CopyString(*report);
    return KVC_OK;
  });
}

kvc_status kvc_calibration_load(const char* path) {
  return Guard([&]() -> kvc_status {
    if (path == nullptr) return NullArgument("path");
    auto loaded = Calibrations().Load(path);
    return loaded.ok() ? KVC_OK : Fail(loaded.status());
  });
}

kvc_status kvc_set_video_decoder(const char* name) {
  return Guard([&]() -> kvc_status {
    if (name == nullptr) return NullArgument("name");
    const kvc::Status s = kvc::SetDefaultVideoDecoder(name);
    return s.ok() ? KVC_OK : Fail(s);
  });
}

kvc_status kvc_quality_floor_json(const char* model_path, const char* profile_path, const char* calibration,
                                  double max_ppl_delta, double min_top1, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (model_path == nullptr || out_json == nullptr) return NullArgument("model or out");
    kvc::ReuseSetupOptions o;
    o.model_path = model_path;
    if (calibration != nullptr) o.calibration = calibration;
    if (profile_path != nullptr) o.profile = profile_path;
    o.quality = ToQualityLimits(max_ppl_delta, min_top1);
    o.codec.clear();       // the floor alone
    o.require_kv = false;  // a model that keeps no KV has a floor too: raw, and nothing to store
    auto setup = kvc::SetUpReuse(o);
    if (!setup.ok()) return Fail(setup.status());
    const kvc::QualityLimits& limits = o.quality;
    const kvc::QualityFloor* floor = &setup->plan.floor;
    nlohmann::ordered_json j;
    j["model"] = model_path;
    j["max_ppl_delta"] = limits.max_ppl_delta;
    j["min_top1"] = limits.min_top1;
    j["from_profile"] = floor->from_profile();
    j["note"] = floor->note;
    j["allowed"] = nlohmann::ordered_json::array();
    for (const auto& [codec, level] : floor->allowed) j["allowed"].push_back(codec + "/" + level);
    j["profile"] =
        floor->profile ? nlohmann::ordered_json::parse(kvc::WriteProfile(*floor->profile)) : nlohmann::ordered_json();
    *out_json = CopyString(kvc::DumpReport(j));
    return KVC_OK;
  });
}

void kvc_run_default_params(kvc_run_params* params) {
  if (params == nullptr) return;
  static const kvc::RunOptions defaults;  // its strings outlive every caller's struct
  *params = kvc_run_params{};
  params->codec = defaults.codec.c_str();
  params->chunk_tokens = defaults.chunk_tokens;
  params->n_generate = defaults.n_generate;
  params->n_threads = defaults.threads;
  params->n_fetch_threads = defaults.fetch_threads;
  SetDefaultQuality(params);
  kvc_sampler_default_params(&params->sampling);
}

}  // extern "C"

namespace {

// Only what is the C API's own is checked here (the pointers and the token count behind them);
// RunJob checks every option once, before it loads anything.
kvc::Result<std::string> RunJsonReport(const kvc_run_params* p) {
  if ((p->prompt == nullptr) == (p->prompt_tokens == nullptr)) {
    return kvc::InvalidArgument("give the prompt as text or as token ids, one of them");
  }
  if (p->prompt_tokens != nullptr && (p->n_prompt_tokens == 0 || p->n_prompt_tokens > kvc::kMaxTokens)) {
    return kvc::InvalidArgument("the prompt's token count is out of range");
  }
  kvc::RunOptions o;
  o.model_path = p->model_path;
  if (p->prompt != nullptr) o.prompt = p->prompt;
  if (p->prompt_tokens != nullptr) o.prompt_tokens.assign(p->prompt_tokens, p->prompt_tokens + p->n_prompt_tokens);
  if (p->store_url) o.store_url = p->store_url;
  if (p->codec) o.codec = p->codec;
  o.levels = SplitList(p->levels);
  if (p->calibration) o.calibration = p->calibration;
  o.link_gbps = p->link_gbps;
  if (p->chunk_tokens) o.chunk_tokens = p->chunk_tokens;
  o.n_generate = p->n_generate;
  o.threads = p->n_threads;
  o.store_new_chunks = p->no_store == 0;
  o.reuse = p->no_reuse == 0;
  o.plan_recompute = p->always_fetch == 0;
  SetQuality(p, &o.profile, &o.quality);
  if (p->store_secret) o.store_secret = p->store_secret;
  o.sampling = ToSamplingParams(p->sampling);
  o.fetch_threads = p->n_fetch_threads;
  ASSIGN_OR_RETURN(const kvc::RunReport report, kvc::RunJob(o));
  return kvc::RunReportJson(report);
}

}  // namespace

extern "C" {

kvc_status kvc_run_json(const kvc_run_params* p, char** out_json) { return JsonTool(p, out_json, RunJsonReport); }

void kvc_serve_default_params(kvc_serve_params* params) {
  if (params == nullptr) return;
  static const kvc::ServerOptions defaults;  // its strings outlive every caller's struct
  *params = kvc_serve_params{};
  params->codec = defaults.codec.c_str();
  params->host = defaults.host.c_str();
  params->port = defaults.port;
  params->n_ctx = defaults.n_ctx;
  params->default_max_tokens = defaults.default_max_tokens;
  params->n_threads = defaults.threads;
  params->n_parallel = defaults.parallel;
  params->n_fetch_threads = defaults.fetch_threads;
  params->scheduler = "kv-aware";
  params->max_body_bytes = defaults.max_body_bytes;
  params->request_timeout_s = defaults.request_timeout_s;
  params->max_connections = defaults.max_connections;
  SetDefaultQuality(params);
}

kvc_status kvc_server_create(const kvc_serve_params* p, kvc_server** out) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out == nullptr) return NullArgument("params, model or out");
    kvc::ServerOptions o;
    o.model_path = p->model_path;
    if (p->store_url) o.store_url = p->store_url;
    if (p->codec) o.codec = p->codec;
    if (p->calibration) o.calibration = p->calibration;
    if (p->host) o.host = p->host;
    if (p->port < 0 || p->port > 65535) return Fail(kvc::InvalidArgument("port outside 0..65535"));
    o.port = p->port;
    o.link_gbps = p->link_gbps;  // it and the other reuse options: checked by the server's reuse set-up
    if (p->n_ctx) o.n_ctx = p->n_ctx;
    if (p->default_max_tokens) o.default_max_tokens = p->default_max_tokens;
    o.threads = p->n_threads;
    if (p->n_parallel) o.parallel = p->n_parallel;
    if (p->n_fetch_threads) o.fetch_threads = p->n_fetch_threads;
    if (p->scheduler) {
      auto scheduler = kvc::ParseScheduler(p->scheduler);
      if (!scheduler.ok()) return Fail(scheduler.status());
      o.scheduler = *scheduler;
    }
    o.reuse = p->no_reuse == 0;
    SetQuality(p, &o.profile, &o.quality);
    if (p->store_secret) o.store_secret = p->store_secret;
    if (p->request_timeout_s < 0 || p->max_connections < 0) {
      return Fail(kvc::InvalidArgument("request timeout and max connections must not be negative"));
    }
    if (p->max_body_bytes) o.max_body_bytes = static_cast<size_t>(p->max_body_bytes);
    if (p->request_timeout_s > 0) o.request_timeout_s = p->request_timeout_s;
    if (p->max_connections) o.max_connections = p->max_connections;
    if (p->alias) o.alias = p->alias;
    if (p->chat_template) o.chat_template = p->chat_template;
    if (p->api_key) o.api_key = p->api_key;
    if (p->metrics_key) o.metrics_key = p->metrics_key;
    auto server = kvc::CompletionServer::Create(o);
    if (!server.ok()) return Fail(server.status());
    *out = new kvc_server{std::move(*server)};
    return KVC_OK;
  });
}

kvc_status kvc_server_start(kvc_server* server) {
  return Guard([&]() -> kvc_status {
    if (server == nullptr) return NullArgument("server");
    if (kvc::Status s = server->server->Start(); !s.ok()) return Fail(s);
    return KVC_OK;
  });
}

int32_t kvc_server_port(const kvc_server* server) { return server == nullptr ? -1 : server->server->port(); }

void kvc_server_stop(kvc_server* server) {
  GuardVoid([&] {
    if (server != nullptr) server->server->Stop();
  });
}

void kvc_server_free(kvc_server* server) {
  GuardVoid([&] { delete server; });
}

}  // extern "C"
