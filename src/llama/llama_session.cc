#include "llama/llama_session.h"

#include <ggml.h>
#include <llama.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/log.h"
#include "llama/llama_state.h"

namespace kvc {
namespace {
// The sequence a single-sequence session stages appended chunks in (AppendKv).
constexpr int32_t kStagingSeq = 1;

// llama.cpp threads when the caller leaves the choice: $KVCODEC_THREADS (1..1024), else every
// core. The test suite sets it to 1: two tests at once on two cores, each with a thread per
// core, stall each other at every step (llama.cpp's threads wait for one another).
int DefaultThreads() {
  if (const char* env = std::getenv("KVCODEC_THREADS"); env != nullptr) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ggml_type GgmlType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return GGML_TYPE_F32;
    case DType::kF16:
      return GGML_TYPE_F16;
    case DType::kBF16:
      return GGML_TYPE_BF16;
  }
  return GGML_TYPE_F16;
}

}  // namespace

// Measured on the six test models (a 9K-token prefill on one thread): steps of 32 or 64 tokens
// take 0.83-1.00x the time of 512 (a step's scores stay in cache), 16 0.92-1.25x, 8 up to 1.45x. But
// each step is a graph run whose threads meet at a spinning barrier after every node, so with
// more threads than free cores the time grows with the number of steps (two threads on one core:
// about 1.3 s a step on kvtiny, whatever its size). Hence the cache's own size as the bound, not
// less.
uint32_t BoundedUbatch(const ModelInfo& model, const SessionOptions& options) {
  if (options.flash_attn || options.n_batch == 0) return options.n_batch;
  constexpr uint32_t kMinUbatch = 16;
  const uint64_t kv_per_cell =
      uint64_t{2} * model.n_layers * model.n_kv_heads * model.head_dim * DTypeSize(options.cache_type);
  const uint64_t scratch_per_cell = uint64_t{6} * model.n_heads + 4;  // per token of the step
  uint32_t n = std::bit_floor(options.n_batch);
  while (n > kMinUbatch && n * scratch_per_cell > kv_per_cell) n /= 2;
  return n;
}

LlamaSession::~LlamaSession() {
  if (ctx_ != nullptr) llama_free(ctx_);
}

Result<std::unique_ptr<LlamaSession>> LlamaSession::Create(const LlamaModel& model, const SessionOptions& options) {
  if (options.n_ctx == 0 || options.n_batch == 0 || options.n_seq == 0) {
    return InvalidArgument("n_ctx, n_batch and n_seq must be positive");
  }
  std::unique_ptr<LlamaSession> s(new LlamaSession());
  s->model_ = &model;
  s->options_ = options;
  llama_context_params params = llama_context_default_params();
  // A stream per sequence (not one unified cache): attention then runs over the sequence's own
  // cells only, where a unified cache makes every token attend over (masked) cells of all of
  // them, so each request's cost would grow with the others' lengths.
  params.n_ctx = options.n_ctx * options.n_seq;
  params.n_batch = options.n_batch;
  params.n_ubatch = options.n_ubatch ? std::min(options.n_ubatch, options.n_batch) : options.n_batch;
  // A single sequence gets a second one to stage chunks in (AppendKv); with one unified cache
  // that adds no cells and changes no computation of sequence 0.
  params.n_seq_max = options.n_seq == 1 ? 2 : options.n_seq;
  const int threads = options.n_threads > 0 ? options.n_threads : DefaultThreads();
  params.n_threads = threads;
  params.n_threads_batch = threads;
  // Explicit, never AUTO: the V layout (transposed or not) depends on it, and restore must
  // write the layout the context uses.
  params.flash_attn_type = options.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  params.type_k = GgmlType(options.cache_type);
  params.type_v = GgmlType(options.cache_type);
  params.kv_unified = options.n_seq == 1;
  params.no_perf = true;
  s->ctx_ = llama_init_from_model(model.raw(), params);
  if (s->ctx_ == nullptr) return Internal("llama.cpp could not create a context");
  if (options.require_kv && llama_get_memory(s->ctx_) == nullptr) return ModelKeepsNoKv(model.path());
  s->n_vocab_ = model.info().n_vocab;
  return s;
}

