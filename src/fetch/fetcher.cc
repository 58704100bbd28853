#include "fetch/fetcher.h"

#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "base/thread_pool.h"
#include "fetch/read_buffers.h"

namespace kvc {
namespace {

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A decode that fails for a reason in the object itself. kNotFound (a kvtc calibration this
// process has not loaded) and kUnsupported (a codec or version this build does not read) are
// about this process, not the object.
bool IsDamage(const Status& decode) {
  return decode.code() == StatusCode::kCorrupt || decode.code() == StatusCode::kInvalidArgument;
}

// Chunks decoded at once: the pool's workers, or the calling thread alone.
unsigned Decoders(const ThreadPool* pool) { return pool != nullptr ? std::max<unsigned>(1, pool->size()) : 1; }

}  // namespace

std::shared_ptr<const DecodedChunkCache::Entry> HeldInMemory(const FetchOptions& options, const ChunkKey& key,
                                                             int32_t pos_begin, uint32_t tokens) {
  if (options.memory == nullptr) return nullptr;
  std::shared_ptr<const DecodedChunkCache::Entry> held = options.memory->Find(key);
  if (held == nullptr) return nullptr;
  const ChunkVariant& v = held->variant;
  const bool allowed = options.allowed.empty() || std::find(options.allowed.begin(), options.allowed.end(),
                                                            std::pair{v.codec, v.level}) != options.allowed.end();
  // The key names the tokens; their place and the model's geometry are checked all the same.
  const KvShape& shape = held->kv.shape();
  const bool fits = !options.kv_shape ||
                    (shape.n_layers == options.kv_shape->n_layers && shape.n_kv_heads == options.kv_shape->n_kv_heads &&
                     shape.head_dim == options.kv_shape->head_dim);
  if (!allowed || !fits || held->kv.pos_begin() != pos_begin || shape.n_tokens != tokens) return nullptr;
  return held;
}

LevelPlanner MakeLevelPlanner(const FetchOptions& options) {
  const std::optional<KvShape>& shape = options.kv_shape;
  return LevelPlanner(options.allowed, Decoders(options.pool), options.recompute_s, options.recompute_tokens,
                      options.loss, shape ? 2.0 * 2.0 * shape->n_layers * shape->n_kv_heads * shape->head_dim : 0.0,
                      options.quality_margin);
}

std::vector<double> PredictFetchSeconds(const FetchOptions& options, std::span<const ChunkManifest> manifests,
                                        std::span<const ChunkKey> keys) {
  FetchOptions fetch_only = options;
  fetch_only.recompute_s = 0;
  const LevelPlanner planner = MakeLevelPlanner(fetch_only);
  const double bytes_per_second = LinkShaper::GbpsToBytesPerSecond(options.initial_gbps);
  std::vector<double> out;
  out.reserve(manifests.size());
  int64_t pos = 0;
  for (size_t i = 0; i < manifests.size(); pos += manifests[i++].chunk_tokens) {
    if (i < keys.size() && pos <= std::numeric_limits<int32_t>::max() &&
        HeldInMemory(options, keys[i], static_cast<int32_t>(pos), manifests[i].chunk_tokens) != nullptr) {
      out.push_back(0);
      continue;
    }
    // The variant as the planner would choose it, priced at its transfer: a new planner has seen
    // no decode, and its prior (slow on purpose, so that no unseen lossy variant is preferred on
    // a guess) would price a local store's raw chunks as if they crossed a slow link.
    const auto choice = planner.Choose(manifests[i], bytes_per_second);
    out.push_back(!choice                ? std::numeric_limits<double>::infinity()
                  : bytes_per_second > 0 ? static_cast<double>(choice->variant.bytes) / bytes_per_second
                                         : 0.0);
  }
  return out;
}

Fetcher::Fetcher(Store& store, LinkShaper& link, const ModelFingerprint& model, const CodecContext& codec_context,
                 FetchOptions options)
    : store_(store),
      link_(link),
      model_(model),
      codec_context_(codec_context),
      options_(std::move(options)),
      planner_(MakeLevelPlanner(options_)),
      bandwidth_(LinkShaper::GbpsToBytesPerSecond(options_.initial_gbps)) {}

unsigned Fetcher::Inflight() const { return std::max(options_.inflight, Decoders(options_.pool) + 1); }

Result<FetchReport> Fetcher::Run(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests,
                                 KvCache& prefix, const std::function<Status(FetchedChunk&&)>& on_chunk,
                                 int32_t first_position) {
  if (keys.size() != manifests.size()) return InvalidArgument("one manifest per chunk key");
  const uint32_t n = static_cast<uint32_t>(keys.size());
  // Each chunk's place in the prefix buffer, checked before anything is fetched: right after
  // the chunks before it (a tail, shorter, only ever comes last).
  std::vector<KvSlice> places(n);
  int64_t pos = first_position;
  for (uint32_t i = 0; i < n; pos += manifests[i++].chunk_tokens) {
    const uint32_t tokens = manifests[i].chunk_tokens;
    const int64_t at = pos - prefix.pos_begin();
    if (pos > std::numeric_limits<int32_t>::max() || at < 0 || at > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgument(
          FormatMessage("chunk %u (position %lld) is outside the prefix buffer", i, static_cast<long long>(pos)));
    }
    ASSIGN_OR_RETURN(places[i], prefix.Slice(static_cast<uint32_t>(at), tokens));
  }
  return RunWithPlaces(
      keys, manifests, [&](uint32_t i) { return places[i]; }, 0, on_chunk);
}

Result<FetchReport> Fetcher::RunThroughSlots(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests,
                                             std::span<KvCache> slots,
                                             const std::function<Status(FetchedChunk&&)>& on_chunk) {
  if (keys.size() != manifests.size()) return InvalidArgument("one manifest per chunk key");
  if (slots.empty()) return InvalidArgument("no slot to decode chunks into");
  const uint32_t n = static_cast<uint32_t>(keys.size());
  std::vector<int32_t> positions(n);
  int64_t pos = 0;
  for (uint32_t i = 0; i < n; pos += manifests[i++].chunk_tokens) {
    const uint32_t tokens = manifests[i].chunk_tokens;
    if (pos > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument(FormatMessage("chunk %u starts past the largest position", i));
    }
    positions[i] = static_cast<int32_t>(pos);
    for (const KvCache& slot : slots) {
      if (slot.shape().n_tokens < tokens) {
        return InvalidArgument(FormatMessage("chunk %u has %u tokens, a slot %u", i, tokens, slot.shape().n_tokens));
      }
    }
  }
  // Chunk i's slot is free again: at most slots.size() chunks are in flight, so the chunk that
  // used it last (i - slots.size()) has been delivered, and nothing reads it any more. A tail
  // takes the first tokens of its slot.
  auto place = [&](uint32_t i) {
    KvCache& slot = slots[i % slots.size()];
    slot.set_pos_begin(positions[i]);
    return slot.Slice(0, manifests[i].chunk_tokens).value();
  };
  return RunWithPlaces(keys, manifests, place, static_cast<unsigned>(slots.size()), on_chunk);
}

Result<FetchReport> Fetcher::RunWithPlaces(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests,
                                           const std::function<KvSlice(uint32_t)>& place, unsigned max_inflight,
                                           const std::function<Status(FetchedChunk&&)>& on_chunk) {
  const uint32_t n = static_cast<uint32_t>(keys.size());
  ThreadPool* const pool = options_.pool != nullptr && options_.pool->size() > 0 ? options_.pool : nullptr;
  const unsigned inflight = max_inflight > 0 ? std::min(Inflight(), max_inflight) : Inflight();
  const auto start = SteadyClock::now();

  struct Outcome {
    std::optional<FetchedChunk> chunk;
    std::string failure;  // why chunk i cannot be delivered
    bool damaged = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint32_t, Outcome> done;  // finished, not yet delivered
  uint32_t decoding = 0;             // decodes submitted and not finished
  uint32_t delivered = 0;
  uint32_t stop_at = n;  // first chunk that will not be delivered
  uint64_t bytes = 0;

  auto finish = [&](uint32_t i, Outcome out) {
    std::lock_guard lock(mu);
    if (!out.failure.empty()) stop_at = std::min(stop_at, i);
    done.emplace(i, std::move(out));
    cv.notify_all();
  };
  // Decodes chunk i's object into its place; on a pool worker, or here without one.
  auto decode = [&](uint32_t i, const KvSlice& out_place, const std::string& name, std::span<const uint8_t> object,
                    const LevelChoice& choice, double transfer_s, SteadyClock::time_point t_end) {
    Outcome out;
    // The chunk's place and the model's geometry are checked on the header, before the codec
    // runs: a well-formed file for another place is as unusable as a damaged one, and a
    // hostile one must not get to allocate what it claims.
    DecodeExpect expect;
    if (options_.kv_shape) expect.Shape(*options_.kv_shape);
    const Status decoded = DecodeKvcInto(object, out_place, &model_, codec_context_, expect);
    const auto t2 = SteadyClock::now();
    if (!decoded.ok()) {
      out.failure = FormatMessage("chunk %u: %s: %s", i, name.c_str(), decoded.ToString().c_str());
      out.damaged = IsDamage(decoded);
    } else {
      planner_.ObserveDecode(choice.variant, Seconds(t_end, t2), out_place.shape().n_tokens);
      out.chunk = FetchedChunk{i, choice.variant, transfer_s, Seconds(t_end, t2), choice.predicted_s, out_place.View()};
    }
    finish(i, std::move(out));
  };
  // Decodes still running write into the caller's buffers and touch this frame (mu, done, the
  // lambdas above): on every way out of here, an early return or an exception included, wait
  // them out. Declared after everything they use, so it runs before any of it is destroyed.
  struct DecodesDrained {
    std::mutex& mu;
    std::condition_variable& cv;
    const uint32_t& decoding;
    void Wait() {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return decoding == 0; });
    }
    ~DecodesDrained() { Wait(); }
  } drained{mu, cv, decoding};

