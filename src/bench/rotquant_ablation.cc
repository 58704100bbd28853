#include "bench/rotquant_ablation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <numeric>
#include <random>

#include "base/byte_io.h"
#include "base/half.h"
#include "base/progress.h"
#include "bench/round_rate.h"
#include "codecs/rotquant/rotquant_codec.h"
#include "codecs/rotquant/rotquant_kernels.h"
#include "entropy/rans.h"
#include "llama/llama_model.h"
#include "llama/model_files.h"
#include "tensor/rope.h"

namespace kvc {
namespace {

using Json = nlohmann::ordered_json;
using rotquant::LayerCoder;

constexpr uint32_t kTableScaleBits = 12;
// Per coded block, two stream lengths a format with entropy-coded codes would have to store.
constexpr uint64_t kStreamLengthBytes = 4;

double NormalPdf(double x) { return std::isinf(x) ? 0.0 : std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi); }
double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }
// E[X | lo < X < hi] for X ~ N(0, 1).
double TruncatedMean(double lo, double hi) { return (NormalPdf(lo) - NormalPdf(hi)) / (NormalCdf(hi) - NormalCdf(lo)); }

// The code of u: how many thresholds lie below it, as rotquant counts.
uint32_t CodeOf(std::span<const float> thresholds, float u) {
  uint32_t q = 0;
  for (float t : thresholds) q += u > t ? 1u : 0u;
  return q;
}

// Squared error and squared signal per kind, and for keys sum <x_hat, x>: below sum |x|^2 the
// decoded keys' inner products with any query shrink by that factor on average.
struct ErrorSums {
  double err[2] = {}, energy[2] = {}, key_dot = 0;
  void Add(KvKind kind, double e, double energy_of, double dot) {
    err[static_cast<int>(kind)] += e;
    energy[static_cast<int>(kind)] += energy_of;
    if (kind == KvKind::kKey) key_dot += dot;
  }
  double Relative(KvKind kind) const {
    const int k = static_cast<int>(kind);
    return energy[k] > 0 ? err[k] / energy[k] : 0;
  }
  Json ToJson(bool with_dot) const {
    Json j;
    j["rel_err_k"] = Relative(KvKind::kKey);
    j["rel_err_v"] = Relative(KvKind::kValue);
    if (with_dot) j["key_dot_scale"] = energy[0] > 0 ? key_dot / energy[0] : 0;
    return j;
  }
};

// One (chunk, kind, layer) as rotquant codes it, with what a decoder with entropy-coded codes
// and scale bytes would read instead.
struct Block {
  uint64_t vectors = 0;
  float top = 0;
  std::vector<uint8_t> scale_codes, codes;
  std::vector<uint8_t> code_stream, scale_stream;
  std::unique_ptr<FrequencyTable> code_table, scale_table;
  KvKind kind = KvKind::kKey;
  uint32_t layer = 0;
};

std::vector<uint64_t> Counts(std::span<const uint8_t> symbols, uint32_t alphabet) {
  std::vector<uint64_t> counts(alphabet);
  for (uint8_t s : symbols) ++counts[s];
  return counts;
}

Result<std::unique_ptr<FrequencyTable>> TableOf(const std::vector<uint64_t>& counts, uint64_t* table_bytes) {
  ASSIGN_OR_RETURN(FrequencyTable table, FrequencyTable::FromCounts(counts, kTableScaleBits));
  ByteWriter w;
  table.AppendTo(&w);
  *table_bytes += w.Take().size();
  return std::make_unique<FrequencyTable>(std::move(table));
}

// Order-0 entropy of symbols with these counts, in bits.
double EntropyBits(const std::vector<uint64_t>& counts) {
  const double total = static_cast<double>(std::accumulate(counts.begin(), counts.end(), uint64_t{0}));
  double bits = 0;
  for (uint64_t c : counts) {
    if (c) bits -= static_cast<double>(c) * std::log2(static_cast<double>(c) / total);
  }
  return bits;
}

// Codes of `bits` packed LSB first (rotquant's layout), one a byte.
std::vector<uint8_t> Unpack(std::span<const uint8_t> packed, uint64_t n, uint32_t bits) {
  std::vector<uint8_t> symbols(n);
  for (uint64_t i = 0, at = 0; i < n; ++i) {
    uint32_t q = 0;
    for (uint32_t k = 0; k < bits; ++k, ++at) q |= ((packed[at / 8] >> (at % 8)) & 1u) << k;
    symbols[i] = static_cast<uint8_t>(q);
  }
  return symbols;
}

