/* kvcodec public C API: compress, store and restore LLM KV caches.
 *
 * Opaque handles, plain C types of fixed width, no exceptions. Every function that can fail
 * returns a kvc_status; on failure kvc_last_error() gives a one-line message for the calling
 * thread.
 *
 * Ownership, for every declaration below (each says where it differs):
 *  - Handles (kvc_model, kvc_session, kvc_sampler, kvc_kv, kvc_store, kvc_server) are the caller's
 *    once a function returns one through its `out` argument, and are released once with their own
 *    kvc_*_free, which ignores NULL. A handle that uses another (a session its model) needs that
 *    one to outlive it; the declarations say where.
 *  - Buffers returned through pointer arguments (char** text and JSON, uint8_t** bytes, int32_t**
 *    tokens, kvc_chunk_key** keys) are allocated for the caller, who releases each with kvc_free.
 *    One is returned, and must be freed, even when its size is 0. Text is NUL-terminated UTF-8.
 *  - `const char*` results (kvc_version, kvc_codec_*, the strings *_default_params puts in a struct)
 *    are the library's own, valid for the life of the process, never freed by the caller.
 *    kvc_last_error() and kvc_session_logits() say how long theirs stay valid.
 *  - What the caller passes in (strings, byte and token buffers, parameter structs and the strings
 *    they point to) is only read during the call: the library copies what it keeps, keeps no
 *    pointer to it after returning, and never frees it.
 *  - On failure nothing is handed over: no handle or buffer is returned to be released.
 *
 * JSON: every kvc_*_json function returns one JSON document through its char** argument (the
 * caller's: kvc_free). Its schema is written next to it: a block opened by `JSON schema "<name>"`
 * lists one key per line as `"key"  type  meaning`, type being string, integer, number (any JSON
 * number), boolean, array, object or null, alternatives joined by '|'; "absent" marks a key that
 * may be missing. An object has exactly the keys listed, in that order (capi_test reads these
 * blocks and holds the library's output to them). The schemas are part of the API (below).
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
  int32_t pos_begin; /* the position of the first token */
} kvc_shape;

typedef struct kvc_session_params {
  uint32_t n_ctx;       /* 0: 2048 */
  uint32_t n_batch;     /* 0: 512 */
  int32_t n_threads;    /* 0: all cores */
  kvc_dtype cache_type; /* the KV cache's type; kvc_session_default_params: KVC_F16 */
  int32_t flash_attn;   /* non-zero: flash attention (V is then kept untransposed) */
} kvc_session_params;

/* The library's version, "major.minor.patch" (the library's own string). */
KVC_API const char* kvc_version(void);
/* The message of the calling thread's last failed call, one line ("" before any). The library's
 * own string, valid until that thread's next call into the library. */
KVC_API const char* kvc_last_error(void);
/* Frees a buffer the library allocated for the caller (text, JSON, bytes, tokens, keys); NULL is
 * ignored. Handles have their own kvc_*_free. */
KVC_API void kvc_free(void* p);

/* The codecs, by index 0..kvc_codec_count()-1. The strings are the library's own. Past the end,
 * or an unknown codec or level index: NULL (or 0 for the counts). */
KVC_API size_t kvc_codec_count(void);
KVC_API const char* kvc_codec_name(size_t index);
KVC_API const char* kvc_codec_description(const char* codec);
/* Levels best quality first, and the default one. */
KVC_API size_t kvc_codec_level_count(const char* codec);
KVC_API const char* kvc_codec_level(const char* codec, size_t index);
KVC_API const char* kvc_codec_default_level(const char* codec);
/* Non-zero when the codec encodes and decodes only with a calibration loaded (kvtc). */
KVC_API int kvc_codec_needs_calibration(const char* codec);
/* The codecs as JSON (*out_json: the caller's, kvc_free): an array with one object per codec, in
 * kvc_codec_name order, each of JSON schema "codec":
 *   "name"               string   the codec's name (kvc_codec_name)
 *   "id"                 integer  its id in .kvc headers (never reused)
 *   "version"            integer  bumped when its bytes change meaning
 *   "levels"             array    its levels (strings), best quality first (kvc_codec_level)
 *   "default_level"      string   the level used when none is given
 *   "params"             array    the key=value parameters kvc_encode's codec_params takes
 *                                 (strings: "name=default", some with a note)
 *   "description"        string   one line
 *   "needs_calibration"  boolean  kvc_codec_needs_calibration
 *   "lossless"           boolean  decodes bit for bit what it was given (raw: an fp16 cache;
 *                                 planes: any dtype), so no model needs a measured profile for it */
KVC_API kvc_status kvc_codecs_json(char** out_json);

/* Loads a GGUF model; *out is the caller's (kvc_model_free, which ignores NULL). Every session made
 * of it must be freed before it. */