  // Chunk i's transfer, one at a time in chunk order: each variant is chosen only when the link
  // is free for it, so the previous transfer's bandwidth picks it and a change of the link shows
  // in the very next choice. The link is one pipe, so this costs no throughput.
  auto transfer = [&](uint32_t i) {
    Outcome out;
    const KvSlice at = place(i);
    if (std::shared_ptr<const DecodedChunkCache::Entry> held = FromMemory(keys[i], at)) {
      const auto t0 = SteadyClock::now();
      CopyKvInto(held->kv.View(), at);
      out.chunk = FetchedChunk{i, held->variant, 0, Seconds(t0, SteadyClock::now()), 0, at.View(), true};
      finish(i, std::move(out));
      return;
    }
    const Status sizes = CheckManifestSizes(manifests[i]);
    const auto choice = sizes.ok() ? planner_.Choose(manifests[i], bandwidth_.BytesPerSecond()) : std::nullopt;
    if (!sizes.ok()) {
      // Before the planner prices its sizes or the store is asked for them.
      out.failure = FormatMessage("chunk %u: manifest: %s", i, sizes.message().c_str());
      out.damaged = true;
    } else if (!choice) {
      out.failure = FormatMessage("chunk %u: no allowed variant stored", i);
    } else if (choice->recompute) {
      out.failure = FormatMessage("chunk %u: recomputing is predicted faster (%.3f s) at %.3f Gbps", i,
                                  choice->predicted_s, bandwidth_.BytesPerSecond() * 8 / 1e9);
    } else {
      std::string name = ChunkObjectName(keys[i], choice->variant.codec, choice->variant.level);
      const auto t0 = SteadyClock::now();
      // No more than the manifest says: a larger object is refused by the store unread.
      std::vector<uint8_t> buffer =
          options_.read_buffers != nullptr ? options_.read_buffers->Take() : std::vector<uint8_t>{};
      Result<std::span<const uint8_t>> object = Internal("not read");
      try {
        object = store_.GetInto(name, choice->variant.bytes, buffer);
      } catch (...) {
        // Stores return errors; a Store of someone else's that throws ends the run here all the same.
        object = StatusOfCurrentException("reading it");
      }
      if (!object.ok()) {
        out.failure = FormatMessage("chunk %u: %s: %s", i, name.c_str(), object.status().ToString().c_str());
        out.damaged = object.status().code() == StatusCode::kCorrupt;
        if (options_.read_buffers != nullptr) options_.read_buffers->Give(std::move(buffer));
      } else {
        const uint64_t size = object->size();
        const auto t1 = link_.Acquire(size);
        const auto t_end = std::max(t1, SteadyClock::now());
        bandwidth_.Add(size, t0, t_end);
        auto task = [&decode, &finish, &mu, &cv, &decoding, buffers = options_.read_buffers, i, out_place = at,
                     name = std::move(name), buffer = std::move(buffer), object = *object, choice = *choice,
                     transfer_s = Seconds(t0, t_end), t_end]() mutable {
          // However the decode ends, it is counted out, or Run would wait for it for ever.
          struct CountedOut {
            std::mutex& mu;
            std::condition_variable& cv;
            uint32_t& decoding;
            ~CountedOut() {
              std::lock_guard lock(mu);
              --decoding;
              cv.notify_all();
            }
          } counted_out{mu, cv, decoding};
          try {
            decode(i, out_place, name, object, choice, transfer_s, t_end);
          } catch (...) {
            Outcome failed;
            failed.failure = FormatMessage("chunk %u: %s: %s", i, name.c_str(),
                                           StatusOfCurrentException("decoding it").ToString().c_str());
            finish(i, std::move(failed));
          }
          if (buffers != nullptr) buffers->Give(std::move(buffer));
        };
        {
          std::lock_guard lock(mu);
          bytes += size;
          ++decoding;
        }
        if (pool != nullptr) {
          try {
            pool->Submit(std::move(task));
          } catch (...) {
            // Not queued: the task never runs, so it is counted out here.
            std::lock_guard lock(mu);
            --decoding;
            throw;
          }
        } else {
          task();
        }
        return;
      }
    }
    finish(i, std::move(out));
  };