Status LlamaSession::Eval(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) return InvalidArgument("nothing to evaluate");
  if (n_cached_ + tokens.size() > options_.n_ctx) {
    return InvalidArgument(FormatMessage("%zu more tokens do not fit the context (%u used of %u)", tokens.size(),
                                         n_cached_, options_.n_ctx));
  }
  // llama.cpp keeps only the last decode call's logits, so "all logits" must fit one call.
  if (all_logits && tokens.size() > options_.n_batch) {
    return InvalidArgument(
        FormatMessage("all logits for %zu tokens needs n_batch >= %zu", tokens.size(), tokens.size()));
  }
  last_logit_rows_.assign(tokens.size(), -1);
  llama_batch batch = llama_batch_init(static_cast<int32_t>(options_.n_batch), 0, 1);
  Status status = Status::Ok();
  for (size_t start = 0; start < tokens.size() && status.ok(); start += options_.n_batch) {
    const size_t n = std::min<size_t>(options_.n_batch, tokens.size() - start);
    batch.n_tokens = static_cast<int32_t>(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t global = start + i;
      batch.token[i] = tokens[global];
      batch.pos[i] = next_pos_ + static_cast<int32_t>(global);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      const bool want = all_logits || global + 1 == tokens.size();
      batch.logits[i] = want;
      if (want) last_logit_rows_[global] = static_cast<int32_t>(i);
    }
    const int32_t rc = llama_decode(ctx_, batch);
    if (rc != 0) {
      status = Internal(FormatMessage("llama_decode failed with code %d", rc));
      break;
    }
  }
  llama_batch_free(batch);
  if (status.ok()) {
    next_pos_ += static_cast<int32_t>(tokens.size());
    n_cached_ += static_cast<uint32_t>(tokens.size());
  } else {
    last_logit_rows_.clear();  // a failed batch may have left rows that no longer hold logits
  }
  return status;
}

std::span<const float> LlamaSession::Logits(int i) const {
  const int idx = i < 0 ? static_cast<int>(last_logit_rows_.size()) - 1 : i;
  const float* row = llama_get_logits_ith(ctx_, last_logit_rows_[static_cast<size_t>(idx)]);
  return {row, n_vocab_};
}

Result<std::span<const float>> LlamaSession::LastLogits() const {
  if (last_logit_rows_.empty() || last_logit_rows_.back() < 0) {
    return InvalidArgument("no logits: evaluate tokens first (a restore or a failed eval leaves none)");
  }
  const float* row = llama_get_logits_ith(ctx_, last_logit_rows_.back());
  if (row == nullptr) return Internal("llama.cpp has no logits for the last evaluated token");
  return std::span<const float>(row, n_vocab_);
}

Result<KvCache> LlamaSession::ExtractKv() const { return ExtractSeqKv(0); }

Result<KvCache> LlamaSession::ExtractSeqKv(int32_t seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= options_.n_seq) return InvalidArgument("no such sequence");
  return ReadSeqState(seq);
}

Result<KvCache> LlamaSession::ExtractKvRange(int32_t pos_begin, uint32_t n_tokens) {
  if (options_.n_seq != 1) return InvalidArgument("extracting a range of tokens needs a single-sequence session");
  const int32_t first = next_pos_ - static_cast<int32_t>(n_cached_);
  if (n_tokens == 0 || pos_begin < first || pos_begin >= next_pos_ ||
      n_tokens > static_cast<uint32_t>(next_pos_ - pos_begin)) {
    return InvalidArgument(FormatMessage("positions %d..%lld are not all in the sequence (%d..%d)", pos_begin,
                                         static_cast<long long>(pos_begin) + n_tokens, first, next_pos_));
  }
  llama_memory_t memory = llama_get_memory(ctx_);
  llama_memory_seq_cp(memory, 0, kStagingSeq, pos_begin, pos_begin + static_cast<int32_t>(n_tokens));
  auto kv = ReadSeqState(kStagingSeq);
  // The cells stay sequence 0's: only the staging label goes.
  llama_memory_seq_rm(memory, kStagingSeq, -1, -1);
  if (kv.ok() && (kv->pos_begin() != pos_begin || kv->shape().n_tokens != n_tokens)) {
    return Internal(FormatMessage("llama.cpp gave %u tokens from position %d for %u from %d", kv->shape().n_tokens,
                                  kv->pos_begin(), n_tokens, pos_begin));
  }
  return kv;
}

