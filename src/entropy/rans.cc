#include "entropy/rans.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <queue>
#include <utility>

#include "entropy/varint.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvc {
namespace {

// Invariants (L = 2^16, n = scale_bits <= 15, f = a symbol's frequency):
//   every state always lies in [L, 2^32);
//   the encoder emits the low 16 bits before coding a symbol when x >= f << (32 - n), which
//   leaves x in [f << (16 - n), f << (32 - n)), where coding cannot overflow 32 bits;
//   the decoder's x' = f * (x >> n) + slot - start is >= 2 for any x >= L, so one 16-bit
//   read always renormalises it, and each decode step exactly inverts one encode step.
// Words are little-endian u16, written back to front by the encoder, read front to back.

inline uint64_t MulHi64(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
}

inline void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline uint32_t GetU32(const uint8_t* p) {
  return p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// Four consecutive 16-bit words, the first in the low bits (the stream is little-endian).
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// steps[k] = f | k << 16 for k < f: a symbol's slots in the fused decode table. Four at a time
// (tables are rebuilt for every file, and a 14-bit one has 16384 slots).
inline void FillSlotSteps(uint32_t* steps, uint32_t f) {
  uint32_t k = 0;
#if defined(__x86_64__)
  const __m128i freq = _mm_set1_epi32(static_cast<int>(f));
  const __m128i four = _mm_set1_epi32(4 << 16);
  __m128i offsets = _mm_setr_epi32(0, 1 << 16, 2 << 16, 3 << 16);
  for (; k + 4 <= f; k += 4) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(steps + k), _mm_or_si128(freq, offsets));
    offsets = _mm_add_epi32(offsets, four);
  }
#endif
  for (; k < f; ++k) steps[k] = f | (k << 16);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// FrequencyTable

FrequencyTable FrequencyTable::Build(std::span<const uint32_t> freqs, uint32_t scale_bits) {
  FrequencyTable t;
  t.scale_bits_ = scale_bits;
  const uint32_t total = 1u << scale_bits;
  t.dec_.resize(freqs.size());
  t.enc_.resize(freqs.size());
  t.slot_symbol_.resize(total);
  t.slot_step_.resize(total);
  uint32_t start = 0;
  for (size_t s = 0; s < freqs.size(); ++s) {
    const uint32_t f = freqs[s];
    t.dec_[s] = f | (start << 16);
    if (f != 0) {
      EncSymbol& e = t.enc_[s];
      e.rcp = ((uint64_t{1} << 63) + f - 1) / f;
      e.renorm = static_cast<uint32_t>((uint64_t{f} << (32 - scale_bits)) - 1);
      e.start = static_cast<uint16_t>(start);
      e.cmpl = static_cast<uint16_t>(total - f);
      std::fill_n(t.slot_symbol_.begin() + start, f, static_cast<uint16_t>(s));
      FillSlotSteps(t.slot_step_.data() + start, f);
    }
    start += f;
  }
  return t;
}

Result<FrequencyTable> FrequencyTable::FromFrequencies(std::span<const uint32_t> freqs, uint32_t scale_bits) {
  if (scale_bits < kMinScaleBits || scale_bits > kMaxScaleBits) {
    return InvalidArgument(FormatMessage("scale_bits %u outside %u..%u", scale_bits, kMinScaleBits, kMaxScaleBits));
  }
  if (freqs.empty() || freqs.size() > kMaxAlphabetSize) {
    return InvalidArgument(FormatMessage("alphabet size %zu outside 1..%u", freqs.size(), kMaxAlphabetSize));
  }
  uint64_t sum = 0;
  for (uint32_t f : freqs) sum += f;
  if (sum != (uint64_t{1} << scale_bits)) {
    return InvalidArgument(
        FormatMessage("frequencies sum to %llu, not %u", static_cast<unsigned long long>(sum), 1u << scale_bits));
  }
  return Build(freqs, scale_bits);
}

Result<FrequencyTable> FrequencyTable::FromCounts(std::span<const uint64_t> counts, uint32_t scale_bits) {
  if (scale_bits < kMinScaleBits || scale_bits > kMaxScaleBits) {
    return InvalidArgument(FormatMessage("scale_bits %u outside %u..%u", scale_bits, kMinScaleBits, kMaxScaleBits));
  }
  if (counts.empty() || counts.size() > kMaxAlphabetSize) {
    return InvalidArgument(FormatMessage("alphabet size %zu outside 1..%u", counts.size(), kMaxAlphabetSize));
  }
  const uint32_t target = 1u << scale_bits;
  uint64_t total = 0;
  size_t present = 0;
  for (uint64_t c : counts) {
    if (__builtin_add_overflow(total, c, &total)) return InvalidArgument("symbol counts overflow 64 bits");
    present += c != 0;
  }
  if (present == 0) return InvalidArgument("all symbol counts are zero");
  if (present > target) {
    return InvalidArgument(
        FormatMessage("%zu symbols present but scale_bits %u gives only %u slots", present, scale_bits, target));
  }

  // Round down, lifting present symbols to 1; then move the sum to the target one unit at a
  // time, always where it costs least: a symbol of count c coded at frequency f costs
  // c * log2(total / f) bits, so a unit added to f saves c * log2((f + 1) / f), and a unit
  // taken away costs c * log2(f / (f - 1)). Ties go to the lower symbol, for determinism.
  std::vector<uint32_t> freqs(counts.size());
  uint64_t sum = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0) continue;
    const auto f = static_cast<uint64_t>(static_cast<unsigned __int128>(counts[s]) * target / total);
    freqs[s] = static_cast<uint32_t>(std::max<uint64_t>(f, 1));
    sum += freqs[s];
  }
  using Entry = std::pair<double, uint32_t>;
  if (sum < target) {
    auto gain = [&](uint32_t s) { return static_cast<double>(counts[s]) * std::log1p(1.0 / freqs[s]); };
    auto worse = [](const Entry& a, const Entry& b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    };
    std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
    for (uint32_t s = 0; s < counts.size(); ++s) {
      if (freqs[s] != 0) heap.emplace(gain(s), s);
    }
    for (; sum < target; ++sum) {
      const uint32_t s = heap.top().second;
      heap.pop();
      ++freqs[s];
      heap.emplace(gain(s), s);
    }
  } else if (sum > target) {
    // Only the lift to 1 overshoots, and present <= target, so some symbol has f >= 2.
    auto loss = [&](uint32_t s) { return static_cast<double>(counts[s]) * -std::log1p(-1.0 / freqs[s]); };
    auto worse = [](const Entry& a, const Entry& b) {
      return a.first > b.first || (a.first == b.first && a.second > b.second);
    };
    std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
    for (uint32_t s = 0; s < counts.size(); ++s) {
      if (freqs[s] >= 2) heap.emplace(loss(s), s);
    }
    for (; sum > target; --sum) {
      const uint32_t s = heap.top().second;
      heap.pop();
      --freqs[s];
      if (freqs[s] >= 2) heap.emplace(loss(s), s);
    }
  }
  return Build(freqs, scale_bits);
}

