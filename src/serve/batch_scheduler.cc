#include "serve/batch_scheduler.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/clock.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "fetch/prefill_split.h"

namespace kvc {

ServeRequest::ServeRequest(std::vector<int32_t> tokens, GenerationOptions options)
    : tokens_(std::move(tokens)), options_(std::move(options)), arrived_(SteadyClock::now()) {
  generation_.prompt_tokens = static_cast<uint32_t>(tokens_.size());
  generation_.finish_reasons.assign(options_.n, "length");
  generation_.stop_words.assign(options_.n, "");
}

ServeRequest::Next ServeRequest::NextPiece(Piece* piece, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !pieces_.empty() || done_; })) return Next::kTimeout;
  if (pieces_.empty()) return Next::kEnd;
  *piece = std::move(pieces_.front());
  pieces_.pop_front();
  return Next::kPiece;
}

void ServeRequest::Push(Piece piece) {
  // A token that only began a character, with nothing else: its id goes out with the next piece.
  if (piece.text.empty() && piece.logprobs.empty() && piece.tokens.empty()) return;
  std::lock_guard lock(mu_);
  pieces_.push_back(std::move(piece));
  cv_.notify_all();
}

void ServeRequest::Finish() {
  std::lock_guard lock(mu_);
  done_ = true;
  cv_.notify_all();
}

// A sequence of the llama.cpp context and the request choice it holds. Choice 0 (the lead)
// restores and prefills the prompt; the other choices' sequences wait, and become copies of the
// lead's when its prompt is done.
struct BatchScheduler::Slot {
  int32_t seq = 0;
  std::shared_ptr<ServeRequest> request;  // null: free
  uint32_t choice = 0;
  uint32_t evaluated = 0;  // prompt and generated tokens in the sequence
  // The tokens the sequence holds, in order: what a later request may continue from.
  std::vector<int32_t> resident;
  // Whole chunks at the start of `resident` that are in the store already (restored from it, or
  // stored after an earlier request): only the chunks after them are stored again.
  uint32_t stored_chunks = 0;
  // Tokens the store holds for this sequence (stored from it, or restored from the store): when
  // they start with all of `resident`, a finished request has nothing new to store. Stored ones
  // are only queued: a store that failed since (store_failures_ moved on) may have lost them.
  std::vector<int32_t> stored;
  uint64_t stored_at_failures = 0;
  uint32_t hot_tokens = 0;  // at admission: prompt tokens the (free) sequence already held
  uint64_t released = 0;    // when it was last freed (releases_)
  // A memory with sliding windows or recurrent states: their snapshot at the end of each new
  // chunk of the prompt, taken as the prefill passes it (stored with the chunk when done).
  std::vector<SeqState> snapshots;
  bool snapshots_failed = false;
  bool waiting_for_prompt = false;  // a choice after the first, before the fork
  bool generating = false;          // prompt done; `next` is the token to evaluate
  int32_t next = 0;
  // The lead of a split whose fetched KV has not joined yet: its prefill stops here until it has
  // (0: no split).
  uint32_t split_at = 0;
  SteadyClock::time_point prefill_start;
};

BatchScheduler::BatchScheduler(const LlamaModel& model, LlamaSession& session, const ReuseContext& reuse,
                               const SchedulerOptions& options, ServeMetrics& metrics)
    : model_(model),
      session_(session),
      reuse_(reuse),
      o_(options),
      metrics_(metrics),
      pool_(size_t{std::max(1u, options.fetch_threads)} + 1),
      memory_(options.reuse && options.memory_bytes > 0 ? std::make_unique<DecodedChunkCache>(options.memory_bytes)
                                                        : nullptr) {
  link_.SetRate(LinkShaper::GbpsToBytesPerSecond(o_.link_gbps));
  if (o_.prefill.known()) prefill_cost_ = std::make_unique<PrefillCostEstimator>(o_.prefill);
  if (o_.reuse) {
    // Zero-filled: every page mapped now, not on the first request's time to first token.
    const uint64_t per_token = model_.info().KvShapeOf(1).fp16_bytes();
    const uint64_t tokens =
        per_token == 0 ? 0 : std::min<uint64_t>(session_.options().n_ctx, kWarmPrefixBytes / per_token);
    if (tokens > 0) {
      auto buffer = KvCache::Create(model_.info().KvShapeOf(static_cast<uint32_t>(tokens)), DType::kF16);
      if (buffer.ok()) spare_prefixes_.push_back(std::move(*buffer));
    }
  }
  // Sized before any thread runs: Sequences() and EraseSequence() read them from any thread.
  hot_.assign(o_.parallel, {});
  seq_busy_.assign(o_.parallel, 0);
  seq_prompt_tokens_.assign(o_.parallel, 0);
  const uint32_t fetchers = o_.reuse ? (o_.fifo ? 1 : std::max(1u, o_.fetch_threads)) : 0;
  if (fetchers > 0) {
    // Each fetch has at most a decode per worker and one more on the link in flight (Fetcher).
    const size_t count = size_t{fetchers} * (pool_.size() + 1);
    const KvShape chunk = model_.info().KvShapeOf(o_.chunk_tokens);
    read_buffers_ = std::make_unique<ReadBuffers>(count, MaxChunkObjectBytes(chunk, o_.chunk_tokens));
    // A raw chunk, its .kvc header and envelope, with room to spare: a read that outgrows its
    // buffer reallocates it, into fresh pages.
    const uint64_t raw_object = chunk.fp16_bytes() + (uint64_t{64} << 10);
    read_buffers_->Warm(static_cast<size_t>(std::min<uint64_t>(count, kWarmReadBytes / raw_object)),
                        static_cast<size_t>(raw_object));
  }
  for (uint32_t i = 0; i < fetchers; ++i) fetchers_.emplace_back([this] { FetchLoop(); });
  engine_ = std::thread([this] { EngineLoop(); });
  storer_ = std::thread([this] { StoreLoop(); });
}