KVC_API kvc_status kvc_model_load(const char* path, kvc_model** out);
KVC_API void kvc_model_free(kvc_model* model);
/* The 16 bytes that bind .kvc files, calibrations and stored chunks to this model, into out. */
KVC_API void kvc_model_fingerprint(const kvc_model* model, uint8_t out[16]);
/* The model's shape and metadata (*out_json: the caller's, kvc_free), JSON schema "model_info":
 *   "path"             string   the path it was loaded from
 *   "architecture"     string   GGUF general.architecture ("llama", "qwen2", ...)
 *   "n_layers"         integer  layers
 *   "n_heads"          integer  attention (query) heads
 *   "n_kv_heads"       integer  K/V heads
 *   "head_dim"         integer  channels per head
 *   "n_vocab"          integer  vocabulary size: token ids are 0..n_vocab-1
 *   "n_ctx_train"      integer  the context length it was trained at
 *   "rope_type"        string   "normal", "neox", "none", "mrope", "imrope" or "vision"
 *   "rope_freq_base"   number   RoPE's frequency base
 *   "rope_n_rot"       integer  channels rotated per head
 *   "rope_freq_scale"  number   linear position scaling (1: none)
 *   "fingerprint"      string   kvc_model_fingerprint, 32 lowercase hex digits */
KVC_API kvc_status kvc_model_info_json(const kvc_model* model, char** out_json);
/* Tokenizes len bytes of text (a BOS first when add_bos is non-zero and the model has one);
 * *out_tokens (*out_n ids) is the caller's (kvc_free). A model without a tokenizer is refused. */
KVC_API kvc_status kvc_model_tokenize(const kvc_model* model, const char* text, size_t len, int add_bos,
                                      int32_t** out_tokens, size_t* out_n);

/* A llama.cpp context of the model for one sequence; *out is the caller's (kvc_session_free, which
 * ignores NULL). The model must outlive the session. */
KVC_API void kvc_session_default_params(kvc_session_params* params);
KVC_API kvc_status kvc_session_create(const kvc_model* model, const kvc_session_params* params, kvc_session** out);
KVC_API void kvc_session_free(kvc_session* session);
/* Appends n tokens to the sequence (token ids below the model's vocabulary size). */
KVC_API kvc_status kvc_session_eval(kvc_session* session, const int32_t* tokens, size_t n);
/* A copy of the sequence's KV cache as a new kvc_kv (the caller's: kvc_kv_free), independent of
 * the session. A model whose memory is not one KV cache of uniform layers (sliding window, MLA,
 * recurrent) is KVC_UNSUPPORTED. */
KVC_API kvc_status kvc_session_extract(const kvc_session* session, kvc_kv** out);
/* Replaces the sequence with a copy of the cache (the model's geometry; kv stays the caller's);
 * the next eval continues after it. */
KVC_API kvc_status kvc_session_restore(kvc_session* session, const kvc_kv* kv);
/* The logits (n_vocab floats) of the last token of the last kvc_session_eval. The pointer is into
 * the session (never freed by the caller) and stays valid until the next call that changes the
 * session (eval, restore, decode_append, reuse_restore, free); fails when no eval has run since the
 * session was created or restored, or the last one failed. */
KVC_API kvc_status kvc_session_logits(const kvc_session* session, const float** out_logits, size_t* out_n_vocab);

/* Choosing the next token from logits, through llama.cpp's sampler chain: kvc_sampler_create, and
 * kvc_run_params.sampling. A struct of zeros, or kvc_sampler_default_params, is greedy decoding;
 * every field's range is checked where it is used (KVC_INVALID_ARGUMENT naming the field). */
typedef struct kvc_sampler kvc_sampler; /* one generated sequence's sampler (its penalties and draw) */
typedef struct kvc_sampler_params {
  float temperature;       /* 0..2; 0: greedy (the rest is ignored) */
  float top_p;             /* (0, 1]; 1: off; 0 is taken as 1 */
  int32_t top_k;           /* >= 0; 0: off */
  float min_p;             /* 0..1; 0: off */
  float presence_penalty;  /* -2..2, subtracted once from a token already generated */
  float frequency_penalty; /* -2..2, subtracted per time a token was generated */
  int32_t has_seed;        /* non-zero: draw with `seed` (the same seed and input, the same tokens);
                              else a random draw */
  uint64_t seed;
} kvc_sampler_params;
/* Greedy decoding: temperature 0, top_p 1, the rest 0. */
KVC_API void kvc_sampler_default_params(kvc_sampler_params* params);
/* *out is the caller's (kvc_sampler_free, which ignores NULL); it keeps no reference to the model
 * or to params. */
KVC_API kvc_status kvc_sampler_create(const kvc_model* model, const kvc_sampler_params* params, kvc_sampler** out);
KVC_API void kvc_sampler_free(kvc_sampler* sampler);
/* The next token from the session's last logits (kvc_session_logits); it then counts as generated.
 * The session must be of a model with the sampler's model's vocabulary. */
