// The completion server's engine: continuous batching over llama.cpp sequences with a
// KV-fetch-aware (or FIFO) scheduler in front.
//
// A request goes through up to three queues. With reuse on, its stored prefix is looked up
// when it arrives; if chunks are stored it waits for KV (fetch threads bring them in and decode
// them), otherwise it is ready at once. Ready requests join the running batch as soon as a
// sequence is free: the fetched prefix is restored into that sequence, the rest of the prompt is
// prefilled in slices that share each step with the other sequences' decode tokens, and every
// step decodes one token for each generating sequence. When a request finishes (or its client
// goes away) its sequence is freed, and its new chunks go to a background storer.
//
// The hot tier: a freed sequence keeps its KV in llama.cpp (where the model's memory is one KV
// cache, which can be cut back to any length). A request whose prompt starts with tokens a free
// sequence holds takes that sequence and continues after them: no lookup, fetch or restore, only
// the rest of its prompt is prefilled (what llama-server's prompt cache does). A sequence is free
// only once its request has ended, so no request ever reads a sequence another is writing; free
// sequences with nothing to reuse are taken least recently used first, so the ones that hold
// something last longest.
//
// On a slow link a request's stored prefix is split (CacheGen's split): the engine prefills its
// first chunks from their tokens while the chunks after them are on the link, then the two meet
// in the request's sequence, so neither the link nor the prefill waits for the other.
//
// Behind the hot tier, a host-memory tier (SchedulerOptions::memory_bytes, `--cache-ram`) keeps
// the decoded chunks of sequences computed here, least recently used out first: a fetch copies
// the chunks it holds instead of reading them from the store.
//
// The FIFO scheduler keeps strict arrival order instead: one admission thread looks up and
// fetches each request's prefix in turn, so a request behind one whose KV is crawling over a slow
// link waits for it — what an engine that loads KV at admission does, and what `kvcodec bench
// serve` compares against.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "base/utf8.h"
#include "fetch/prefill_cost.h"
#include "fetch/read_buffers.h"
#include "llama/token_sampler.h"
#include "reuse/prefix_reuse.h"
#include "reuse/state_chunks.h"
#include "serve/serve_metrics.h"
#include "serve/stop_filter.h"

namespace kvc {

// What a request asks of its generation besides the prompt.
struct GenerationOptions {
  uint32_t max_tokens = 64;  // per choice
  uint32_t n = 1;            // choices: sequences that share the prompt's prefill
  SamplingParams sampling;   // greedy by default
  std::vector<std::string> stop;
  int32_t logprobs = -1;  // alternatives per token to report; -1: no log-probabilities
};

// A generated token's log-probability and its most likely alternatives, as a response reports
// them. `bytes` are the token's own (possibly part of a character).
struct TokenLogprob {
  std::string bytes;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
  size_t text_offset = 0;  // where the token's text starts in its choice's text
};

// Text of one choice as the engine produces it, with the log-probabilities of the tokens whose
// text it completes.
struct Piece {
  uint32_t choice = 0;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> tokens;  // the ids sampled since the choice's last piece
};

// What one request's generation did, for the response's usage block.
struct Generation {
  uint32_t prompt_tokens = 0, cached_tokens = 0;
  uint32_t completion_tokens = 0;           // all choices together, as OpenAI counts them
  std::vector<std::string> finish_reasons;  // per choice: "stop", "length" or "cancelled"
  std::vector<std::string> stop_words;      // per choice: the stop string that ended it ("" none)
  uint64_t fetched_bytes = 0;
  double ttft_s = 0;   // arrival to the first token (queue, restore and prefill)
  double total_s = 0;  // arrival to the end
};

// One request between the HTTP thread that owns its connection and the engine: the engine
// writes generated text into it, the HTTP thread reads it out (and cancels it when the client
// is gone).
class ServeRequest {
 public:
  ServeRequest(std::vector<int32_t> tokens, GenerationOptions options);

  // Blocks until the next piece of some choice's text (kPiece), the end of the whole
  // generation (kEnd; then status() and generation() are final) or `timeout` (kTimeout, so a
  // waiting HTTP thread can look at its client). Pieces' text is valid UTF-8: a character split
  // over tokens (byte-fallback vocabularies) comes out whole with its last byte, bytes that never
  // form one come out as U+FFFD, and a choice's text is what ToValidUtf8 makes of its tokens'
  // bytes, cut before the first stop string (of which no part is ever sent).
  enum class Next { kPiece, kEnd, kTimeout };
  Next NextPiece(Piece* piece, std::chrono::milliseconds timeout);
  // The client is gone: the engine frees the request's sequences at its next step (or drops
  // the request before admitting it).
  void Cancel() { cancelled_ = true; }
  const Status& status() const { return status_; }
  const Generation& generation() const { return generation_; }

 private:
  friend class BatchScheduler;
  void Push(Piece piece);
  void Finish();

