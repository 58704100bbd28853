#include "engine/batch_scheduler.h"

#include <algorithm>
#include <chrono>

#include "base/clock.h"
#include "base/log.h"
#include "base/thread_pool.h"

namespace kvc {

ServeRequest::ServeRequest(std::vector<int32_t> tokens, uint32_t max_tokens)
    : tokens_(std::move(tokens)), max_tokens_(max_tokens), arrived_(SteadyClock::now()) {
  generation_.prompt_tokens = static_cast<uint32_t>(tokens_.size());
}

bool ServeRequest::NextPiece(std::string* piece) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !pieces_.empty() || done_; });
  if (pieces_.empty()) return false;
  *piece = std::move(pieces_.front());
  pieces_.pop_front();
  return true;
}

ServeRequest::Next ServeRequest::NextPiece(std::string* piece, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !pieces_.empty() || done_; })) return Next::kTimeout;
  if (pieces_.empty()) return Next::kEnd;
  *piece = std::move(pieces_.front());
  pieces_.pop_front();
  return Next::kPiece;
}

void ServeRequest::Push(std::string piece) {
  if (piece.empty()) return;  // a token that only began a character
  std::lock_guard lock(mu_);
  pieces_.push_back(std::move(piece));
  cv_.notify_all();
}

void ServeRequest::Finish(Status status) {
  std::lock_guard lock(mu_);
  status_ = std::move(status);
  done_ = true;
  cv_.notify_all();
}

// A sequence of the llama.cpp context and the request it holds.
struct BatchScheduler::Slot {
  int32_t seq = 0;
  std::shared_ptr<ServeRequest> request;  // null: free
  uint32_t evaluated = 0;                 // prompt and generated tokens in the sequence
  uint32_t restored_chunks = 0;
  bool generating = false;                // prompt done; `next` is the token to evaluate
  int32_t next = 0;
  SteadyClock::time_point prefill_start;
};

BatchScheduler::BatchScheduler(const LlamaModel& model, LlamaSession& session, const ReuseContext& reuse,
                               const SchedulerOptions& options, ServeMetrics& metrics)
    : model_(model), session_(session), reuse_(reuse), o_(options), metrics_(metrics) {
  link_.SetRate(LinkShaper::GbpsToBytesPerSecond(o_.link_gbps));
  const uint32_t fetchers = o_.reuse ? (o_.fifo ? 1 : std::max(1u, o_.fetch_threads)) : 0;
  for (uint32_t i = 0; i < fetchers; ++i) fetchers_.emplace_back([this] { FetchLoop(); });
  engine_ = std::thread([this] { EngineLoop(); });
  storer_ = std::thread([this] { StoreLoop(); });
}

BatchScheduler::~BatchScheduler() { Stop(); }

void BatchScheduler::Submit(std::shared_ptr<ServeRequest> request) {
  if (o_.reuse) request->keys_ = ReusableChunkKeys(*reuse_.model, request->tokens_, o_.chunk_tokens);
  // FIFO: every request, even one with no whole chunk to look up, keeps its place in line.
  if (!o_.reuse || (!o_.fifo && request->keys_.empty())) {
    MakeReady(std::move(request));
    return;
  }
  if (!o_.fifo) {
    // KV-fetch-aware: the lookup is one batched read of small manifests, done here so that a
    // request with nothing stored never queues behind another's fetch.
    Lookup(*request);
    if (request->lookup_.manifests.empty()) {
      MakeReady(std::move(request));
      return;
    }
  }
  std::lock_guard lock(mu_);
  to_fetch_.push_back(std::move(request));
  fetch_cv_.notify_one();
}

void BatchScheduler::MakeReady(std::shared_ptr<ServeRequest> request) {
  std::lock_guard lock(mu_);
  ready_.push_back(std::move(request));
  engine_cv_.notify_one();
}

void BatchScheduler::FetchLoop() {
  for (;;) {
    std::shared_ptr<ServeRequest> request;
    {
      std::unique_lock lock(mu_);
      fetch_cv_.wait(lock, [&] { return stop_fetch_ || !to_fetch_.empty(); });
      if (to_fetch_.empty()) return;
      request = std::move(to_fetch_.front());
      to_fetch_.pop_front();
      ++fetching_;
    }
    // A client that left while its request waited to be fetched costs no fetch. Nothing thrown
    // here may end the thread (std::terminate would take the server down): the request then
    // recomputes its prefix, as for any failed fetch.
    if (!request->cancelled_) {
      try {
        Fetch(*request);
      } catch (...) {
        request->fetched_.reset();
        KVC_LOG_WARN("KV reuse failed, recomputing: %s", ExceptionText(std::current_exception()).c_str());
        std::lock_guard m(metrics_.mu);
        ++metrics_.reuse_failures;
      }
    }
    std::lock_guard lock(mu_);
    --fetching_;
    ready_.push_back(std::move(request));
    engine_cv_.notify_one();
  }
}