KVC_API kvc_status kvc_sampler_next(kvc_sampler* sampler, const kvc_session* session, int32_t* out_token);
/* Non-zero for a token that ends generation (end of sequence, end of turn). */
KVC_API int kvc_model_is_end_of_generation(const kvc_model* model, int32_t token);
/* Tokens as text (*out_text: the caller's, kvc_free). Bytes that are not valid UTF-8 (a character
 * split over byte-fallback tokens, cut at the end) become U+FFFD, so the text is always valid UTF-8. */
KVC_API kvc_status kvc_model_detokenize(const kvc_model* model, const int32_t* tokens, size_t n, char** out_text);

/* Releases a kvc_kv (NULL is ignored). */
KVC_API void kvc_kv_free(kvc_kv* kv);
/* The cache's shape into *out (all zeros for a NULL kv). */
KVC_API void kvc_kv_shape(const kvc_kv* kv, kvc_shape* out);
/* llama.cpp's sequence-state bytes (llama_state_seq_get_data) <-> a KV cache: *out is the
 * caller's (kvc_kv_free, or for the bytes kvc_free). kvc_kv_to_llama_state writes V as
 * kvc_kv_llama_v_trans says, so a state read here is written back in its own layout. A cache of
 * keys alone (kvc_kv_keys_only) has no such state: KVC_UNSUPPORTED. */
KVC_API kvc_status kvc_kv_from_llama_state(const uint8_t* data, size_t size, uint32_t n_kv_heads, kvc_kv** out);
KVC_API kvc_status kvc_kv_to_llama_state(const kvc_kv* kv, uint8_t** out, size_t* out_size);
/* How kvc_kv_to_llama_state lays out V: 1 transposed (how llama.cpp keeps V without flash
 * attention), 0 as K is (a flash-attention context). llama.cpp refuses a state in the other
 * layout than its context's. A cache from kvc_kv_from_llama_state has its state's, one from
 * kvc_session_extract its session's (0 with flash_attn); any other (kvc_decode,
 * kvc_kv_from_arrays) 1, until set: a .kvc file does not record it. -1 for a NULL kv. */
KVC_API int kvc_kv_llama_v_trans(const kvc_kv* kv);
/* v_trans: 0 or 1 (anything else is KVC_INVALID_ARGUMENT). */
KVC_API kvc_status kvc_kv_set_llama_v_trans(kvc_kv* kv, int v_trans);
/* Non-zero for a cache of keys alone, with no V (an MLA latent or indexer cache, from kvc_decode
 * or kvc_kv_from_arrays); 0 for NULL. */
KVC_API int kvc_kv_keys_only(const kvc_kv* kv);

/* Where K or V lies in the caller's memory, for kvc_kv_from_arrays (which reads it) and
 * kvc_kv_to_arrays (which writes it). Value (layer, token, head, channel) is the element at
 *     base(layer) + token * token_stride + head * head_stride + channel * dim_stride
 * counted in elements of the dtype, not bytes, where base(layer) is layers[layer] when `layers`
 * is non-NULL, else data + layer * layer_stride. Any order of the four axes is described this
 * way, none needs a copy first:
 *   [layer][token][head][channel], dense (as a kvc_kv holds it): dim_stride 1, head_stride
 *     head_dim, token_stride n_kv_heads * head_dim, layer_stride n_tokens * token_stride;
 *   one [head][token][channel] buffer per layer (Hugging Face's past_key_values, batch 1):
 *     layers, dim_stride 1, token_stride head_dim, head_stride n_tokens * head_dim;
 *   V transposed, [layer][head][channel][token] (llama.cpp's without flash attention):
 *     token_stride 1, dim_stride n_tokens, head_stride head_dim * n_tokens, layer_stride
 *     n_kv_heads * head_stride.
 * Strides are not negative (a negative one is refused). A stride only matters along an axis of
 * more than one value; along one it is ignored. Reading, a stride may be 0 (one value repeated);
 * writing, no two values may share an element. `size` is the bytes from data (or from each
 * layers[l]) the caller lends: every element the description reaches must lie inside them, which
 * the library checks (overflow included) before it touches any. Elements are copied byte-wise,
 * so need no alignment. The arrays are only used during the call. */
typedef struct kvc_kv_array {
  void* data;          /* every layer, one after another layer_stride apart; NULL when `layers` is given
                          (kvc_kv_from_arrays only reads: cast a const buffer) */
  void* const* layers; /* n_layers pointers, one buffer per layer; NULL when `data` is given */
  size_t size;         /* bytes of data, or of each layers[l] */
  int64_t layer_stride;
  int64_t token_stride;
  int64_t head_stride;
  int64_t dim_stride;
} kvc_kv_array;

