#include "quality/evaluator.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <vector>

#include "base/progress.h"
#include "base/report_json.h"
#include "llama/model_files.h"
#include "quality/token_file.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// log of sum(exp(logits)), in double for stable sums: logit - LogNormaliser is the log-softmax.
double LogNormaliser(std::span<const float> logits) {
  double max = -INFINITY;
  for (float v : logits) max = std::max(max, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
  return max + std::log(sum);
}

size_t ArgMax(std::span<const float> v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

}  // namespace

Result<std::vector<std::vector<int32_t>>> MakeDocuments(const std::vector<int32_t>& stream, int32_t bos,
                                                        uint32_t n_docs, uint32_t doc_tokens) {
  if (doc_tokens < 2) return InvalidArgument("documents need at least 2 tokens");
  const size_t body = doc_tokens - (bos >= 0 ? 1 : 0);
  const size_t available = stream.size() / body;
  if (available < n_docs) {
    return InvalidArgument(
        FormatMessage("evaluation text has %zu tokens: enough for %zu documents of %u tokens, not %u", stream.size(),
                      available, doc_tokens, n_docs));
  }
  std::vector<std::vector<int32_t>> docs(n_docs);
  for (uint32_t d = 0; d < n_docs; ++d) {
    docs[d].reserve(doc_tokens);
    if (bos >= 0) docs[d].push_back(bos);
    docs[d].insert(docs[d].end(), stream.begin() + d * body, stream.begin() + (d + 1) * body);
  }
  return docs;
}

Result<std::vector<std::vector<int32_t>>> DocumentsFromTokenLines(const std::vector<std::vector<int32_t>>& lines,
                                                                  int32_t bos, uint32_t n_docs, uint32_t doc_tokens) {
  std::vector<std::vector<int32_t>> docs;
  for (const auto& line : lines) {
    if (docs.size() == n_docs) break;
    std::vector<int32_t> doc;
    doc.reserve(doc_tokens);
    if (bos >= 0 && (line.empty() || line.front() != bos)) doc.push_back(bos);
    const size_t take = std::min<size_t>(line.size(), doc_tokens - doc.size());
    doc.insert(doc.end(), line.begin(), line.begin() + static_cast<std::ptrdiff_t>(take));
    if (doc.size() == doc_tokens) docs.push_back(std::move(doc));
  }
  if (docs.size() < n_docs) {
    return InvalidArgument(
        FormatMessage("the token file has %zu documents of at least %u tokens (ctx + cont + 1%s); --docs asks for %u",
                      docs.size(), doc_tokens, bos >= 0 ? ", BOS included" : "", n_docs));
  }
  return docs;
}

void DocumentSums::Add(const PositionScore& p) {
  nll_base += p.nll_base;
  nll_codec += p.nll_codec;
  kl += p.kl;
  agree += p.agree ? 1 : 0;
  ++positions;
}

Result<std::vector<int32_t>> LoadTokenStream(const LlamaModel& model, const DocumentSource& source) {
  std::vector<int32_t> stream;
  if (!source.token_path.empty()) {
    ASSIGN_OR_RETURN(auto lines, ReadTokenFile(source.token_path, model.info().n_vocab));
    for (const auto& line : lines) stream.insert(stream.end(), line.begin(), line.end());
  } else {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(source.text_path));
    ASSIGN_OR_RETURN(stream, model.Tokenize(text, /*add_bos=*/false));
  }
  if (source.max_tokens > 0 && stream.size() > source.max_tokens) stream.resize(source.max_tokens);
  return stream;
}

Result<std::vector<std::vector<int32_t>>> LoadDocuments(const LlamaModel& model, const DocumentSource& source,
                                                        uint32_t n_docs, uint32_t doc_tokens, bool from_end) {
  if (!source.token_path.empty() && !from_end) {
    ASSIGN_OR_RETURN(auto lines, ReadTokenFile(source.token_path, model.info().n_vocab));
    return DocumentsFromTokenLines(lines, model.bos_token(), n_docs, doc_tokens);
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> stream, LoadTokenStream(model, source));
  if (from_end) {
    const size_t want = size_t{n_docs} * (doc_tokens - (model.has_bos() ? 1 : 0));
    if (stream.size() > want) stream.erase(stream.begin(), stream.end() - static_cast<std::ptrdiff_t>(want));
  }
  return MakeDocuments(stream, model.bos_token(), n_docs, doc_tokens);
}

