/* A C program built against an installed kvcodec (pkg-config), as a user would write one: load a
 * model, evaluate a prompt, take its KV cache out into the program's own arrays (K one buffer per
 * layer, [head][token][channel] as Hugging Face keeps it; V transposed, [layer][head][channel]
 * [token], as llama.cpp keeps it without flash attention), build a KV cache from those arrays,
 * encode and decode it, copy the result out into arrays of yet another layout and compare, then
 * restore it into a fresh session and check the restored context continues as the original does.
 * A KV made from arrays the program fills itself goes through the codec too.
 *   consumer MODEL CODEC LEVEL   (LEVEL "-": the codec's default)
 * raw and planes (lossless) must give back every value and bit-identical logits; quant within one
 * quantisation step of the values' range per value; any codec the same greedy next token. */
#include <kvcodec/kvcodec.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(kvc_status status, const char* what) {
  if (status == KVC_OK) return 1;
  fprintf(stderr, "%s failed: %s\n", what, kvc_last_error());
  return 0;
}

/* Float arrays of one of K or V, and where value (layer, token, head, channel) is. */
typedef struct float_array {
  float* buffer; /* one allocation; with per-layer pointers, every layer's window of it */
  void** layers; /* NULL, or n_layers pointers into buffer */
  kvc_kv_array desc;
} float_array;

static float* element(const float_array* a, uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
  float* base = a->layers ? (float*)a->layers[l] : a->buffer + l * a->desc.layer_stride;
  return base + t * a->desc.token_stride + h * a->desc.head_stride + d * a->desc.dim_stride;
}

enum layout { DENSE, PER_LAYER_HEADS_FIRST, TRANSPOSED };

static int make_array(const kvc_shape* s, enum layout layout, float_array* a) {
  const int64_t T = s->n_tokens, H = s->n_kv_heads, D = s->head_dim;
  const size_t layer_elems = (size_t)(T * H * D);
  memset(a, 0, sizeof *a);
  a->buffer = calloc(layer_elems * s->n_layers, sizeof(float));
  if (a->buffer == NULL) return 0;
  switch (layout) {
    case DENSE:
      a->desc.dim_stride = 1, a->desc.head_stride = D, a->desc.token_stride = H * D, a->desc.layer_stride = T * H * D;
      break;
    case PER_LAYER_HEADS_FIRST:
      a->desc.dim_stride = 1, a->desc.token_stride = D, a->desc.head_stride = T * D;
      break;
    case TRANSPOSED:
      a->desc.token_stride = 1, a->desc.dim_stride = T, a->desc.head_stride = D * T, a->desc.layer_stride = H * D * T;
      break;
  }
  if (layout == PER_LAYER_HEADS_FIRST) {
    a->layers = malloc(s->n_layers * sizeof(void*));
    if (a->layers == NULL) return 0;
    for (uint32_t l = 0; l < s->n_layers; ++l) a->layers[l] = a->buffer + l * layer_elems;
    a->desc.layers = a->layers;
    a->desc.size = layer_elems * sizeof(float);
  } else {
    a->desc.data = a->buffer;
    a->desc.size = layer_elems * s->n_layers * sizeof(float);
  }
  return 1;
}

static void free_array(float_array* a) {
  free(a->layers);
  free(a->buffer);
}

/* The largest |a - b| over every value, and the values' range. */
static double max_diff(const kvc_shape* s, const float_array* a, const float_array* b, double* lo, double* hi) {
  double worst = 0;
  for (uint32_t l = 0; l < s->n_layers; ++l)
    for (uint32_t t = 0; t < s->n_tokens; ++t)
      for (uint32_t h = 0; h < s->n_kv_heads; ++h)
        for (uint32_t d = 0; d < s->head_dim; ++d) {
          const double x = *element(a, l, t, h, d), y = *element(b, l, t, h, d);
          if (fabs(x - y) > worst) worst = fabs(x - y);
          if (x < *lo) *lo = x;
          if (x > *hi) *hi = x;
        }
  return worst;
}

static int lossless(const char* codec) { return strcmp(codec, "raw") == 0 || strcmp(codec, "planes") == 0; }

/* The error a codec may leave in a value: none for the lossless ones; for quant at `bits`, one
 * quantisation step of the values' range (a group's step is at most that); unchecked otherwise. */
static int within_codec_error(const char* codec, const char* level, double diff, double lo, double hi) {
  if (lossless(codec)) return diff == 0;
  if (strcmp(codec, "quant") == 0) {
    const int bits = level ? atoi(level) : 8; /* quant's default level is 8 bits */
    return bits > 0 && diff <= (hi - lo) / ((1 << bits) - 1);
  }
  return 1;
}

/* kv (from arrays) -> codec -> decoded (*out) -> arrays of DENSE K and PER_LAYER V, compared with
 * k and v; prints the figures. */