  FetchReport report;
  Status status = Status::Ok();
  uint32_t next_to_transfer = 0;
  try {
    for (;;) {
      std::optional<Outcome> ready;
      bool may_transfer = false;
      {
        std::unique_lock lock(mu);
        if (delivered >= stop_at) {
          if (auto it = done.find(stop_at); it != done.end()) {
            report.stop_reason = it->second.failure;
            report.stopped_on_damage = it->second.damaged;
          }
          break;
        }
        if (auto it = done.find(delivered); it != done.end()) {
          ready = std::move(it->second);
          done.erase(it);
        } else {
          may_transfer = next_to_transfer < stop_at && next_to_transfer < delivered + inflight;
          // Nothing to deliver and no transfer to start: a decode will finish (or fail) first.
          if (!may_transfer) cv.wait(lock, [&] { return done.count(delivered) > 0 || delivered >= stop_at; });
        }
      }
      if (ready) {
        FetchedChunk& chunk = *ready->chunk;
        report.memory_chunks += chunk.from_memory ? 1 : 0;
        report.variants.push_back(chunk.variant);
        report.decode_s += chunk.decode_s;
        report.transfer_s += chunk.transfer_s;
        status = on_chunk(std::move(chunk));
        ++delivered;
        if (!status.ok()) break;
      } else if (may_transfer) {
        transfer(next_to_transfer++);
      }
    }
  } catch (...) {
    // A failed allocation here, or an exception from on_chunk: an error of the run, returned
    // once the decodes in flight are done (drained, above).
    status = StatusOfCurrentException(FormatMessage("fetching chunk %u", delivered));
  }
  drained.Wait();
  RETURN_IF_ERROR(status);
  report.chunks = delivered;
  report.bytes = bytes;
  report.wall_s = Seconds(start, SteadyClock::now());
  return report;
}

std::shared_ptr<const DecodedChunkCache::Entry> Fetcher::FromMemory(const ChunkKey& key, const KvSlice& place) const {
  auto held = HeldInMemory(options_, key, place.pos_begin(), place.n_tokens());
  return held != nullptr && held->kv.shape() == place.shape() ? held : nullptr;
}

Status Fetcher::CheckManifestSizes(const ChunkManifest& manifest) const {
  const uint64_t most =
      options_.kv_shape ? MaxChunkObjectBytes(*options_.kv_shape, manifest.chunk_tokens) : kDefaultMaxObjectBytes;
  for (const ChunkVariant& v : manifest.variants) {
    if (v.bytes > most) {
      return Corrupt(
          FormatMessage("variant %s/%s claims %llu bytes, more than the %llu a chunk of %u tokens of this "
                        "model can take",
                        v.codec.c_str(), v.level.c_str(), static_cast<unsigned long long>(v.bytes),
                        static_cast<unsigned long long>(most), manifest.chunk_tokens));
    }
  }
  return Status::Ok();
}

uint64_t MaxChunkObjectBytes(const KvShape& shape, uint32_t chunk_tokens) {
  constexpr uint64_t kMost = std::numeric_limits<uint64_t>::max();
  auto times = [](uint64_t a, uint64_t b) {
    const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
    return p > kMost ? kMost : static_cast<uint64_t>(p);
  };
  auto plus = [](uint64_t a, uint64_t b) { return a > kMost - b ? kMost : a + b; };
  // K and V, 2 bytes a value (the raw codec's sections), for the chunk's tokens and, as room for
  // the per-channel tables codecs keep (scales, frequency tables), kChunkTableTokens more: a
  // chunk of a few tokens of a wide model is not judged by its KV alone.
  const uint64_t row = times(times(times(2 * 2, shape.n_layers), shape.n_kv_heads), shape.head_dim);
  const uint64_t kv = times(row, plus(chunk_tokens, kChunkTableTokens));
  // The largest .kvc header (codec params at their limit) and section table, and some slack.
  const uint64_t header = kMaxCodecParamsBytes + uint64_t{kMaxSections} * (4 + 8 + 4) + 4096;
  return plus(times(kChunkSizeFactor, kv), header);
}

}  // namespace kvc