void FrequencyTable::AppendTo(ByteWriter* w) const {
  PutVarint(w, dec_.size());
  w->U8(static_cast<uint8_t>(scale_bits_));
  for (size_t s = 0; s < dec_.size();) {
    const uint32_t f = dec_[s] & 0xffff;
    if (f != 0) {
      PutVarint(w, f);
      ++s;
      continue;
    }
    size_t run = 1;
    while (s + run < dec_.size() && (dec_[s + run] & 0xffff) == 0) ++run;
    PutVarint(w, 0);
    PutVarint(w, run - 1);
    s += run;
  }
}

Result<FrequencyTable> FrequencyTable::Parse(ByteReader* r, uint32_t max_alphabet_size) {
  max_alphabet_size = std::min(max_alphabet_size, kMaxAlphabetSize);
  uint64_t alphabet = 0;
  RETURN_IF_ERROR(ReadVarint(r, max_alphabet_size, &alphabet, "frequency table alphabet size"));
  KVC_CHECK_CORRUPT(alphabet >= 1, "frequency table alphabet size is 0");
  uint8_t scale_bits = 0;
  RETURN_IF_ERROR(r->U8(&scale_bits, "frequency table scale_bits"));
  KVC_CHECK_CORRUPT(scale_bits >= kMinScaleBits && scale_bits <= kMaxScaleBits,
                    "frequency table scale_bits %u outside %u..%u", scale_bits, kMinScaleBits, kMaxScaleBits);
  const uint32_t target = 1u << scale_bits;
  std::vector<uint32_t> freqs(alphabet);
  uint64_t sum = 0;
  bool after_zero_run = false;
  for (size_t s = 0; s < alphabet;) {
    uint64_t f = 0;
    RETURN_IF_ERROR(ReadVarint(r, target, &f, "frequency table frequency"));
    if (f != 0) {
      freqs[s++] = static_cast<uint32_t>(f);
      sum += f;
      after_zero_run = false;
      continue;
    }
    // Two adjacent runs would be a second spelling of one longer run.
    KVC_CHECK_CORRUPT(!after_zero_run, "frequency table: zero run at symbol %zu follows another", s);
    uint64_t more = 0;
    RETURN_IF_ERROR(ReadVarint(r, alphabet - s - 1, &more, "frequency table zero run"));
    s += 1 + more;
    after_zero_run = true;
  }
  KVC_CHECK_CORRUPT(sum == target, "frequency table sums to %llu, not %u", static_cast<unsigned long long>(sum),
                    target);
  return Build(freqs, scale_bits);
}