namespace {

// What llama_state_seq_get_data(_ext) writes for `seq`, any sequence of the context.
Result<std::vector<uint8_t>> GetStateBytes(llama_context* ctx, int32_t seq, llama_state_seq_flags flags) {
  const size_t size = llama_state_seq_get_size_ext(ctx, seq, flags);
  std::vector<uint8_t> blob(size);
  const size_t written = llama_state_seq_get_data_ext(ctx, blob.data(), blob.size(), seq, flags);
  if (written == 0 || written > size) return Internal("llama_state_seq_get_data failed");
  blob.resize(written);
  return blob;
}

}  // namespace

Result<KvCache> LlamaSession::ReadSeqState(int32_t seq) const {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> blob, GetStateBytes(ctx_, seq, 0));
  auto kv = ParseLlamaSeqState(blob, model_->info().n_kv_heads);
  if (kv.ok()) return kv;
  // A memory of another kind (MLA's keys-only latent, a sliding-window pair, a recurrent state)
  // is not corrupt: say what it is and where it is handled, not where the one-cache reader stopped.
  if (auto state = ParseSeqState(blob); state.ok()) {
    return Unsupported("this model's memory (" + SeqStateKinds(*state) +
                       (state->sections.empty() ? "" : ", not one KV cache of uniform layers") +
                       ") is not read as one KV cache; `run` and `serve` reuse it as state chunks, and each of "
                       "its attention caches is coded as planes of their own shapes (src/llama/kv_planes.h)");
  }
  return kv.status();
}

Status LlamaSession::RestoreKv(const KvView& kv) {
  Clear();
  RETURN_IF_ERROR(RestoreSeqKv(0, kv));
  next_pos_ = kv.pos_begin() + static_cast<int32_t>(kv.n_tokens());
  n_cached_ = kv.n_tokens();
  return Status::Ok();
}

Status LlamaSession::AppendKv(const KvView& chunk) {
  if (options_.n_seq != 1) return InvalidArgument("appending KV needs a single-sequence session");
  if (chunk.pos_begin() != next_pos_) {
    return InvalidArgument(
        FormatMessage("the chunk starts at position %d, the sequence continues at %d", chunk.pos_begin(), next_pos_));
  }
  if (chunk.n_tokens() > options_.n_ctx - n_cached_) {
    return InvalidArgument(FormatMessage("%u more tokens do not fit the context (%u used of %u)", chunk.n_tokens(),
                                         n_cached_, options_.n_ctx));
  }
  // The chunk lands in cells of its own staging sequence, which then become sequence 0's: in a
  // unified cache a sequence copy only relabels cells, so nothing is copied twice.
  RETURN_IF_ERROR(WriteSeqState(kStagingSeq, chunk));
  llama_memory_t memory = llama_get_memory(ctx_);
  llama_memory_seq_cp(memory, kStagingSeq, 0, -1, -1);
  llama_memory_seq_rm(memory, kStagingSeq, -1, -1);
  next_pos_ += static_cast<int32_t>(chunk.n_tokens());
  n_cached_ += chunk.n_tokens();
  last_logit_rows_.clear();  // the last logits belong to a token that is no longer the last
  return Status::Ok();
}

Status LlamaSession::RestoreSeqKv(int32_t seq, const KvView& kv) {
  if (seq < 0 || static_cast<uint32_t>(seq) >= options_.n_seq) return InvalidArgument("no such sequence");
  return WriteSeqState(seq, kv);
}

