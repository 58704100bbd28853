/* kvcodec public C API: compress, store and restore LLM KV caches.
 *
 * Opaque handles, plain C types, no exceptions. Every function that can fail returns a
 * kvc_status; on failure kvc_last_error() gives a one-line message for the calling thread.
 * Buffers and strings the library allocates are released with kvc_free().
 *
 * Compatibility: while KVC_VERSION_MAJOR is 0, a minor release may change this API and its ABI;
 * the library's SONAME carries major.minor (libkvcodec.so.0.1), so a program is never loaded
 * against another minor's library. Within one minor, patch releases keep both. The numbers of
 * kvc_status and kvc_dtype values are stable: a value never changes meaning, new ones may be
 * added; messages (kvc_last_error) are for people and may change. */
#ifndef KVCODEC_H
#define KVCODEC_H

/* The version this header belongs to; kvc_version() gives the library's. */
#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 1
#define KVC_VERSION_PATCH 0
#define KVC_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>

/* Only what is marked KVC_API leaves libkvcodec.so: the library is built with
 * -fvisibility=hidden and a version script that exports kvc_* alone. */
#if defined(KVCODEC_BUILDING_LIBRARY) && defined(__GNUC__)
#define KVC_API __attribute__((visibility("default")))
#else
#define KVC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvc_status {
  KVC_OK = 0,
  KVC_INVALID_ARGUMENT = 1,
  KVC_CORRUPT = 2,
  KVC_UNSUPPORTED = 3,
  KVC_NOT_FOUND = 4,
  KVC_IO_ERROR = 5,
  KVC_INTERNAL = 6
} kvc_status;

typedef enum kvc_dtype { KVC_F32 = 0, KVC_F16 = 1, KVC_BF16 = 2 } kvc_dtype;

typedef struct kvc_model kvc_model;     /* a loaded GGUF model */
typedef struct kvc_session kvc_session; /* one llama.cpp context evaluating one sequence */
typedef struct kvc_kv kvc_kv;           /* a KV cache: layers x tokens x kv_heads x head_dim, K and V */

typedef struct kvc_shape {
  uint32_t n_layers, n_kv_heads, head_dim, n_tokens;
  kvc_dtype dtype;
  int32_t pos_begin;
} kvc_shape;

typedef struct kvc_session_params {
  uint32_t n_ctx;    /* 0: 2048 */
  uint32_t n_batch;  /* 0: 512 */
  int32_t n_threads; /* 0: all cores */
  kvc_dtype cache_type;
  int flash_attn;
} kvc_session_params;

/* The quality floor a request gets for a model: its profile (profile_path, or <model>.kvprof.json
 * beside it), the rungs within max_ppl_delta (percent; <= 0: 1.0) and min_top1 (<= 0: 0.97), and a
 * note on how it was decided (JSON, caller frees). */
KVC_API kvc_status kvc_quality_floor_json(const char* model_path, const char* profile_path, const char* calibration,
                                          double max_ppl_delta, double min_top1, char** out_json);

/* The library's version, "major.minor.patch" (the library's own string, never freed). */
KVC_API const char* kvc_version(void);
/* The message of the calling thread's last failed call, one line ("" before any); valid
 * until that thread's next call into the library. */
KVC_API const char* kvc_last_error(void);
/* Frees what the library allocated for the caller (JSON, text, byte buffers, token arrays);
 * NULL is ignored. Handles have their own kvc_*_free. */
KVC_API void kvc_free(void* p);

/* The codecs, by index 0..kvc_codec_count()-1; the strings are the library's own (never freed).
 * Past the end, or an unknown codec or level index: NULL (or 0 for the counts). */
KVC_API size_t kvc_codec_count(void);
KVC_API const char* kvc_codec_name(size_t index);
KVC_API const char* kvc_codec_description(const char* codec);
/* Levels best quality first, and the default one. */
KVC_API size_t kvc_codec_level_count(const char* codec);
KVC_API const char* kvc_codec_level(const char* codec, size_t index);
KVC_API const char* kvc_codec_default_level(const char* codec);
/* Non-zero when the codec encodes and decodes only with a calibration loaded (kvtc). */
KVC_API int kvc_codec_needs_calibration(const char* codec);
/* Codecs and their levels as a JSON array (caller frees). */
KVC_API kvc_status kvc_codecs_json(char** out_json);