std::vector<ReferenceRow> CopyReferenceRows(LlamaSession& session, uint32_t n) {
  std::vector<ReferenceRow> rows(n);
  for (uint32_t i = 0; i < n; ++i) {
    const auto row = session.Logits(static_cast<int>(i));
    rows[i].logits.assign(row.begin(), row.end());
    rows[i].log_z = LogNormaliser(row);
    rows[i].argmax = ArgMax(row);
  }
  return rows;
}

std::vector<PositionScore> ScoreRows(const std::vector<ReferenceRow>& reference, LlamaSession& restored,
                                     std::span<const int32_t> targets) {
  std::vector<PositionScore> out(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const ReferenceRow& base = reference[i];
    const auto codec_row = restored.Logits(static_cast<int>(i));
    const double codec_log_z = LogNormaliser(codec_row);
    const auto target = static_cast<size_t>(targets[i]);
    PositionScore& p = out[i];
    p.nll_base = -(static_cast<double>(base.logits[target]) - base.log_z);
    p.nll_codec = -(static_cast<double>(codec_row[target]) - codec_log_z);
    double kl = 0;
    for (size_t v = 0; v < base.logits.size(); ++v) {
      const double lp_base = static_cast<double>(base.logits[v]) - base.log_z;
      const double lp_codec = static_cast<double>(codec_row[v]) - codec_log_z;
      kl += std::exp(lp_base) * (lp_base - lp_codec);
    }
    p.kl = std::max(0.0, kl);
    p.agree = base.argmax == ArgMax(codec_row);
  }
  return out;
}

Result<EvalReport> RunEval(const EvalOptions& options) {
  ASSIGN_OR_RETURN(std::vector<EvalReport> reports, RunEvalRungs(options, {{options.codec, options.encode}}));
  return std::move(reports.front());
}