Status LlamaSession::WriteSeqState(int32_t seq, const KvView& kv) {
  const ModelInfo& info = model_->info();
  const KvShape shape = kv.shape();
  if (shape.n_layers != info.n_layers || shape.n_kv_heads != info.n_kv_heads || shape.head_dim != info.head_dim) {
    return InvalidArgument(
        FormatMessage("KV shape (%u layers, %u heads, head_dim %u) does not fit this model (%u, %u, %u)",
                      shape.n_layers, shape.n_kv_heads, shape.head_dim, info.n_layers, info.n_kv_heads, info.head_dim));
  }
  if (kv.pos_begin() < 0) return InvalidArgument("restore needs non-negative positions");
  if (shape.n_tokens > options_.n_ctx) return InvalidArgument("KV cache is longer than the context");
  KvView source = kv;
  KvCache converted;
  if (kv.dtype() != options_.cache_type) {
    ASSIGN_OR_RETURN(const KvCache copy, kv.Copy());
    ASSIGN_OR_RETURN(converted, copy.ConvertTo(options_.cache_type));
    source = converted.View();
  }
  LlamaStateLayout layout;
  layout.dtype = options_.cache_type;
  layout.v_trans = !options_.flash_attn;
  layout.seq_id = seq;
  if (options_.n_seq > 1) {
    layout.n_stream = options_.n_seq;
    layout.stream = static_cast<uint32_t>(seq);
  }
  ASSIGN_OR_RETURN(const size_t bytes, LlamaSeqStateBytes(source.shape(), layout));
  if (state_blob_.size() < bytes) state_blob_.resize(bytes);
  const std::span<uint8_t> blob(state_blob_.data(), bytes);
  RETURN_IF_ERROR(WriteLlamaSeqState(source, layout, blob));
  ClearSeq(seq);
  const size_t read = llama_state_seq_set_data(ctx_, blob.data(), blob.size(), seq);
  constexpr size_t kMaxKeptBlobBytes = size_t{32} << 20;
  if (state_blob_.size() > kMaxKeptBlobBytes) std::vector<uint8_t>().swap(state_blob_);
  if (read != blob.size()) {
    ClearSeq(seq);
    return Internal("llama.cpp rejected the restored KV state (the shared cache may be full)");
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> LlamaSession::StateBlob(int32_t seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= options_.n_seq) return InvalidArgument("no such sequence");
  return GetStateBytes(ctx_, seq, 0);
}

size_t LlamaSession::StateBlobBytes(int32_t seq) const { return llama_state_seq_get_size(ctx_, seq); }

Result<SeqState> LlamaSession::ExtractState(int32_t seq) const {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> blob, StateBlob(seq));
  return ParseSeqState(blob);
}

Status LlamaSession::RestoreState(const SeqState& state, int32_t seq) {
  if (seq < 0 || static_cast<uint32_t>(seq) >= options_.n_seq) return InvalidArgument("no such sequence");
  ASSIGN_OR_RETURN(const std::vector<uint8_t> blob, kvc::WriteSeqState(state, seq));
  return RestoreStateBlob(blob, seq);
}

Status LlamaSession::RestoreStateBlob(std::span<const uint8_t> blob, int32_t seq) {
  if (seq < 0 || static_cast<uint32_t>(seq) >= options_.n_seq) return InvalidArgument("no such sequence");
  ClearSeq(seq);
  if (llama_state_seq_set_data(ctx_, blob.data(), blob.size(), seq) != blob.size()) {
    ClearSeq(seq);
    return InvalidArgument("llama.cpp rejected the state (another model, cache type or context size?)");
  }
  if (seq == 0) {
    // Where the sequence continues, as the memory itself says (a sliding-window or recurrent
    // memory holds fewer cells than the tokens it has seen).
    llama_memory_t memory = llama_get_memory(ctx_);
    const llama_pos first = llama_memory_seq_pos_min(memory, 0), last = llama_memory_seq_pos_max(memory, 0);
    next_pos_ = last < 0 ? 0 : last + 1;
    n_cached_ = last < 0 ? 0 : static_cast<uint32_t>(last + 1 - std::max<llama_pos>(0, first));
    last_logit_rows_.clear();
  }
  return Status::Ok();
}

