// rANS: kvcodec's own range-variant asymmetric numeral system coder, used directly by codecs
// that keep one probability table per context (CacheGen: one per (layer, channel)) and by the
// block coder (block.h) for order-0 coding of bytes.
//
// Coder: kRansStates (4) interleaved 32-bit states, or kRansWideStates (32) in a wide stream,
// renormalised 16 bits at a time: at most one 16-bit read per symbol, and independent
// dependency chains for the CPU to overlap (decoding is bound by the latency of one state's
// lookup-multiply-refill chain). Symbol i of a stream uses state i % states. A wide stream is
// the same format with more states: 32 independent lookups per round for the CPU to overlap,
// and refills done 8 states per AVX2 instruction. Every symbol may use a different
// FrequencyTable, and tables may have different scale_bits; the decoder must be given the same
// table sequence the encoder used. A stream carries no table, length or checksum: the caller stores those.
// Byte layouts: docs/format.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/byte_io.h"
#include "base/status.h"
#include "base/vector_isa.h"

namespace kvc {

// A quantised probability distribution over symbols 0..alphabet_size-1: integer frequencies
// summing to exactly 1 << scale_bits, with the lookup tables both coding directions need.
// Immutable once built; safe to share between threads.
class FrequencyTable {
 public:
  static constexpr uint32_t kMaxAlphabetSize = 4096;
  static constexpr uint32_t kMinScaleBits = 10;
  static constexpr uint32_t kMaxScaleBits = 15;

  // Normalises symbol counts (1..4096 of them, not all zero) to a total of 1 << scale_bits.
  // Every symbol with a non-zero count gets frequency >= 1, so it stays codable; the rounding
  // minimises the coded size of exactly these counts. InvalidArgument if scale_bits is outside
  // 10..15 or more symbols are present than 1 << scale_bits slots.
  [[nodiscard]] static Result<FrequencyTable> FromCounts(std::span<const uint64_t> counts, uint32_t scale_bits);
  // Takes frequencies as they are; InvalidArgument unless they sum to exactly 1 << scale_bits.
  [[nodiscard]] static Result<FrequencyTable> FromFrequencies(std::span<const uint32_t> freqs, uint32_t scale_bits);

  // Appends the compact serialisation (docs/format.md, "Frequency table").
  void AppendTo(ByteWriter* w) const;
  // Parses one serialised table from hostile bytes: kCorrupt unless the alphabet size is in
  // 1..max_alphabet_size (<= 4096), scale_bits in 10..15, the encoding canonical and the
  // frequencies sum to exactly 1 << scale_bits.
  [[nodiscard]] static Result<FrequencyTable> Parse(ByteReader* r, uint32_t max_alphabet_size = kMaxAlphabetSize);

  uint32_t alphabet_size() const { return static_cast<uint32_t>(dec_.size()); }
  uint32_t scale_bits() const { return scale_bits_; }
  uint32_t frequency(uint32_t symbol) const { return symbol < dec_.size() ? dec_[symbol] & 0xffff : 0; }

 private:
  friend class RansEncoder;
  friend class RansDecoder;
  friend Result<std::vector<uint8_t>> RansEncodeBytes(const FrequencyTable&, std::span<const uint8_t>);

  // What encoding one symbol needs, with x / freq turned into a multiply: q = mulhi(2x, rcp)
  // with rcp = ceil(2^63 / freq) is exact for every x < 2^32 when freq <= 2^15.
  struct EncSymbol {
    uint64_t rcp = 0;     // 0: the symbol has frequency 0 and cannot be coded
    uint32_t renorm = 0;  // emit 16 bits first while x > renorm, i.e. x >= freq << (32 - scale_bits)
    uint16_t start = 0;   // cumulative frequency of the symbols before it
    uint16_t cmpl = 0;    // (1 << scale_bits) - freq: x' = x + start + q * cmpl
  };

  // Private so that no table exists without its lookup tables (decoding indexes them blindly).
  FrequencyTable() = default;
  static FrequencyTable Build(std::span<const uint32_t> freqs, uint32_t scale_bits);