/* A new KV cache (*out: the caller's, kvc_kv_free) holding a copy of the caller's K and V.
 * shape: n_layers, n_kv_heads, head_dim (K's and V's alike) and n_tokens, each at least 1 and
 * within the library's limits (the file format's: 1024 layers, 1024 heads, 4096 channels, 2^22
 * tokens, 16 GiB), dtype (the arrays' element type, and the cache's), pos_begin (the first
 * token's position, at least 0; positions follow). v NULL: a cache of keys alone. Refused with
 * KVC_INVALID_ARGUMENT and a message naming the field: a NULL pointer, an unknown dtype, a size
 * out of range, an array with both or neither of data and layers or a NULL layer, a negative
 * stride, strides that reach past `size` or overflow. */
KVC_API kvc_status kvc_kv_from_arrays(const kvc_shape* shape, const kvc_kv_array* k, const kvc_kv_array* v,
                                      kvc_kv** out);
/* Copies the cache into the caller's arrays (its shape: kvc_kv_shape) as dtype, converting where
 * it differs from the cache's (to f16 or bf16: rounded to nearest, ties to even). v must be NULL
 * exactly when the cache holds keys alone. Refused as kvc_kv_from_arrays refuses, and where the
 * arrays would write two values into one element: a stride of 0 along an axis of several values,
 * strides that interleave, two layers' buffers that meet, K and V starting at the same element
 * (other overlaps of K with V are the caller's to avoid). On failure nothing is written. */
KVC_API kvc_status kvc_kv_to_arrays(const kvc_kv* kv, kvc_dtype dtype, const kvc_kv_array* k, const kvc_kv_array* v);

/* Encodes a KV cache (tokens [token_begin, token_begin + n_tokens) of it; n_tokens 0 = to the
 * end) into .kvc bytes (*out: the caller's, kvc_free). level NULL: the codec's default;
 * codec_params: "key=value,..." (kvc_codecs_json "params"), or NULL. kvtc uses the calibration
 * kvc_calibration_load loaded last for the fingerprint. */
KVC_API kvc_status kvc_encode(const kvc_kv* kv, uint32_t token_begin, uint32_t n_tokens, const char* codec,
                              const char* level, const char* codec_params, const uint8_t fingerprint[16], uint8_t** out,
                              size_t* out_size);
/* Decodes .kvc bytes into a new kvc_kv (the caller's: kvc_kv_free); with a non-NULL
 * expected_fingerprint (16 bytes), a file of another model fails. */