BatchScheduler::~BatchScheduler() { Stop(); }

namespace {

uint32_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<uint32_t>(ia - a.begin());
}

// Tokens of `prompt` a sequence holding `resident` can continue from: all but the prompt's last,
// which is always evaluated (its logits give the first token).
uint32_t HotMatch(std::span<const int32_t> resident, std::span<const int32_t> prompt) {
  return prompt.empty() ? 0 : CommonPrefix(resident, prompt.first(prompt.size() - 1));
}

}  // namespace

uint32_t BatchScheduler::BestHotMatch(std::span<const int32_t> prompt) const {
  uint32_t best = 0;
  for (const std::vector<int32_t>& held : hot_) best = std::max(best, HotMatch(held, prompt));
  return best;
}

void BatchScheduler::Submit(std::shared_ptr<ServeRequest> request) {
  if (o_.reuse) request->keys_ = ReusableChunkKeys(*reuse_.model, request->tokens_, o_.chunk_tokens);
  uint32_t hot = 0;
  if (o_.reuse && o_.hot_tier) {
    std::lock_guard lock(mu_);
    hot = BestHotMatch(request->tokens_);
  }
  // FIFO: every request keeps its place in line. Otherwise a request the hot tier serves as far
  // as the store could (all its tokens but the last) is ready at once.
  if (!o_.reuse || (!o_.fifo && uint64_t{hot} + 1 >= request->tokens_.size())) {
    MakeReady(std::move(request));
    return;
  }
  if (!o_.fifo) {
    // KV-fetch-aware: the lookup is one batched read of small manifests, done here so that a
    // request with nothing stored never queues behind another's fetch.
    Lookup(*request);
    if (request->lookup_.tokens(o_.chunk_tokens) <= hot) {
      request->lookup_ = {};
      MakeReady(std::move(request));
      return;
    }
    // A split: the engine starts on the prompt now, the fetch threads on the chunks after the split.
    request->split_chunks_ = ChooseSplit(*request);
    if (request->split_chunks_ > 0) {
      std::lock_guard lock(mu_);
      request->split_fetching_ = true;
      to_fetch_.push_back(request);
      ready_.push_back(std::move(request));
      fetch_cv_.notify_one();
      engine_cv_.notify_one();
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
        request->fetched_states_.reset();
        KVC_LOG_WARN("KV reuse failed, recomputing: %s", ExceptionText(std::current_exception()).c_str());
        std::lock_guard m(metrics_.mu);
        ++metrics_.reuse_failures;
      }
    }
    std::lock_guard lock(mu_);
    --fetching_;
    // A split's request is with the engine already, waiting for this.
    if (request->split_chunks_ > 0) {
      request->split_fetching_ = false;
    } else {
      ready_.push_back(std::move(request));
    }
    engine_cv_.notify_one();
  }
}

FetchOptions BatchScheduler::RunFetchOptions(const PrefillCost& cost, size_t chunks) const {
  const uint64_t tokens = uint64_t{o_.chunk_tokens} * std::max<size_t>(1, chunks);
  const double recompute_s = cost.Seconds(0, tokens) * o_.chunk_tokens / static_cast<double>(tokens);
  return ReuseFetchOptions(o_.link_gbps, recompute_s, o_.chunk_tokens, model_.info(), o_.floor, *reuse_.store);
}

uint32_t BatchScheduler::ChooseSplit(const ServeRequest& request) const {
  const PrefixLookup& lookup = request.lookup_;
  // Only the KV of one cache can be joined after a prefill; state chunks are restored whole.
  if (!prefill_cost_ || lookup.manifests.empty() || IsStateChunkManifest(lookup.manifests[0])) return 0;
  const PrefillCost cost = prefill_cost_->Now();
  FetchOptions options = RunFetchOptions(cost, lookup.manifests.size());
  options.pool = const_cast<ThreadPool*>(&pool_);  // only its size is read
  options.memory = memory_.get();
  std::vector<ChunkManifest> run = lookup.manifests;
  std::vector<ChunkKey> keys(request.keys_.begin(), request.keys_.begin() + static_cast<std::ptrdiff_t>(run.size()));
  if (lookup.tail) {
    run.push_back(lookup.tail->manifest);
    keys.push_back(lookup.tail->key);
  }
  return ChoosePrefillSplit(PredictFetchSeconds(options, run, keys),
                            cost.Prefix(static_cast<uint32_t>(lookup.manifests.size()), o_.chunk_tokens))
      .prefilled_chunks;
}

void BatchScheduler::Lookup(ServeRequest& request) {
  // Every prompt token but the last (its logits give the first token) may come from the store.
  const std::span<const int32_t> prompt(request.tokens_);
  request.lookup_ = LookupStoredPrefix(*reuse_.store, *reuse_.model, request.keys_,
                                       prompt.first(prompt.empty() ? 0 : prompt.size() - 1), o_.chunk_tokens);
  const bool failed = request.lookup_.manifests.empty() && !request.lookup_.fallback.empty();
  // Once per few seconds: while the store is down this fails on every request, and the store
  // logs its going down and coming back itself.
  if (failed) KVC_LOG_WARN_EVERY(10, "KV reuse unavailable, recomputing: %s", request.lookup_.fallback.c_str());
  std::lock_guard m(metrics_.mu);
  metrics_.lookup.Add(request.lookup_.lookup_s);
  metrics_.reuse_failures += failed ? 1 : 0;
  // With manifests before it, a damaged one is counted when the fetch reports it (below).
  if (request.lookup_.damaged && request.lookup_.manifests.empty()) ++metrics_.damaged_chunks;
}