  uint32_t scale_bits_ = 0;
  std::vector<uint32_t> dec_;          // per symbol: freq | start << 16
  std::vector<uint16_t> slot_symbol_;  // per slot in [0, 1 << scale_bits): the symbol owning it
  // Per slot: freq | (slot - start) << 16 of the symbol owning it (both < 2^16), so a decode step
  // is one lookup, x' = freq * (x >> n) + (slot - start), with the symbol's lookup beside it
  // rather than before it: the state's dependency chain has one load, not two.
  std::vector<uint32_t> slot_step_;
  std::vector<EncSymbol> enc_;  // per symbol
};

// Interleaved states of a stream, and of a wide one; powers of two.
inline constexpr uint32_t kRansStates = 4;
inline constexpr uint32_t kRansWideStates = 32;
// Lowest value of a normalised state; every state starts and must end here.
inline constexpr uint32_t kRansStateLow = 1u << 16;
// A stream is the initial decoder states (u32 each) then 16-bit words.
inline constexpr size_t kRansStreamHeaderBytes = size_t{4} * kRansStates;
constexpr size_t RansStreamHeaderBytes(uint32_t states) { return size_t{4} * states; }

// Multi-context encoder: Put symbols in decoding order, each with its table; Finish codes them
// (rANS encodes last to first, hence the buffering: 8 bytes per symbol until Finish). Put keeps
// pointers into the tables, so they must stay alive and in place (moving a table keeps its
// storage; copying does not) until Finish.
class RansEncoder {
 public:
  void Reserve(size_t n) { pending_.reserve(n); }
  void Put(const FrequencyTable& table, uint32_t symbol) {
    if (symbol < table.enc_.size() && table.enc_[symbol].rcp != 0) {
      pending_.push_back(&table.enc_[symbol]);
    } else if (!failed_) {
      failed_ = true;
      bad_position_ = pending_.size();
      bad_symbol_ = symbol;
    }
  }
  size_t size() const { return pending_.size(); }
  // The stream with `states` interleaved states (kRansStates or kRansWideStates), or
  // InvalidArgument if some symbol was not codable with its table (outside the alphabet or of
  // frequency 0) or states is neither. Either way the encoder is empty afterwards.
  [[nodiscard]] Result<std::vector<uint8_t>> Finish(uint32_t states = kRansStates);

 private:
  std::vector<const FrequencyTable::EncSymbol*> pending_;
  bool failed_ = false;
  size_t bad_position_ = 0;
  uint32_t bad_symbol_ = 0;
};

// Decodes a stream symbol by symbol, the caller naming each symbol's table in the order the
// encoder was given them. Never reads outside the stream or the tables, whatever the bytes or
// tables: running out of input is remembered and reported by Finish, while Get keeps returning
// (meaningless) symbols. Get returns a symbol of non-zero frequency in `table`.
class RansDecoder {
 public:
  // kCorrupt if the stream is shorter than its header or a state is not normalised;
  // InvalidArgument if states is neither kRansStates nor kRansWideStates.
  [[nodiscard]] static Result<RansDecoder> Open(std::span<const uint8_t> stream, uint32_t states = kRansStates);

  uint32_t Get(const FrequencyTable& table) {
    uint32_t x = state_[next_];
    const uint32_t scale = table.scale_bits_;
    const uint32_t slot = x & ((1u << scale) - 1);
    const uint32_t step = table.slot_step_[slot];
    const uint32_t symbol = table.slot_symbol_[slot];
    x = (step & 0xffff) * (x >> scale) + (step >> 16);
    if (x < kRansStateLow) x = Refill(x);
    state_[next_] = x;
    next_ = (next_ + 1) & (states_ - 1);
    return symbol;
  }

  // Decodes out.size() symbols that all use `table`: the same as that many Get calls, several
  // times faster (the states live in registers and refills are branch-free while enough input
  // remains). InvalidArgument if the table's alphabet exceeds 256. `isa` picks the wide stream's
  // vector path (tests and benchmarks compare them; every path decodes the same symbols).
  [[nodiscard]] Status GetBytes(const FrequencyTable& table, std::span<uint8_t> out, VectorIsa isa = VectorIsa::kAuto);

  // OK only if the stream was consumed exactly and every state is back at its initial
  // value: a truncated, extended or corrupted stream (or a wrong table sequence) almost
  // always fails here. There is no checksum; containers carry one.
  [[nodiscard]] Status Finish() const;

 private:
  RansDecoder() = default;
  uint32_t Refill(uint32_t x) {
    if (end_ - pos_ >= 2) {
      x = (x << 16) | pos_[0] | (static_cast<uint32_t>(pos_[1]) << 8);
      pos_ += 2;
      return x;
    }
    // A state >= 2 shifted left stays normalised, so decoding continues safely to the end.
    overrun_ = true;
    return x << 16;
  }

  uint32_t state_[kRansWideStates] = {};
  uint32_t states_ = kRansStates;
  uint32_t next_ = 0;
  const uint8_t* pos_ = nullptr;
  const uint8_t* end_ = nullptr;
  bool overrun_ = false;
};

// Fast paths for one table over byte symbols (alphabet_size <= 256). The stream format is the
// same as RansEncoder's / RansDecoder's with that table for every symbol.
[[nodiscard]] Result<std::vector<uint8_t>> RansEncodeBytes(const FrequencyTable& table,
                                                           std::span<const uint8_t> symbols);
// Decodes exactly out.size() symbols and checks the stream as RansDecoder::Finish does.
[[nodiscard]] Status RansDecodeBytes(const FrequencyTable& table, std::span<const uint8_t> stream,
                                     std::span<uint8_t> out);

}  // namespace kvc