KVC_API kvc_status kvc_decode(const uint8_t* data, size_t size, const uint8_t* expected_fingerprint, kvc_kv** out);
/* What a file says about itself, as JSON (*out_json: the caller's, kvc_free): a .kvc file, or a
 * state chunk object (the objects a store keeps for memories that are not one uniform KV cache:
 * the token object, "KVSC", or the boundary object, llama.cpp's sequence-state bytes). Objects as
 * a store holds them (in their envelope) are not read here.
 *
 * A .kvc file, JSON schema "inspect_kvc":
 *   "format_version"      integer  the .kvc container's version (docs/format.md)
 *   "file_bytes"          integer  the input's size
 *   "codec"               string   the codec's name; "unknown" for an id this library does not know
 *   "codec_id"            integer  the codec's id (kvc_codecs_json "id")
 *   "codec_version"       integer  the codec's version the file was written with
 *   "level"               string   the level it was encoded at
 *   "codec_params_bytes"  integer  the size of the codec's parameters in the header
 *   "n_layers"            integer  the cache's layers
 *   "n_kv_heads"          integer  its K/V heads
 *   "head_dim"            integer  its channels per head
 *   "n_tokens"            integer  its tokens
 *   "keys_only"           boolean  K alone (an MLA latent or indexer cache), no V
 *   "dtype"               string   "f32", "f16" or "bf16"
 *   "model_fingerprint"   string   the model it is of, 32 lowercase hex digits
 *   "token_begin"         integer  its first token's index in the sequence it was cut from
 *   "pos_begin"           integer  its first token's position
 *   "bytes_fp16"          integer  the cache's size as fp16
 *   "compression_ratio"   number   bytes_fp16 / file_bytes
 *   "sections"            array    the payload's sections, each of JSON schema "inspect_kvc_section"
 * JSON schema "inspect_kvc_section":
 *   "tag"                 string   the section's tag, "0x" and 8 hex digits
 *   "bytes"               integer  its size
 *
 * A state chunk's token object, JSON schema "state_chunk_tokens":
 *   "kind"                string   "state chunk tokens"
 *   "file_bytes"          integer  the input's size
 *   "seq_id"              integer  the llama.cpp sequence the state was taken from
 *   "pos_begin"           integer  the chunk's first position
 *   "n_tokens"            integer  the chunk's cells
 *   "has_boundary"        boolean  a boundary object completes it
 *   "layout"              array    the memory's sections in order, each "tokens" (its cells are in
 *                                  this object) or "boundary" (its snapshot is in the boundary one)
 *   "memory"              string   the kinds of this object's sections, joined by '+'
 *                                  ("attention", "attention+recurrent", ...; "none")
 *   "sections"            array    per section, JSON schema "state_attention_section" or
 *                                  "state_recurrent_section" (by its "kind")
 * A state chunk's boundary object, JSON schema "state_chunk_boundary":
 *   "kind"                string   "state chunk boundary"
 *   "file_bytes"          integer  the input's size
 *   "seq_id"              integer  the llama.cpp sequence the state was taken from
 *   "memory"              string   as in "state_chunk_tokens"
 *   "sections"            array    as in "state_chunk_tokens"
 * JSON schema "state_attention_section":
 *   "kind"                string   "attention"
 *   "n_stream"            integer  the cache's streams
 *   "stream"              integer  the stream holding the cells (the others are empty)
 *   "cells"               integer  cells, at consecutive positions
 *   "pos_begin"           integer  the first cell's position (a sliding window's may be past 0)
 *   "cell_ext_bytes"      integer  bytes of each cell's extension (M-RoPE's 2-D position): 0 or 12
 *   "v_trans"             boolean  V written transposed
 *   "keys_only"           boolean  K alone (MLA, an indexer cache)
 *   "layers"              array    per layer, JSON schema "state_layer"
 * JSON schema "state_layer":
 *   "k"                   object   the layer's K, JSON schema "state_tensor"
 *   "v"                   object|null  its V, JSON schema "state_tensor"; null when keys_only
 * JSON schema "state_tensor":
 *   "type"                integer  the ggml type id
 *   "type_name"           string   ggml's name for it ("f16", "q8_0"; "type N" for an unknown id)
 *   "row_bytes"           integer  bytes per cell
 *   "elem_bytes"          integer|absent  bytes per value: a V written transposed only
 * JSON schema "state_recurrent_section":
 *   "kind"                string   "recurrent"
 *   "bytes"               integer  the section's size
 *   "cells"               integer  1 when the sequence has a state, else 0
 *   "pos"                 integer  the position the state was taken at; -1 without cells
 *   "n_layer"             integer  the model's layers
 *   "n_recurrent_layers"  integer  of which recurrent
 *   "r_row_bytes"         integer  the rolling (conv) state per layer
 *   "history_row_bytes"   integer  a per-layer-embedding conv history per layer; 0: none
 *   "s_row_bytes"         integer  the recurrent (ssm / wkv) state per layer */
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
  const char* secret;      /* NULL or "": CRC32C seals; else only objects sealed with it are read
                              (copied: the store keeps its own) */
} kvc_store_params;
KVC_API void kvc_store_default_params(kvc_store_params* params);
/* url NULL: the embedded default (dir://$KVCODEC_STORE, else the user's cache folder). *out is the
 * caller's (kvc_store_free, which ignores NULL). A mem:// store's objects go with it. */
KVC_API kvc_status kvc_store_open(const char* url, const kvc_store_params* params, kvc_store** out);
KVC_API void kvc_store_free(kvc_store* store);
/* Object names: [A-Za-z0-9._-], 1..200 characters (kvc_chunk_object_name makes them). The store
 * keeps a copy of the data. */
KVC_API kvc_status kvc_store_put(kvc_store* store, const char* name, const uint8_t* data, size_t size);
/* *out (*out_size bytes) is the caller's (kvc_free). KVC_NOT_FOUND when there is no such object;
 * KVC_CORRUPT when it fails its seal or is larger than 1 GiB (such an object is refused before it
 * is read: no chunk or manifest is that large). */
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
 * *out_keys (*out_n keys) is the caller's (kvc_free). */
KVC_API kvc_status kvc_chunk_keys(const uint8_t fingerprint[16], const int32_t* tokens, size_t n_tokens,
                                  uint32_t chunk_tokens, kvc_chunk_key** out_keys, size_t* out_n);
/* "<32 hex>.<codec>.<level>", the object name of one encoded variant of a chunk (*out_name: the
 * caller's, kvc_free). */
KVC_API kvc_status kvc_chunk_object_name(const kvc_chunk_key* key, const char* codec, const char* level,
                                         char** out_name);