static int codec_round_trip(const char* what, kvc_kv* kv, const float_array* k, const float_array* v, const char* codec,
                            const char* level, const uint8_t fingerprint[16], kvc_kv** out, size_t* encoded_size) {
  kvc_shape s;
  kvc_kv_shape(kv, &s);
  uint8_t* encoded = NULL;
  float_array k_out, v_out;
  int ok = 0;
  memset(&k_out, 0, sizeof k_out);
  memset(&v_out, 0, sizeof v_out);
  if (!check(kvc_encode(kv, 0, 0, codec, level, NULL, fingerprint, &encoded, encoded_size), "kvc_encode")) goto done;
  if (!check(kvc_decode(encoded, *encoded_size, fingerprint, out), "kvc_decode")) goto done;
  if (!make_array(&s, DENSE, &k_out) || !make_array(&s, PER_LAYER_HEADS_FIRST, &v_out)) goto done;
  /* A dtype of any other bits (legal to pass in C, where C++ could not) is refused, not read. */
  if (kvc_kv_to_arrays(*out, (kvc_dtype)99, &k_out.desc, &v_out.desc) != KVC_INVALID_ARGUMENT ||
      kvc_kv_to_arrays(*out, (kvc_dtype)-1, &k_out.desc, &v_out.desc) != KVC_INVALID_ARGUMENT) {
    fprintf(stderr, "%s: kvc_kv_to_arrays took a dtype that is none of kvc_dtype's\n", what);
    goto done;
  }
  if (!check(kvc_kv_to_arrays(*out, KVC_F32, &k_out.desc, &v_out.desc), "kvc_kv_to_arrays")) goto done;
  double lo = 0, hi = 0;
  const double dk = max_diff(&s, k, &k_out, &lo, &hi), dv = max_diff(&s, v, &v_out, &lo, &hi);
  const double diff = dk > dv ? dk : dv;
  printf(
      "%s: %u layers x %u tokens x %u heads x %u channels through %s %s (%zu bytes): max |diff| %.6g, range "
      "[%.4g, %.4g]\n",
      what, s.n_layers, s.n_tokens, s.n_kv_heads, s.head_dim, codec, level ? level : "default", *encoded_size, diff, lo,
      hi);
  if (!within_codec_error(codec, level, diff, lo, hi)) {
    fprintf(stderr, "%s: the values that came back differ by more than %s allows\n", what, codec);
    goto done;
  }
  ok = 1;
done:
  kvc_free(encoded);
  free_array(&k_out);
  free_array(&v_out);
  return ok;
}

/* A KV of the program's own making: values it computes, in arrays it lays out, through the codec. */
static int own_values_round_trip(const char* codec, const char* level, const uint8_t fingerprint[16]) {
  const kvc_shape s = {2, 2, 64, 40, KVC_F32, 0};
  float_array k, v;
  kvc_kv *kv = NULL, *decoded = NULL;
  size_t encoded_size = 0;
  int ok = 0;
  memset(&k, 0, sizeof k);
  memset(&v, 0, sizeof v);
  if (!make_array(&s, TRANSPOSED, &k) || !make_array(&s, PER_LAYER_HEADS_FIRST, &v)) goto done;
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t t = 0; t < s.n_tokens; ++t)
      for (uint32_t h = 0; h < s.n_kv_heads; ++h)
        for (uint32_t d = 0; d < s.head_dim; ++d) {
          /* Exact in fp16, so an fp16 codec (raw) can give every value back. */
          *element(&k, l, t, h, d) = (float)((int)((l * 31 + t * 7 + h * 5 + d * 3) % 97) - 48) / 16.0f;
          *element(&v, l, t, h, d) = (float)((int)((l * 13 + t * 11 + h * 3 + d) % 61) - 30) / 8.0f;
        }
  if (!check(kvc_kv_from_arrays(&s, &k.desc, &v.desc, &kv), "kvc_kv_from_arrays")) goto done;
  if (!codec_round_trip("own values", kv, &k, &v, codec, level, fingerprint, &decoded, &encoded_size)) goto done;
  ok = 1;
