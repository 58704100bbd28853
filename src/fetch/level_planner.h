// Picks, per chunk, which stored variant to fetch (the fetcher's choice), quality
// first: among the variants whose predicted time at the bandwidth seen on recent transfers is
// within `margin` (5%) of the fastest, the most accurate (least measured loss), so reuse leaves
// the output as it was unless bandwidth makes the trade real; "recompute" (exact) when
// prefilling the chunk is predicted faster than that. In a pipeline a chunk costs the slower of
// its transfer and its decode (the other hides under it), so a variant's predicted time is
// max(bytes / bandwidth, decode seconds / decoders). Decode times are learned from the chunks
// decoded so far; until a variant is seen its decode is priced at kPriorDecodeBytesPerSecond of
// output, the same for every codec, and it is tried only when that guess beats every measured
// variant by kUnseenAdvantage, so that an unseen variant neither looks free nor wins on a guess. The quality floor is
// the set of variants a request allows.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/chunk_manifest.h"

namespace kvc {

struct LevelChoice {
  bool recompute = false;
  ChunkVariant variant;    // when not recomputing
  double predicted_s = 0;  // per chunk, at the bandwidth it was chosen for
};

// Slower than any codec decodes here, so an unseen lossy variant is not preferred on a guess.
inline constexpr double kPriorDecodeBytesPerSecond = 100e6;
inline constexpr double kDefaultQualityMargin = 0.05;
inline constexpr double kUnseenAdvantage = 2.0;

class LevelPlanner {
 public:
  using Rung = std::pair<std::string, std::string>;  // (codec, level)
  // `allowed`: (codec, level) pairs a request accepts (empty: every variant); `decoders`: how
  // many chunks decode at once; `recompute_s`: seconds to prefill one chunk here (0: never), a
  // chunk of `recompute_tokens` (a shorter chunk costs its share; 0: every chunk recompute_s);
  // `loss`: each rung's measured quality loss (lower is better; a lossless codec's rungs, raw
  // fp16 and planes, are 0 whatever it says; a rung missing from it ranks last);
  // `output_bytes_per_token`: fp16 bytes of one token's KV, for the decode prior (0: unseen
  // variants decode for free).
  LevelPlanner(std::vector<Rung> allowed, unsigned decoders, double recompute_s, uint32_t recompute_tokens = 0,
               std::map<Rung, double> loss = {}, double output_bytes_per_token = 0,
               double margin = kDefaultQualityMargin);

  // nullopt when the manifest lists no allowed variant and recompute is off.
  std::optional<LevelChoice> Choose(const ChunkManifest& manifest, double bytes_per_second) const;
  // A decode of `variant` that took `seconds` for `tokens` tokens (decode times are learnt per
  // token, so a tail is priced by its length).
  void ObserveDecode(const ChunkVariant& variant, double seconds, uint32_t tokens);

 private:
  bool Allowed(const ChunkVariant& v) const;
  double Loss(const ChunkVariant& v) const;
  std::vector<Rung> allowed_;
  unsigned decoders_;
  double recompute_s_;
  uint32_t recompute_tokens_;
  std::map<Rung, double> loss_;
  double output_bytes_per_token_;
  double margin_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, double> decode_s_;  // per token, moving average per variant
};

}  // namespace kvc
