#include "fetch/level_planner.h"

#include <algorithm>

namespace kvc {
namespace {

// Weight of the newest decode time in the moving average: recent chunks matter most (another
// request may be decoding too), one outlier does not swing the choice.
constexpr double kDecodeWeight = 0.5;

}  // namespace

LevelPlanner::LevelPlanner(std::vector<std::pair<std::string, std::string>> allowed, unsigned decoders,
                           double recompute_s)
    : allowed_(std::move(allowed)), decoders_(std::max(1u, decoders)), recompute_s_(recompute_s) {}

bool LevelPlanner::Allowed(const ChunkVariant& v) const {
  if (allowed_.empty()) return true;
  return std::find(allowed_.begin(), allowed_.end(), std::pair{v.codec, v.level}) != allowed_.end();
}

std::optional<LevelChoice> LevelPlanner::Choose(const ChunkManifest& manifest, double bytes_per_second) const {
  std::lock_guard lock(mu_);
  std::optional<LevelChoice> best;
  for (const ChunkVariant& v : manifest.variants) {
    if (!Allowed(v)) continue;
    const double transfer = bytes_per_second > 0 ? static_cast<double>(v.bytes) / bytes_per_second : 0.0;
    const auto it = decode_s_.find({v.codec, v.level});
    const double decode = it == decode_s_.end() ? 0.0 : it->second / decoders_;
    const double t = std::max(transfer, decode);
    // Ties go to the smaller variant: it costs the link less if the estimate is optimistic.
    if (!best || t < best->predicted_s || (t == best->predicted_s && v.bytes < best->variant.bytes)) {
      best = LevelChoice{false, v, t};
    }
  }
  if (recompute_s_ > 0 && (!best || recompute_s_ < best->predicted_s)) return LevelChoice{true, {}, recompute_s_};
  return best;
}

void LevelPlanner::ObserveDecode(const ChunkVariant& v, double seconds) {
  std::lock_guard lock(mu_);
  auto [it, inserted] = decode_s_.try_emplace({v.codec, v.level}, seconds);
  if (!inserted) it->second = kDecodeWeight * seconds + (1 - kDecodeWeight) * it->second;
}

}  // namespace kvc