/* Loads a GGUF model (*out is the caller's until kvc_model_free; NULL is ignored there). */
KVC_API kvc_status kvc_model_load(const char* path, kvc_model** out);
KVC_API void kvc_model_free(kvc_model* model);
/* The 16 bytes that bind .kvc files, calibrations and stored chunks to this model. */
KVC_API void kvc_model_fingerprint(const kvc_model* model, uint8_t out[16]);
/* Model shape and metadata as a JSON object (caller frees). */
KVC_API kvc_status kvc_model_info_json(const kvc_model* model, char** out_json);
/* Tokenizes len bytes of text (a BOS first when add_bos is non-zero and the model has one);
 * *out_tokens is the caller's (kvc_free). A model without a tokenizer is refused. */
KVC_API kvc_status kvc_model_tokenize(const kvc_model* model, const char* text, size_t len, int add_bos,
                                      int32_t** out_tokens, size_t* out_n);

/* A llama.cpp context of the model for one sequence. The model must outlive the session. */
KVC_API void kvc_session_default_params(kvc_session_params* params);
KVC_API kvc_status kvc_session_create(const kvc_model* model, const kvc_session_params* params, kvc_session** out);
KVC_API void kvc_session_free(kvc_session* session);
/* Appends n tokens to the sequence (token ids below the model's vocabulary size). */
KVC_API kvc_status kvc_session_eval(kvc_session* session, const int32_t* tokens, size_t n);
/* The sequence's KV cache as a new kvc_kv (the caller's: kvc_kv_free). A model whose memory is
 * not one KV cache of uniform layers (sliding window, MLA, recurrent) is KVC_UNSUPPORTED. */
KVC_API kvc_status kvc_session_extract(const kvc_session* session, kvc_kv** out);
/* Replaces the sequence with the cache (the model's geometry); the next eval continues after it. */
KVC_API kvc_status kvc_session_restore(kvc_session* session, const kvc_kv* kv);
/* The logits (n_vocab floats) of the last token of the last kvc_session_eval. The pointer stays
 * valid until the next call that changes the session; fails when no eval has run since the
 * session was created or restored, or the last one failed. */
KVC_API kvc_status kvc_session_logits(const kvc_session* session, const float** out_logits, size_t* out_n_vocab);

/* Choosing the next token from a session's logits. The defaults are greedy decoding. */
typedef struct kvc_sampler kvc_sampler; /* one generated sequence's sampler (its penalties and draw) */
typedef struct kvc_sampler_params {
  float temperature;       /* 0: greedy (the rest is ignored); at most 2 */
  float top_p;             /* (0, 1]; 1: off */
  int32_t top_k;           /* 0: off */
  float min_p;             /* 0: off */
  float presence_penalty;  /* -2..2 */
  float frequency_penalty; /* -2..2 */
  int has_seed;            /* non-zero: draws repeat for the same seed */
  uint64_t seed;
} kvc_sampler_params;
/* Greedy defaults; create checks every field's range (KVC_INVALID_ARGUMENT naming it). */
KVC_API void kvc_sampler_default_params(kvc_sampler_params* params);
KVC_API kvc_status kvc_sampler_create(const kvc_model* model, const kvc_sampler_params* params, kvc_sampler** out);
KVC_API void kvc_sampler_free(kvc_sampler* sampler);
/* The next token from the session's last logits (kvc_session_logits); it then counts as generated. */
KVC_API kvc_status kvc_sampler_next(kvc_sampler* sampler, const kvc_session* session, int32_t* out_token);
/* Non-zero for a token that ends generation (end of sequence, end of turn). */
KVC_API int kvc_model_is_end_of_generation(const kvc_model* model, int32_t token);
/* Tokens as text (caller frees). Bytes that are not valid UTF-8 (a character split over
 * byte-fallback tokens, cut at the end) become U+FFFD, so the text is always valid UTF-8. */
KVC_API kvc_status kvc_model_detokenize(const kvc_model* model, const int32_t* tokens, size_t n, char** out_text);

/* A kvc_kv is the caller's once returned; NULL is ignored. */
KVC_API void kvc_kv_free(kvc_kv* kv);
KVC_API void kvc_kv_shape(const kvc_kv* kv, kvc_shape* out);
/* llama.cpp's sequence-state bytes (llama_state_seq_get_data) <-> a KV cache. */
KVC_API kvc_status kvc_kv_from_llama_state(const uint8_t* data, size_t size, uint32_t n_kv_heads, kvc_kv** out);
KVC_API kvc_status kvc_kv_to_llama_state(const kvc_kv* kv, uint8_t** out, size_t* out_size);

/* Encodes a KV cache (tokens [token_begin, token_begin + n_tokens) of it; n_tokens 0 = to the
 * end) into .kvc bytes. */
