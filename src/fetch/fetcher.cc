#include "fetch/fetcher.h"

#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

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

}  // namespace

Fetcher::Fetcher(Store& store, LinkShaper& link, const ModelFingerprint& model, const CodecContext& codec_context,
                 FetchOptions options)
    : store_(store),
      link_(link),
      model_(model),
      codec_context_(codec_context),
      options_(std::move(options)),
      planner_(options_.allowed, std::max(1u, options_.inflight), options_.recompute_s, options_.loss,
               options_.kv_shape ? 2.0 * 2.0 * options_.kv_shape->n_layers * options_.kv_shape->n_kv_heads *
                                       options_.kv_shape->head_dim
                                 : 0.0,
               options_.quality_margin),
      bandwidth_(LinkShaper::GbpsToBytesPerSecond(options_.initial_gbps)) {}

Result<FetchReport> Fetcher::Run(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests,
                                 const std::function<Status(FetchedChunk&&)>& on_chunk) {
  if (keys.size() != manifests.size()) return InvalidArgument("one manifest per chunk key");
  const uint32_t n = static_cast<uint32_t>(keys.size());
  const unsigned inflight = std::max(1u, options_.inflight);
  const auto start = SteadyClock::now();

  struct Outcome {
    std::optional<FetchedChunk> chunk;
    std::string failure;  // why chunk i cannot be delivered
    bool damaged = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint32_t, Outcome> done;  // finished, not yet delivered
  uint32_t next_to_start = 0;
  uint32_t transferred = 0;  // chunks whose transfer has ended (in order: one transfer at a time)
  uint32_t delivered = 0;
  uint32_t stop_at = n;  // first chunk that will not be delivered
  bool cancelled = false;
  uint64_t bytes = 0;

  auto worker = [&]() {
    for (;;) {
      uint32_t i;
      {
        std::unique_lock lock(mu);
        // Backpressure: at most `inflight` chunks between the one being delivered and the newest.
        cv.wait(lock, [&] { return cancelled || next_to_start >= stop_at || next_to_start < delivered + inflight; });
        if (cancelled || next_to_start >= stop_at) return;
        i = next_to_start++;
      }
      // Transfers go one at a time, in chunk order, and each variant is chosen only when the link
      // is free for it: the previous transfer's bandwidth picks the next chunk's variant, and a
      // change of the link shows in the very next choice. The link is one pipe, so this costs no
      // throughput; decoding still overlaps the next transfer.
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return cancelled || transferred == i || i >= stop_at; });
        if (cancelled || i >= stop_at) return;
      }
      Outcome out;
      auto end_transfer = [&] {
        std::lock_guard lock(mu);
        transferred = i + 1;
        cv.notify_all();
      };
      const auto choice = planner_.Choose(manifests[i], bandwidth_.BytesPerSecond());
      if (!choice) {
        end_transfer();
        out.failure = FormatMessage("chunk %u: no allowed variant stored", i);
      } else if (choice->recompute) {
        end_transfer();
        out.failure = FormatMessage("chunk %u: recomputing is predicted faster (%.3f s) at %.3f Gbps", i,
                                    choice->predicted_s, bandwidth_.BytesPerSecond() * 8 / 1e9);
      } else {
        const std::string name = ChunkObjectName(keys[i], choice->variant.codec, choice->variant.level);
        const auto t0 = SteadyClock::now();
        auto object = store_.Get(name);
        const uint32_t want_tokens = manifests[i].chunk_tokens;
        const int64_t want_pos = int64_t{i} * want_tokens;
        if (!object.ok()) {
          end_transfer();
          out.failure = FormatMessage("chunk %u: %s: %s", i, name.c_str(), object.status().ToString().c_str());
          out.damaged = object.status().code() == StatusCode::kCorrupt;
        } else if (want_pos > std::numeric_limits<int32_t>::max()) {
          end_transfer();
          out.failure = FormatMessage("chunk %u: position %lld is beyond any KV cache", i,
                                      static_cast<long long>(want_pos));
        } else {
          const auto t1 = link_.Acquire(object->size());
          const auto t_end = std::max(t1, SteadyClock::now());
          bandwidth_.Add(object->size(), t0, t_end);
          end_transfer();
          // The chunk's place and the model's geometry are checked on the header, before the
          // codec runs: a well-formed file for another place is as unusable as a damaged one,
          // and a hostile one must not get to allocate what it claims.
          DecodeExpect expect;
          if (options_.kv_shape) expect.Shape(*options_.kv_shape);
          expect.n_tokens = want_tokens;
          expect.pos_begin = static_cast<int32_t>(want_pos);
          auto kv = DecodeKvc(*object, &model_, codec_context_, expect);
          const auto t2 = SteadyClock::now();
          if (!kv.ok()) {
            out.failure = FormatMessage("chunk %u: %s: %s", i, name.c_str(), kv.status().ToString().c_str());
            out.damaged = IsDamage(kv.status());
          } else {
            planner_.ObserveDecode(choice->variant, Seconds(t_end, t2));
            out.chunk = FetchedChunk{i, choice->variant, Seconds(t0, t_end), Seconds(t_end, t2), choice->predicted_s,
                                     std::move(*kv)};
            std::lock_guard lock(mu);
            bytes += object->size();
          }
        }
      }
      std::lock_guard lock(mu);
      if (!out.failure.empty()) stop_at = std::min(stop_at, i);
      done.emplace(i, std::move(out));
      cv.notify_all();
    }
  };

  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::min<unsigned>(inflight, n); ++t) threads.emplace_back(worker);

  FetchReport report;
  Status status = Status::Ok();
  for (;;) {
    Outcome out;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return delivered >= stop_at || done.count(delivered) > 0; });
      if (delivered >= stop_at) {
        if (auto it = done.find(stop_at); it != done.end()) {
          report.stop_reason = it->second.failure;
          report.stopped_on_damage = it->second.damaged;
        }
        break;
      }
      out = std::move(done.at(delivered));
      done.erase(delivered);
    }
    FetchedChunk& chunk = *out.chunk;
    report.variants.push_back(chunk.variant);
    report.decode_s += chunk.decode_s;
    report.transfer_s += chunk.transfer_s;
    status = on_chunk(std::move(chunk));
    std::lock_guard lock(mu);
    ++delivered;
    if (!status.ok()) {
      cancelled = true;
      cv.notify_all();
      break;
    }
    cv.notify_all();
  }
  {
    std::lock_guard lock(mu);
    cancelled = true;
    cv.notify_all();
  }
  for (auto& t : threads) t.join();
  RETURN_IF_ERROR(status);
  report.chunks = delivered;
  report.bytes = bytes;
  report.wall_s = Seconds(start, SteadyClock::now());
  return report;
}

}  // namespace kvc
