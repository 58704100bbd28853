// The accuracy harness every codec is judged by: for held-out documents, prefill a context,
// take its KV out, encode, decode, restore into a fresh context, teacher-force a continuation
// and compare the next-token distributions with the uncompressed run.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "codecs/codec.h"
#include "llama/llama_model.h"
#include "llama/llama_session.h"

namespace kvc {

struct EvalOptions {
  std::string model_path;
  std::string text_path;  // empty: eval.txt beside the model
  // Instead of text: one document per line of token ids (quality/token_file.h). Each of the first
  // n_docs lines with at least ctx + cont + 1 tokens (the model's BOS prepended when it has one
  // and the line does not start with it) gives one document, its first ctx + cont + 1 tokens;
  // with docs_from_end, the lines one after another are cut into windows as a text is.
  std::string token_path;
  std::string codec = "raw";
  EncodeOptions encode;
  std::string calibration;  // .kvcal for kvtc; empty: <model>.kvcal beside the model, if present
  uint32_t n_docs = 8;
  uint32_t ctx = 1024;         // context tokens per document (any BOS included) whose KV is compressed
  uint32_t cont = 128;         // teacher-forced continuation tokens scored after the context
  bool docs_from_end = false;  // the last n_docs windows of the text (or token file) instead of the first
  SessionOptions session;
  bool progress = true;
};

struct EvalReport {
  std::string model;
  std::string codec;
  std::string level;
  std::string kv_dtype;
  uint32_t n_docs = 0;
  uint32_t ctx = 0;
  uint32_t cont = 0;
  uint64_t bytes_fp16 = 0;    // KV of every context as fp16
  uint64_t bytes_stored = 0;  // every byte of every .kvc file
  double compression_ratio = 0;
  double ppl_base = 0;
  double ppl_codec = 0;
  double ppl_delta_pct = 0;
  double top1_agreement = 0;
  double kl_mean = 0;
  double encode_mb_s = 0;  // MB (1e6 bytes) of fp16 KV per second, one thread
  double decode_mb_s = 0;
  double seconds = 0;
};

Result<EvalReport> RunEval(const EvalOptions& options);

// Several (codec, encode options) at once on the same documents: each document's uncompressed
// run is made once and serves every rung (options.codec and options.encode are not used).
struct EvalRung {
  std::string codec;
  EncodeOptions encode;
};
Result<std::vector<EvalReport>> RunEvalRungs(const EvalOptions& options, const std::vector<EvalRung>& rungs);

// The report as one JSON object (field names are part of the CLI's contract).
std::string EvalReportJson(const EvalReport& report);

// The documents of an evaluation or a profile: `n_docs` of `doc_tokens` tokens (the model's BOS
// first where it has one) from a text (tokenised) or a token file (quality/token_file.h). From a
// token file, each document is the start of one line long enough (DocumentsFromTokenLines),
// unless `from_end`: then, as from a text, the source's tokens one after another are cut into
// windows, the last n_docs of them (what calibrate held back of its input). `max_tokens` (0: all)
// keeps only the source's first tokens, as calibrate's --tokens does.
struct DocumentSource {
  std::string text_path;
  std::string token_path;  // instead of text_path
  uint32_t max_tokens = 0;
};
Result<std::vector<std::vector<int32_t>>> LoadDocuments(const LlamaModel& model, const DocumentSource& source,
                                                        uint32_t n_docs, uint32_t doc_tokens, bool from_end);
// The source's tokens one after another (a token file's lines concatenated, a text tokenised
// without BOS), its first max_tokens: what calibrate fits on and LoadDocuments cuts from_end.
Result<std::vector<int32_t>> LoadTokenStream(const LlamaModel& model, const DocumentSource& source);

// How a restored run's next-token distribution at one position compares with the uncompressed
// run's, for the token that follows there.
struct PositionScore {
  double nll_base = 0;
  double nll_codec = 0;
  double kl = 0;       // KL(base || restored), nats, >= 0
  bool agree = false;  // the same argmax
};
// Position scores summed (over a document's positions in a window, or a whole evaluation).
struct DocumentSums {
  double nll_base = 0;
  double nll_codec = 0;
  double kl = 0;
  uint64_t agree = 0;
  uint64_t positions = 0;
  void Add(const PositionScore& p);
};

// One row of the uncompressed run, which every rung is scored against: its logits copied
// (llama.cpp overwrites them at the next Eval), with what each comparison needs of it computed
// once rather than once per rung.
struct ReferenceRow {
  std::vector<float> logits;
  double log_z = 0;  // log of the softmax's normaliser: log-probability = logit - log_z
  size_t argmax = 0;
};
// Rows 0..n-1 of the session's last Eval.
std::vector<ReferenceRow> CopyReferenceRows(LlamaSession& session, uint32_t n);
// Scores rows 0..targets.size()-1 of `restored`'s last Eval against `reference`.
std::vector<PositionScore> ScoreRows(const std::vector<ReferenceRow>& reference, LlamaSession& restored,
                                     std::span<const int32_t> targets);

// Splits a token stream into `n_docs` documents of `doc_tokens` tokens, each starting with `bos`
// (bos < 0: the model has none, and documents are the stream's tokens alone).
Result<std::vector<std::vector<int32_t>>> MakeDocuments(const std::vector<int32_t>& stream, int32_t bos,
                                                        uint32_t n_docs, uint32_t doc_tokens);

// The same from pre-tokenised documents (see EvalOptions::token_path); bos < 0: none is added.
Result<std::vector<std::vector<int32_t>>> DocumentsFromTokenLines(const std::vector<std::vector<int32_t>>& lines,
                                                                  int32_t bos, uint32_t n_docs, uint32_t doc_tokens);

}  // namespace kvc