// Brings the request's stored prefix in (this fetch thread waits on the link) and decodes it on
// the pool, whose workers are the share of the machine fetching may take from generation.
// Says what a fetch did (in the log and the metrics) and whether it brought anything to restore.
bool BatchScheduler::CountFetch(const Status& status, const PrefixRestore* stats) {
  if (!status.ok()) {
    KVC_LOG_WARN("KV reuse failed, recomputing: %s", status.ToString().c_str());
    std::lock_guard m(metrics_.mu);
    ++metrics_.reuse_failures;
    return false;
  }
  if (!stats->fallback.empty())
    KVC_LOG_WARN("KV reuse stopped early, recomputing the rest: %s", stats->fallback.c_str());
  std::lock_guard m(metrics_.mu);
  metrics_.fetch.Add(stats->fetch_s);
  if (stats->damaged) ++metrics_.damaged_chunks;
  return true;
}

void BatchScheduler::Fetch(ServeRequest& request) {
  if (o_.fifo) Lookup(request);
  if (request.lookup_.manifests.empty() && !request.lookup_.tail) return;
  if (!request.lookup_.manifests.empty() && IsStateChunkManifest(request.lookup_.manifests[0])) {
    auto fetched = FetchStoredStatePrefix(*reuse_.store, request.keys_, request.lookup_);
    if (CountFetch(fetched.status(), fetched.ok() ? &fetched->stats : nullptr)) {
      request.fetched_states_ = std::move(*fetched);
    }
    return;
  }
  // Chunks decode side by side on the pool, each on one worker.
  const CodecContext context{reuse_.calibrations, reuse_.model, nullptr};
  // KV-fetch-aware, what to prefill was decided with the lookup (ChooseSplit), fetch and prefill
  // side by side; the planner's chunk-by-chunk "recompute" assumes an engine idle while it waits,
  // and would undo that. FIFO has no split: there the planner may plan a recompute.
  FetchOptions options = RunFetchOptions(prefill_cost_ && o_.fifo ? prefill_cost_->Now() : PrefillCost{},
                                         request.lookup_.manifests.size());
  options.pool = &pool_;
  options.memory = memory_.get();
  options.read_buffers = read_buffers_.get();
  KvCache buffer;
  {
    std::lock_guard lock(mu_);
    if (!spare_prefixes_.empty()) {
      buffer = std::move(spare_prefixes_.back());
      spare_prefixes_.pop_back();
    }
  }
  auto fetched = FetchLookedUpPrefix(*reuse_.store, *reuse_.model, request.keys_, std::move(request.lookup_), context,
                                     link_, options, {}, std::move(buffer), request.split_chunks_);
  if (CountFetch(fetched.status(), fetched.ok() ? &fetched->stats : nullptr)) request.fetched_ = std::move(*fetched);
}

void BatchScheduler::EngineLoop() {
  slots_.resize(o_.parallel);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].seq = static_cast<int32_t>(i);

  auto busy = [&] {
    return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.request != nullptr; });
  };
  // A step has work: some sequence is not only waiting for its split's fetch (needs mu_).
  auto can_step = [&] {
    return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) {
      return s.request != nullptr && !(s.split_at > 0 && s.evaluated >= s.split_at && s.request->split_fetching_);
    });
  };
  // Least recently freed first.
  auto free_slots = [&] {
    std::vector<Slot*> out;
    for (Slot& s : slots_) {
      if (s.request == nullptr) out.push_back(&s);
    }
    std::stable_sort(out.begin(), out.end(), [](const Slot* a, const Slot* b) { return a->released < b->released; });
    return out;
  };
  for (;;) {
    std::vector<Slot*> admitted;                          // leads
    std::vector<std::shared_ptr<ServeRequest>> gone;      // cancelled before they got a sequence
    std::vector<std::shared_ptr<ServeRequest>> too_wide;  // more choices than sequences
    {
      std::unique_lock lock(mu_);
      engine_cv_.wait(lock, [&] {
        return can_step() || !ready_.empty() || !erases_.empty() ||
               (stop_engine_ && to_fetch_.empty() && fetching_ == 0);
      });
      // Erases first: a free sequence's KV dropped, so no request admitted below continues it.
      for (; !erases_.empty(); erases_.pop_front()) {
        auto& [seq, held] = erases_.front();
        uint32_t erased = 0;
        if (seq >= 0 && static_cast<size_t>(seq) < slots_.size() &&
            slots_[static_cast<size_t>(seq)].request == nullptr) {
          Slot& s = slots_[static_cast<size_t>(seq)];
          erased = static_cast<uint32_t>(s.resident.size());
          session_.ClearSeq(s.seq);
          s.resident.clear();
          s.stored_chunks = 0;
          s.stored.clear();
          hot_[static_cast<size_t>(seq)].clear();
        }
        held.set_value(erased);
      }
      if (!busy() && ready_.empty() && stop_engine_ && to_fetch_.empty() && fetching_ == 0) return;
      if (!busy() && ready_.empty()) continue;
      // In arrival order: a request of n choices waits for n free sequences at once, and the
      // ones behind it wait with it.
      for (std::vector<Slot*> free = free_slots(); !ready_.empty(); free = free_slots()) {
        std::shared_ptr<ServeRequest>& front = ready_.front();
        const uint32_t n = front->options_.n;
        if (front->cancelled_ || n == 0 || n > slots_.size()) {
          (front->cancelled_ ? gone : too_wide).push_back(std::move(front));
          ready_.pop_front();
          continue;
        }
        if (free.size() < n) break;
        std::shared_ptr<ServeRequest> request = std::move(front);
        ready_.pop_front();
        // The lead takes the sequence that holds most of its prompt (none: the least recently
        // used one), the other choices the least recently used of the rest.
        uint32_t best = 0;
        for (size_t i = 0; i < free.size(); ++i) {
          const uint32_t held = HotMatch(free[i]->resident, request->tokens_);
          if (held > best) {
            best = held;
            std::rotate(free.begin(), free.begin() + static_cast<std::ptrdiff_t>(i),
                        free.begin() + static_cast<std::ptrdiff_t>(i) + 1);
          }
        }
        for (uint32_t c = 0; c < n; ++c) {
          Slot& s = *free[c];
          s.request = request;
          s.choice = c;
          s.waiting_for_prompt = c > 0;
          s.generating = false;
          s.evaluated = 0;
          s.hot_tokens = c == 0 ? best : 0;
          s.snapshots.clear();
          s.snapshots_failed = false;
          hot_[static_cast<size_t>(s.seq)].clear();
          seq_busy_[static_cast<size_t>(s.seq)] = 1;
          seq_prompt_tokens_[static_cast<size_t>(s.seq)] = static_cast<uint32_t>(request->tokens_.size());
        }
        request->open_choices_ = n;
        admitted.push_back(free[0]);
        ++running_;
      }
    }
    for (const auto& request : gone) {
      {
        std::lock_guard m(metrics_.mu);
        ++metrics_.disconnects;
      }
      request->generation_.finish_reasons.assign(request->options_.n, "cancelled");
      request->Finish();
    }
    for (const auto& request : too_wide) {
      request->status_ = InvalidArgument(
          FormatMessage("n = %u is more than the server's %zu sequences", request->options_.n, slots_.size()));
      request->Finish();
    }
    // Nothing thrown may end this thread (std::terminate would take every request in flight
    // with it): what fails a request ends that request with an error; what fails a step ends
    // the requests in it.
    for (Slot* lead : admitted) {
      try {
        Admit(*lead);
      } catch (...) {
        Release(*lead, Internal("admitting the request failed: " + ExceptionText(std::current_exception())), "length");
      }
    }
    for (Slot& s : slots_) {
      if (s.request && s.request->cancelled_) Cancelled(s);
    }
    try {
      JoinSplits();
      Step();
    } catch (...) {
      const Status failed = Internal("a batch step failed: " + ExceptionText(std::current_exception()));
      KVC_LOG_ERROR("%s", failed.ToString().c_str());
      FailAll(failed);
    }
  }
}

