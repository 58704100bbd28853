#include "bench/codec_bench.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/report_json.h"
#include "base/thread_pool.h"
#include "bench/round_rate.h"
#include "llama/model_files.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {
namespace {

// MB (1e6 bytes) of fp16 KV per second, `round` processing `bytes` of them; with `cpu_mb_s`, also
// per second of CPU time.
template <typename F>
Result<double> Rate(double min_seconds, uint64_t bytes, F&& round, double* cpu_mb_s = nullptr) {
  ASSIGN_OR_RETURN(const RoundRate rate, MeasureRounds(min_seconds, round));
  const double mb = static_cast<double>(bytes) / 1e6;
  if (cpu_mb_s != nullptr) *cpu_mb_s = rate.per_cpu_s * mb;
  return rate.per_s * mb;
}

}  // namespace

Result<CodecBenchReport> RunCodecBench(const CodecBenchOptions& o) {
  const Codec* codec = FindCodec(o.codec);
  if (codec == nullptr) return InvalidArgument("unknown codec '" + o.codec + "'");
  if (o.chunk == 0 || o.ctx < o.chunk) return InvalidArgument("need ctx >= chunk > 0");
  ASSIGN_OR_RETURN(PrefilledText prefilled, PrefillModelText(o.model_path, o.text_path, o.ctx));
  const auto& model = prefilled.model;
  const KvCache& kv = prefilled.kv;

  CalibrationRegistry calibrations;
  RETURN_IF_ERROR(LoadModelCalibration(calibrations, o.model_path, o.calibration));
  const CodecContext context{&calibrations, &model->fingerprint(), nullptr};

  CodecBenchReport r;
  r.codec = codec->info().name;
  r.ctx = o.ctx;
  r.chunk = o.chunk;
  r.n_chunks = o.ctx / o.chunk;
  r.threads = o.threads > 0 ? static_cast<uint32_t>(o.threads) : std::max(1u, std::thread::hardware_concurrency());
  std::vector<KvView> views;
  std::vector<std::vector<uint8_t>> files(r.n_chunks);
  for (uint32_t c = 0; c < r.n_chunks; ++c) {
    ASSIGN_OR_RETURN(KvView v, kv.View(c * o.chunk, o.chunk));
    views.push_back(v);
    ASSIGN_OR_RETURN(files[c], EncodeKvc(*codec, v, o.encode, model->fingerprint(), c * o.chunk, context));
    r.bytes_fp16 += v.shape().fp16_bytes();
    r.bytes_stored += files[c].size();
  }
  ASSIGN_OR_RETURN(KvcFile first, ReadKvc(files[0]));
  r.level = first.header.level;
  r.compression_ratio = static_cast<double>(r.bytes_fp16) / static_cast<double>(r.bytes_stored);

  auto encode_chunk = [&](uint32_t c) -> Status {
    auto bytes = EncodeKvc(*codec, views[c], o.encode, model->fingerprint(), c * o.chunk, context);
    return bytes.status();
  };
  // Each chunk decodes into its place in one buffer for the whole cache, as the fetcher decodes
  // a prefix.
  ASSIGN_OR_RETURN(KvCache decoded, KvCache::Create(kv.shape(), kv.dtype(), kv.pos_begin()));
  auto decode_chunk_with = [&](uint32_t c, const CodecContext& with) -> Status {
    ASSIGN_OR_RETURN(const KvSlice place, decoded.Slice(c * o.chunk, o.chunk));
    return DecodeKvcInto(files[c], place, &model->fingerprint(), with);
  };
  auto decode_chunk = [&](uint32_t c) -> Status { return decode_chunk_with(c, context); };
  ThreadPool pool2(2);
  CodecContext context2 = context;
  context2.pool = &pool2;
  auto decode_chunk_2t = [&](uint32_t c) -> Status { return decode_chunk_with(c, context2); };
  auto sequential = [&](auto&& one) {
    return [&, one]() -> Status {
      for (uint32_t c = 0; c < r.n_chunks; ++c) RETURN_IF_ERROR(one(c));
      return Status::Ok();
    };
  };
  ThreadPool pool(r.threads);
  // All cores: chunks in parallel, each chunk on one thread (how a fetcher decodes).
  auto parallel = [&](auto&& one) {
    return [&, one]() -> Status {
      std::vector<Status> statuses(r.n_chunks);
      pool.ParallelFor(r.n_chunks, [&](size_t c) { statuses[c] = one(static_cast<uint32_t>(c)); });
      for (const Status& s : statuses) RETURN_IF_ERROR(s);
      return Status::Ok();
    };
  };
  ASSIGN_OR_RETURN(r.encode_mb_s_1t,
                   Rate(o.min_seconds, r.bytes_fp16, sequential(encode_chunk), &r.encode_mb_cpu_s_1t));
  ASSIGN_OR_RETURN(r.decode_mb_s_1t,
                   Rate(o.min_seconds, r.bytes_fp16, sequential(decode_chunk), &r.decode_mb_cpu_s_1t));
  ASSIGN_OR_RETURN(r.decode_mb_s_2t,
                   Rate(o.min_seconds, r.bytes_fp16, sequential(decode_chunk_2t), &r.decode_mb_cpu_s_2t));
  ASSIGN_OR_RETURN(r.encode_mb_s_all, Rate(o.min_seconds, r.bytes_fp16, parallel(encode_chunk)));
  ASSIGN_OR_RETURN(r.decode_mb_s_all, Rate(o.min_seconds, r.bytes_fp16, parallel(decode_chunk)));

  // memcpy ceiling on the same bytes: each chunk's fp16 KV copied once per round.
  std::vector<std::vector<uint8_t>> src(r.n_chunks), dst(r.n_chunks);
  for (uint32_t c = 0; c < r.n_chunks; ++c) {
    src[c].assign(views[c].shape().fp16_bytes(), static_cast<uint8_t>(c));
    dst[c].resize(src[c].size());
  }
  auto copy_chunk = [&](uint32_t c) -> Status {
    std::memcpy(dst[c].data(), src[c].data(), src[c].size());
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(r.memcpy_mb_s_1t, Rate(o.min_seconds, r.bytes_fp16, sequential(copy_chunk)));
  ASSIGN_OR_RETURN(r.memcpy_mb_s_all, Rate(o.min_seconds, r.bytes_fp16, parallel(copy_chunk)));
  return r;
}

KVC_REPORT_JSON(CodecBenchReport, codec, level, ctx, chunk, n_chunks, threads, bytes_fp16, bytes_stored,
                compression_ratio, encode_mb_s_1t, decode_mb_s_1t, decode_mb_s_2t, encode_mb_cpu_s_1t,
                decode_mb_cpu_s_1t, decode_mb_cpu_s_2t, encode_mb_s_all, decode_mb_s_all, memcpy_mb_s_1t,
                memcpy_mb_s_all)

std::string CodecBenchReportJson(const CodecBenchReport& r) { return DumpReport(r); }

}  // namespace kvc