// ---------------------------------------------------------------------------------------------
// Encoding

namespace {

// One encode step: renormalise, then x' = (x / f) * 2^n + x % f + start, computed as
// x + start + q * (2^n - f) with q = x / f from the reciprocal.
template <typename Sym>
inline void EncodeStep(uint32_t& x, const Sym& s, uint8_t*& p) {
  if (x > s.renorm) {
    p -= 2;
    p[0] = static_cast<uint8_t>(x);
    p[1] = static_cast<uint8_t>(x >> 8);
    x >>= 16;
  }
  const auto q = static_cast<uint32_t>(MulHi64(uint64_t{x} << 1, s.rcp));
  x = x + s.start + q * s.cmpl;
}

// Codes n symbols, symbol i given by at(i), last to first, into a buffer filled from its end;
// at most one 16-bit word per symbol, so 2n bytes plus the header always suffice.
template <uint32_t kStates, typename At>
std::vector<uint8_t> EncodeCore(size_t n, At at) {
  const size_t cap = 2 * n + RansStreamHeaderBytes(kStates);
  std::unique_ptr<uint8_t[]> buf(new uint8_t[cap]);
  uint8_t* const end = buf.get() + cap;
  uint8_t* p = end;
  uint32_t x[kStates];
  for (uint32_t& s : x) s = kRansStateLow;
  size_t i = n;
  while (i % kStates != 0) {
    --i;
    EncodeStep(x[i % kStates], at(i), p);
  }
  while (i > 0) {
    i -= kStates;
    for (size_t k = kStates; k-- > 0;) EncodeStep(x[k], at(i + k), p);
  }
  p -= RansStreamHeaderBytes(kStates);
  for (size_t k = 0; k < kStates; ++k) PutU32(p + 4 * k, x[k]);
  return std::vector<uint8_t>(p, end);
}

}  // namespace

Result<std::vector<uint8_t>> RansEncoder::Finish(uint32_t states) {
  std::vector<const FrequencyTable::EncSymbol*> pending = std::move(pending_);
  pending_.clear();
  if (failed_) {
    failed_ = false;
    return InvalidArgument(
        FormatMessage("rANS: symbol %u at position %zu has frequency 0 in its table", bad_symbol_, bad_position_));
  }
  auto at = [&](size_t i) -> const FrequencyTable::EncSymbol& { return *pending[i]; };
  if (states == kRansStates) return EncodeCore<kRansStates>(pending.size(), at);
  if (states == kRansWideStates) return EncodeCore<kRansWideStates>(pending.size(), at);
  return InvalidArgument(
      FormatMessage("rANS: %u interleaved states (expected %u or %u)", states, kRansStates, kRansWideStates));
}