void BatchScheduler::Cancelled(Slot& slot) {
  const std::shared_ptr<ServeRequest> request = slot.request;
  Release(slot, Status::Ok(), "cancelled");
  // Counted once the sequence is free: whoever sees the count sees the request gone.
  if (!request->disconnect_counted_) {
    request->disconnect_counted_ = true;
    std::lock_guard m(metrics_.mu);
    ++metrics_.disconnects;
  }
}

void BatchScheduler::FailAll(const Status& status) {
  for (Slot& s : slots_) {
    if (s.request) Release(s, status, "length");
  }
}

// Restores the fetched prefix (if any) into the lead's sequence, and makes every choice's
// sampler (each its own state; choices that share a seed draw differently).
void BatchScheduler::Admit(Slot& lead) {
  ServeRequest& r = *lead.request;
  {
    std::lock_guard m(metrics_.mu);
    metrics_.queue.Add(SecondsSince(r.arrived_));
  }
  r.choices_.clear();
  r.choices_.resize(r.options_.n);
  for (uint32_t c = 0; c < r.options_.n; ++c) {
    r.choices_[c].stop = StopFilter(r.options_.stop);
    auto sampler = TokenSampler::Create(r.options_.sampling, session_.n_vocab(), session_.options().n_ctx, c);
    if (!sampler.ok()) {
      Release(lead, sampler.status(), "length");
      return;
    }
    r.choices_[c].sampler = std::move(*sampler);
  }
  for (Slot& s : slots_) {
    if (s.request.get() == &r && &s != &lead) {
      session_.ClearSeq(s.seq);
      s.resident.clear();
      s.stored_chunks = 0;
      s.stored.clear();
    }
  }
  if (r.split_chunks_ > 0) {
    // A split: the prompt's first chunks are prefilled here, up to split_at, while the fetch
    // (whose fetched_ is not to be touched until it is done) brings the rest.
    lead.split_at = r.split_chunks_ * o_.chunk_tokens;
    if (lead.hot_tokens == 0 || !ContinueHeld(lead)) {
      session_.ClearSeq(lead.seq);
      lead.resident.clear();
      lead.stored.clear();
      lead.stored_chunks = r.split_chunks_;  // the lookup found them: in the store already
    }
    r.generation_.cached_tokens = lead.evaluated;
    lead.prefill_start = SteadyClock::now();
    return;
  }
  // The hot tier, when its sequence holds at least as much of the prompt as was fetched.
  const uint32_t fetched_tokens = r.fetched_          ? r.fetched_->tokens()
                                  : r.fetched_states_ ? r.fetched_states_->stats.chunks_fetched * o_.chunk_tokens
                                                      : 0;
  if (lead.hot_tokens > 0 && lead.hot_tokens >= fetched_tokens && ContinueHeld(lead)) {
    SpareFetchedPrefix(r);
    r.fetched_states_.reset();
    r.generation_.cached_tokens = lead.evaluated;
    lead.prefill_start = SteadyClock::now();
    return;
  }
  session_.ClearSeq(lead.seq);
  lead.resident.clear();
  lead.stored_chunks = 0;
  lead.stored.clear();
  // The fetched prefix, of either form, into the lead's sequence.
  const PrefixRestore* stats = nullptr;
  const auto t = SteadyClock::now();
  Status restored = Status::Ok();
  if (r.fetched_ && r.fetched_->stats.chunks_fetched > 0) {
    stats = &r.fetched_->stats;
    restored = session_.RestoreSeqKv(lead.seq, r.fetched_->view());
  } else if (r.fetched_states_ && !r.fetched_states_->chunks.empty()) {
    stats = &r.fetched_states_->stats;
    auto state = ComposePrefixState(r.fetched_states_->chunks);
    restored = state.ok() ? session_.RestoreState(*state, lead.seq) : state.status();
  }
  if (stats != nullptr) {
    if (restored.ok()) {
      lead.stored_chunks = stats->chunks_fetched;
      lead.evaluated = lead.stored_chunks * o_.chunk_tokens + stats->tail_tokens;
      lead.resident.assign(r.tokens_.begin(), r.tokens_.begin() + lead.evaluated);
      lead.stored = lead.resident;
      lead.stored_at_failures = store_failures_.load();
      r.generation_.fetched_bytes = stats->bytes;
    } else {
      KVC_LOG_WARN("restoring the fetched prefix failed, recomputing: %s", restored.ToString().c_str());
      session_.ClearSeq(lead.seq);
    }
    {
      std::lock_guard m(metrics_.mu);
      metrics_.restore.Add(SecondsSince(t));
    }
    if (restored.ok()) CountRestored(*stats, lead.evaluated);
  }
  SpareFetchedPrefix(r);  // the sequence holds it now
  r.fetched_states_.reset();
  r.generation_.cached_tokens = lead.evaluated;
  lead.prefill_start = SteadyClock::now();
}