Result<ChunkState> LlamaSession::ExtractChunkState(int32_t pos_begin, uint32_t n_tokens) {
  if (options_.n_seq != 1) return InvalidArgument("extracting a chunk needs a single-sequence session");
  const int32_t first = next_pos_ - static_cast<int32_t>(n_cached_);
  const int32_t end = pos_begin + static_cast<int32_t>(n_tokens);
  if (n_tokens == 0 || pos_begin < first || end > next_pos_) {
    return InvalidArgument(
        FormatMessage("positions %d..%d are not all in the sequence (%d..%d)", pos_begin, end, first, next_pos_));
  }
  const bool snapshots = model_->info().SnapshotsAtChunkEnds();
  if (snapshots && end != next_pos_) {
    return InvalidArgument(FormatMessage(
        "this model's memory keeps a sliding window or a recurrent state: a chunk ending at %d is taken when the "
        "sequence ends there (it ends at %d)",
        end, next_pos_));
  }
  // The chunk's cells, through the staging sequence (as ExtractKvRange).
  llama_memory_t memory = llama_get_memory(ctx_);
  llama_memory_seq_cp(memory, 0, kStagingSeq, pos_begin, end);
  auto staged_bytes = GetStateBytes(ctx_, kStagingSeq, 0);
  llama_memory_seq_rm(memory, kStagingSeq, -1, -1);
  RETURN_IF_ERROR(staged_bytes.status());
  ASSIGN_OR_RETURN(SeqState staged, ParseSeqState(*staged_bytes));

  ChunkState chunk;
  chunk.pos_begin = pos_begin;
  chunk.n_tokens = n_tokens;
  chunk.at_boundary.assign(staged.sections.size(), false);
  chunk.tokens.seq_id = 0;
  chunk.boundary.seq_id = 0;
  if (snapshots) {
    // llama.cpp writes only the partial sections (sliding-window caches, recurrent states) under
    // this flag; a cache that ignores it writes all of itself, which then all counts as snapshot.
    ASSIGN_OR_RETURN(const std::vector<uint8_t> partial_bytes,
                     GetStateBytes(ctx_, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY));
    ASSIGN_OR_RETURN(chunk.boundary, ParseSeqState(partial_bytes));
    ASSIGN_OR_RETURN(chunk.at_boundary, MatchSnapshotSections(staged, chunk.boundary));
  }
  for (size_t i = 0; i < staged.sections.size(); ++i) {
    if (!chunk.at_boundary[i]) chunk.tokens.sections.push_back(std::move(staged.sections[i]));
  }
  if (const Status s = CheckChunkState(chunk); !s.ok()) {
    return Internal("llama.cpp's state does not split into chunks: " + s.message());
  }
  return chunk;
}

Result<bool> LlamaSession::MemoryIsOneKvCache(int32_t seq) {
  if (one_kv_cache_) return *one_kv_cache_;
  if (model_->info().SnapshotsAtChunkEnds()) {
    one_kv_cache_ = false;
    return false;
  }
  // One cell is enough to see the layout; a session of several sequences (or one whose positions
  // a caller tracks: DecodeBatch) has no staging one to take it through, and reads it whole.
  SeqState cells;
  if (options_.n_seq == 1 && seq == 0 && n_cached_ > 0) {
    ASSIGN_OR_RETURN(ChunkState one, ExtractChunkState(next_pos_ - static_cast<int32_t>(n_cached_), 1));
    cells = std::move(one.tokens);
  } else {
    ASSIGN_OR_RETURN(cells, ExtractState(seq));
  }
  const ModelInfo& info = model_->info();
  bool uniform = cells.sections.size() == 1;
  if (uniform) {
    const auto& a = std::get<AttentionSection>(cells.sections[0]);
    const uint64_t row = uint64_t{info.n_kv_heads} * info.head_dim * DTypeSize(options_.cache_type);
    const auto type = static_cast<int32_t>(GgmlType(options_.cache_type));
    uniform = a.n_cells > 0 && a.cell_ext_bytes == 0 && !a.k.empty() && a.v.size() == a.k.size() &&
              a.k.size() == info.n_layers;
    for (const auto* tensors : {&a.k, &a.v}) {
      for (const StateTensor& t : *tensors) uniform = uniform && t.row_bytes == row && t.ggml_type == type;
    }
  }
  one_kv_cache_ = uniform;
  return uniform;
}

Result<SeqState> LlamaSession::ExtractSnapshot(int32_t seq) {
  if (seq < 0 || static_cast<uint32_t>(seq) >= options_.n_seq) return InvalidArgument("no such sequence");
  if (!model_->info().SnapshotsAtChunkEnds()) return SeqState{.seq_id = seq, .sections = {}};
  ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, GetStateBytes(ctx_, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY));
  return ParseSeqState(bytes);
}

Status LlamaSession::RestoreChunks(std::span<const ChunkState> chunks) {
  ASSIGN_OR_RETURN(const SeqState state, ComposePrefixState(chunks));
  Clear();
  return RestoreState(state, 0);
}

void LlamaSession::ClearSeq(int32_t seq) { llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1); }