KVC_API kvc_status kvc_encode(const kvc_kv* kv, uint32_t token_begin, uint32_t n_tokens, const char* codec,
                              const char* level, const char* codec_params, const uint8_t fingerprint[16], uint8_t** out,
                              size_t* out_size);
/* Decodes .kvc bytes; with a non-NULL expected_fingerprint, a file of another model fails. */
KVC_API kvc_status kvc_decode(const uint8_t* data, size_t size, const uint8_t* expected_fingerprint, kvc_kv** out);
/* What a file says about itself, as JSON (caller frees): a .kvc file's header and sections
 * ("keys_only" for an MLA latent or indexer cache), or a state chunk object's (the token object,
 * "KVSC", or the boundary object, llama.cpp's sequence-state bytes): its cells, layers and types
 * per section. Objects as a store holds them (in their envelope) are not read here. */
KVC_API kvc_status kvc_inspect_json(const uint8_t* data, size_t size, char** out_json);

/* Decodes one .kvc chunk and appends it to the session's sequence, which must continue at the
 * chunk's first position (chunks restored one after another as they arrive). The chunk must be
 * of the session's model. */
KVC_API kvc_status kvc_session_decode_append(kvc_session* session, const uint8_t* data, size_t size);

/* Stores of compressed chunks, opened by URL: "mem://", "dir:///path" (the embedded default),
 * "redis://[user[:password]@]host:port", "redis-cluster://[user[:password]@]h:p,h:p,...".
 * Every object is bound to its name and sealed (HMAC-SHA256 with a secret, else CRC32C).
 * Safe to call from several threads at once. */
typedef struct kvc_store kvc_store;
typedef struct kvc_store_params {
  uint64_t capacity_bytes; /* LRU bound on stored bytes; 0: mem 1 GiB, dir 10 GiB, Redis: the server's */
  uint32_t timeout_ms;     /* per network operation; 0: 2000 */
  const char* secret;      /* NULL or "": CRC32C seals; else only objects sealed with it are read */
} kvc_store_params;
KVC_API void kvc_store_default_params(kvc_store_params* params);
/* url NULL: the embedded default (dir://$KVCODEC_STORE, else the user's cache folder). */
KVC_API kvc_status kvc_store_open(const char* url, const kvc_store_params* params, kvc_store** out);
KVC_API void kvc_store_free(kvc_store* store);
/* Object names: [A-Za-z0-9._-], 1..200 characters (kvc_chunk_object_name makes them). */
KVC_API kvc_status kvc_store_put(kvc_store* store, const char* name, const uint8_t* data, size_t size);
/* KVC_NOT_FOUND when there is no such object; KVC_CORRUPT when it fails its seal or is larger
   than 1 GiB (such an object is refused before it is read: no chunk or manifest is that large). */
KVC_API kvc_status kvc_store_get(kvc_store* store, const char* name, uint8_t** out, size_t* out_size);
KVC_API kvc_status kvc_store_exists(kvc_store* store, const char* name, int* out_exists);
/* Deleting an absent object is not an error. */
KVC_API kvc_status kvc_store_delete(kvc_store* store, const char* name);

/* Chunk keys: chunk i of a prompt (chunk_tokens tokens each) is named by a hash of the model
 * fingerprint and every token up to its end, so a key names a whole prefix. */
typedef struct kvc_chunk_key {
  uint8_t bytes[16];
} kvc_chunk_key;
/* Keys of the whole chunks of tokens (n_tokens / chunk_tokens of them; chunk_tokens 0: 256);
 * caller frees *out_keys. */
KVC_API kvc_status kvc_chunk_keys(const uint8_t fingerprint[16], const int32_t* tokens, size_t n_tokens,
                                  uint32_t chunk_tokens, kvc_chunk_key** out_keys, size_t* out_n);
/* "<32 hex>.<codec>.<level>", the object name of one encoded variant of a chunk (caller frees). */
KVC_API kvc_status kvc_chunk_object_name(const kvc_chunk_key* key, const char* codec, const char* level,
                                         char** out_name);

/* The reuse path in two calls: before a prompt is evaluated, restore its longest stored prefix
 * (one batched lookup, then chunks fetched through the level planner and decoded on a pool while
 * earlier ones are restored); after it, store the chunks that were not found, at every rung the
 * model's quality floor allows. Keys come from the tokens (kvc_chunk_keys): whole chunks before
 * the prompt's last token, which is always evaluated (its logits give the first new token). */
