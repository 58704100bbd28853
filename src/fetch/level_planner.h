// Picks, per chunk, which stored variant to fetch (design brief §2.2, "fetcher"): the one whose
// predicted time is least at the bandwidth seen on recent transfers, or "recompute" when
// prefilling the chunk's tokens is predicted faster than any fetch. In a pipeline a chunk costs
// the slower of its transfer and its decode (the other hides under it), so a variant's predicted
// time is max(bytes / bandwidth, decode seconds / decoders). Decode times are learned from the
// chunks decoded so far (unknown variants count as free until seen). The quality floor is the
// set of variants a request allows.
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
  ChunkVariant variant;     // when not recomputing
  double predicted_s = 0;   // per chunk, at the bandwidth it was chosen for
};

class LevelPlanner {
 public:
  // `allowed`: (codec, level) pairs a request accepts (empty: every variant); `decoders`: how
  // many chunks decode at once; `recompute_s`: seconds to prefill one chunk here (0: never).
  LevelPlanner(std::vector<std::pair<std::string, std::string>> allowed, unsigned decoders, double recompute_s);

  // nullopt when the manifest lists no allowed variant and recompute is off.
  std::optional<LevelChoice> Choose(const ChunkManifest& manifest, double bytes_per_second) const;
  void ObserveDecode(const ChunkVariant& variant, double seconds);

 private:
  bool Allowed(const ChunkVariant& v) const;
  std::vector<std::pair<std::string, std::string>> allowed_;
  unsigned decoders_;
  double recompute_s_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, double> decode_s_;  // moving average per variant
};

}  // namespace kvc