bool BatchScheduler::ContinueHeld(Slot& lead) {
  const Status trimmed = session_.TrimSeq(lead.seq, lead.hot_tokens);
  if (!trimmed.ok()) {
    KVC_LOG_WARN("continuing a kept sequence failed, recomputing: %s", trimmed.ToString().c_str());
    return false;
  }
  lead.evaluated = lead.hot_tokens;
  lead.resident.resize(lead.hot_tokens);
  lead.stored_chunks = std::min(lead.stored_chunks, lead.hot_tokens / o_.chunk_tokens);
  std::lock_guard m(metrics_.mu);
  ++metrics_.hot_hits;
  metrics_.hot_tokens += lead.evaluated;
  return true;
}

void BatchScheduler::JoinSplits() {
  for (Slot& s : slots_) {
    if (!s.request || s.split_at == 0) continue;
    {
      std::lock_guard lock(mu_);
      if (s.request->split_fetching_) continue;
    }
    // Nothing fetched, or the prefill has caught up with the split: go on from here.
    const FetchedPrefix* fetched = s.request->fetched_ ? &*s.request->fetched_ : nullptr;
    if (fetched != nullptr && fetched->tokens() > 0 && s.evaluated < fetched->first_token()) continue;
    s.split_at = 0;
    JoinSplit(s);
  }
}

void BatchScheduler::JoinSplit(Slot& lead) {
  ServeRequest& r = *lead.request;
  if (!r.fetched_ || r.fetched_->tokens() <= lead.evaluated || lead.evaluated < r.fetched_->first_token()) {
    SpareFetchedPrefix(r);
    return;
  }
  FetchedPrefix& fetched = *r.fetched_;
  const auto t = SteadyClock::now();
  const uint32_t prefilled = lead.evaluated;
  // The prefilled tokens' KV into their place before the fetched ones (replacing fetched ones it
  // overlaps: computed here, they are exact), then the whole of it as the sequence: a restore
  // replaces a sequence, it cannot add to one.
  Status joined = Status::Ok();
  if (prefilled > 0) {
    auto held = session_.ExtractSeqKv(lead.seq);
    if (held.ok() && held->dtype() != DType::kF16) held = held->ConvertTo(DType::kF16);
    if (!held.ok()) {
      joined = held.status();
    } else if (held->pos_begin() != 0 || held->shape().n_tokens != prefilled) {
      joined = Internal(FormatMessage("the sequence gave %u tokens from position %d for %u from 0",
                                      held->shape().n_tokens, held->pos_begin(), prefilled));
    } else if (auto place = fetched.kv.Slice(0, prefilled); !place.ok()) {
      joined = place.status();
    } else {
      CopyKvInto(held->View(), *place);
    }
  }
  if (joined.ok()) joined = session_.RestoreSeqKv(lead.seq, fetched.view());
  if (joined.ok()) {
    lead.evaluated = fetched.tokens();
    lead.resident.assign(r.tokens_.begin(), r.tokens_.begin() + lead.evaluated);
    lead.stored_chunks = fetched.stats.first_chunk + fetched.stats.chunks_fetched;
    lead.stored = lead.resident;
    lead.stored_at_failures = store_failures_.load();
    r.generation_.cached_tokens += lead.evaluated - prefilled;
    r.generation_.fetched_bytes = fetched.stats.bytes;
  } else {
    // The sequence may be gone with the failed restore: the prompt is prefilled from the start.
    KVC_LOG_WARN("joining the fetched KV after the prefilled part failed, recomputing: %s", joined.ToString().c_str());
    session_.ClearSeq(lead.seq);
    lead.evaluated = 0;
    lead.resident.clear();
    lead.stored.clear();
    r.generation_.cached_tokens = 0;
  }
  {
    std::lock_guard m(metrics_.mu);
    metrics_.restore.Add(SecondsSince(t));
    metrics_.split_joins += joined.ok() ? 1 : 0;
  }
  if (joined.ok()) CountRestored(fetched.stats, lead.evaluated - prefilled);
  SpareFetchedPrefix(r);
}

void BatchScheduler::CountRestored(const PrefixRestore& stats, uint32_t tokens) {
  const uint32_t from_memory = std::min(stats.memory_tokens, tokens);
  std::lock_guard m(metrics_.mu);
  if (from_memory > 0) {
    ++metrics_.memory_hits;
    metrics_.memory_tokens += from_memory;
  }
  if (tokens > from_memory) {
    ++metrics_.store_hits;
    metrics_.store_tokens += tokens - from_memory;
  }
}

void BatchScheduler::SpareFetchedPrefix(ServeRequest& request) {
  if (!request.fetched_) return;
  KvCache buffer = std::move(request.fetched_->kv);
  request.fetched_.reset();
  // As many as can be in use at once (a fetch per fetch thread, a restore), none over
  // kMaxSpareBufferBytes; the rest are freed.
  std::lock_guard lock(mu_);
  if (buffer.shape().n_tokens > 0 && buffer.shape().fp16_bytes() <= kMaxSpareBufferBytes &&
      spare_prefixes_.size() < fetchers_.size() + 1) {
    spare_prefixes_.push_back(std::move(buffer));
  }
}