typedef struct kvc_reuse_params {
  uint32_t chunk_tokens;    /* 0: 256 */
  double link_gbps;         /* in-process cap on the fetch, and the first bandwidth guess; 0: no cap */
  int32_t fetch_threads;    /* fetch/decode/encode workers (kept by the session); 0: one per core */
  double recompute_chunk_s; /* seconds to prefill one chunk here, pricing "recompute" for the
                               planner; 0: chunks are always fetched */
  const char* codec;        /* what new chunks are stored as; NULL: kvtc where a calibration for the
                               model is loaded (kvc_calibration_load), quant otherwise */
  const char* profile_path; /* the quality profile; NULL: <model>.kvprof.json beside the model,
                               and without one only the lossless rung (raw fp16) */
  double max_ppl_delta;     /* percent; <= 0: 1.0 */
  double min_top1;          /* <= 0: 0.97 */
} kvc_reuse_params;
typedef struct kvc_reuse_result {
  uint32_t chunks_found;    /* stored, from chunk 0 on */
  uint32_t chunks_restored; /* restored into the session (fewer when one is damaged or recomputed) */
  uint32_t tokens_restored; /* evaluate tokens[tokens_restored..] next */
  int damaged;              /* reuse stopped at a damaged chunk (corrupt, forged, another model's) */
  uint64_t bytes_fetched;
  double lookup_s, fetch_s, decode_s, restore_s;
} kvc_reuse_result;
KVC_API void kvc_reuse_default_params(kvc_reuse_params* params);
/* The session must be empty. A store that fails or a missing or damaged chunk is not an error:
 * fewer tokens are restored (chunks_restored says how many chunks). */
KVC_API kvc_status kvc_reuse_restore(kvc_session* session, kvc_store* store, const int32_t* tokens, size_t n_tokens,
                                     const kvc_reuse_params* params, kvc_reuse_result* out);
/* Stores chunks [first_chunk, ...) of the session's sequence, which must hold tokens from
 * position 0 (the caller says which tokens: they name the chunks). */
KVC_API kvc_status kvc_reuse_store(kvc_session* session, kvc_store* store, const int32_t* tokens, size_t n_tokens,
                                   uint32_t first_chunk, const kvc_reuse_params* params, uint32_t* out_chunks_stored);

/* Calibrations (.kvcal) kvc_encode and kvc_decode may use (kvtc): loaded once per process;
 * kvc_encode picks the one loaded last for the fingerprint it is given. */
KVC_API kvc_status kvc_calibration_load(const char* path);

/* Which engine decodes video KV from now on, process-wide: "auto" (the default: NVDEC where a
 * CUDA device is present and the stream is one it decodes, the CPU otherwise and after any device
 * failure), "cpu", or "nvdec" (an error where no CUDA device can be opened, with the reason). */
KVC_API kvc_status kvc_set_video_decoder(const char* name);

typedef struct kvc_run_params {
  const char* model_path;
  const char* prompt;      /* the prompt text (not a path) */
  const char* store_url;   /* NULL: the embedded default dir:// store */
  const char* codec;       /* how new chunks are stored; NULL: "kvtc" */
  const char* levels;      /* "l1,l2,..." to store; NULL: the codec's ladder */
  const char* calibration; /* kvtc; NULL: <model>.kvcal beside the model */
  double link_gbps;        /* in-process link cap for fetches; 0: none */
  uint32_t chunk_tokens;   /* 0: 256 */
  uint32_t n_generate;     /* tokens to generate; 0: none */
  int32_t n_threads;
  int32_t no_store;         /* non-zero: do not store the prompt's new chunks */
  int32_t no_reuse;         /* non-zero: ignore stored chunks (recompute everything) */
  const char* store_secret; /* non-NULL, non-empty: seal and check every stored object with HMAC-SHA256 keyed
                               with it (for stores others can write to); NULL: a CRC32C seal */
  const char* profile;      /* quality profile; NULL: <model>.kvprof.json beside the model, if any (without
                               one only raw fp16, lossless, is stored and fetched) */
  double max_ppl_delta;     /* largest profiled perplexity change a rung may have, percent; <= 0: 1.0 */
  double min_top1;          /* smallest profiled top-1 agreement; <= 0: 0.97 */
  /* Sampling through llama.cpp's sampler chain; all zero: greedy decoding. */
  double temperature;       /* 0: greedy (the rest ignored); at most 2 */
  double top_p;             /* (0, 1]; 0: 1 (off) */
  int32_t top_k;            /* 0: off */
  double min_p;             /* 0..1; 0: off */
  double presence_penalty;  /* -2..2 */
  double frequency_penalty; /* -2..2 */
  int32_t has_seed;         /* non-zero: draw with `seed` (same seed and prompt, same text); else at random */
  uint64_t seed;
  int32_t n_fetch_threads; /* workers fetched chunks decode on (and new chunks encode on); 0: one per core */
  /* Token ids to prefill instead of `prompt` (which may then be NULL), as given: no BOS is added. The only
     prompt a model without a tokenizer takes; each id must be in the model's vocabulary. */
  const int32_t* prompt_tokens;
  size_t n_prompt_tokens;
  int32_t always_fetch; /* non-zero: fetch every stored chunk (else the planner may prefill one it predicts faster) */
} kvc_run_params;