void BatchScheduler::Lookup(ServeRequest& request) {
  request.lookup_ = LookupStoredPrefix(*reuse_.store, request.keys_, o_.chunk_tokens);
  const bool failed = request.lookup_.manifests.empty() && !request.lookup_.fallback.empty();
  if (failed) KVC_LOG_WARN("KV reuse unavailable, recomputing: %s", request.lookup_.fallback.c_str());
  std::lock_guard m(metrics_.mu);
  metrics_.lookup.Add(request.lookup_.lookup_s);
  metrics_.reuse_failures += failed ? 1 : 0;
  // With manifests before it, a damaged one is counted when the fetch reports it (below).
  if (request.lookup_.damaged && request.lookup_.manifests.empty()) ++metrics_.damaged_chunks;
}

// Brings the request's stored prefix in and decodes it (on this fetch thread, one core's worth:
// the fetch threads are the share of the machine that fetching may take from generation).
void BatchScheduler::Fetch(ServeRequest& request) {
  if (o_.fifo) Lookup(request);
  if (request.lookup_.manifests.empty()) return;
  const CodecContext context{reuse_.calibrations, reuse_.model, nullptr};
  auto fetched = FetchLookedUpPrefix(*reuse_.store, *reuse_.model, request.keys_, std::move(request.lookup_), context,
                                     link_, ReuseFetchOptions(o_.link_gbps, o_.recompute_s, model_.info(), o_.floor,
                                                       *reuse_.store));
  if (!fetched.ok()) {
    KVC_LOG_WARN("KV reuse failed, recomputing: %s", fetched.status().ToString().c_str());
    std::lock_guard m(metrics_.mu);
    ++metrics_.reuse_failures;
    return;
  }
  if (!fetched->stats.fallback.empty()) {
    KVC_LOG_WARN("KV reuse stopped early, recomputing the rest: %s", fetched->stats.fallback.c_str());
  }
  {
    std::lock_guard m(metrics_.mu);
    metrics_.fetch.Add(fetched->stats.fetch_s);
    if (fetched->stats.damaged) ++metrics_.damaged_chunks;
  }
  request.fetched_ = std::move(*fetched);
}

void BatchScheduler::EngineLoop() {
  std::vector<Slot> slots(o_.parallel);
  for (size_t i = 0; i < slots.size(); ++i) slots[i].seq = static_cast<int32_t>(i);
  auto busy = [&] { return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.request != nullptr; }); };
  auto free_slot = [&]() -> Slot* {
    for (Slot& s : slots) {
      if (s.request == nullptr) return &s;
    }
    return nullptr;
  };
  for (;;) {
    std::vector<Slot*> admitted;
    std::vector<std::shared_ptr<ServeRequest>> gone;  // cancelled before they got a sequence
    {
      std::unique_lock lock(mu_);
      engine_cv_.wait(lock, [&] {
        return busy() || !ready_.empty() || (stop_engine_ && to_fetch_.empty() && fetching_ == 0);
      });
      if (!busy() && ready_.empty()) return;  // stopping, and nothing is left anywhere
      for (Slot* s = free_slot(); s != nullptr && !ready_.empty(); s = free_slot()) {
        std::shared_ptr<ServeRequest> request = std::move(ready_.front());
        ready_.pop_front();
        if (request->cancelled_) {
          gone.push_back(std::move(request));
          continue;
        }
        s->request = std::move(request);
        admitted.push_back(s);
        ++running_;
      }
    }
    for (const auto& request : gone) {
      {
        std::lock_guard m(metrics_.mu);
        ++metrics_.disconnects;
      }
      request->generation_.finish_reason = "cancelled";
      request->Finish(Status::Ok());
    }
    // Nothing thrown may end this thread (std::terminate would take every request in flight
    // with it): what fails a request ends that request with an error; what fails a step ends
    // the requests in it.
    for (Slot* slot : admitted) {
      try {
        Admit(*slot);
      } catch (...) {
        Release(*slot, Internal("admitting the request failed: " + ExceptionText(std::current_exception())));
      }
    }
    for (Slot& s : slots) {
      if (s.request && s.request->cancelled_) Cancelled(s);
    }
    try {
      Step(slots);
    } catch (...) {
      const Status failed = Internal("a batch step failed: " + ExceptionText(std::current_exception()));
      KVC_LOG_ERROR("%s", failed.ToString().c_str());
      FailAll(slots, failed);
    }
  }
}