// One llama.cpp batch: a token for every generating sequence first (so streams keep flowing),
// then prompt slices of the prefilling ones in the room left (chunked prefill).
void BatchScheduler::Step() {
  std::vector<SeqTokens> entries;
  std::vector<Slot*> owners;
  size_t room = session_.options().n_batch;
  for (Slot& s : slots_) {
    if (s.request && s.generating && room > 0) {
      entries.push_back({s.seq, static_cast<int32_t>(s.evaluated), std::span(&s.next, 1)});
      owners.push_back(&s);
      --room;
    }
  }
  // Shortest remaining prompt first: a short prompt is done in one step instead of waiting
  // behind the slices of a long one (which loses a step, not its place).
  std::vector<Slot*> prefilling;
  for (Slot& s : slots_) {
    if (s.request && !s.generating && !s.waiting_for_prompt) prefilling.push_back(&s);
  }
  auto remaining = [](const Slot* s) { return s->request->tokens_.size() - s->evaluated; };
  std::stable_sort(prefilling.begin(), prefilling.end(),
                   [&](const Slot* a, const Slot* b) { return remaining(a) < remaining(b); });
  // Slices of a memory with snapshots end at chunk ends, where the snapshot is taken.
  const bool take_snapshots = o_.reuse && model_.info().SnapshotsAtChunkEnds();
  for (Slot* s : prefilling) {
    if (room == 0) break;
    const std::span<const int32_t> prompt(s->request->tokens_);
    size_t n = std::min(room, remaining(s));
    if (s->split_at > 0) {
      // Up to the split only, until the fetched KV after it has joined (JoinSplits).
      if (s->evaluated >= s->split_at) continue;
      n = std::min<size_t>(n, s->split_at - s->evaluated);
    }
    const uint64_t next_end = (uint64_t{s->evaluated} / o_.chunk_tokens + 1) * o_.chunk_tokens;
    if (take_snapshots && s->choice == 0 && next_end <= uint64_t{s->request->keys_.size()} * o_.chunk_tokens) {
      n = std::min<size_t>(n, next_end - s->evaluated);
    }
    entries.push_back({s->seq, static_cast<int32_t>(s->evaluated), prompt.subspan(s->evaluated, n)});
    owners.push_back(s);
    room -= n;
  }
  if (entries.empty()) return;
  const auto decode_start = SteadyClock::now();
  if (Status status = session_.DecodeBatch(entries); !status.ok()) {
    KVC_LOG_ERROR("decoding a batch of %zu sequences failed: %s", entries.size(), status.ToString().c_str());
    for (Slot* s : owners) Release(*s, status, "length");
    return;
  }
  // A prefill of one sequence alone prices prefills (the split's, and the planner's recompute);
  // a few tokens say more about a step's fixed costs than about a token's.
  constexpr size_t kLeastPricedTokens = 32;
  if (prefill_cost_ && o_.learn_prefill && entries.size() == 1 && !owners[0]->generating &&
      entries[0].tokens.size() >= kLeastPricedTokens) {
    prefill_cost_->Observe(static_cast<uint64_t>(entries[0].pos), entries[0].tokens.size(), SecondsSince(decode_start));
  }
  {
    std::lock_guard m(metrics_.mu);
    ++metrics_.batches;
    metrics_.batched_sequences += entries.size();
    metrics_.peak_batch_sequences = std::max<uint64_t>(metrics_.peak_batch_sequences, entries.size());
  }
  bool emitted = false;
  for (size_t i = 0; i < entries.size(); ++i) {
    Slot& s = *owners[i];
    s.evaluated += static_cast<uint32_t>(entries[i].tokens.size());
    s.resident.insert(s.resident.end(), entries[i].tokens.begin(), entries[i].tokens.end());
    const std::span<const float> logits = session_.BatchLogits(i);
    if (s.generating) {
      Emit(s, logits);
      emitted = true;
      continue;
    }
    const uint32_t chunk_end = s.evaluated / o_.chunk_tokens;
    if (take_snapshots && !s.snapshots_failed && s.evaluated % o_.chunk_tokens == 0 && chunk_end > s.stored_chunks &&
        chunk_end <= s.request->keys_.size()) {
      if (auto snapshot = session_.ExtractSnapshot(s.seq); snapshot.ok()) {
        s.snapshots.push_back(std::move(*snapshot));
      } else {
        // Nothing of this prompt is stored then; the request itself goes on.
        KVC_LOG_WARN("taking a chunk's snapshot failed: %s", snapshot.status().ToString().c_str());
        s.snapshots_failed = true;
        s.snapshots.clear();
      }
    }
    if (s.evaluated < s.request->tokens_.size()) continue;
    s.generating = true;
    s.request->generation_.ttft_s = SecondsSince(s.request->arrived_);
    {
      std::lock_guard m(metrics_.mu);
      metrics_.prefill.Add(SecondsSince(s.prefill_start));
      metrics_.ttft.Add(s.request->generation_.ttft_s);
    }
    // The other choices start from the same prompt: copies of this sequence, each drawing its
    // first token from these logits with its own sampler. Copied before the lead's first token,
    // which may end the lead and free its sequence.
    std::vector<Slot*> followers;
    for (Slot& f : slots_) {
      if (f.request == s.request && f.waiting_for_prompt) followers.push_back(&f);
    }
    for (Slot* f : followers) {
      f->waiting_for_prompt = false;
      f->generating = true;
      f->evaluated = s.evaluated;
      f->resident = s.resident;
    }
    for (Slot* f : followers) {
      if (Status copied = session_.CopySeq(s.seq, f->seq); !copied.ok()) Release(*f, copied, "length");
    }
    Emit(s, logits);
    for (Slot* f : followers) {
      if (f->request) Emit(*f, logits);
    }
    emitted = true;
  }
  // The pieces pushed wake their clients' threads, which the kernel may queue on this core behind
  // the next step's decode instead of on an idle one (seen here: a first token written 1.7 ms
  // late, the other core idle). Giving the core up once lets them write now.
  if (emitted) std::this_thread::yield();
}

