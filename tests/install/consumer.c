/* A C program built against an installed kvcodec (pkg-config), as a user would write one: load a
 * model, evaluate a prompt, take its KV cache out, encode and decode it, restore it into a fresh
 * session and check the restored context continues exactly as the original does.
 *   consumer MODEL CODEC LEVEL   (LEVEL "-": the codec's default)
 * raw must give bit-identical logits; any other codec must pick the same greedy next token. */
#include <kvcodec/kvcodec.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(kvc_status status, const char* what) {
  if (status == KVC_OK) return 1;
  fprintf(stderr, "%s failed: %s\n", what, kvc_last_error());
  return 0;
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
  kvc_kv *kv = NULL, *decoded = NULL;
  int32_t* tokens = NULL;
  uint8_t* encoded = NULL;
  float* original_logits = NULL;
  char* piece = NULL;
  size_t n_tokens = 0, encoded_size = 0, n_vocab = 0, n_vocab_restored = 0;
  const float* logits = NULL;
  int32_t original_next = -1, restored_next = -1;
  uint8_t fingerprint[16];
  int ok = 0;

  printf("kvcodec %s\n", kvc_version());
  if (!check(kvc_model_load(argv[1], &model), "kvc_model_load")) goto done;
  kvc_model_fingerprint(model, fingerprint);
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

  if (!check(kvc_encode(kv, 0, 0, codec, level, NULL, fingerprint, &encoded, &encoded_size), "kvc_encode")) goto done;
  if (!check(kvc_decode(encoded, encoded_size, fingerprint, &decoded), "kvc_decode")) goto done;
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

  double max_diff = 0;
  for (size_t i = 0; i < n_vocab; ++i) {
    const double d = fabs((double)logits[i] - (double)original_logits[i]);
    if (d > max_diff) max_diff = d;
  }
  if (!check(kvc_model_detokenize(model, &restored_next, 1, &piece), "kvc_model_detokenize")) goto done;
  printf("%s %s: %zu tokens, %zu bytes encoded, max |logit diff| %.6g, next token %d (%d) \"%s\"\n", codec,
         level ? level : "default", n_tokens, encoded_size, max_diff, restored_next, original_next, piece);
  if (strcmp(codec, "raw") == 0 && max_diff != 0) {
    fprintf(stderr, "raw must restore bit-identical logits\n");
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
  kvc_free(encoded);
  kvc_free(tokens);
  kvc_kv_free(decoded);
  kvc_kv_free(kv);
  kvc_sampler_free(sampler);
  kvc_session_free(restored);
  kvc_session_free(original);
  kvc_model_free(model);
  return ok ? 0 : 1;
}