void Pack(std::span<const uint8_t> symbols, uint32_t bits, uint8_t* out) {
  uint64_t acc = 0;
  uint32_t filled = 0;
  for (uint8_t s : symbols) {
    acc |= uint64_t{s} << filled;
    filled += bits;
    while (filled >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
  if (filled > 0) *out = static_cast<uint8_t>(acc);
}

// Everything measured at one bit width.
struct LevelReport {
  ErrorSums plain, rope_undone, sign_refined, qjl;
  uint64_t values = 0, plain_bytes = 0, entropy_bytes = 0;
  double code_entropy_bits = 0;
  std::vector<Block> blocks;
};

// A random Gaussian d x d matrix, the same for every vector (QJL's sketch).
std::vector<float> GaussianMatrix(uint32_t d) {
  std::mt19937 rng(RotQuantCodec::kDefaultSeed);
  std::normal_distribution<float> normal;
  std::vector<float> s(size_t{d} * d);
  for (float& v : s) v = normal(rng);
  return s;
}

class LevelMeasurer {
 public:
  LevelMeasurer(const KvShape& shape, uint32_t bits, const RopeParams& rope)
      : shape_(shape),
        bits_(bits),
        rope_(rope),
        coder_(shape.head_dim, shape.n_kv_heads, bits),
        coarse_(shape.head_dim, shape.n_kv_heads, std::max(bits - 1, rotquant::kMinBits)),
        sketch_(GaussianMatrix(shape.head_dim)) {
    const auto levels = coder_.levels();
    const auto thr = coder_.thresholds();
    for (uint32_t q = 0; q < levels.size(); ++q) {
      const double lo = q == 0 ? -INFINITY : thr[q - 1];
      const double hi = q + 1 == levels.size() ? INFINITY : thr[q];
      refined_.push_back(
          {static_cast<float>(TruncatedMean(lo, levels[q])), static_cast<float>(TruncatedMean(levels[q], hi))});
    }
  }

  Status Add(const KvView& view, KvKind kind, uint32_t layer, LevelReport* r) {
    const uint64_t n = uint64_t{view.n_tokens()} * shape_.n_kv_heads;
    const uint32_t d = shape_.head_dim;
    x_.resize(n * d);
    view.ReadLayerF32(kind, layer, x_.data());
    coder_.SetSigns(RotQuantCodec::kDefaultSeed, static_cast<uint32_t>(kind), layer);
    Block& b = r->blocks.emplace_back();
    b.kind = kind;
    b.layer = layer;
    b.vectors = n;
    Code(x_, n, &b, &r->plain, kind);
    r->values += n * d;
    r->plain_bytes += 2 + n + b.codes.size();

    // In the rotated domain (orthogonal, so errors are those of the values): the sign bit and
    // the QJL sketch beside the plain codes.
    const std::vector<uint8_t> symbols = Unpack(b.codes, n * d, bits_);
    std::vector<float> residual(d), coarse(d), sketch_signs(d), estimate(d);
    const bool with_qjl = bits_ > rotquant::kMinBits;
    for (uint64_t vi = 0; vi < n; ++vi) {
      const float scale = rotquant::ScaleOf(b.top, b.scale_codes[vi]);
      const float inv = scale > 0 ? 1.0f / scale : 0.0f;
      const float* v = rotated_.data() + vi * d;
      double energy = 0, err_sign = 0, err_qjl = 0, dot_qjl = 0;
      for (uint32_t c = 0; c < d; ++c) {
        const float u = v[c] * inv;
        const uint32_t q = symbols[vi * d + c];
        energy += double{v[c]} * v[c];
        const float refined = refined_[q][u > coder_.levels()[q] ? 1 : 0] * scale;
        err_sign += (double{v[c]} - refined) * (v[c] - refined);
        coarse[c] = coarse_.levels()[CodeOf(coarse_.thresholds(), u)];
        residual[c] = u - coarse[c];
      }
      r->sign_refined.Add(kind, scale > 0 ? err_sign : energy, energy, 0);
      if (!with_qjl) continue;
      // QJL: sign(S r) kept, r estimated as sqrt(pi / 2) / d * |r| * S^T sign(S r); the norm is
      // taken as exact (a format would spend a byte on it, as it is counted).
      double r_norm = 0;
      for (float e : residual) r_norm += double{e} * e;
      r_norm = std::sqrt(r_norm);
      for (uint32_t i = 0; i < d; ++i) {
        double dot = 0;
        for (uint32_t c = 0; c < d; ++c) dot += double{sketch_[size_t{i} * d + c]} * residual[c];
        sketch_signs[i] = dot >= 0 ? 1.0f : -1.0f;
      }
      const double gain = std::sqrt(std::numbers::pi / 2) / d * r_norm;
      std::fill(estimate.begin(), estimate.end(), 0.0f);
      for (uint32_t i = 0; i < d; ++i) {
        for (uint32_t c = 0; c < d; ++c) estimate[c] += sketch_[size_t{i} * d + c] * sketch_signs[i];
      }
      for (uint32_t c = 0; c < d; ++c) {
        const double decoded = scale > 0 ? (coarse[c] + gain * estimate[c]) * scale : 0.0;
        err_qjl += (v[c] - decoded) * (v[c] - decoded);
        dot_qjl += decoded * v[c];
      }
      r->qjl.Add(kind, err_qjl, energy, dot_qjl);
    }
    const std::vector<uint64_t> code_counts = Counts(symbols, 1u << bits_);
    r->code_entropy_bits += EntropyBits(code_counts);

    // Entropy coding: one order-0 table per block for the codes and one for the scale bytes.
    uint64_t table_bytes = 0;
    ASSIGN_OR_RETURN(b.code_table, TableOf(code_counts, &table_bytes));
    ASSIGN_OR_RETURN(b.scale_table, TableOf(Counts(b.scale_codes, 256), &table_bytes));
    ASSIGN_OR_RETURN(b.code_stream, RansEncodeBytes(*b.code_table, symbols));
    ASSIGN_OR_RETURN(b.scale_stream, RansEncodeBytes(*b.scale_table, b.scale_codes));
    r->entropy_bytes += 2 + kStreamLengthBytes + table_bytes + b.code_stream.size() + b.scale_stream.size();

    if (kind == KvKind::kKey) {  // the same keys with RoPE undone before the rotation
      const RopeTable rope(rope_, d, view.pos_begin(), view.n_tokens());
      rope.Rotate(x_.data(), shape_.n_kv_heads, /*inverse=*/true);
      Block scratch;
      Code(x_, n, &scratch, &r->rope_undone, kind);
    }
    return Status::Ok();
  }

 private:
  // Codes x (n vectors) as the codec does into b, and adds the decoded error to `sums`.
  void Code(const std::vector<float>& x, uint64_t n, Block* b, ErrorSums* sums, KvKind kind) {
    const uint32_t d = shape_.head_dim;
    b->scale_codes.resize(n);
    b->codes.assign(coder_.CodeBytes(n), 0);
    b->top = Fp16ToFp32(coder_.Code(x.data(), n, b->scale_codes.data(), b->codes.data()));
    rotated_ = x;  // the rotated values, for the options measured beside the codes
    std::vector<double> rms(n);
    coder_.Rotate(rotated_.data(), n, rms.data());
    decoded_.resize(n * d);
    coder_.Reconstruct(b->codes.data(), n, b->scale_codes.data(), b->top, decoded_.data());
    double err = 0, energy = 0, dot = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (double{x[i]} - decoded_[i]) * (double{x[i]} - decoded_[i]);
      energy += double{x[i]} * x[i];
      dot += double{x[i]} * decoded_[i];
    }
    sums->Add(kind, err, energy, dot);
  }

  KvShape shape_;
  uint32_t bits_;
  RopeParams rope_;
  LayerCoder coder_, coarse_;
  std::vector<float> sketch_;
  std::vector<std::array<float, 2>> refined_;  // per code: the means of its cell's lower and upper halves
  std::vector<float> x_, rotated_, decoded_;
};

}  // namespace