void BatchScheduler::Emit(Slot& slot, std::span<const float> logits) {
  ServeRequest& r = *slot.request;
  ServeRequest::Choice& c = r.choices_[slot.choice];
  const int32_t token = c.sampler->Sample(logits);
  if (model_.IsEndOfGeneration(token)) {
    Release(slot, Status::Ok(), "stop");
    return;
  }
  ++c.tokens;
  ++r.generation_.completion_tokens;
  std::string bytes = model_.TokenText(token);
  const std::string text = c.utf8.Push(bytes);
  if (r.options_.logprobs >= 0) {
    const TokenLogprobs lp = ComputeLogprobs(logits, token, static_cast<uint32_t>(r.options_.logprobs));
    TokenLogprob entry{std::move(bytes), lp.logprob, {}, c.produced};
    for (const auto& [id, logprob] : lp.top) entry.top.emplace_back(model_.TokenText(id), logprob);
    c.pending.emplace_back(std::move(entry), c.produced + text.size());
  }
  c.produced += text.size();
  Piece piece{slot.choice, c.stop.Push(text), {}, {}};
  // The log-probabilities of the tokens whose text is all out now.
  while (!c.pending.empty() && c.pending.front().second <= c.stop.emitted() && !c.stop.stopped()) {
    piece.logprobs.push_back(std::move(c.pending.front().first));
    c.pending.pop_front();
  }
  // A token whose text is held back (part of a character, or maybe of a stop string) rides on
  // the next piece that goes out.
  c.unsent_tokens.push_back(token);
  if (!piece.text.empty() || !piece.logprobs.empty()) piece.tokens = std::exchange(c.unsent_tokens, {});
  r.Push(std::move(piece));
  if (c.stop.stopped()) {
    Release(slot, Status::Ok(), "stop");
  } else if (c.tokens == r.options_.max_tokens) {
    Release(slot, Status::Ok(), "length");
  } else {
    slot.next = token;
  }
}

// Ends the slot's choice and frees its sequence; the request ends with its last choice. The
// lead's prompt chunks it did not restore go to the storer first (copied out now, while the
// sequence still holds them).
void BatchScheduler::Release(Slot& slot, Status status, const char* finish_reason) {
  ServeRequest& r = *slot.request;
  const bool prompt_done = slot.generating;
  try {
    const bool stores = status.ok() && o_.reuse && prompt_done && slot.choice == 0 && !slot.snapshots_failed;
    const auto one_cache = stores ? session_.MemoryIsOneKvCache(slot.seq) : Result<bool>(false);
    // One KV cache: every token the sequence holds (the prompt and what was generated), as whole
    // chunks and a tail, so a repeat, or a conversation's next turn, prefills only what is new.
    // Other memories: the prompt's whole chunks, as state chunks.
    StoreJob job{.kv = {},
                 .whole = {},
                 .snapshots = {},
                 .keys = r.keys_,
                 .first = slot.stored_chunks,
                 .held = {},
                 .prompt_reusable = r.tokens_.empty() ? 0 : r.tokens_.size() - 1};
    uint32_t chunks = static_cast<uint32_t>(job.keys.size());
    if (one_cache.ok() && *one_cache) {
      job.held = slot.resident;
      chunks = static_cast<uint32_t>(job.held.size() / o_.chunk_tokens);
    }
    // Nothing new: state chunks all stored, or a kept sequence's chunks all stored and nothing
    // after them (a tail already stored is found by the storer, which then writes nothing).
    const bool has_tail = job.held.size() % o_.chunk_tokens != 0;
    const bool stored_already = slot.stored_at_failures == store_failures_.load() &&
                                slot.resident.size() <= slot.stored.size() &&
                                std::equal(slot.resident.begin(), slot.resident.end(), slot.stored.begin());
    if (stores && !stored_already && (!one_cache.ok() || job.first < chunks || has_tail)) {
      Status copied = Status::Ok();
      if (!one_cache.ok()) {
        copied = one_cache.status();
      } else if (*one_cache) {
        auto kv = session_.ExtractSeqKv(slot.seq);
        copied = kv.status();
        if (kv.ok()) job.kv = std::move(*kv);
      } else {
        auto whole = session_.ExtractState(slot.seq);
        copied = whole.status();
        if (whole.ok()) job.whole = std::move(*whole);
        job.snapshots = std::move(slot.snapshots);
      }
      if (copied.ok()) {
        slot.stored_chunks = chunks;
        slot.stored = slot.resident;
        slot.stored_at_failures = store_failures_.load();
        std::lock_guard lock(mu_);
        store_jobs_.push_back(std::move(job));
        store_cv_.notify_one();
      } else {
        KVC_LOG_WARN("copying a finished request's KV out failed: %s", copied.ToString().c_str());
      }
    }
    if (slot.choice < r.choices_.size()) {
      // A character still incomplete at the end never completes: it ends the text as U+FFFD
      // (unless that completes a stop string). Text held back for a stop string that never came
      // goes out, with the log-probabilities of every token whose text was sent.
      ServeRequest::Choice& c = r.choices_[slot.choice];
      Piece piece{slot.choice, c.stop.Push(c.utf8.Finish()), {}, std::exchange(c.unsent_tokens, {})};
      if (c.stop.stopped()) {
        finish_reason = "stop";
        if (slot.choice < r.generation_.stop_words.size()) r.generation_.stop_words[slot.choice] = c.stop.stop_word();
      }
      piece.text += c.stop.Finish();
      for (auto& [entry, end] : c.pending) {
        if (entry.text_offset < c.stop.emitted() || (!c.stop.stopped() && end <= c.stop.emitted())) {
          piece.logprobs.push_back(std::move(entry));
        }
      }
      c.pending.clear();
      r.Push(std::move(piece));
    }
  } catch (...) {
    // Only the store job or the last piece is lost; the sequence is freed and the choice ends.
    KVC_LOG_WARN("finishing a request: %s", ExceptionText(std::current_exception()).c_str());
  }
  // The hot tier keeps the sequence for a later request, where its memory can be cut back to
  // any prefix of it (one KV cache) and nothing went wrong in it.
  bool keep = false;
  if (status.ok() && o_.reuse && o_.hot_tier && !slot.resident.empty()) {
    const auto one_cache = session_.MemoryIsOneKvCache(slot.seq);
    keep = one_cache.ok() && *one_cache;
  }
  slot.released = ++releases_;
  {
    std::lock_guard lock(mu_);
    seq_busy_[static_cast<size_t>(slot.seq)] = 0;
    if (keep) hot_[static_cast<size_t>(slot.seq)] = slot.resident;
  }
  if (!keep) {
    session_.ClearSeq(slot.seq);
    slot.resident.clear();
    slot.stored_chunks = 0;
    slot.stored.clear();
  }
  if (slot.choice < r.generation_.finish_reasons.size()) r.generation_.finish_reasons[slot.choice] = finish_reason;
  if (!status.ok() && r.status_.ok()) r.status_ = std::move(status);
  std::shared_ptr<ServeRequest> request = std::move(slot.request);
  slot.waiting_for_prompt = false;
  slot.generating = false;
  slot.split_at = 0;
  // The lead ended before its prompt was done: the choices waiting for it end with it.
  if (slot.choice == 0 && !prompt_done) {
    for (Slot& f : slots_) {
      if (f.request == request && f.waiting_for_prompt) Release(f, r.status_, finish_reason);
    }
  }
  if (--r.open_choices_ > 0) return;
  if (r.status_.ok()) {
    std::lock_guard m(metrics_.mu);
    metrics_.prompt_tokens += r.generation_.prompt_tokens;
    metrics_.cached_tokens += r.generation_.cached_tokens;
    metrics_.completion_tokens += r.generation_.completion_tokens;
    metrics_.fetched_bytes += r.generation_.fetched_bytes;
  }
  r.generation_.total_s = SecondsSince(r.arrived_);
  r.Finish();
  std::lock_guard lock(mu_);
  --running_;
}