  // One choice's state on the engine thread.
  struct Choice {
    Utf8Stream utf8;  // token bytes in, whole characters out
    StopFilter stop;
    std::unique_ptr<TokenSampler> sampler;
    uint32_t tokens = 0;
    size_t produced = 0;  // bytes out of utf8 so far
    // Log-probabilities of tokens whose text is not all sent yet, each with where its text ends.
    std::deque<std::pair<TokenLogprob, size_t>> pending;
    std::vector<int32_t> unsent_tokens;  // sampled, not yet in a piece
  };

  const std::vector<int32_t> tokens_;
  const GenerationOptions options_;
  const std::chrono::steady_clock::time_point arrived_;
  std::atomic<bool> cancelled_{false};
  // Scheduler state (each field touched by one stage at a time, handed over through its queues).
  std::vector<ChunkKey> keys_;
  PrefixLookup lookup_;
  std::optional<FetchedPrefix> fetched_;
  // The fetched prefix of a model whose memory is not one KV cache (reuse/state_chunks.h).
  std::optional<FetchedStatePrefix> fetched_states_;
  // A split (fetch/prefill_split.h): the lead prefills the prompt's first split_chunks_ chunks
  // while a fetch thread brings the stored ones after them. Set before the request is queued.
  uint32_t split_chunks_ = 0;
  // Guarded by the scheduler's mu_: the split's fetch is running, and fetched_ is the fetch
  // thread's until this is false.
  bool split_fetching_ = false;
  std::vector<Choice> choices_;  // the engine thread's
  uint32_t open_choices_ = 0;
  bool disconnect_counted_ = false;
  Generation generation_;
  Status status_;
  // The text channel.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> pieces_;
  bool done_ = false;
};

struct SchedulerOptions {
  uint32_t parallel = 4;       // sequences (the session must have as many)
  uint32_t fetch_threads = 1;  // kv-aware only; FIFO admits on one thread
  bool fifo = false;
  bool reuse = true;
  bool hot_tier = true;  // keep freed sequences' KV for later requests (with reuse only)
  uint32_t chunk_tokens = 256;
  double link_gbps = 0;
  // What prefilling costs here (unknown: "recompute" is never planned and nothing is split):
  // prices a chunk's recompute for the level planner and a split's prefilled side. With
  // learn_prefill the scheduler refits it to the prefills it times.
  PrefillCost prefill;
  bool learn_prefill = true;
  uint64_t memory_bytes = 0;      // the host-memory tier's limit (0: no such tier)
  std::vector<StoredRung> rungs;  // stored per new chunk (empty: the context's codec at its default level)
  QualityFloor floor;             // what may be fetched, and each rung's measured loss
};

// What reuse needs: where chunks live, how new ones are encoded, what decodes them.
struct ReuseContext {
  Store* store = nullptr;
  const Codec* codec = nullptr;
  CalibrationRegistry* calibrations = nullptr;
  const ModelFingerprint* model = nullptr;
};

class BatchScheduler {
 public:
  // `session` must hold options.parallel sequences; the scheduler's engine thread is its only
  // user from now on. Starts the engine, fetch and store threads.
  BatchScheduler(const LlamaModel& model, LlamaSession& session, const ReuseContext& reuse,
                 const SchedulerOptions& options, ServeMetrics& metrics);
  ~BatchScheduler();
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Queues a request (from any thread); its text arrives through request->NextPiece.
  void Submit(std::shared_ptr<ServeRequest> request);
  // Serves every request already submitted, then drains the background stores and stops.
  void Stop();

  // What a sequence is doing, as llama-server's GET /slots shows its slots.
  struct SequenceView {
    bool processing = false;     // a request has it
    uint32_t prompt_tokens = 0;  // the prompt of the request that has it, or had it last
    std::vector<int32_t> held;   // free: the tokens it holds (the hot tier); else empty
  };
  std::vector<SequenceView> Sequences();
  // Frees what free sequence `seq` holds (the hot tier's KV); returns the tokens it held, 0 for a
  // sequence a request has (nothing erased) or one out of range.
  uint32_t EraseSequence(int32_t seq);
  // Waits until every store job queued so far is done: a finished request's chunks are then in
  // the store (or failed, which the log and /metrics tell).
  void WaitForStores();

  struct Gauges {
    int waiting_for_kv = 0, waiting = 0, running = 0, store_pending = 0;
    uint64_t memory_bytes = 0, memory_chunks = 0;  // what the host-memory tier holds
  };
  Gauges gauges();