Result<std::vector<uint8_t>> RansEncodeBytes(const FrequencyTable& table, std::span<const uint8_t> symbols) {
  // A 256-entry copy makes every byte a valid index; uncodable ones keep rcp == 0 and are
  // collected without a branch in the loop.
  FrequencyTable::EncSymbol enc[256];
  std::copy_n(table.enc_.begin(), std::min<size_t>(table.enc_.size(), 256), enc);
  uint64_t bad = 0;
  std::vector<uint8_t> out = EncodeCore<kRansStates>(symbols.size(), [&](size_t i) -> const FrequencyTable::EncSymbol& {
    const FrequencyTable::EncSymbol& s = enc[symbols[i]];
    bad |= s.rcp == 0;
    return s;
  });
  if (bad) {
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (enc[symbols[i]].rcp == 0) {
        return InvalidArgument(
            FormatMessage("rANS: byte %u at position %zu has frequency 0 in the table", symbols[i], i));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding

Result<RansDecoder> RansDecoder::Open(std::span<const uint8_t> stream, uint32_t states) {
  if (states != kRansStates && states != kRansWideStates) {
    return InvalidArgument(
        FormatMessage("rANS: %u interleaved states (expected %u or %u)", states, kRansStates, kRansWideStates));
  }
  const size_t header = RansStreamHeaderBytes(states);
  KVC_CHECK_CORRUPT(stream.size() >= header, "rANS stream of %zu bytes is shorter than its header", stream.size());
  RansDecoder d;
  d.states_ = states;
  for (size_t k = 0; k < states; ++k) {
    d.state_[k] = GetU32(stream.data() + 4 * k);
    KVC_CHECK_CORRUPT(d.state_[k] >= kRansStateLow, "rANS initial state %zu (0x%x) is below 0x%x", k, d.state_[k],
                      kRansStateLow);
  }
  d.pos_ = stream.data() + header;
  d.end_ = stream.data() + stream.size();
  return d;
}

Status RansDecoder::Finish() const {
  KVC_CHECK_CORRUPT(!overrun_, "rANS stream ends before the last symbol");
  KVC_CHECK_CORRUPT(pos_ == end_, "rANS stream has %zu bytes left after the last symbol",
                    static_cast<size_t>(end_ - pos_));
  for (size_t k = 0; k < states_; ++k) {
    KVC_CHECK_CORRUPT(state_[k] == kRansStateLow, "rANS final state %zu (0x%x) is not the initial 0x%x", k, state_[k],
                      kRansStateLow);
  }
  return Status::Ok();
}

namespace {

#if defined(__x86_64__)
// kRefill[m]: a byte shuffle that gives each of 4 lanes whose bit is set in m the next unread
// 16-bit word (zero-extended; the lanes in order take consecutive words), and 0 to the others.
struct RefillShuffles {
  alignas(16) uint8_t bytes[16][16];
  constexpr RefillShuffles() : bytes() {
    for (uint32_t m = 0; m < 16; ++m) {
      uint32_t word = 0;
      for (uint32_t lane = 0; lane < 4; ++lane) {
        const bool take = (m >> lane) & 1;
        bytes[m][4 * lane] = take ? static_cast<uint8_t>(2 * word) : 0x80;
        bytes[m][4 * lane + 1] = take ? static_cast<uint8_t>(2 * word + 1) : 0x80;
        bytes[m][4 * lane + 2] = bytes[m][4 * lane + 3] = 0x80;
        word += take;
      }
    }
  }
};
constexpr RefillShuffles kRefill;

// Rounds run while at least this many bytes remain, the most one round's loads reach: the
// vectors before the last take at most 48 bytes, the last one's high half starts at most 8
// bytes after its low half, and each half loads 16.
constexpr ptrdiff_t kWideReadBytes = 2 * (kRansWideStates - 8) + 8 + 16;

// Refills the lanes of x below kRansStateLow in lane order from *pos, as the scalar decoder does.
__attribute__((target("avx2"), always_inline)) inline void Refill8(__m256i& x, const uint8_t*& pos) {
  const __m256i low = _mm256_set1_epi32(static_cast<int>(kRansStateLow - 1));
  const __m256i need = _mm256_cmpeq_epi32(_mm256_min_epu32(x, low), x);
  const auto mask = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(need)));
  const uint32_t lo = mask & 15, hi = mask >> 4;
  const int lo_words = std::popcount(lo);
  const __m256i words =
      _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(pos + 2 * lo_words), reinterpret_cast<const __m128i*>(pos));
  const __m256i shuffle = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(kRefill.bytes[hi]),
                                              reinterpret_cast<const __m128i*>(kRefill.bytes[lo]));
  const __m256i refilled = _mm256_or_si256(_mm256_slli_epi32(x, 16), _mm256_shuffle_epi8(words, shuffle));
  x = _mm256_blendv_epi8(x, refilled, need);
  pos += 2 * (lo_words + std::popcount(hi));
}