done:
  kvc_kv_free(decoded);
  kvc_kv_free(kv);
  free_array(&k);
  free_array(&v);
  return ok;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: consumer MODEL CODEC LEVEL\n");
    return 2;
  }
  const char* codec = argv[2];
  const char* level = strcmp(argv[3], "-") == 0 ? NULL : argv[3];
  const char* text =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity.";
  kvc_model* model = NULL;
  kvc_session *original = NULL, *restored = NULL;
  kvc_sampler* sampler = NULL;
  kvc_kv *kv = NULL, *mine = NULL, *decoded = NULL;
  float_array k_arrays, v_arrays;
  int32_t* tokens = NULL;
  float* original_logits = NULL;
  char* piece = NULL;
  size_t n_tokens = 0, encoded_size = 0, n_vocab = 0, n_vocab_restored = 0;
  const float* logits = NULL;
  int32_t original_next = -1, restored_next = -1;
  uint8_t fingerprint[16];
  int ok = 0;
  memset(&k_arrays, 0, sizeof k_arrays);
  memset(&v_arrays, 0, sizeof v_arrays);

  printf("kvcodec %s\n", kvc_version());
  if (!check(kvc_model_load(argv[1], &model), "kvc_model_load")) goto done;
  kvc_model_fingerprint(model, fingerprint);
  if (!own_values_round_trip(codec, level, fingerprint)) goto done;
  if (!check(kvc_model_tokenize(model, text, strlen(text), 1, &tokens, &n_tokens), "kvc_model_tokenize")) goto done;
  if (n_tokens < 8) {
    fprintf(stderr, "only %zu tokens\n", n_tokens);
    goto done;
  }

  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 256;
  params.n_threads = 1;
  /* The prompt but its last token, the KV cache of that, then the last token's logits. */
  if (!check(kvc_session_create(model, &params, &original), "kvc_session_create")) goto done;
  if (!check(kvc_session_eval(original, tokens, n_tokens - 1), "kvc_session_eval")) goto done;
  if (!check(kvc_session_extract(original, &kv), "kvc_session_extract")) goto done;
  if (!check(kvc_session_eval(original, tokens + n_tokens - 1, 1), "kvc_session_eval")) goto done;
  if (!check(kvc_session_logits(original, &logits, &n_vocab), "kvc_session_logits")) goto done;
  original_logits = malloc(n_vocab * sizeof(float));
  if (original_logits == NULL) goto done;
  memcpy(original_logits, logits, n_vocab * sizeof(float));
  kvc_sampler_params sampling;
  kvc_sampler_default_params(&sampling); /* greedy */
  /* kvc_run_params holds the same struct, with the same defaults. */
  kvc_run_params run;
  kvc_run_default_params(&run);
  if (run.sampling.temperature != sampling.temperature || run.sampling.top_p != 1.0f || run.sampling.has_seed != 0) {
    fprintf(stderr, "kvc_run_default_params' sampling is not greedy\n");
    goto done;
  }
  if (!check(kvc_sampler_create(model, &sampling, &sampler), "kvc_sampler_create")) goto done;
  if (!check(kvc_sampler_next(sampler, original, &original_next), "kvc_sampler_next")) goto done;

  /* The cache into the program's own arrays (as f32), and a cache made of those arrays again. */
  kvc_shape shape;
  kvc_kv_shape(kv, &shape);
  if (!make_array(&shape, PER_LAYER_HEADS_FIRST, &k_arrays) || !make_array(&shape, TRANSPOSED, &v_arrays)) goto done;
  if (!check(kvc_kv_to_arrays(kv, KVC_F32, &k_arrays.desc, &v_arrays.desc), "kvc_kv_to_arrays")) goto done;
  shape.dtype = KVC_F32;
  if (!check(kvc_kv_from_arrays(&shape, &k_arrays.desc, &v_arrays.desc, &mine), "kvc_kv_from_arrays")) goto done;
  if (!codec_round_trip("model's KV", mine, &k_arrays, &v_arrays, codec, level, fingerprint, &decoded, &encoded_size))
    goto done;

  if (!check(kvc_session_create(model, &params, &restored), "kvc_session_create")) goto done;
  if (!check(kvc_session_restore(restored, decoded), "kvc_session_restore")) goto done;
  if (kvc_session_logits(restored, &logits, &n_vocab_restored) == KVC_OK) {
    fprintf(stderr, "a restored session reported logits before any eval\n");
    goto done;
  }
  if (!check(kvc_session_eval(restored, tokens + n_tokens - 1, 1), "kvc_session_eval")) goto done;
  if (!check(kvc_session_logits(restored, &logits, &n_vocab_restored), "kvc_session_logits")) goto done;
  if (n_vocab_restored != n_vocab) {
    fprintf(stderr, "vocabularies differ: %zu vs %zu\n", n_vocab, n_vocab_restored);
    goto done;
  }
  if (!check(kvc_sampler_next(sampler, restored, &restored_next), "kvc_sampler_next")) goto done;

  double max_logit_diff = 0;
  for (size_t i = 0; i < n_vocab; ++i) {
    const double d = fabs((double)logits[i] - (double)original_logits[i]);
    if (d > max_logit_diff) max_logit_diff = d;
  }
  if (!check(kvc_model_detokenize(model, &restored_next, 1, &piece), "kvc_model_detokenize")) goto done;
  printf("%s %s: %zu tokens, %zu bytes encoded, max |logit diff| %.6g, next token %d (%d) \"%s\"\n", codec,
         level ? level : "default", n_tokens, encoded_size, max_logit_diff, restored_next, original_next, piece);
  if (lossless(codec) && max_logit_diff != 0) {
    fprintf(stderr, "%s must restore bit-identical logits\n", codec);
    goto done;
  }
  if (restored_next != original_next) {
    fprintf(stderr, "the restored context continues with another token\n");
    goto done;
  }
  ok = 1;

done:
  kvc_free(piece);
  free(original_logits);
  kvc_free(tokens);
  free_array(&k_arrays);
  free_array(&v_arrays);
  kvc_kv_free(decoded);
  kvc_kv_free(mine);
  kvc_kv_free(kv);
  kvc_sampler_free(sampler);
  kvc_session_free(restored);
  kvc_session_free(original);
  kvc_model_free(model);
  return ok ? 0 : 1;
}
