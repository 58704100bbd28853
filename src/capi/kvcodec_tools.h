/* The command line's entry points beyond the C API: evaluation, calibration, quality profiles and
 * the benchmarks, each a parameter struct in and a JSON report out, with the C API's conventions
 * (kvc_status, kvc_last_error(), the report freed with kvc_free()). Not part of libkvcodec: the
 * `kvcodec` command links them statically (kvcodec_tools), with the C API, so the shipped library
 * carries neither the evaluator, the calibration fit, the benchmarks nor their dependencies. */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvcodec/kvcodec.hpp"

extern "C" {

typedef struct kvc_eval_params {
  const char* model_path;
  const char* text_path;      /* NULL: eval.txt beside the model */
  const char* codec;          /* NULL: "raw" */
  const char* level;          /* NULL: the codec's default */
  const char* codec_params;   /* "key=value,key=value" or NULL */
  uint32_t n_docs, ctx, cont; /* 0: 8, 1024, 128 */
  int32_t n_threads;
  kvc_dtype cache_type;
  int progress;            /* non-zero: a progress line on stderr */
  const char* calibration; /* .kvcal for kvtc; NULL: <model>.kvcal beside the model, if present */
  const char* token_path;  /* instead of text: one document per line of space-separated token ids */
} kvc_eval_params;

typedef struct kvc_calibrate_params {
  const char* model_path;
  const char* text_path; /* NULL: calib.txt beside the model */
  const char* out_path;  /* NULL: <model>.kvcal beside the model */
  const char* grouping;  /* "layer", "layer-head", "all"; NULL or "auto": the better of layer and layer-head */
  uint32_t group_size;   /* token-group components per scale; 0: the best of 8, 16, 32 */
  uint32_t max_tokens;   /* 0: the whole text */
  uint32_t window;       /* 0: min(1024, the model's training context) */
  int32_t n_threads;
  int progress;
  const char* quantizer;  /* "token-group", "component"; NULL or "auto": the better one */
  const char* token_path; /* instead of text: one document per line of space-separated token ids */
  uint32_t chunk_tokens;  /* tokens per chunk sizes are measured at; 0: 256 */
} kvc_calibrate_params;

typedef struct kvc_profile_params {
  const char* model_path;
  const char* text_path;   /* NULL: calib.txt beside the model (its last windows: what calibrate held back) */
  const char* calibration; /* NULL: <model>.kvcal beside the model, if present (else kvtc is not profiled) */
  const char* out_path;    /* NULL: <model>.kvprof.json beside the model */
  uint32_t docs;           /* 0: enough for 1024 scored positions, at least 8 */
  uint32_t ctx;            /* 0: min(1024, training context) - cont - 1 */
  uint32_t cont;           /* 0: min(128, training context / 4) */
  int32_t n_threads;
  int progress;
} kvc_profile_params;

/* Measures every rung of every codec on the model and writes its quality profile (JSON, caller frees). */
kvc_status kvc_profile_json(const kvc_profile_params* params, char** out_json);

/* Fits a KVTC calibration and writes it; the report is a JSON object (caller frees). */
kvc_status kvc_calibrate_json(const kvc_calibrate_params* params, char** out_json);

/* The ids of a token file (one document per line, ids separated by spaces or tabs, as calibrate and
 * eval read with token_path), every document one after another, each id checked against n_vocab.
 * The caller frees *out_tokens. */
kvc_status kvc_read_token_file(const char* path, uint32_t n_vocab, int32_t** out_tokens, size_t* out_n);

typedef struct kvc_bench_codec_params {
  const char* model_path;
  const char* text_path;   /* NULL: eval.txt beside the model */
  const char* calibration; /* NULL: <model>.kvcal beside the model, if present */
  const char* codec;       /* NULL: "kvtc" */
  const char* level;
  const char* codec_params;
  uint32_t ctx;       /* 0: 1024 */
  uint32_t chunk;     /* 0: 256 */
  int32_t n_threads;  /* 0: every core */
  double min_seconds; /* 0: 1.0 */
} kvc_bench_codec_params;

/* Codec encode/decode MB/s on a real KV cache, one thread and all cores, beside memcpy (JSON). */
kvc_status kvc_bench_codec_json(const kvc_bench_codec_params* params, char** out_json);

typedef struct kvc_bench_video_params {
  const char* model_path;
  const char* text_path; /* NULL: eval.txt beside the model */
  const char* preset;    /* NULL: "medium" (x265/x264) */
  uint32_t ctx;          /* 0: 1024 */
  uint32_t chunk;        /* 0: 256 */
  double min_seconds;    /* 0: 0.3, per decode-speed measurement */
  int32_t quiet;         /* non-zero: no progress line on stderr */
} kvc_bench_video_params;

/* The video codec's layout ablation on a real KV cache: 8-bit codes alone, general-purpose
 * coders on them, each layout step with each video coder (ratio, decode MB/s), and per layer
 * the neighbouring-token difference ratio (JSON, caller frees). */
kvc_status kvc_bench_video_json(const kvc_bench_video_params* params, char** out_json);

typedef struct kvc_bench_rotquant_params {
  const char* model_path;
  const char* text_path; /* NULL: eval.txt beside the model */
  uint32_t ctx;          /* 0: 1024 */
  uint32_t chunk;        /* 0: 256 */
  double min_seconds;    /* 0: 0.3, per decode-speed measurement */
  int32_t quiet;         /* non-zero: no progress line on stderr */
} kvc_bench_rotquant_params;

/* rotquant's optional parts on a real KV cache, per bit width: entropy-coded codes and scales
 * (size, decode MB/s beside the plain decoder), a residual sign bit, a QJL residual sketch, and
 * keys coded with RoPE undone (relative errors) (JSON, caller frees). */
kvc_status kvc_bench_rotquant_json(const kvc_bench_rotquant_params* params, char** out_json);

typedef struct kvc_bench_ttft_params {
  const char* model_path;
  const char* text_path;   /* NULL: eval.txt beside the model */
  const char* calibration; /* NULL: <model>.kvcal beside the model */
  const char* codecs;      /* "a,b,..."; NULL: every codec */
  const char* link_gbps;   /* "0.01,0.1,..."; NULL: 0.01 0.03 0.1 0.3 1 3 10 */
  uint32_t prompt_tokens;  /* 0: 4096 */
  uint32_t chunk_tokens;   /* 0: 256 */
  uint32_t repeats;        /* 0: 3 (median reported) */
  int32_t n_threads;
  int32_t quiet;
  const char* profile;       /* quality profile; NULL: <model>.kvprof.json beside the model, if any (without
                                one only raw fp16, lossless, is stored and fetched) */
  double max_ppl_delta;      /* largest profiled perplexity change a rung may have, percent; <= 0: 1.0 */
  double min_top1;           /* smallest profiled top-1 agreement; <= 0: 0.97 */
  const char* prefix_tokens; /* "1024,4096,..." stored prefix lengths measured; NULL: prompt_tokens - chunk_tokens */
  int32_t n_fetch_threads;   /* workers chunks decode on; 0: one per core */
} kvc_bench_ttft_params;

/* TTFT of a long prompt with a stored prefix, per codec and link rate, beside recompute and each
 * run's bound, plus a labelled projection to 7B-70B shapes (JSON, caller frees). */
kvc_status kvc_bench_ttft_json(const kvc_bench_ttft_params* params, char** out_json);

/* Runs the accuracy evaluation; the report is a JSON object (caller frees). */
kvc_status kvc_eval_json(const kvc_eval_params* params, char** out_json);

typedef struct kvc_bench_serve_params {
  const char* model_path;
  const char* text_path;   /* prompts are cut from it; NULL: eval.txt beside the model */
  const char* calibration; /* NULL: <model>.kvcal beside the model */
  const char* codec;       /* how the servers store chunks; NULL: "kvtc" */
  const char* configs;     /* "none,fifo,kv-aware" (NULL) or a subset, in the order given */
  const char* url;         /* non-NULL: one configuration against the server at http://host:port instead */
  double link_gbps;        /* the in-process servers' fetch link cap; 0: uncapped (the CLI's default is 0.003) */
  double rate;             /* requests per second, Poisson arrivals; 0: 0.75 */
  double shared_fraction;  /* of the requests, those sharing a long prefix, in (0, 1]; 0: 0.5 */
  uint32_t requests;       /* per configuration; 0: 60 */
  uint32_t prefixes;       /* distinct shared documents; 0: 4 */
  uint32_t prefix_tokens;  /* 0: 3072 */
  uint32_t suffix_tokens;  /* each shared-prefix request's own text after it; 0: 24 */
  uint32_t unique_tokens;  /* no-prefix prompts, 0.8x to 1.2x this; 0: 160 */
  uint32_t max_tokens;     /* completion tokens per request; 0: 16 */
  int32_t n_parallel;      /* the servers' sequences decoded together; 0: 8 */
  int32_t n_fetch_threads; /* 0: 1 */
  int32_t n_threads;       /* llama.cpp threads of the servers; 0: the cores the fetch threads leave */
  uint64_t seed;           /* the trace's; 0: 1 */
  int32_t plan_recompute;  /* nonzero: the planner may recompute chunks instead of fetching them */
  int32_t quiet;
} kvc_bench_serve_params;

/* Load generator for the completion server: one trace of shared-prefix and no-prefix streaming
 * requests replayed against a fresh in-process server per configuration (no reuse, FIFO,
 * KV-aware); TTFT percentiles and hit rate per class, throughput (JSON, caller frees). */
kvc_status kvc_bench_serve_json(const kvc_bench_serve_params* params, char** out_json);
}  // extern "C"