/* What `kvcodec run` uses when given nothing: codec kvtc, 256-token chunks, 32 generated tokens,
 * greedy, the default quality floor; model_path and prompt are left NULL for the caller. */
KVC_API void kvc_run_default_params(kvc_run_params* params);

/* The main job: reuse the prompt's longest stored prefix, prefill the rest, generate, store the
 * new chunks; the report (text, TTFT and its parts, bytes moved) is JSON (caller frees). */
KVC_API kvc_status kvc_run_json(const kvc_run_params* params, char** out_json);

typedef struct kvc_server kvc_server;
typedef struct kvc_serve_params {
  const char* model_path;
  const char* store_url;       /* NULL: the embedded default dir:// store */
  const char* codec;           /* how new chunks are stored; NULL: "kvtc" */
  const char* calibration;     /* NULL: <model>.kvcal beside the model */
  const char* host;            /* NULL: "127.0.0.1" */
  int32_t port;                /* 0: any free port (kvc_server_port tells which) */
  double link_gbps;            /* in-process link cap for fetches; 0: none */
  uint32_t n_ctx;              /* 0: 4096 */
  uint32_t default_max_tokens; /* 0: 64 */
  int32_t n_threads;           /* llama.cpp threads; 0: the cores the fetch threads leave */
  int32_t n_parallel;          /* sequences decoded together; 0: 4 */
  int32_t n_fetch_threads;     /* pool workers fetched chunks decode on and new chunks encode on; 0: 1 */
  const char* scheduler;       /* "kv-aware" (NULL) or "fifo" */
  int32_t no_reuse;            /* nonzero: never look up, fetch or store chunks */
  const char* store_secret;    /* as in kvc_run_params */
  uint64_t max_body_bytes;     /* a larger request body is a 413; 0: 1 MiB */
  double request_timeout_s;    /* a request must arrive whole within this, else 408; 0: 30 */
  int32_t max_connections;     /* requests served at once (a thread each, once their head is read;
                                  /health and /metrics have a few threads of their own); 0: 512 */
  const char* profile;         /* quality profile; NULL: <model>.kvprof.json beside the model, if any (without
                                  one only raw fp16, lossless, is stored and fetched) */
  double max_ppl_delta;        /* largest profiled perplexity change a rung may have, percent; <= 0: 1.0 */
  double min_top1;             /* smallest profiled top-1 agreement; <= 0: 0.97 */
  const char* alias;           /* model id clients see (/v1/models, responses); NULL: the model's file name
                                  without .gguf */
  const char* chat_template;   /* a llama.cpp built-in template's name ("chatml", ...) or a template's text;
                                  NULL: the model's own, or "role: content" lines without one */
  const char* api_key;         /* non-NULL: every endpoint but /health and /metrics needs
                                  "Authorization: Bearer <api_key>" (else 401) */
  const char* metrics_key;     /* non-NULL: /metrics needs "Authorization: Bearer <metrics_key>" */
} kvc_serve_params;

/* What `kvcodec serve` uses when given nothing (port 8080 on 127.0.0.1, 4 sequences, one fetch
 * thread, the kv-aware scheduler, the request limits above); model_path is left NULL. */
KVC_API void kvc_serve_default_params(kvc_serve_params* params);

/* The OpenAI-compatible completion server with KV reuse: create (loads the model), start
 * (listens; returns at once), stop (finishes the admitted requests, drains stores), free. */
KVC_API kvc_status kvc_server_create(const kvc_serve_params* params, kvc_server** out);
KVC_API kvc_status kvc_server_start(kvc_server* server);
KVC_API int32_t kvc_server_port(const kvc_server* server);
KVC_API void kvc_server_stop(kvc_server* server);
KVC_API void kvc_server_free(kvc_server* server);

#ifdef __cplusplus
}
#endif

#endif /* KVCODEC_H */