/* Quality floors. A model's quality profile (<model>.kvprof.json, written by `kvcodec calibrate`
 * or `kvcodec profile`) holds every codec rung measured on that model, in the first 8 and 32
 * tokens after restored prefixes, each figure with a 95% confidence bound; the floor is the rungs
 * whose bounds in every window are within the limits (max_ppl_delta: the largest perplexity
 * change, percent; min_top1: the smallest top-1 agreement), and raw fp16 always. Only the floor's
 * rungs are fetched, and stored (unless kvc_run_params.levels names others). kvtc rungs count only
 * when the profile was measured with the kvtc calibration in use. Without a profile for the model
 * (none beside it, or one beside it that cannot be read, is of an older version or is another
 * model's: skipped, with a note), the floor is lossless: raw fp16 and the lossless codecs
 * (planes), whatever codec is asked for.
 *
 * The floor a model gets, as JSON (*out_json: the caller's, kvc_free). model_path is loaded (the
 * whole GGUF); profile_path: that profile, which must exist and be the model's, or NULL for
 * <model>.kvprof.json beside the model; calibration: the .kvcal kvtc rungs are judged with, or NULL
 * for <model>.kvcal beside the model, if any (loaded for this call alone, not for kvc_encode);
 * max_ppl_delta <= 0: 1.0; min_top1 (at most 1) <= 0: 0.97. JSON schema "quality_floor":
 *   "model"          string   model_path
 *   "max_ppl_delta"  number   the limit applied, percent
 *   "min_top1"       number   the limit applied
 *   "from_profile"   boolean  a profile decided it; false: the lossless floor
 *   "note"           string   how it was decided, one line (without a profile: why, and how to
 *                             make one)
 *   "allowed"        array    the rungs that may be stored and fetched, "codec/level" strings,
 *                             most accurate first; "raw/fp16" always; without a profile the
 *                             lossless ones alone ("raw/fp16", "planes/lossless")
 *   "profile"        object|null  the profile it was decided from (docs/format.md, "Quality
 *                             profile"), JSON schema "quality_profile"; null without one
 * JSON schema "quality_profile":
 *   "format"             string   "kvcodec-quality-profile"
 *   "version"            integer  the profile format's version (2)
 *   "model_fingerprint"  string   the model it was measured on, 32 lowercase hex digits
 *   "calibration"        string   the hash of the .kvcal its kvtc rungs were measured with; "": none
 *   "text"               string   what it was measured on (informational)
 *   "docs"               integer  documents scored
 *   "prefix_lengths"     array    the restored prefix lengths each document is scored after, tokens
 *   "windows"            array    the scored windows after each prefix, tokens ([8, 32])
 *   "resamples"          integer  bootstrap resamples of the documents behind each bound
 *   "confidence"         number   of each one-sided bound (0.95)
 *   "rungs"              array    every rung measured, each of JSON schema "quality_profile_rung"
 *   "checksum"           string   xxh3-128 of the profile written without it, 32 hex digits
 * JSON schema "quality_profile_rung":
 *   "codec"              string   the codec
 *   "level"              string   its level
 *   "ratio"              number   fp16 bytes / stored bytes
 *   "windows"            array    one per profile window, each of JSON schema "quality_window"
 * JSON schema "quality_window":
 *   "tokens"             integer  the first this many tokens after each restored prefix
 *   "positions"          integer  positions scored: docs x prefix lengths x tokens
 *   "ppl_delta_pct"      number   teacher-forced perplexity change, percent
 *   "ppl_delta_pct_bound" number  its upper bound
 *   "top1_agreement"     number   share of positions whose most likely next token is unchanged
 *   "top1_agreement_bound" number its lower bound
 *   "kl_mean"            number   mean KL divergence from the uncompressed run's next-token
 *                                 distribution, nats
 *   "kl_mean_bound"      number   its upper bound */
KVC_API kvc_status kvc_quality_floor_json(const char* model_path, const char* profile_path, const char* calibration,
                                          double max_ppl_delta, double min_top1, char** out_json);

/* The reuse path in two calls: before a prompt is evaluated, restore its longest stored prefix
 * (one batched lookup, then chunks fetched through the level planner and decoded on a pool while
 * earlier ones are restored); after it, store the chunks that were not found, at every rung the
 * model's quality floor allows. Keys come from the tokens (kvc_chunk_keys): whole chunks before
 * the prompt's last token, which is always evaluated (its logits give the first new token).
 * kvtc needs its calibration loaded in the process (kvc_calibration_load): nothing is loaded from
 * beside the model here. */