Status LlamaSession::TrimSeq(int32_t seq, uint32_t keep) {
  if (seq < 0 || static_cast<uint32_t>(seq) >= options_.n_seq) return InvalidArgument("no such sequence");
  if (keep > options_.n_ctx) return InvalidArgument("keeping more tokens than a sequence holds");
  if (!llama_memory_seq_rm(llama_get_memory(ctx_), seq, static_cast<llama_pos>(keep), -1)) {
    return Unsupported("llama.cpp cannot drop the last tokens of this model's memory");
  }
  return Status::Ok();
}

Status LlamaSession::CopySeq(int32_t src, int32_t dst) {
  const auto valid = [&](int32_t seq) { return seq >= 0 && static_cast<uint32_t>(seq) < options_.n_seq; };
  if (!valid(src) || !valid(dst) || src == dst) return InvalidArgument("no such pair of sequences");
  // Through llama.cpp's sequence state, not llama_memory_seq_cp: across per-sequence streams
  // that copy is deferred to the next decode, so a restore into `src` before then (a new request
  // in a freed sequence) would reach `dst` too. This copy is done when it returns.
  ASSIGN_OR_RETURN(const std::vector<uint8_t> blob, GetStateBytes(ctx_, src, 0));
  ClearSeq(dst);
  if (llama_state_seq_set_data(ctx_, blob.data(), blob.size(), dst) != blob.size()) {
    ClearSeq(dst);
    return Internal("llama.cpp could not copy a sequence");
  }
  return Status::Ok();
}

Status LlamaSession::DecodeBatch(std::span<const SeqTokens> entries) {
  size_t total = 0;
  for (const SeqTokens& e : entries) {
    if (e.tokens.empty()) return InvalidArgument("a batch entry without tokens");
    if (e.seq < 0 || static_cast<uint32_t>(e.seq) >= options_.n_seq) return InvalidArgument("no such sequence");
    if (e.pos < 0 || static_cast<uint64_t>(e.pos) + e.tokens.size() > options_.n_ctx) {
      return InvalidArgument(FormatMessage("positions %d..%zu exceed the %u tokens a sequence may hold", e.pos,
                                           e.pos + e.tokens.size(), options_.n_ctx));
    }
    total += e.tokens.size();
  }
  if (total == 0) return InvalidArgument("nothing to evaluate");
  // llama.cpp keeps only the last decode call's logits, so one call must take the whole batch.
  if (total > options_.n_batch)
    return InvalidArgument(FormatMessage("%zu tokens exceed n_batch %u", total, options_.n_batch));
  llama_batch batch = llama_batch_init(static_cast<int32_t>(total), 0, 1);
  last_logit_rows_.assign(entries.size(), -1);
  int32_t n = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SeqTokens& e = entries[i];
    for (size_t t = 0; t < e.tokens.size(); ++t, ++n) {
      batch.token[n] = e.tokens[t];
      batch.pos[n] = e.pos + static_cast<int32_t>(t);
      batch.n_seq_id[n] = 1;
      batch.seq_id[n][0] = e.seq;
      batch.logits[n] = t + 1 == e.tokens.size();
    }
    last_logit_rows_[i] = n - 1;
  }
  batch.n_tokens = n;
  const int32_t rc = llama_decode(ctx_, batch);
  llama_batch_free(batch);
  if (rc != 0) {
    last_logit_rows_.clear();
    return Internal(
        FormatMessage("llama_decode failed with code %d%s", rc, rc == 1 ? " (the shared KV cache is full)" : ""));
  }
  return Status::Ok();
}

std::span<const float> LlamaSession::BatchLogits(size_t entry) const {
  const float* row = llama_get_logits_ith(ctx_, last_logit_rows_[entry]);
  return {row, n_vocab_};
}

Status LlamaSession::SetNextPosition(int32_t pos) {
  if (n_cached_ != 0) return InvalidArgument("the next position can only be set on an empty session");
  if (pos < 0) return InvalidArgument("positions are non-negative");
  next_pos_ = pos;
  return Status::Ok();
}

void LlamaSession::Clear() {
  llama_memory_clear(llama_get_memory(ctx_), true);
  next_pos_ = 0;
  n_cached_ = 0;
  last_logit_rows_.clear();
}

}  // namespace kvc