Result<std::string> RunRotQuantAblationJson(const RotQuantAblationOptions& o) {
  if (o.chunk == 0 || o.ctx < o.chunk) return InvalidArgument("need ctx >= chunk > 0");
  ASSIGN_OR_RETURN(PrefilledText prefilled, PrefillModelText(o.model_path, o.text_path, o.ctx));
  const auto& model = prefilled.model;
  const KvShape shape = prefilled.kv.shape();
  const uint32_t n_chunks = o.ctx / o.chunk;
  const uint32_t d = shape.head_dim;
  std::vector<KvView> views;
  for (uint32_t c = 0; c < n_chunks; ++c) {
    ASSIGN_OR_RETURN(KvView v, prefilled.kv.View(c * o.chunk, o.chunk));
    views.push_back(v);
  }

  Json levels = Json::array();
  std::map<uint32_t, double> plain_bits;
  ProgressBar progress("rotquant ablation", 3, o.progress);
  for (uint32_t bits = rotquant::kMinBits; bits <= rotquant::kMaxBits; ++bits) {
    LevelMeasurer m(shape, bits, model->info().rope);
    LevelReport r;
    for (const KvView& view : views) {
      for (KvKind kind : kKvKinds) {
        for (uint32_t l = 0; l < shape.n_layers; ++l) RETURN_IF_ERROR(m.Add(view, kind, l, &r));
      }
    }
    const double fp16_bytes = 2.0 * static_cast<double>(r.values);
    std::vector<uint16_t> out(size_t{o.chunk} * shape.n_kv_heads * d);
    LayerCoder coder(d, shape.n_kv_heads, bits);
    ASSIGN_OR_RETURN(const RoundRate plain_rate, MeasureRounds(o.min_seconds, [&]() -> Status {
                       for (const Block& b : r.blocks) {
                         coder.SetSigns(RotQuantCodec::kDefaultSeed, static_cast<uint32_t>(b.kind), b.layer);
                         coder.ReconstructFp16(b.codes.data(), b.vectors, b.scale_codes.data(), b.top, out.data());
                       }
                       return Status::Ok();
                     }));
    std::vector<uint8_t> symbols, scale_codes, codes;
    ASSIGN_OR_RETURN(const RoundRate entropy_rate, MeasureRounds(o.min_seconds, [&]() -> Status {
                       for (const Block& b : r.blocks) {
                         symbols.resize(b.vectors * d);
                         scale_codes.resize(b.vectors);
                         codes.assign(coder.CodeBytes(b.vectors), 0);
                         RETURN_IF_ERROR(RansDecodeBytes(*b.code_table, b.code_stream, symbols));
                         RETURN_IF_ERROR(RansDecodeBytes(*b.scale_table, b.scale_stream, scale_codes));
                         Pack(symbols, bits, codes.data());
                         coder.SetSigns(RotQuantCodec::kDefaultSeed, static_cast<uint32_t>(b.kind), b.layer);
                         coder.ReconstructFp16(codes.data(), b.vectors, scale_codes.data(), b.top, out.data());
                       }
                       return Status::Ok();
                     }));
    const double values = static_cast<double>(r.values);
    plain_bits[bits] = 8.0 * static_cast<double>(r.plain_bytes) / values;
    Json j;
    j["bits"] = bits;
    j["plain"] = r.plain.ToJson(true);
    j["plain"]["bits_per_value"] = plain_bits[bits];
    j["plain"]["compression_ratio"] = fp16_bytes / static_cast<double>(r.plain_bytes);
    j["plain"]["decode_mb_s"] = plain_rate.per_s * fp16_bytes / 1e6;
    j["entropy_coded"]["bits_per_value"] = 8.0 * static_cast<double>(r.entropy_bytes) / values;
    j["entropy_coded"]["compression_ratio"] = fp16_bytes / static_cast<double>(r.entropy_bytes);
    j["entropy_coded"]["code_entropy_bits"] = r.code_entropy_bits / values;
    j["entropy_coded"]["decode_mb_s"] = entropy_rate.per_s * fp16_bytes / 1e6;
    j["sign_refined"] = r.sign_refined.ToJson(false);
    j["sign_refined"]["bits_per_value"] = plain_bits[bits] + 1;
    // (bits - 1)-bit codes and scales, one sketch bit per value, a norm byte per vector.
    if (bits > rotquant::kMinBits) {
      j["qjl"] = r.qjl.ToJson(true);
      j["qjl"]["bits_per_value"] = plain_bits[bits - 1] + 1 + 8.0 / d;
    }
    j["keys_rope_undone"]["rel_err_k"] = r.rope_undone.Relative(KvKind::kKey);
    levels.push_back(std::move(j));
    progress.Advance();
  }
  progress.Finish();

  Json report;
  report["model"] = model->path();
  report["ctx"] = o.ctx;
  report["chunk"] = o.chunk;
  report["n_chunks"] = n_chunks;
  report["n_layers"] = shape.n_layers;
  report["n_kv_heads"] = shape.n_kv_heads;
  report["head_dim"] = d;
  report["levels"] = std::move(levels);
  return report.dump(2);
}

}  // namespace kvc