// Decodes whole rounds of kRansWideStates symbols into dst (at most n), starting at state 0;
// returns how many. The decode steps are scalar (AVX2's gathers, ~20 cycles each on AMD's
// cores, cost more than the 32 independent scalar lookups they replace); the refills are
// vector, 8 states at a time, so the read position advances once per 8 symbols rather than
// once per symbol or 4, the chain that bounds the narrow decoder.
__attribute__((target("avx2"))) size_t DecodeWideAvx2(uint32_t* states, const uint8_t*& pos, const uint8_t* end,
                                                      const uint32_t* steps, const uint16_t* symbols, uint32_t scale,
                                                      uint8_t* dst, size_t n) {
  // (gcc vectorises parts of the unrolled scalar loop below with lane inserts; that measured
  // faster than keeping it scalar.)
  static_assert(kRansWideStates % 8 == 0);
  alignas(32) uint32_t x[kRansWideStates];
  std::copy_n(states, kRansWideStates, x);
  const uint32_t mask = (1u << scale) - 1;
  const uint8_t* p = pos;
  size_t i = 0;
  for (; i + kRansWideStates <= n && end - p >= kWideReadBytes; i += kRansWideStates) {
#pragma GCC unroll 32
    for (uint32_t k = 0; k < kRansWideStates; ++k) {
      const uint32_t slot = x[k] & mask;
      const uint32_t step = steps[slot];
      dst[i + k] = static_cast<uint8_t>(symbols[slot]);
      x[k] = (step & 0xffff) * (x[k] >> scale) + (step >> 16);
    }
    for (uint32_t v = 0; v < kRansWideStates; v += 8) {
      __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + v));
      Refill8(xv, p);
      _mm256_store_si256(reinterpret_cast<__m256i*>(x + v), xv);
    }
  }
  std::copy_n(x, kRansWideStates, states);
  pos = p;
  return i;
}

// (GCC 12's avx512fintrin.h warns about its own _mm512_undefined_* in the intrinsics.)
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC warning group clang does not know
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// DecodeWideAvx2 with 16 states per vector: where AVX-512 is there, its gathers are cheap enough
// (Intel's cores: ~1 per 5 cycles for 16 lanes) to do the lookups too, and a masked expand puts
// each refilling lane's word in place, in lane order, as the scalar decoder takes them.
__attribute__((target("avx512f,avx2"))) size_t DecodeWideAvx512(uint32_t* states, const uint8_t*& pos,
                                                                const uint8_t* end, const uint32_t* steps,
                                                                const uint16_t* symbols, uint32_t scale, uint8_t* dst,
                                                                size_t n) {
  static_assert(kRansWideStates == 32, "two vectors of 16 states");
  __m512i x[2] = {_mm512_loadu_si512(states), _mm512_loadu_si512(states + 16)};
  const __m512i mask = _mm512_set1_epi32(static_cast<int>((1u << scale) - 1));
  const __m512i low16 = _mm512_set1_epi32(0xffff);
  const __m512i state_low = _mm512_set1_epi32(static_cast<int>(kRansStateLow));
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(scale));
  // The symbol table is read as 32-bit pairs (slot / 2), never past its end: every table has
  // 2^scale entries with scale >= kMinScaleBits, an even count.
  const auto* const symbol_pairs = reinterpret_cast<const int*>(symbols);
  const uint8_t* p = pos;
  size_t i = 0;
  // At most 32 words (64 bytes) a round: within kWideReadBytes.
  for (; i + kRansWideStates <= n && end - p >= kWideReadBytes; i += kRansWideStates) {
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      const __m512i slot = _mm512_and_si512(x[v], mask);
      const __m512i step = _mm512_i32gather_epi32(slot, reinterpret_cast<const int*>(steps), 4);
      const __m512i pair = _mm512_i32gather_epi32(_mm512_srli_epi32(slot, 1), symbol_pairs, 4);
      const __m512i symbol =
          _mm512_srlv_epi32(pair, _mm512_slli_epi32(_mm512_and_si512(slot, _mm512_set1_epi32(1)), 4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 16 * v), _mm512_cvtepi32_epi8(symbol));
      __m512i next = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(step, low16), _mm512_srl_epi32(x[v], shift)),
                                      _mm512_srli_epi32(step, 16));
      const __mmask16 need = _mm512_cmplt_epu32_mask(next, state_low);
      const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      next = _mm512_mask_or_epi32(next, need, _mm512_slli_epi32(next, 16), _mm512_maskz_expand_epi32(need, words));
      p += 2 * std::popcount(static_cast<uint32_t>(need));
      x[v] = next;
    }
  }
  _mm512_storeu_si512(states, x[0]);
  _mm512_storeu_si512(states + 16, x[1]);
  pos = p;
  return i;
}
#pragma GCC diagnostic pop
#endif

}  // namespace