typedef struct kvc_reuse_params {
  uint32_t chunk_tokens;    /* 0: 256 */
  double link_gbps;         /* in-process cap on the fetch, and the first bandwidth guess; 0: no cap */
  int32_t fetch_threads;    /* 0..64 fetch/decode/encode workers (kept by the session); 0: one per core */
  double recompute_chunk_s; /* seconds to prefill one chunk here, pricing "recompute" for the
                               planner; 0: chunks are always fetched */
  const char* codec;        /* what new chunks are stored as, within the floor; NULL: kvtc where a
                               calibration for the model is loaded, quant otherwise */
  const char* profile_path; /* the quality profile (which must exist and be the model's); NULL:
                               <model>.kvprof.json beside the model, and without one the lossless
                               floor (raw fp16 and planes) */
  double max_ppl_delta;     /* percent; <= 0: 1.0 */
  double min_top1;          /* at most 1; <= 0: 0.97 */
} kvc_reuse_params;
typedef struct kvc_reuse_result {
  uint32_t chunks_found;    /* stored, from chunk 0 on */
  uint32_t chunks_restored; /* whole chunks restored into the session (fewer when one is damaged or
                               recomputed) */
  uint32_t tokens_restored; /* those chunks' tokens and a stored tail's; evaluate
                               tokens[tokens_restored..] next */
  int32_t damaged;          /* non-zero: reuse stopped at a damaged chunk (corrupt, forged, another model's) */
  uint64_t bytes_fetched;
  double lookup_s, fetch_s, decode_s, restore_s;
} kvc_reuse_result;
KVC_API void kvc_reuse_default_params(kvc_reuse_params* params);
/* The session must be empty. A store that fails or a missing or damaged chunk is not an error:
 * fewer tokens are restored (chunks_restored says how many chunks). */
KVC_API kvc_status kvc_reuse_restore(kvc_session* session, kvc_store* store, const int32_t* tokens, size_t n_tokens,
                                     const kvc_reuse_params* params, kvc_reuse_result* out);
/* Stores chunks [first_chunk, ...) of the session's sequence, which must hold tokens from
 * position 0 (the caller says which tokens: they name the chunks), at raw fp16 and each level of
 * the codec the floor allows. Where the floor is a profile's and allows no level of the codec,
 * planes, quant 8 and rotquant 3 are stored where it allows them; under the lossless floor, raw fp16
 * and planes (lossless). The tokens after the last whole chunk but the last token (what
 * kvc_reuse_restore of the same tokens may restore) are stored too, as the chunks' tail, where
 * the session holds them. */
KVC_API kvc_status kvc_reuse_store(kvc_session* session, kvc_store* store, const int32_t* tokens, size_t n_tokens,
                                   uint32_t first_chunk, const kvc_reuse_params* params, uint32_t* out_chunks_stored);

/* Calibrations (.kvcal) kvc_encode, kvc_decode and the reuse path may use (kvtc): loaded once per
 * process and kept for its life; kvc_encode picks the one loaded last for the fingerprint it is
 * given. */
KVC_API kvc_status kvc_calibration_load(const char* path);

/* Which engine decodes video KV from now on, process-wide: "auto" (the default: NVDEC where a
 * CUDA device is present and the stream is one it decodes, the CPU otherwise and after any device
 * failure), "cpu", or "nvdec" (an error where no CUDA device can be opened, with the reason). */
KVC_API kvc_status kvc_set_video_decoder(const char* name);

typedef struct kvc_run_params {
  const char* model_path;
  const char* prompt;          /* the prompt text (not a path) */
  const char* store_url;       /* NULL: the embedded default dir:// store */
  const char* codec;           /* how new chunks are stored, within the quality floor; NULL: "kvtc" */
  const char* levels;          /* "l1,l2,...": store exactly these levels of the codec (no raw fp16 added),
                                  floor or not (kvtc's need its calibration); NULL: raw fp16 and the
                                  codec's levels the floor allows (as kvc_reuse_store) */
  const char* calibration;     /* kvtc's; NULL: <model>.kvcal beside the model, if any (without one kvtc
                                  has no rung in the floor) */
  double link_gbps;            /* in-process link cap for fetches; 0: none */
  uint32_t chunk_tokens;       /* 0: 256 */
  uint32_t n_generate;         /* tokens to generate; 0: none */
  int32_t n_threads;           /* llama.cpp threads; 0: all cores */
  int32_t no_store;            /* non-zero: do not store the prompt's new chunks */
  int32_t no_reuse;            /* non-zero: ignore stored chunks (recompute everything) */
  const char* store_secret;    /* non-NULL, non-empty: seal and check every stored object with HMAC-SHA256 keyed
                                  with it (for stores others can write to); NULL: a CRC32C seal */
  const char* profile;         /* quality profile (which must exist and be the model's); NULL:
                                  <model>.kvprof.json beside the model, if any: without one the floor is
                                  lossless, only raw fp16 and planes are stored and fetched */
  double max_ppl_delta;        /* largest profiled perplexity change a rung may have, percent; <= 0: 1.0 */
  double min_top1;             /* smallest profiled top-1 agreement, at most 1; <= 0: 0.97 */
  kvc_sampler_params sampling; /* how generated tokens are chosen; all zero: greedy */
  int32_t n_fetch_threads;     /* 0..64 workers fetched chunks decode on (and new chunks encode on);
                                  0: one per core */
  /* Token ids to prefill instead of `prompt` (which must then be NULL), as given: no BOS is added.
     The only prompt a model without a tokenizer takes; each id must be in the model's vocabulary. */
  const int32_t* prompt_tokens;
  size_t n_prompt_tokens; /* 1..4194304 */
  int32_t always_fetch;   /* non-zero: fetch every stored chunk (else the planner may prefill one it
                             predicts faster) */
} kvc_run_params;