void BatchScheduler::Cancelled(Slot& slot) {
  {
    std::lock_guard m(metrics_.mu);
    ++metrics_.disconnects;
  }
  slot.request->generation_.finish_reason = "cancelled";
  Release(slot, Status::Ok());
}

void BatchScheduler::FailAll(std::vector<Slot>& slots, const Status& status) {
  for (Slot& s : slots) {
    if (s.request) Release(s, status);
  }
}

// Restores the fetched prefix (if any) into the sequence the request was given.
void BatchScheduler::Admit(Slot& slot) {
  ServeRequest& r = *slot.request;
  slot.evaluated = 0;
  slot.restored_chunks = 0;
  slot.generating = false;
  {
    std::lock_guard m(metrics_.mu);
    metrics_.queue.Add(SecondsSince(r.arrived_));
  }
  session_.ClearSeq(slot.seq);
  if (r.fetched_ && r.fetched_->stats.chunks_fetched > 0) {
    const auto t = SteadyClock::now();
    if (Status s = session_.RestoreSeqKv(slot.seq, r.fetched_->kv); s.ok()) {
      slot.restored_chunks = r.fetched_->stats.chunks_fetched;
      slot.evaluated = slot.restored_chunks * o_.chunk_tokens;
      r.generation_.fetched_bytes = r.fetched_->stats.bytes;
    } else {
      KVC_LOG_WARN("restoring the fetched prefix failed, recomputing: %s", s.ToString().c_str());
      session_.ClearSeq(slot.seq);
    }
    std::lock_guard m(metrics_.mu);
    metrics_.restore.Add(SecondsSince(t));
  }
  r.fetched_.reset();  // the decoded prefix can be large; the sequence holds it now
  r.generation_.cached_tokens = slot.evaluated;
  slot.prefill_start = SteadyClock::now();
}

// One llama.cpp batch: a token for every generating sequence first (so streams keep flowing),
// then prompt slices of the prefilling ones in the room left (chunked prefill).
void BatchScheduler::Step(std::vector<Slot>& slots) {
  std::vector<SeqTokens> entries;
  std::vector<Slot*> owners;
  size_t room = session_.options().n_batch;
  for (Slot& s : slots) {
    if (s.request && s.generating && room > 0) {
      entries.push_back({s.seq, static_cast<int32_t>(s.evaluated), std::span(&s.next, 1)});
      owners.push_back(&s);
      --room;
    }
  }
  // Shortest remaining prompt first: a short prompt is done in one step instead of waiting
  // behind the slices of a long one (which loses a step, not its place).
  std::vector<Slot*> prefilling;
  for (Slot& s : slots) {
    if (s.request && !s.generating) prefilling.push_back(&s);
  }
  auto remaining = [](const Slot* s) { return s->request->tokens_.size() - s->evaluated; };
  std::stable_sort(prefilling.begin(), prefilling.end(),
                   [&](const Slot* a, const Slot* b) { return remaining(a) < remaining(b); });
  for (Slot* s : prefilling) {
    if (room == 0) break;
    const std::span<const int32_t> prompt(s->request->tokens_);
    const size_t n = std::min(room, remaining(s));
    entries.push_back({s->seq, static_cast<int32_t>(s->evaluated), prompt.subspan(s->evaluated, n)});
    owners.push_back(s);
    room -= n;
  }
  if (entries.empty()) return;
  if (Status status = session_.DecodeBatch(entries); !status.ok()) {
    KVC_LOG_ERROR("decoding a batch of %zu sequences failed: %s", entries.size(), status.ToString().c_str());
    for (Slot* s : owners) Release(*s, status);
    return;
  }
  {
    std::lock_guard m(metrics_.mu);
    ++metrics_.batches;
    metrics_.batched_sequences += entries.size();
    metrics_.peak_batch_sequences = std::max<uint64_t>(metrics_.peak_batch_sequences, entries.size());
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    Slot& s = *owners[i];
    s.evaluated += static_cast<uint32_t>(entries[i].tokens.size());
    if (!s.generating) {
      if (s.evaluated < s.request->tokens_.size()) continue;
      s.generating = true;
      s.request->generation_.ttft_s = SecondsSince(s.request->arrived_);
      std::lock_guard m(metrics_.mu);
      metrics_.prefill.Add(SecondsSince(s.prefill_start));
      metrics_.ttft.Add(s.request->generation_.ttft_s);
    }
    Emit(s, GreedyToken(session_.BatchLogits(i)));
  }
}