Status RansDecoder::GetBytes(const FrequencyTable& table, std::span<uint8_t> out, VectorIsa isa) {
  if (table.alphabet_size() > 256) {
    return InvalidArgument(
        FormatMessage("rANS byte decoding needs an alphabet of at most 256, not %u", table.alphabet_size()));
  }
  const size_t n = out.size();
  uint8_t* const dst = out.data();
  size_t i = 0;
  // Up to the next use of state 0, so that symbol i + k of the unrolled loop uses state k.
  for (; i < n && next_ != 0; ++i) dst[i] = static_cast<uint8_t>(Get(table));

  if (states_ == kRansWideStates) {
#if defined(__x86_64__)
    const VectorIsa resolved = ResolveVectorIsa(isa);
    const auto decode_wide = resolved == VectorIsa::kAvx512 ? DecodeWideAvx512
                             : resolved == VectorIsa::kAvx2 ? DecodeWideAvx2
                                                            : nullptr;
    if (decode_wide != nullptr) {
      i += decode_wide(state_, pos_, end_, table.slot_step_.data(), table.slot_symbol_.data(), table.scale_bits_,
                       dst + i, n - i);
    }
#endif
    for (; i < n; ++i) dst[i] = static_cast<uint8_t>(Get(table));
    return Status::Ok();
  }

  const uint32_t scale = table.scale_bits_;
  const uint32_t mask = (1u << scale) - 1;
  const uint16_t* const lut = table.slot_symbol_.data();
  const uint32_t* const steps = table.slot_step_.data();
  auto decode = [&](uint32_t& x) -> uint32_t {
    const uint32_t slot = x & mask;
    const uint32_t step = steps[slot];
    const uint32_t symbol = lut[slot];
    x = (step & 0xffff) * (x >> scale) + (step >> 16);
    return symbol;
  };
  // Whether a state needs a word is data-dependent and unpredictable, so the hot loop never
  // branches on it: it loads the next four words (every word this round could take) as one
  // 64-bit read, and state k takes the word after those the states before it took. Reading
  // the words one state after another instead puts a load on the path from each state to the
  // next (its address depends on the previous state's need), and that chain, not the table
  // lookups, set the speed. It runs only while enough bytes remain for every state to read.
  const uint8_t* pos = pos_;
  const uint8_t* const end = end_;
  // Pure arithmetic on purpose: written as a select, compilers turn some of the four into
  // branches, and those mispredict about every other symbol.
  auto refill_from = [](uint32_t& x, uint32_t need, uint64_t words, uint32_t taken) {
    const uint32_t word = static_cast<uint32_t>(words >> (16 * taken)) & 0xffff & (0u - need);
    x = (x << (need * 16)) | word;
  };
  // The states as named locals (not an array): the byte stores to dst may alias any memory, so
  // an array's states would be reloaded after every store.
  static_assert(kRansStates == 4, "the loop below is unrolled for four states");
  uint32_t x0 = state_[0], x1 = state_[1], x2 = state_[2], x3 = state_[3];
  constexpr ptrdiff_t kMaxReadPerRound = ptrdiff_t{2} * kRansStates;
  for (; i + kRansStates <= n && end - pos >= kMaxReadPerRound; i += kRansStates) {
    const uint32_t s0 = decode(x0), s1 = decode(x1), s2 = decode(x2), s3 = decode(x3);
    dst[i] = static_cast<uint8_t>(s0);
    dst[i + 1] = static_cast<uint8_t>(s1);
    dst[i + 2] = static_cast<uint8_t>(s2);
    dst[i + 3] = static_cast<uint8_t>(s3);
    const uint64_t words = GetU64(pos);
    const uint32_t need0 = x0 < kRansStateLow, need1 = x1 < kRansStateLow, need2 = x2 < kRansStateLow,
                   need3 = x3 < kRansStateLow;
    refill_from(x0, need0, words, 0);
    refill_from(x1, need1, words, need0);
    refill_from(x2, need2, words, need0 + need1);
    refill_from(x3, need3, words, need0 + need1 + need2);
    pos += size_t{2} * (need0 + need1 + need2 + need3);
  }
  state_[0] = x0;
  state_[1] = x1;
  state_[2] = x2;
  state_[3] = x3;
  pos_ = pos;
  for (; i < n; ++i) dst[i] = static_cast<uint8_t>(Get(table));
  return Status::Ok();
}

Status RansDecodeBytes(const FrequencyTable& table, std::span<const uint8_t> stream, std::span<uint8_t> out) {
  ASSIGN_OR_RETURN(RansDecoder d, RansDecoder::Open(stream));
  RETURN_IF_ERROR(d.GetBytes(table, out));
  return d.Finish();
}

}  // namespace kvc