namespace kvcodec {

// The reports as strings, in kvcodec.hpp's style.
template <typename Params>
Outcome<std::string> ToolJson(kvc_status (*tool)(const Params*, char**), const Params& params) {
  char* json = nullptr;
  if (kvc_status s = tool(&params, &json); s != KVC_OK) return LastError(s);
  return TakeString(json);
}
inline Outcome<std::string> EvalJson(const kvc_eval_params& p) { return ToolJson(kvc_eval_json, p); }
inline Outcome<std::string> CalibrateJson(const kvc_calibrate_params& p) { return ToolJson(kvc_calibrate_json, p); }
inline Outcome<std::vector<int32_t>> ReadTokenFile(const std::string& path, uint32_t n_vocab) {
  int32_t* tokens = nullptr;
  size_t n = 0;
  if (kvc_status s = kvc_read_token_file(path.c_str(), n_vocab, &tokens, &n); s != KVC_OK) return LastError(s);
  std::unique_ptr<int32_t, Freer> owned(tokens);
  return std::vector<int32_t>(tokens, tokens + n);
}
inline Outcome<std::string> ProfileJson(const kvc_profile_params& p) { return ToolJson(kvc_profile_json, p); }
inline Outcome<std::string> BenchCodecJson(const kvc_bench_codec_params& p) {
  return ToolJson(kvc_bench_codec_json, p);
}
inline Outcome<std::string> BenchVideoJson(const kvc_bench_video_params& p) {
  return ToolJson(kvc_bench_video_json, p);
}
inline Outcome<std::string> BenchRotQuantJson(const kvc_bench_rotquant_params& p) {
  return ToolJson(kvc_bench_rotquant_json, p);
}
inline Outcome<std::string> BenchTtftJson(const kvc_bench_ttft_params& p) { return ToolJson(kvc_bench_ttft_json, p); }
inline Outcome<std::string> BenchServeJson(const kvc_bench_serve_params& p) {
  return ToolJson(kvc_bench_serve_json, p);
}

}  // namespace kvcodec