void BatchScheduler::Emit(Slot& slot, int32_t token) {
  Generation& g = slot.request->generation_;
  if (model_.IsEndOfGeneration(token)) {
    g.finish_reason = "stop";
    Release(slot, Status::Ok());
    return;
  }
  ++g.completion_tokens;
  slot.request->Push(slot.request->utf8_.Push(model_.TokenText(token)));
  if (g.completion_tokens == slot.request->max_tokens_) {
    g.finish_reason = "length";
    Release(slot, Status::Ok());
    return;
  }
  slot.next = token;
}

// Frees the slot's sequence; the prompt's chunks it did not restore go to the storer first
// (copied out now, while the sequence still holds them).
void BatchScheduler::Release(Slot& slot, Status status) {
  ServeRequest& r = *slot.request;
  const bool prompt_done = slot.generating;
  try {
    if (status.ok() && o_.reuse && prompt_done && slot.restored_chunks < r.keys_.size()) {
      if (auto kv = session_.ExtractSeqKv(slot.seq); kv.ok()) {
        std::lock_guard lock(mu_);
        store_jobs_.push_back({std::move(*kv), r.keys_, slot.restored_chunks});
        store_cv_.notify_one();
      } else {
        KVC_LOG_WARN("copying a finished request's KV out failed: %s", kv.status().ToString().c_str());
      }
    }
    // A character still incomplete at the end never completes: it ends the text as U+FFFD.
    r.Push(r.utf8_.Finish());
  } catch (...) {
    // Only the store job or the last piece is lost; the sequence is freed and the request ends.
    KVC_LOG_WARN("finishing a request: %s", ExceptionText(std::current_exception()).c_str());
  }
  session_.ClearSeq(slot.seq);
  if (status.ok()) {
    std::lock_guard m(metrics_.mu);
    metrics_.prompt_tokens += r.generation_.prompt_tokens;
    metrics_.cached_tokens += r.generation_.cached_tokens;
    metrics_.completion_tokens += r.generation_.completion_tokens;
    metrics_.fetched_bytes += r.generation_.fetched_bytes;
  }
  r.Finish(std::move(status));
  slot.request.reset();
  std::lock_guard lock(mu_);
  --running_;
}

void BatchScheduler::StoreLoop() {
  // Encoding takes from generation as decoding does: the same number of cores as the fetchers.
  std::unique_ptr<ThreadPool> pool;
  if (o_.fetch_threads > 1) pool = std::make_unique<ThreadPool>(o_.fetch_threads);
  const CodecContext context{reuse_.calibrations, reuse_.model, pool.get()};
  for (;;) {
    StoreJob job;
    {
      std::unique_lock lock(mu_);
      store_cv_.wait(lock, [&] { return stop_store_ || !store_jobs_.empty(); });
      if (store_jobs_.empty()) return;
      job = std::move(store_jobs_.front());
    }
    Result<StoredChunks> stored = Internal("not stored");
    try {
      stored = StoreChunks(*reuse_.store, job.kv, job.keys, job.first, o_.chunk_tokens,
                           o_.rungs.empty() ? std::vector<StoredRung>{{reuse_.codec, reuse_.codec->info().default_level}}
                                            : o_.rungs,
                           *reuse_.model, context);
    } catch (...) {
      stored = Internal(ExceptionText(std::current_exception()));
    }
    if (!stored.ok()) KVC_LOG_WARN("storing new chunks failed: %s", stored.status().ToString().c_str());
    {
      std::lock_guard m(metrics_.mu);
      if (stored.ok()) {
        metrics_.stored_bytes += stored->bytes;
      } else {
        ++metrics_.store_failures;
      }
    }
    // Popped only now, so that "nothing pending" means the chunks are in the store.
    std::lock_guard lock(mu_);
    store_jobs_.pop_front();
  }
}

BatchScheduler::Gauges BatchScheduler::gauges() {
  std::lock_guard lock(mu_);
  return {static_cast<int>(to_fetch_.size()) + fetching_, static_cast<int>(ready_.size()), running_,
          static_cast<int>(store_jobs_.size())};
}

void BatchScheduler::Stop() {
  // In pipeline order, each stage draining what the one before handed it.
  auto stop = [&](bool& flag, std::condition_variable& cv) {
    std::lock_guard lock(mu_);
    flag = true;
    cv.notify_all();
  };
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop(stop_fetch_, fetch_cv_);
  for (std::thread& t : fetchers_) t.join();
  stop(stop_engine_, engine_cv_);
  engine_.join();
  stop(stop_store_, store_cv_);
  storer_.join();
}

}  // namespace kvc
