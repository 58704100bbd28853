#include "fetch/level_planner.h"

#include <algorithm>
#include <limits>

#include "codecs/codec.h"

namespace kvc {
namespace {

// Weight of the newest decode time in the moving average: recent chunks matter most (another
// request may be decoding too), one outlier does not swing the choice.
constexpr double kDecodeWeight = 0.5;

}  // namespace

LevelPlanner::LevelPlanner(std::vector<Rung> allowed, unsigned decoders, double recompute_s, uint32_t recompute_tokens,
                           std::map<Rung, double> loss, double output_bytes_per_token, double margin)
    : allowed_(std::move(allowed)),
      decoders_(std::max(1u, decoders)),
      recompute_s_(recompute_s),
      recompute_tokens_(recompute_tokens),
      loss_(std::move(loss)),
      output_bytes_per_token_(output_bytes_per_token),
      margin_(margin) {}

bool LevelPlanner::Allowed(const ChunkVariant& v) const {
  if (allowed_.empty()) return true;
  return std::find(allowed_.begin(), allowed_.end(), std::pair{v.codec, v.level}) != allowed_.end();
}

double LevelPlanner::Loss(const ChunkVariant& v) const {
  // Bit-exact: nothing to measure, whatever the model. A name no codec has (a manifest from
  // another build) falls through to the measured losses.
  if (const Codec* codec = FindCodec(v.codec); codec != nullptr && codec->info().lossless) return 0;
  const auto it = loss_.find({v.codec, v.level});
  return it == loss_.end() ? std::numeric_limits<double>::infinity() : it->second;
}

std::optional<LevelChoice> LevelPlanner::Choose(const ChunkManifest& manifest, double bytes_per_second) const {
  std::lock_guard lock(mu_);
  const double prior_decode = output_bytes_per_token_ * manifest.chunk_tokens / kPriorDecodeBytesPerSecond;
  std::vector<LevelChoice> options;
  std::vector<bool> seen;
  double fastest_seen = std::numeric_limits<double>::infinity();
  for (const ChunkVariant& v : manifest.variants) {
    if (!Allowed(v)) continue;
    const double transfer = bytes_per_second > 0 ? static_cast<double>(v.bytes) / bytes_per_second : 0.0;
    const auto it = decode_s_.find({v.codec, v.level});
    const double decode = (it == decode_s_.end() ? prior_decode : it->second * manifest.chunk_tokens) / decoders_;
    const double t = std::max(transfer, decode);
    options.push_back(LevelChoice{false, v, t});
    seen.push_back(it != decode_s_.end());
    if (seen.back()) fastest_seen = std::min(fastest_seen, t);
  }
  // A variant not decoded yet is tried only when its guess beats every measured one by
  // kUnseenAdvantage: measurements made under this machine's load are not traded for a guess
  // made without it (on a busy machine a local read looks slow, a guessed decode does not).
  double fastest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < options.size(); ++i) {
    if (!seen[i] && options[i].predicted_s * kUnseenAdvantage >= fastest_seen) {
      options[i].predicted_s = std::numeric_limits<double>::infinity();
    }
    fastest = std::min(fastest, options[i].predicted_s);
  }
  std::optional<LevelChoice> best;
  for (const LevelChoice& c : options) {
    if (c.predicted_s > fastest * (1 + margin_) || c.predicted_s == std::numeric_limits<double>::infinity()) continue;
    // Most accurate first; then faster; then smaller (it costs the link less if the estimate is optimistic).
    if (!best) {
      best = c;
      continue;
    }
    const double l = Loss(c.variant), lb = Loss(best->variant);
    if (l < lb || (l == lb && (c.predicted_s < best->predicted_s ||
                               (c.predicted_s == best->predicted_s && c.variant.bytes < best->variant.bytes)))) {
      best = c;
    }
  }
  const double recompute =
      recompute_tokens_ > 0 ? recompute_s_ * manifest.chunk_tokens / recompute_tokens_ : recompute_s_;
  if (recompute > 0 && (!best || recompute < best->predicted_s)) return LevelChoice{true, {}, recompute};
  return best;
}

void LevelPlanner::ObserveDecode(const ChunkVariant& v, double seconds, uint32_t tokens) {
  const double per_token = seconds / std::max(1u, tokens);
  std::lock_guard lock(mu_);
  auto [it, inserted] = decode_s_.try_emplace({v.codec, v.level}, per_token);
  if (!inserted) it->second = kDecodeWeight * per_token + (1 - kDecodeWeight) * it->second;
}

}  // namespace kvc