/* What `kvcodec run` uses when given nothing: codec kvtc, 256-token chunks, 32 generated tokens,
 * greedy sampling (kvc_sampler_default_params), the default quality limits; model_path and prompt
 * are left NULL for the caller. */
KVC_API void kvc_run_default_params(kvc_run_params* params);

/* The main job: reuse the prompt's longest stored prefix, prefill the rest, generate, store the
 * new chunks. The store is a cache: one that cannot be opened, read or written is a warning in the
 * report, and the text is generated either way. The report (*out_json: the caller's, kvc_free),
 * JSON schema "run_report":
 *   "text"               string   the generated text, valid UTF-8 (U+FFFD for a character the
 *                                 last token left incomplete)
 *   "generated_ids"      array    the generated token ids (integers), which "text" spells where
 *                                 the model has a tokenizer
 *   "store"              string   the store's URL, without any password
 *   "codec"              string   the codec new chunks are stored with
 *   "link_gbps"          number   the link cap applied to fetches; 0: none
 *   "prompt_tokens"      integer  the prompt's tokens (with the BOS the tokenizer added)
 *   "reused_tokens"      integer  of those, restored from the store
 *   "prefilled_tokens"   integer  of those, evaluated
 *   "generated_tokens"   integer  tokens generated
 *   "chunks_reusable"    integer  whole chunks before the prompt's last token
 *   "chunks_found"       integer  of those, stored (from chunk 0 on)
 *   "chunks_fetched"     integer  of those, restored from the store
 *   "tail_tokens"        integer  tokens restored from a stored tail after those chunks (the
 *                                 rest of reused_tokens)
 *   "variants"           array    "codec/level" of each fetched chunk, then of the tail (strings)
 *   "fallback"           string   why reuse stopped before chunks_found, if it did; else ""
 *   "damaged"            boolean  it stopped at a damaged chunk (corrupt, forged, another model's)
 *   "bytes_fetched"      integer  bytes fetched from the store
 *   "ttft_s"             number   seconds from the request to the first token: lookup, fetch,
 *                                 decode, restore, prefill and the first draw
 *   "lookup_s"           number   of which the store lookup
 *   "fetch_s"            number   fetching chunks
 *   "decode_s"           number   decoding them
 *   "restore_s"          number   restoring them into llama.cpp
 *   "prefill_s"          number   prefilling the rest and drawing the first token
 *   "load_s"             number   before the request: the model, calibration, floor, store and a
 *                                 prefill probe
 *   "generate_s"         number   generating after the first token
 *   "store_s"            number   encoding and storing new chunks, after the response
 *   "peak_rss_bytes"     integer  the process's peak resident memory when the job ended
 *   "chunks_stored"      integer  chunks stored
 *   "tail_tokens_stored" integer  tokens stored as a tail after them (0: none, or stored already)
 *   "bytes_stored"       integer  bytes stored (every rung of every chunk, and snapshots)
 *   "llama_state_bytes"  integer  llama.cpp's own state of the prompt, for comparison
 *   "warnings"           array    one-line strings: what failed without stopping the job (a store
 *                                 that cannot be opened or written, a restore that failed)
 *   "quality_floor"      string   how the floor was decided (kvc_quality_floor_json "note")
 *   "stored_levels"      array    "codec/level" of every rung new chunks are stored at (strings) */
KVC_API kvc_status kvc_run_json(const kvc_run_params* params, char** out_json);

typedef struct kvc_server kvc_server;
typedef struct kvc_serve_params {
  const char* model_path;
  const char* store_url;       /* NULL: the embedded default dir:// store */
  const char* codec;           /* how new chunks are stored, within the quality floor; NULL: "kvtc" */
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
  double min_top1;             /* smallest profiled top-1 agreement, at most 1; <= 0: 0.97 */
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

/* The OpenAI-compatible completion server with KV reuse: create (loads the model; *out is the
 * caller's, and params and its strings are copied), start (listens; returns at once), stop
 * (finishes the admitted requests, drains stores), free (stops it first if it runs; NULL is
 * ignored). */
KVC_API kvc_status kvc_server_create(const kvc_serve_params* params, kvc_server** out);
KVC_API kvc_status kvc_server_start(kvc_server* server);
/* The port it listens on; -1 for NULL. */
KVC_API int32_t kvc_server_port(const kvc_server* server);
KVC_API void kvc_server_stop(kvc_server* server);
KVC_API void kvc_server_free(kvc_server* server);

#ifdef __cplusplus
}
#endif

#endif /* KVCODEC_H */