void BatchScheduler::StoreLoop() {
  // Encoding takes from generation as decoding does: the same pool.
  const CodecContext context{reuse_.calibrations, reuse_.model, &pool_};
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
      if (job.whole) {
        // Lossless state chunks: these layouts have no codec rungs yet.
        stored = StoreStateChunks(*reuse_.store, *job.whole, job.snapshots, job.keys, job.first, o_.chunk_tokens);
      } else {
        const KvView kv = job.kv.View();
        // Into the host-memory tier first: a request may want these before the store has them.
        if (memory_ != nullptr) {
          const Status kept =
              RememberHeldChunks(*memory_, kv, job.held, job.prompt_reusable, o_.chunk_tokens, *reuse_.model);
          if (!kept.ok()) KVC_LOG_WARN_EVERY(10, "keeping chunks in memory failed: %s", kept.ToString().c_str());
        }
        stored = StoreHeldChunks(
            *reuse_.store, [&](uint32_t begin, uint32_t n) { return kv.View(begin, n); }, job.held, job.prompt_reusable,
            job.first, o_.chunk_tokens,
            o_.rungs.empty() ? std::vector<StoredRung>{{reuse_.codec, reuse_.codec->info().default_level}} : o_.rungs,
            *reuse_.model, context);
      }
    } catch (...) {
      stored = Internal(ExceptionText(std::current_exception()));
    }
    if (!stored.ok()) {
      ++store_failures_;
      KVC_LOG_WARN_EVERY(10, "storing new chunks failed: %s", stored.status().ToString().c_str());
    }
    {
      std::lock_guard m(metrics_.mu);
      if (stored.ok()) {
        metrics_.stored_bytes += stored->bytes;
        metrics_.stored_tokens += uint64_t{stored->chunks} * o_.chunk_tokens + stored->tail_tokens;
      } else {
        ++metrics_.store_failures;
      }
    }
    // Popped only now, so that "nothing pending" means the chunks are in the store.
    std::lock_guard lock(mu_);
    store_jobs_.pop_front();
    if (store_jobs_.empty()) stores_done_cv_.notify_all();
  }
}

std::vector<BatchScheduler::SequenceView> BatchScheduler::Sequences() {
  std::lock_guard lock(mu_);
  std::vector<SequenceView> out(hot_.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].processing = seq_busy_[i] != 0;
    out[i].prompt_tokens = seq_prompt_tokens_[i];
    out[i].held = hot_[i];
  }
  return out;
}

uint32_t BatchScheduler::EraseSequence(int32_t seq) {
  std::future<uint32_t> erased;
  {
    std::lock_guard lock(mu_);
    if (stop_engine_ || seq < 0 || static_cast<size_t>(seq) >= hot_.size()) return 0;
    std::promise<uint32_t> held;
    erased = held.get_future();
    erases_.emplace_back(seq, std::move(held));
    engine_cv_.notify_one();
  }
  return erased.get();
}

void BatchScheduler::WaitForStores() {
  std::unique_lock lock(mu_);
  stores_done_cv_.wait(lock, [&] { return store_jobs_.empty(); });
}

BatchScheduler::Gauges BatchScheduler::gauges() {
  std::lock_guard lock(mu_);
  return {static_cast<int>(to_fetch_.size()) + fetching_,
          static_cast<int>(ready_.size()),
          running_,
          static_cast<int>(store_jobs_.size()),
          memory_ ? memory_->bytes() : 0,
          memory_ ? memory_->entries() : 0};
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