Result<std::vector<EvalReport>> RunEvalRungs(const EvalOptions& options, const std::vector<EvalRung>& rungs) {
  if (options.n_docs == 0) return InvalidArgument("--docs must be at least 1");
  if (options.ctx < 2) return InvalidArgument("--ctx must be at least 2");
  if (options.cont < 1 || options.cont > 4096) return InvalidArgument("--cont must be in 1..4096");
  if (rungs.empty()) return InvalidArgument("no codec to evaluate");
  std::vector<const Codec*> codecs;
  for (const EvalRung& rung : rungs) {
    const Codec* codec = FindCodec(rung.codec);
    if (codec == nullptr) return InvalidArgument("unknown codec '" + rung.codec + "' (see `kvcodec codecs`)");
    codecs.push_back(codec);
  }

  const auto t_start = Clock::now();
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(options.model_path));
  RETURN_IF_ERROR(model->CheckKeepsKv());
  const uint32_t doc_tokens = options.ctx + options.cont + 1;
  const DocumentSource source{
      .text_path = options.token_path.empty() ? BesideModel(options.model_path, "eval.txt", options.text_path) : "",
      .token_path = options.token_path};
  ASSIGN_OR_RETURN(auto docs, LoadDocuments(*model, source, options.n_docs, doc_tokens, options.docs_from_end));

  CalibrationRegistry calibrations;
  RETURN_IF_ERROR(LoadModelCalibration(calibrations, options.model_path, options.calibration));
  // One thread: encode_mb_s and decode_mb_s are per-core figures.
  const CodecContext codec_context{&calibrations, &model->fingerprint(), nullptr};

  SessionOptions session_options = options.session;
  session_options.n_ctx = options.ctx + options.cont + 16;
  session_options.n_batch = std::max<uint32_t>(512, options.cont);
  session_options.require_kv = true;
  ASSIGN_OR_RETURN(auto base, LlamaSession::Create(*model, session_options));
  ASSIGN_OR_RETURN(auto restored, LlamaSession::Create(*model, session_options));

  struct Sums {
    DocumentSums scores;
    double encode_s = 0, decode_s = 0;
  };
  std::vector<EvalReport> reports(rungs.size());
  std::vector<Sums> sums(rungs.size());
  for (size_t k = 0; k < rungs.size(); ++k) {
    EvalReport& report = reports[k];
    report.model = options.model_path;
    report.codec = codecs[k]->info().name;
    report.n_docs = options.n_docs;
    report.ctx = options.ctx;
    report.cont = options.cont;
    report.kv_dtype = DTypeName(session_options.cache_type);
  }

  // One base run per document serves every rung: only the restored continuation is per rung.
  ProgressBar progress(rungs.size() == 1 ? "eval " + reports[0].codec : "eval", options.n_docs * rungs.size(),
                       options.progress);
  for (const auto& doc : docs) {
    const std::span<const int32_t> context(doc.data(), options.ctx);
    const std::span<const int32_t> cont_in(doc.data() + options.ctx, options.cont);

    base->Clear();
    RETURN_IF_ERROR(base->Eval(context, false));
    ASSIGN_OR_RETURN(KvCache kv, base->ExtractKv());
    RETURN_IF_ERROR(base->Eval(cont_in, true));
    const auto base_rows = CopyReferenceRows(*base, options.cont);

    for (size_t k = 0; k < rungs.size(); ++k) {
      EvalReport& report = reports[k];
      Sums& sum = sums[k];
      const auto t0 = Clock::now();
      ASSIGN_OR_RETURN(std::vector<uint8_t> file,
                       EncodeKvc(*codecs[k], kv.View(), rungs[k].encode, model->fingerprint(), 0, codec_context));
      const auto t1 = Clock::now();
      ASSIGN_OR_RETURN(KvCache decoded, DecodeKvc(file, &model->fingerprint(), codec_context));
      const auto t2 = Clock::now();
      sum.encode_s += Seconds(t0, t1);
      sum.decode_s += Seconds(t1, t2);
      if (report.level.empty()) {
        ASSIGN_OR_RETURN(KvcFile parsed, ReadKvc(file));
        report.level = parsed.header.level;
      }
      report.bytes_fp16 += kv.shape().fp16_bytes();
      report.bytes_stored += file.size();

      restored->Clear();
      RETURN_IF_ERROR(restored->RestoreKv(decoded));
      RETURN_IF_ERROR(restored->Eval(cont_in, true));
      const auto targets = std::span(doc).subspan(options.ctx + 1, options.cont);
      for (const PositionScore& p : ScoreRows(base_rows, *restored, targets)) sum.scores.Add(p);
      progress.Advance();
    }
  }
  progress.Finish();

  const double seconds = Seconds(t_start, Clock::now());
  for (size_t k = 0; k < rungs.size(); ++k) {
    EvalReport& report = reports[k];
    const Sums& sum = sums[k];
    const DocumentSums& scores = sum.scores;
    const double scored = static_cast<double>(scores.positions);
    report.compression_ratio = static_cast<double>(report.bytes_fp16) / static_cast<double>(report.bytes_stored);
    report.ppl_base = std::exp(scores.nll_base / scored);
    report.ppl_codec = std::exp(scores.nll_codec / scored);
    report.ppl_delta_pct = 100.0 * (report.ppl_codec - report.ppl_base) / report.ppl_base;
    report.top1_agreement = static_cast<double>(scores.agree) / scored;
    report.kl_mean = scores.kl / scored;
    report.encode_mb_s = sum.encode_s > 0 ? static_cast<double>(report.bytes_fp16) / 1e6 / sum.encode_s : 0;
    report.decode_mb_s = sum.decode_s > 0 ? static_cast<double>(report.bytes_fp16) / 1e6 / sum.decode_s : 0;
    report.seconds = seconds;
  }
  return reports;
}

KVC_REPORT_JSON(EvalReport, codec, level, n_docs, ctx, cont, bytes_fp16, bytes_stored, compression_ratio, ppl_base,
                ppl_codec, ppl_delta_pct, top1_agreement, kl_mean, encode_mb_s, decode_mb_s, model, kv_dtype, seconds)

std::string EvalReportJson(const EvalReport& r) { return DumpReport(r); }

}  // namespace kvc