 private:
  struct Slot;
  void FetchLoop();
  void EngineLoop();
  void StoreLoop();
  void MakeReady(std::shared_ptr<ServeRequest> request);
  void Lookup(ServeRequest& request);
  void Fetch(ServeRequest& request);
  bool CountFetch(const Status& status, const PrefixRestore* stats);
  void Admit(Slot& lead);
  // The split (prefill_split.h) that gets the looked-up prefix in first: chunks to prefill while
  // the rest are fetched (0: fetch it all).
  uint32_t ChooseSplit(const ServeRequest& request) const;
  // Fetch options for a run of `chunks` looked-up chunks: "recompute" priced at a chunk's mean
  // price over the run, as the cost is now.
  FetchOptions RunFetchOptions(const PrefillCost& cost, size_t chunks) const;
  // Joins each split whose fetch is done and whose lead has prefilled up to it: the prefilled KV
  // and the fetched KV after it become the lead's sequence.
  void JoinSplits();
  void JoinSplit(Slot& lead);
  // The lead continues from the free sequence it took where that holds part of its prompt.
  bool ContinueHeld(Slot& lead);
  void Step();
  void Fork(Slot& lead);
  void Emit(Slot& slot, std::span<const float> logits);
  void Release(Slot& slot, Status status, const char* finish_reason);
  void Cancelled(Slot& slot);
  // Counts a restore's reused tokens per tier: the host-memory tier's and the store's.
  void CountRestored(const PrefixRestore& stats, uint32_t tokens);
  // Hands the request's fetched prefix buffer back for later fetches (needs no lock).
  void SpareFetchedPrefix(ServeRequest& request);
  void FailAll(const Status& status);
  // The most tokens of `prompt` a free sequence holds (needs mu_).
  uint32_t BestHotMatch(std::span<const int32_t> prompt) const;

  const LlamaModel& model_;
  LlamaSession& session_;
  const ReuseContext reuse_;
  const SchedulerOptions o_;
  ServeMetrics& metrics_;
  LinkShaper link_;          // one emulated link every fetch shares, as concurrent fetches share a network
  std::vector<Slot> slots_;  // the engine thread's: one per sequence
  uint64_t releases_ = 0;    // the engine thread's: ticks that order freed sequences
  std::atomic<uint64_t> store_failures_{0};  // store jobs that failed, so far

  std::mutex mu_;  // guards the queues and flags below
  std::condition_variable fetch_cv_, engine_cv_, store_cv_;
  std::deque<std::shared_ptr<ServeRequest>> to_fetch_;  // kv-aware: stored prefix found; fifo: every request
  std::deque<std::shared_ptr<ServeRequest>> ready_;
  // Prefix buffers fetches decode into, handed back once restored: a fresh one would fault in
  // every page again (10-20 us each where page faults trap to a hypervisor). One as long as a
  // sequence is made at start (up to kWarmPrefixBytes), so the first fetch finds it mapped; none
  // over kMaxSpareBufferBytes is kept (host memory held for a latency a long prefix hardly sees).
  static constexpr uint64_t kWarmPrefixBytes = uint64_t{64} << 20;
  static constexpr uint64_t kMaxSpareBufferBytes = uint64_t{256} << 20;
  std::vector<KvCache> spare_prefixes_;
  // Per sequence: the tokens it holds while free (the hot tier); empty while a request has it.
  std::vector<std::vector<int32_t>> hot_;
  // Per sequence: whether a request has it, and the prompt tokens of the one that has it or had
  // it last (for Sequences()).
  std::vector<uint8_t> seq_busy_;
  std::vector<uint32_t> seq_prompt_tokens_;
  // Sequences EraseSequence asked the engine to free, each with the promise of what it held.
  std::deque<std::pair<int32_t, std::promise<uint32_t>>> erases_;
  std::condition_variable stores_done_cv_;
  struct StoreJob {
    KvCache kv;
    // A memory that is not one KV cache: the sequence's whole state and, where it keeps sliding
    // windows or recurrent states, their snapshot at each new chunk's end (state_chunks.h).
    std::optional<SeqState> whole;
    std::vector<SeqState> snapshots;
    std::vector<ChunkKey> keys;  // state chunks: the prompt's whole chunks
    uint32_t first = 0;
    // One KV cache: the tokens the sequence holds, the first prompt_reusable of them the
    // prompt's reusable ones (StoreHeldChunks).
    std::vector<int32_t> held;
    size_t prompt_reusable = 0;
  };
  std::deque<StoreJob> store_jobs_;
  int fetching_ = 0, running_ = 0;
  bool stop_fetch_ = false, stop_engine_ = false, stop_store_ = false, stopped_ = false;

  // The one pool fetch and store work shares: chunks decode and encode on its fetch_threads
  // workers, so reuse takes that many cores from generation and no more.
  ThreadPool pool_;
  // The host-memory tier (null without one): chunks computed or fetched here lately, decoded.
  std::unique_ptr<DecodedChunkCache> memory_;
  // Stored objects are read into these (fetch/read_buffers.h): as many as the fetches may have in
  // flight, mapped at start for a raw chunk each, up to kWarmReadBytes in all.
  static constexpr uint64_t kWarmReadBytes = uint64_t{64} << 20;
  std::unique_ptr<ReadBuffers> read_buffers_;
  // Null when the prefill cost is unknown.
  std::unique_ptr<PrefillCostEstimator> prefill_cost_;
  std::vector<std::thread> fetchers_;
  std::thread engine_, storer_;
};

}  // namespace kvc
