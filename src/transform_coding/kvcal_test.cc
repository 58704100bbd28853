#include "transform_coding/kvcal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "base/byte_io.h"
#include "base/crc32c.h"
#include "base/hash.h"
#include "base/split_mix.h"

// The largest single allocation since the last reset, so tests can show that a hostile count
// is refused before anything of that size is allocated.
namespace {
std::atomic<size_t> g_largest_allocation{0};
}  // namespace

// The replacements below pair malloc with free by design; gcc's inliner cannot see that.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t n) {
  size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
  while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace kvc {
namespace {

namespace fs = std::filesystem;

// Offsets from docs/format.md (.kvcal).
constexpr size_t kHeaderCrcAt = 75;
constexpr size_t kFirstSectionAt = 79;
constexpr size_t kNLayersAt = 28, kNKvHeadsAt = 32, kHeadDimAt = 36, kRopeTypeAt = 40, kNRotAt = 41;
constexpr size_t kUndoneAt = 53, kGroupingAt = 54, kGroupSizeAt = 55, kNBasesAt = 67, kNAllocationsAt = 71;

// splitmix64: the same sequence on every platform (std's distributions are not), so the fuzz
// seeds regenerate byte for byte.
class Rng {
 public:
  explicit Rng(uint64_t seed) : rng_(seed) {}
  uint64_t Next() { return rng_.Next(); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53 * 2.0 - 1.0; }  // [-1, 1)

 private:
  SplitMix64 rng_;
};

PcaBasis MakeBasis(uint32_t dim, uint32_t n_components, Rng& rng) {
  PcaBasis b;
  b.dim = dim;
  b.n_components = n_components;
  for (uint32_t j = 0; j < dim; ++j) b.mean.push_back(static_cast<float>(rng.Uniform()));
  // Gram-Schmidt in double on random vectors; a draw too close to the span so far is redrawn.
  std::vector<std::vector<double>> rows;
  while (rows.size() < n_components) {
    std::vector<double> v(dim);
    for (double& x : v) x = rng.Uniform();
    for (const auto& u : rows) {
      double dot = 0;
      for (uint32_t j = 0; j < dim; ++j) dot += v[j] * u[j];
      for (uint32_t j = 0; j < dim; ++j) v[j] -= dot * u[j];
    }
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    if (norm < 1e-3) continue;
    for (double& x : v) x /= norm;
    rows.push_back(v);
  }
  for (const auto& u : rows) {
    for (double x : u) b.components.push_back(static_cast<float>(x));
  }
  double e = 4.0 + rng.Uniform();
  for (uint32_t i = 0; i < n_components; ++i) {
    b.eigenvalues.push_back(static_cast<float>(e));
    e *= 0.6 + 0.3 * std::fabs(rng.Uniform());
  }
  return b;
}

// Version 1 by default: the byte offsets below are version 1's; version 2 files get their own
// tests (Kvcal2).
struct Spec {
  KvtcGrouping grouping = KvtcGrouping::kLayer;
  uint32_t n_layers = 2, n_kv_heads = 2, head_dim = 4;
  uint32_t group_size = 3;
  uint32_t n_allocations = 2;
  uint64_t seed = 1;
  uint32_t format_version = 1;
  KvtcQuantizer quantizer = KvtcQuantizer::kTokenGroup;  // kComponent forces group_size 1
  bool keys_only = false;                                // K bases only: needs format_version 3
};

// A valid calibration whose bases have differing component counts, so group counts differ.
KvtcCalibration MakeCalibration(const Spec& spec) {
  Rng rng(spec.seed);
  KvtcCalibration c;
  for (size_t i = 0; i < c.model_fingerprint.size(); ++i) c.model_fingerprint[i] = static_cast<uint8_t>(rng.Next());
  c.n_layers = spec.n_layers;
  c.n_kv_heads = spec.n_kv_heads;
  c.head_dim = spec.head_dim;
  c.keys_only = spec.keys_only;
  c.rope = {.type = RopeType::kNeox, .n_rot = spec.head_dim & ~1u, .freq_base = 500000.0f, .freq_scale = 0.25f};
  c.keys_rope_undone = (spec.seed & 1) != 0;
  c.format_version = spec.format_version;
  c.quantizer = spec.quantizer;
  c.grouping = spec.grouping;
  c.group_size = spec.quantizer == KvtcQuantizer::kComponent ? 1 : spec.group_size;
  if (spec.format_version >= 2) {
    c.chunk_tokens = 256;
    c.choice = "component/layer: held-out rel MSE at 16x 0.0123 vs token-group/layer/16 0.0456";
  }
  c.fit_tokens = 4096 + static_cast<uint32_t>(spec.seed);
  c.heldout_tokens = 1024;
  const uint32_t dim = c.basis_dim();
  for (uint32_t i = 0; i < c.n_kinds() * c.n_bases(); ++i) {
    const uint32_t n_components = std::max<uint32_t>(1, dim - i % 3);
    c.bases.push_back(MakeBasis(dim, n_components, rng));
    if (spec.quantizer == KvtcQuantizer::kComponent) {
      for (uint32_t k = 0; k < n_components * kKvtcWidths; ++k) {
        c.bases.back().step_multipliers.push_back(std::exp2(static_cast<float>(rng.Next() % 17) / 8.0f - 1.0f));
      }
    }
  }
  uint32_t total_groups = 0;
  for (uint32_t i = 0; i < c.bases.size(); ++i) total_groups += c.n_groups(i);
  for (uint32_t j = 0; j < spec.n_allocations; ++j) {
    BitAllocation a;
    a.target_ratio = 4.0f * static_cast<float>(j + 1);
    a.heldout_rel_mse = 0.01 * (j + 1) + 1e-3 * rng.Uniform();
    if (spec.format_version >= 2) a.coded_bits_per_value = 16.0 / a.target_ratio * (1 + 0.01 * rng.Uniform());
    for (uint32_t g = 0; g < total_groups; ++g) a.bits.push_back(static_cast<uint8_t>(rng.Next() % 9));
    c.allocations.push_back(a);
  }
  return c;
}

// Field by field: KvtcCalibration's defaulted operator== is deleted while RopeParams
// (tensor/rope.h) has no operator==. Floats compare by bits so -0 and 0 differ, as in the file.
::testing::AssertionResult Same(const KvtcCalibration& a, const KvtcCalibration& b) {
  auto same_floats = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  };
  auto bits = [](auto v) {
    uint64_t out = 0;
    std::memcpy(&out, &v, sizeof(v));
    return out;
  };
  if (a.model_fingerprint != b.model_fingerprint) return ::testing::AssertionFailure() << "model_fingerprint";
  if (a.format_version != b.format_version || a.quantizer != b.quantizer || a.chunk_tokens != b.chunk_tokens ||
      a.choice != b.choice) {
    return ::testing::AssertionFailure() << "format_version, quantizer, chunk_tokens or choice";
  }
  if (a.n_layers != b.n_layers || a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim ||
      a.keys_only != b.keys_only) {
    return ::testing::AssertionFailure() << "shape";
  }
  if (a.rope.type != b.rope.type || a.rope.n_rot != b.rope.n_rot || bits(a.rope.freq_base) != bits(b.rope.freq_base) ||
      bits(a.rope.freq_scale) != bits(b.rope.freq_scale)) {
    return ::testing::AssertionFailure() << "rope";
  }
  if (a.keys_rope_undone != b.keys_rope_undone || a.grouping != b.grouping || a.group_size != b.group_size ||
      a.fit_tokens != b.fit_tokens || a.heldout_tokens != b.heldout_tokens) {
    return ::testing::AssertionFailure() << "flags, grouping, group_size or token counts";
  }
  if (a.bases.size() != b.bases.size()) return ::testing::AssertionFailure() << "bases.size()";
  for (size_t i = 0; i < a.bases.size(); ++i) {
    const PcaBasis& x = a.bases[i];
    const PcaBasis& y = b.bases[i];
    if (x.dim != y.dim || x.n_components != y.n_components || !same_floats(x.mean, y.mean) ||
        !same_floats(x.components, y.components) || !same_floats(x.eigenvalues, y.eigenvalues) ||
        !same_floats(x.step_multipliers, y.step_multipliers)) {
      return ::testing::AssertionFailure() << "basis " << i;
    }
  }
  if (a.allocations.size() != b.allocations.size()) return ::testing::AssertionFailure() << "allocations.size()";
  for (size_t j = 0; j < a.allocations.size(); ++j) {
    const BitAllocation& x = a.allocations[j];
    const BitAllocation& y = b.allocations[j];
    if (bits(x.target_ratio) != bits(y.target_ratio) || bits(x.heldout_rel_mse) != bits(y.heldout_rel_mse) ||
        bits(x.coded_bits_per_value) != bits(y.coded_bits_per_value) || x.bits != y.bits) {
      return ::testing::AssertionFailure() << "allocation " << j;
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<uint8_t> Write(const KvtcCalibration& c) {
  auto bytes = WriteKvcal(c);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : std::vector<uint8_t>{};
}

// The smallest file that still has every part: one K and one V basis of dim 2, one allocation.
std::vector<uint8_t> TinyFile(uint32_t version = 1, KvtcQuantizer quantizer = KvtcQuantizer::kTokenGroup) {
  return Write(MakeCalibration({.grouping = KvtcGrouping::kAll,
                                .n_layers = 1,
                                .n_kv_heads = 1,
                                .head_dim = 2,
                                .group_size = 1,
                                .n_allocations = 1,
                                .format_version = version,
                                .quantizer = quantizer}));
}

uint32_t GetU32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t{b[at]} | uint32_t{b[at + 1]} << 8 | uint32_t{b[at + 2]} << 16 | uint32_t{b[at + 3]} << 24;
}
uint64_t GetU64(const std::vector<uint8_t>& b, size_t at) {
  return uint64_t{GetU32(b, at)} | uint64_t{GetU32(b, at + 4)} << 32;
}
void PutU32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  PutU32(b, at, static_cast<uint32_t>(v));
  PutU32(b, at + 4, static_cast<uint32_t>(v >> 32));
}

// Offsets of each section's prefix, walking the stored lengths from `first` (version 1's first
// section by default).
std::vector<size_t> SectionOffsets(const std::vector<uint8_t>& b, size_t first = kFirstSectionAt) {
  std::vector<size_t> at;
  for (size_t off = first; off + 16 <= b.size();) {
    at.push_back(off);
    const uint64_t length = GetU64(b, off + 4);
    if (length > b.size() - off - 16) break;
    off += 16 + static_cast<size_t>(length);
  }
  return at;
}

// Recomputes every CRC, so a test can hand the reader a deliberately wrong value that is not
// caught by a checksum first (version 1's layout by default).
void FixCrcs(std::vector<uint8_t>& b, size_t header_crc_at = kHeaderCrcAt, size_t first_section_at = kFirstSectionAt) {
  PutU32(b, header_crc_at, Crc32c(b.data(), header_crc_at));
  for (size_t off : SectionOffsets(b, first_section_at)) {
    const uint64_t length = GetU64(b, off + 4);
    if (length > b.size() - off - 16) break;
    PutU32(b, off + 12, Crc32cExtend(Crc32c(b.data() + off, 12), b.data() + off + 16, static_cast<size_t>(length)));
  }
}

Status ReadStatus(const std::vector<uint8_t>& b) { return ReadKvcal(b).status(); }

void ExpectCorrupt(const std::vector<uint8_t>& b, const std::string& needle) {
  const Status s = ReadStatus(b);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message() << "\nwanted: " << needle;
}

TEST(KvtcCalibration, GroupingNames) {
  for (KvtcGrouping g : {KvtcGrouping::kLayerHead, KvtcGrouping::kLayer, KvtcGrouping::kAll}) {
    auto parsed = ParseKvtcGrouping(KvtcGroupingName(g));
    ASSERT_TRUE(parsed.ok()) << KvtcGroupingName(g);
    EXPECT_EQ(*parsed, g);
  }
  EXPECT_EQ(*ParseKvtcGrouping("layer_head"), KvtcGrouping::kLayerHead);
  auto bad = ParseKvtcGrouping("head");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'head'"), std::string::npos);
}

TEST(KvtcCalibration, Counts) {
  KvtcCalibration c;
  c.n_layers = 3;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.grouping = KvtcGrouping::kLayerHead;
  EXPECT_EQ(c.n_bases(), 6u);
  EXPECT_EQ(c.basis_dim(), 8u);
  c.grouping = KvtcGrouping::kLayer;
  EXPECT_EQ(c.n_bases(), 3u);
  EXPECT_EQ(c.basis_dim(), 16u);
  c.grouping = KvtcGrouping::kAll;
  EXPECT_EQ(c.n_bases(), 1u);
  EXPECT_EQ(c.basis_dim(), 48u);

  c.group_size = 4;
  c.bases.resize(2);
  c.bases[0].n_components = 8;
  c.bases[1].n_components = 9;
  EXPECT_EQ(c.n_groups(0), 2u);
  EXPECT_EQ(c.n_groups(1), 3u);
  EXPECT_EQ(c.n_groups(2), 0u);  // no such basis

  // Past the limits the sizes saturate instead of wrapping into plausible values.
  c.n_layers = c.n_kv_heads = c.head_dim = 1u << 20;
  EXPECT_EQ(c.basis_dim(), std::numeric_limits<uint32_t>::max());
  c.grouping = KvtcGrouping::kLayerHead;
  EXPECT_EQ(c.n_bases(), std::numeric_limits<uint32_t>::max());
}

TEST(Kvcal, RoundTripEachGrouping) {
  for (KvtcGrouping g : {KvtcGrouping::kLayerHead, KvtcGrouping::kLayer, KvtcGrouping::kAll}) {
    SCOPED_TRACE(KvtcGroupingName(g));
    const KvtcCalibration c = MakeCalibration({.grouping = g, .n_layers = 3, .n_kv_heads = 2, .head_dim = 6});
    ASSERT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c).ToString();
    const std::vector<uint8_t> bytes = Write(c);
    auto read = ReadKvcal(bytes);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(Same(*read, c));
  }
}

// Models without RoPE (GPT-2, BLOOM) and with sectioned RoPE (Qwen2-VL) have their keys fitted as
// stored; the kind is written and read back as it is, in both format versions, and version 1
// files of the kinds every earlier reader knew keep their bytes.
TEST(Kvcal, RoundTripEachRopeType) {
  for (uint8_t t = 0; t <= static_cast<uint8_t>(kLastRopeType); ++t) {
    const auto type = static_cast<RopeType>(t);
    SCOPED_TRACE(RopeTypeName(type));
    for (uint32_t version : {1u, 2u}) {
      const KvtcQuantizer quantizer = version == 1 ? KvtcQuantizer::kTokenGroup : KvtcQuantizer::kComponent;
      KvtcCalibration c = MakeCalibration({.seed = 2, .format_version = version, .quantizer = quantizer});
      c.rope.type = type;
      ASSERT_FALSE(c.keys_rope_undone);
      ASSERT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c).ToString();
      const std::vector<uint8_t> bytes = Write(c);
      EXPECT_EQ(bytes[kRopeTypeAt], t);
      auto read = ReadKvcal(bytes);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      EXPECT_EQ(read->rope.type, type);
      EXPECT_FALSE(read->keys_rope_undone);
      EXPECT_TRUE(Same(*read, c));
      EXPECT_EQ(Write(*read), bytes);
    }
  }
}

TEST(Kvcal, RoundTripWithoutAllocations) {
  const KvtcCalibration c = MakeCalibration({.n_allocations = 0});
  auto read = ReadKvcal(Write(c));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(Same(*read, c));
}

TEST(Kvcal, Deterministic) {
  const KvtcCalibration c = MakeCalibration({.grouping = KvtcGrouping::kLayerHead});
  const std::vector<uint8_t> a = Write(c);
  const std::vector<uint8_t> b = Write(MakeCalibration({.grouping = KvtcGrouping::kLayerHead}));
  EXPECT_EQ(a, b);
  auto read = ReadKvcal(a);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(Write(*read), a);  // canonical: a rewrite reproduces the file
  EXPECT_EQ(KvcalHash(a), Xxh3_128(a.data(), a.size()));
}

TEST(Kvcal, LayoutMatchesFormatDoc) {
  const KvtcCalibration c = MakeCalibration({.grouping = KvtcGrouping::kLayer});
  const std::vector<uint8_t> b = Write(c);
  ASSERT_GT(b.size(), kFirstSectionAt);
  EXPECT_EQ(std::memcmp(b.data(), "KVCL", 4), 0);
  EXPECT_EQ(GetU32(b, 4), 1u);
  EXPECT_EQ(GetU32(b, 8), 63u);
  EXPECT_EQ(std::memcmp(b.data() + 12, c.model_fingerprint.data(), 16), 0);
  EXPECT_EQ(GetU32(b, kNLayersAt), c.n_layers);
  EXPECT_EQ(GetU32(b, kHeadDimAt), c.head_dim);
  EXPECT_EQ(b[kRopeTypeAt], 1);
  EXPECT_EQ(GetU32(b, kNRotAt), c.rope.n_rot);
  EXPECT_EQ(b[kGroupingAt], 1);
  EXPECT_EQ(GetU32(b, kGroupSizeAt), c.group_size);
  EXPECT_EQ(GetU32(b, kNBasesAt), c.n_bases());
  EXPECT_EQ(GetU32(b, kNAllocationsAt), c.allocations.size());
  EXPECT_EQ(GetU32(b, kHeaderCrcAt), Crc32c(b.data(), kHeaderCrcAt));

  const std::vector<size_t> at = SectionOffsets(b);
  const size_t n_bases = c.n_bases();
  ASSERT_EQ(at.size(), 2 * n_bases + 1);
  for (size_t i = 0; i < at.size(); ++i) {
    const char* tag = i < n_bases ? "KBAS" : i < 2 * n_bases ? "VBAS" : "ALOC";
    EXPECT_EQ(std::memcmp(b.data() + at[i], tag, 4), 0) << i;
    if (i < 2 * n_bases) {
      const PcaBasis& basis = c.bases[i];
      EXPECT_EQ(GetU64(b, at[i] + 4), 12 + 4 * (basis.dim + basis.n_components * (basis.dim + 1)));
      EXPECT_EQ(GetU32(b, at[i] + 16), i % n_bases);
    }
  }
  size_t total_groups = 0;
  for (uint32_t i = 0; i < c.bases.size(); ++i) total_groups += c.n_groups(i);
  EXPECT_EQ(GetU32(b, at.back() + 16), total_groups);
  EXPECT_EQ(b.size(), at.back() + 16 + 4 + c.allocations.size() * (12 + total_groups));
}

// The example in docs/format.md (.kvcal), byte for byte: every value in it is exact in binary,
// so this holds on every platform.
TEST(Kvcal, SmallestExampleMatchesFormatDoc) {
  KvtcCalibration c;
  c.format_version = 1;
  c.n_layers = c.n_kv_heads = c.head_dim = 1;
  c.grouping = KvtcGrouping::kAll;
  c.group_size = 1;
  for (int kind = 0; kind < 2; ++kind) {
    c.bases.push_back({.dim = 1, .n_components = 1, .mean = {0.0f}, .components = {1.0f}, .eigenvalues = {1.0f}});
  }
  c.allocations.push_back({.target_ratio = 4.0f, .bits = {4, 2}, .heldout_rel_mse = 0.0});
  const std::vector<uint8_t> expected = {
      0x4b, 0x56, 0x43, 0x4c, 0x01, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x1c, 0x46, 0x00, 0x00, 0x80, 0x3f, 0x01,
      0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
      0x00, 0x00, 0x00, 0x3b, 0xbe, 0xb7, 0x8e, 0x4b, 0x42, 0x41, 0x53, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x7b, 0xb2, 0xb6, 0x52, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x56, 0x42, 0x41, 0x53, 0x18, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0xf5, 0x6c, 0x3e, 0x07, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x41, 0x4c, 0x4f,
      0x43, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0d, 0x67, 0xd6, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x80, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x02};
  EXPECT_TRUE(Write(c) == expected);
  auto read = ReadKvcal(expected);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(Same(*read, c));
}

TEST(Kvcal, EveryByteFlipFails) {
  const std::vector<uint8_t> good = TinyFile();
  ASSERT_TRUE(ReadKvcal(good).ok());
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= mask;
      const Status s = ReadStatus(bad);
      EXPECT_FALSE(s.ok()) << "byte " << i << " mask " << int{mask};
      EXPECT_TRUE(s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported) << s.ToString();
    }
  }
}

TEST(Kvcal, EveryTruncationFails) {
  const std::vector<uint8_t> good = TinyFile();
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    const Status s = ReadStatus(cut);
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << n << ": " << s.ToString();
  }
}

TEST(Kvcal, TrailingBytesFail) {
  std::vector<uint8_t> b = TinyFile();
  b.push_back(0);
  ExpectCorrupt(b, "1 trailing bytes after the last section");
  b = TinyFile(2, KvtcQuantizer::kComponent);
  b.push_back(0);
  ExpectCorrupt(b, "1 trailing bytes after the last section");
}

TEST(Kvcal, WrongMagicAndVersion) {
  std::vector<uint8_t> b = TinyFile();
  b[3] = '1';  // the .kvc magic
  ExpectCorrupt(b, "not a .kvcal file (bad magic)");

  for (uint32_t version : {0u, 4u}) {
    b = TinyFile();
    PutU32(b, 4, version);
    FixCrcs(b);
    const Status s = ReadStatus(b);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_EQ(s.message(), FormatMessage("format version %u not supported (this build reads 1 to 3)", version));
  }
  // A version 1 file relabelled 2 is read as 2: its header is too short.
  b = TinyFile();
  PutU32(b, 4, 2);
  FixCrcs(b);
  ExpectCorrupt(b, "header_length 63 is not 68");

  ExpectCorrupt({}, "truncated reading magic");
}

// Version 2: the header gains quantizer and chunk_tokens, component bases their step
// multipliers, allocations their coded size, and a NOTE section closes the file.
constexpr size_t kV2QuantizerAt = 75, kV2ChunkTokensAt = 76, kV2HeaderCrcAt = 80, kV2FirstSectionAt = 84;

TEST(Kvcal2, RoundTripEachGroupingAndQuantizer) {
  for (KvtcQuantizer q : {KvtcQuantizer::kTokenGroup, KvtcQuantizer::kComponent}) {
    for (KvtcGrouping g : {KvtcGrouping::kLayerHead, KvtcGrouping::kLayer, KvtcGrouping::kAll}) {
      const KvtcCalibration c = MakeCalibration({.grouping = g, .format_version = 2, .quantizer = q});
      const std::vector<uint8_t> b = Write(c);
      auto read = ReadKvcal(b);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      EXPECT_TRUE(Same(*read, c)) << KvtcQuantizerName(q) << " " << KvtcGroupingName(g);
      EXPECT_TRUE(Write(*read) == b);
    }
  }
}

TEST(Kvcal2, LayoutMatchesFormatDoc) {
  const KvtcCalibration c =
      MakeCalibration({.grouping = KvtcGrouping::kLayer, .format_version = 2, .quantizer = KvtcQuantizer::kComponent});
  const std::vector<uint8_t> b = Write(c);
  EXPECT_EQ(GetU32(b, 4), 2u);
  EXPECT_EQ(GetU32(b, 8), 68u);
  EXPECT_EQ(GetU32(b, kGroupSizeAt), 1u);
  EXPECT_EQ(b[kV2QuantizerAt], 1);
  EXPECT_EQ(GetU32(b, kV2ChunkTokensAt), 256u);
  EXPECT_EQ(GetU32(b, kV2HeaderCrcAt), Crc32c(b.data(), kV2HeaderCrcAt));
  const std::vector<size_t> at = SectionOffsets(b, kV2FirstSectionAt);
  const size_t n_bases = c.n_bases();
  ASSERT_EQ(at.size(), 2 * n_bases + 2);
  for (size_t i = 0; i < 2 * n_bases; ++i) {
    const PcaBasis& basis = c.bases[i];
    EXPECT_EQ(GetU64(b, at[i] + 4), 12 + 4 * (basis.dim + basis.n_components * (basis.dim + 1 + 8))) << i;
  }
  size_t total_groups = 0;
  for (uint32_t i = 0; i < c.bases.size(); ++i) total_groups += c.n_groups(i);
  EXPECT_EQ(std::memcmp(b.data() + at[2 * n_bases], "ALOC", 4), 0);
  EXPECT_EQ(GetU64(b, at[2 * n_bases] + 4), 4 + c.allocations.size() * (20 + total_groups));
  EXPECT_EQ(std::memcmp(b.data() + at.back(), "NOTE", 4), 0);
  EXPECT_EQ(GetU64(b, at.back() + 4), c.choice.size());
  EXPECT_EQ(std::string(b.end() - static_cast<std::ptrdiff_t>(c.choice.size()), b.end()), c.choice);
}

TEST(Kvcal2, EveryByteFlipAndTruncationFails) {
  const std::vector<uint8_t> good = TinyFile(2, KvtcQuantizer::kComponent);
  ASSERT_TRUE(ReadKvcal(good).ok());
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= mask;
      const Status s = ReadStatus(bad);
      EXPECT_TRUE(s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported)
          << "byte " << i << " mask " << int{mask} << ": " << s.ToString();
    }
  }
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(ReadStatus(cut).code(), StatusCode::kCorrupt) << n;
  }
}

TEST(Kvcal2, HostileValuesInsideSectionsFail) {
  std::vector<uint8_t> b = TinyFile(2, KvtcQuantizer::kComponent);
  b[kV2QuantizerAt] = 2;
  FixCrcs(b, kV2HeaderCrcAt, kV2FirstSectionAt);
  ExpectCorrupt(b, "unknown quantizer 2");
  // A multiplier of 0 (the last float of the first basis section).
  b = TinyFile(2, KvtcQuantizer::kComponent);
  const std::vector<size_t> at = SectionOffsets(b, kV2FirstSectionAt);
  PutU32(b, at[1] - 4, 0);
  FixCrcs(b, kV2HeaderCrcAt, kV2FirstSectionAt);
  ExpectCorrupt(b, "step multiplier 15 is 0, outside [0.0625, 16]");
  // A choice that is not one printable line.
  b = TinyFile(2, KvtcQuantizer::kComponent);
  b[b.size() - 3] = '\n';
  FixCrcs(b, kV2HeaderCrcAt, kV2FirstSectionAt);
  ExpectCorrupt(b, "choice is not one line of printable UTF-8");
  b = TinyFile(2, KvtcQuantizer::kComponent);
  b[b.size() - 3] = 0xC3;
  FixCrcs(b, kV2HeaderCrcAt, kV2FirstSectionAt);
  ExpectCorrupt(b, "choice is not one line of printable UTF-8");
}

TEST(Kvcal2, VersionOneFilesAreStillReadAndRewriteToThemselves) {
  const std::vector<uint8_t> v1 = TinyFile(1);
  auto read = ReadKvcal(v1);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->format_version, 1u);
  EXPECT_EQ(read->quantizer, KvtcQuantizer::kTokenGroup);
  EXPECT_TRUE(Write(*read) == v1);
}

// Version 3: a keys-only calibration. Version 2's header gains a flags byte, and the file has
// only the K bases (the allocations cover their groups alone).
constexpr size_t kV3FlagsAt = 80, kV3HeaderCrcAt = 81, kV3FirstSectionAt = 85;

Spec KeysOnlySpec(Spec spec) {
  spec.format_version = 3;
  spec.keys_only = true;
  return spec;
}

// TinyFile's keys-only twin: one K basis of dim 2, one allocation.
std::vector<uint8_t> TinyKeysFile(KvtcQuantizer quantizer = KvtcQuantizer::kComponent) {
  return Write(MakeCalibration(KeysOnlySpec({.grouping = KvtcGrouping::kAll,
                                             .n_layers = 1,
                                             .n_kv_heads = 1,
                                             .head_dim = 2,
                                             .group_size = 1,
                                             .n_allocations = 1,
                                             .quantizer = quantizer})));
}

void FixCrcsV3(std::vector<uint8_t>& b) { FixCrcs(b, kV3HeaderCrcAt, kV3FirstSectionAt); }

// A copy of a version 3 file after `edit`, its CRCs made right again, so the reader meets the
// edited field rather than a CRC mismatch.
std::vector<uint8_t> EditedV3(std::vector<uint8_t> file, const std::function<void(std::vector<uint8_t>&)>& edit) {
  edit(file);
  FixCrcsV3(file);
  return file;
}

TEST(Kvcal3, RoundTripEachGroupingAndQuantizerByteForByte) {
  for (KvtcQuantizer q : {KvtcQuantizer::kTokenGroup, KvtcQuantizer::kComponent}) {
    for (KvtcGrouping g : {KvtcGrouping::kLayerHead, KvtcGrouping::kLayer, KvtcGrouping::kAll}) {
      SCOPED_TRACE(::testing::Message() << KvtcQuantizerName(q) << " " << KvtcGroupingName(g));
      const KvtcCalibration c = MakeCalibration(KeysOnlySpec({.grouping = g, .n_layers = 3, .quantizer = q}));
      ASSERT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c).ToString();
      ASSERT_EQ(c.bases.size(), c.n_bases());
      const std::vector<uint8_t> b = Write(c);
      auto read = ReadKvcal(b);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      EXPECT_TRUE(read->keys_only);
      EXPECT_EQ(read->format_version, 3u);
      EXPECT_TRUE(Same(*read, c));
      EXPECT_TRUE(*read == c);
      EXPECT_TRUE(Write(*read) == b);
    }
  }
}

// The shapes kvtc codes keys-only caches of: MLA's latent (1 x 576, no RoPE undone) and an
// indexer's keys (1 x 128).
TEST(Kvcal3, MlaAndIndexerShapesRoundTrip) {
  for (uint32_t head_dim : {576u, 128u}) {
    SCOPED_TRACE(head_dim);
    KvtcCalibration c = MakeCalibration(KeysOnlySpec(
        {.grouping = KvtcGrouping::kLayer, .n_layers = 2, .n_kv_heads = 1, .head_dim = head_dim, .group_size = 16}));
    if (head_dim == 576) c.rope = {.type = RopeType::kNone}, c.keys_rope_undone = false;
    ASSERT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c).ToString();
    const std::vector<uint8_t> b = Write(c);
    auto read = ReadKvcal(b);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(Same(*read, c));
    EXPECT_TRUE(Write(*read) == b);
  }
}

TEST(Kvcal3, LayoutMatchesFormatDoc) {
  const KvtcCalibration c = MakeCalibration(
      KeysOnlySpec({.grouping = KvtcGrouping::kLayer, .n_layers = 3, .quantizer = KvtcQuantizer::kComponent}));
  const std::vector<uint8_t> b = Write(c);
  EXPECT_EQ(GetU32(b, 4), 3u);
  EXPECT_EQ(GetU32(b, 8), 69u);
  EXPECT_EQ(GetU32(b, kNBasesAt), 3u);  // per kind, as in every version
  EXPECT_EQ(b[kV2QuantizerAt], 1);
  EXPECT_EQ(GetU32(b, kV2ChunkTokensAt), 256u);
  EXPECT_EQ(b[kV3FlagsAt], kKvcalFlagKeysOnly);
  EXPECT_EQ(GetU32(b, kV3HeaderCrcAt), Crc32c(b.data(), kV3HeaderCrcAt));
  const std::vector<size_t> at = SectionOffsets(b, kV3FirstSectionAt);
  const size_t n_bases = c.n_bases();
  ASSERT_EQ(at.size(), n_bases + 2);
  for (size_t i = 0; i < n_bases; ++i) {
    EXPECT_EQ(std::memcmp(b.data() + at[i], "KBAS", 4), 0) << i;
    EXPECT_EQ(GetU32(b, at[i] + 16), i);
    const PcaBasis& basis = c.bases[i];
    EXPECT_EQ(GetU64(b, at[i] + 4), 12 + 4 * (basis.dim + basis.n_components * (basis.dim + 1 + 8))) << i;
  }
  size_t total_groups = 0;
  for (uint32_t i = 0; i < n_bases; ++i) total_groups += c.n_groups(i);
  EXPECT_EQ(std::memcmp(b.data() + at[n_bases], "ALOC", 4), 0);
  EXPECT_EQ(GetU32(b, at[n_bases] + 16), total_groups);
  EXPECT_EQ(GetU64(b, at[n_bases] + 4), 4 + c.allocations.size() * (20 + total_groups));
  EXPECT_EQ(std::memcmp(b.data() + at.back(), "NOTE", 4), 0);
  EXPECT_EQ(b.size(), at.back() + 16 + c.choice.size());
}

TEST(Kvcal3, EveryByteFlipAndTruncationFails) {
  for (KvtcQuantizer q : {KvtcQuantizer::kTokenGroup, KvtcQuantizer::kComponent}) {
    const std::vector<uint8_t> good = TinyKeysFile(q);
    ASSERT_TRUE(ReadKvcal(good).ok());
    for (size_t i = 0; i < good.size(); ++i) {
      for (uint8_t mask : {0x01, 0x80, 0xFF}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= mask;
        const Status s = ReadStatus(bad);
        EXPECT_TRUE(s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported)
            << "byte " << i << " mask " << int{mask} << ": " << s.ToString();
      }
    }
    for (size_t n = 0; n < good.size(); ++n) {
      const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_EQ(ReadStatus(cut).code(), StatusCode::kCorrupt) << n;
    }
  }
}

// `b` with its header body lengthened by a flags byte (a version 2 file made version 3) or
// shortened by one (the reverse), CRCs recomputed.
std::vector<uint8_t> Relabel(std::vector<uint8_t> b, uint32_t version, int flags) {
  if (flags >= 0) {
    b.insert(b.begin() + kV3FlagsAt, static_cast<uint8_t>(flags));
    PutU32(b, 8, 69);
  } else {
    b.erase(b.begin() + kV3FlagsAt);
    PutU32(b, 8, 68);
  }
  PutU32(b, 4, version);
  if (flags >= 0) {
    FixCrcsV3(b);
  } else {
    FixCrcs(b, kV2HeaderCrcAt, kV2FirstSectionAt);
  }
  return b;
}

// Hostile version 3 headers, and files whose sections disagree with the flag: each fails
// cleanly as damage, before anything the size of a hostile count is allocated.
TEST(Kvcal3, HostileFlagsAndBasisCountsFail) {
  const KvtcCalibration full =
      MakeCalibration({.grouping = KvtcGrouping::kLayer, .format_version = 2, .quantizer = KvtcQuantizer::kComponent});
  const KvtcCalibration keys =
      MakeCalibration(KeysOnlySpec({.grouping = KvtcGrouping::kLayer, .quantizer = KvtcQuantizer::kComponent}));
  const std::vector<uint8_t> full_file = Write(full);
  const std::vector<uint8_t> keys_file = Write(keys);
  struct Case {
    const char* name;
    std::function<std::vector<uint8_t>()> make;
    const char* needle;
  };
  const Case cases[] = {
      {"flags 0", [&] { return EditedV3(keys_file, [&](std::vector<uint8_t>& b) { b[kV3FlagsAt] = 0; }); },
       "header: format version 3 holds only keys-only calibrations"},
      {"unknown flag", [&] { return EditedV3(keys_file, [&](std::vector<uint8_t>& b) { b[kV3FlagsAt] = 0x03; }); },
       "header: unknown flags 0x03"},
      {"high flag", [&] { return EditedV3(keys_file, [&](std::vector<uint8_t>& b) { b[kV3FlagsAt] = 0x80; }); },
       "header: unknown flags 0x80"},
      {"n_bases counts both kinds",
       [&] { return EditedV3(keys_file, [&](std::vector<uint8_t>& b) { PutU32(b, kNBasesAt, 2 * keys.n_bases()); }); },
       "header: n_bases 4, but grouping layer of this shape has 2"},
      // The flag set on a file that still holds V bases: they stand where the allocations belong.
      {"flag on a file with V bases", [&] { return Relabel(full_file, 3, kKvcalFlagKeysOnly); },
       "allocations: tag 0x53414256 'VBAS' where 0x434f4c41 'ALOC' belongs"},
      // The flag cleared (as version 2) on a keys-only file: its V bases are missing.
      {"version 2 without V bases", [&] { return Relabel(keys_file, 2, -1); },
       "V basis 0: tag 0x434f4c41 'ALOC' where 0x53414256 'VBAS' belongs"},
      {"version 2 header labelled 3",
       [&] {
         std::vector<uint8_t> b = full_file;
         PutU32(b, 4, 3);
         FixCrcs(b, kV2HeaderCrcAt, kV2FirstSectionAt);
         return b;
       },
       "header_length 68 is not 69"},
      {"a K basis missing",
       [&] {
         std::vector<uint8_t> b = keys_file;
         const std::vector<size_t> at = SectionOffsets(b, kV3FirstSectionAt);
         b.erase(b.begin() + static_cast<std::ptrdiff_t>(at[1]), b.begin() + static_cast<std::ptrdiff_t>(at[2]));
         return b;
       },
       "K basis 1: tag 0x434f4c41 'ALOC' where 0x5341424b 'KBAS' belongs"},
      {"groups of K and V",
       [&] {
         return EditedV3(keys_file, [&](std::vector<uint8_t>& b) {
           const std::vector<size_t> at = SectionOffsets(b, kV3FirstSectionAt);
           PutU32(b, at[keys.n_bases()] + 16, 2 * GetU32(b, at[keys.n_bases()] + 16));
         });
       },
       "allocations: groups_per_allocation 30, but the bases have 15 groups"},
      {"a million bases",
       [&] {
         return EditedV3(keys_file, [&](std::vector<uint8_t>& b) {
           PutU32(b, kNLayersAt, 1024);
           PutU32(b, kNKvHeadsAt, 1024);
           PutU32(b, kHeadDimAt, 32);
           b[kGroupingAt] = static_cast<uint8_t>(KvtcGrouping::kLayerHead);
           PutU32(b, kNBasesAt, 1024 * 1024);
           PutU32(b, kNRotAt, 32);
         });
       },
       "truncated: 1048576 bases of dimension 32 and 2 allocations need at least"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> b = c.make();
    g_largest_allocation = 0;
    ExpectCorrupt(b, c.needle);
    EXPECT_LT(g_largest_allocation.load(), size_t{1} << 16);
  }
}

// Keys-only files came after versions 1 and 2: those keep every byte, read as calibrations of
// K and V and rewrite to themselves, and a calibration of K and V never becomes version 3.
TEST(Kvcal3, OlderVersionsKeepTheirBytes) {
  for (uint32_t version : {1u, 2u}) {
    SCOPED_TRACE(version);
    const KvtcQuantizer q = version == 1 ? KvtcQuantizer::kTokenGroup : KvtcQuantizer::kComponent;
    const std::vector<uint8_t> b = TinyFile(version, q);
    EXPECT_EQ(GetU32(b, 4), version);
    EXPECT_EQ(GetU32(b, 8), version == 1 ? 63u : 68u);
    auto read = ReadKvcal(b);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_FALSE(read->keys_only);
    EXPECT_EQ(read->bases.size(), 2 * read->n_bases());
    EXPECT_TRUE(Write(*read) == b);
  }
  // Committed files of both versions (fuzz seeds, the real calibration), byte for byte.
  for (const char* name :
       {"fuzz/corpus/kvcal/layer.kvcal", "fuzz/corpus/kvcal/v2_component.kvcal", "models/kvtiny/kvtiny.kvcal"}) {
    SCOPED_TRACE(name);
    std::ifstream in(fs::path(KVCODEC_SOURCE_DIR) / name, std::ios::binary);
    const std::vector<uint8_t> file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ASSERT_FALSE(file.empty());
    auto read = ReadKvcal(file);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_FALSE(read->keys_only);
    EXPECT_EQ(read->bases.size(), 2 * read->n_bases());
    EXPECT_TRUE(Write(*read) == file);
  }
}

// The version 3 example in docs/format.md (.kvcal), byte for byte.
TEST(Kvcal3, SmallestExampleMatchesFormatDoc) {
  KvtcCalibration c;
  c.format_version = 3;
  c.keys_only = true;
  c.n_layers = c.n_kv_heads = c.head_dim = 1;
  c.rope = {.type = RopeType::kNone};
  c.keys_rope_undone = false;
  c.grouping = KvtcGrouping::kAll;
  c.group_size = 1;
  c.bases.push_back({.dim = 1, .n_components = 1, .mean = {0.0f}, .components = {1.0f}, .eigenvalues = {1.0f}});
  c.allocations.push_back({.target_ratio = 4.0f, .bits = {4}, .heldout_rel_mse = 0.0, .coded_bits_per_value = 4.0});
  const std::vector<uint8_t> expected = {
      0x4b, 0x56, 0x43, 0x4c, 0x03, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
      0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x1c, 0x46, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x02, 0x01, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x01, 0xee, 0x5e, 0x5c, 0x5d, 0x4b, 0x42, 0x41, 0x53, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x7b, 0xb2, 0xb6, 0x52, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x41, 0x4c, 0x4f, 0x43, 0x19, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x3d, 0x5b, 0x25, 0xec, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x40, 0x04, 0x4e, 0x4f, 0x54, 0x45, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf2, 0x7b, 0x94, 0x3b};
  EXPECT_TRUE(Write(c) == expected);
  auto read = ReadKvcal(expected);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(Same(*read, c));
}

TEST(Kvcal, DamagedHeaderReportsCrcFirst) {
  std::vector<uint8_t> b = TinyFile();
  b[kNLayersAt] = 9;
  ExpectCorrupt(b, "header: CRC32C mismatch");
  b = TinyFile();
  PutU32(b, 8, 64);
  ExpectCorrupt(b, "header_length 64 is not 63");
}

TEST(Kvcal, DamagedSectionNamesIt) {
  std::vector<uint8_t> b = TinyFile();
  const std::vector<size_t> at = SectionOffsets(b);
  b[at[1] + 20] ^= 1;
  ExpectCorrupt(b, "V basis 0: CRC32C mismatch");
  b = TinyFile();
  b[at[2]] ^= 1;  // tag byte of the allocations section
  ExpectCorrupt(b, "allocations: CRC32C mismatch");
}

TEST(Kvcal, HostileHeaderFieldsFail) {
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> mutate;
    const char* needle;
  };
  const Case cases[] = {
      {"rope type", [](auto& b) { b[kRopeTypeAt] = 6; }, "header: unknown rope type 6"},
      {"rope type 255", [](auto& b) { b[kRopeTypeAt] = 255; }, "header: unknown rope type 255"},
      // TinyFile's keys were fitted with RoPE undone: no rotation a kind without one could undo.
      {"undone without rope", [](auto& b) { b[kRopeTypeAt] = 2; },
       "header: keys_rope_undone is set, but rope type none is not undone"},
      {"undone with vision rope", [](auto& b) { b[kRopeTypeAt] = 5; },
       "header: keys_rope_undone is set, but rope type vision is not undone"},
      {"undone flag", [](auto& b) { b[kUndoneAt] = 2; }, "keys_rope_undone is 2, not 0 or 1"},
      {"grouping", [](auto& b) { b[kGroupingAt] = 3; }, "header: unknown grouping 3"},
      {"n_layers", [](auto& b) { PutU32(b, kNLayersAt, 0); }, "header: n_layers 0 outside"},
      {"group_size", [](auto& b) { PutU32(b, kGroupSizeAt, 4097); }, "group_size 4097 outside 1..4096"},
      {"n_rot", [](auto& b) { PutU32(b, kNRotAt, 3); }, "rope n_rot 3 is not an even count"},
      {"n_bases", [](auto& b) { PutU32(b, kNBasesAt, 2); }, "header: n_bases 2, but grouping all"},
      {"n_allocations", [](auto& b) { PutU32(b, kNAllocationsAt, 257); }, "257 allocations exceed the limit 256"},
      {"freq_base", [](auto& b) { PutU32(b, 45, 0x7fc00000); }, "rope freq_base nan"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> b = TinyFile();
    c.mutate(b);
    FixCrcs(b);
    ExpectCorrupt(b, c.needle);
  }
}

TEST(Kvcal, HostileCountsDoNotAllocate) {
  const std::vector<uint8_t> good = TinyFile();
  const size_t first = SectionOffsets(good)[0];
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> mutate;
    const char* needle;
  };
  const Case cases[] = {
      {"n_components 2^31", [&](auto& b) { PutU32(b, first + 16 + 8, 0x80000000u); },
       "K basis 0: n_components 2147483648 outside 1..2"},
      {"dim 2^31", [&](auto& b) { PutU32(b, first + 16 + 4, 0x80000000u); }, "K basis 0: dim 2147483648 differs"},
      {"section length 2^63", [&](auto& b) { PutU64(b, first + 4, uint64_t{1} << 63); },
       "K basis 0: length 9223372036854775808 exceeds"},
      {"a million bases",
       [](auto& b) {
         PutU32(b, kNLayersAt, 1024);
         PutU32(b, kNKvHeadsAt, 1024);
         PutU32(b, kHeadDimAt, 32);
         b[kGroupingAt] = static_cast<uint8_t>(KvtcGrouping::kLayerHead);
         PutU32(b, kNBasesAt, 1024 * 1024);
       },
       "truncated: 2097152 bases of dimension 32 and 1 allocations need at least"},
      {"too many floats",
       [](auto& b) {
         PutU32(b, kNLayersAt, 1024);
         PutU32(b, kNKvHeadsAt, 1024);
         PutU32(b, kHeadDimAt, 256);
         b[kGroupingAt] = static_cast<uint8_t>(KvtcGrouping::kLayerHead);
         PutU32(b, kNBasesAt, 1024 * 1024);
       },
       "need at least 1075838976 floats, over the limit 268435456"},
      {"basis dim over 65536",
       [](auto& b) {
         PutU32(b, kNLayersAt, 1024);
         PutU32(b, kNKvHeadsAt, 128);
       },
       "basis dimension 262144 (grouping all) exceeds the limit 65536"},
      {"groups_per_allocation", [&](auto& b) { PutU32(b, SectionOffsets(b)[2] + 16, 0xFFFFFFFFu); },
       "allocations: groups_per_allocation 4294967295, but the bases have"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> b = good;
    c.mutate(b);
    FixCrcs(b);
    g_largest_allocation = 0;
    ExpectCorrupt(b, c.needle);
    EXPECT_LT(g_largest_allocation.load(), size_t{1} << 16);
  }
}

TEST(Kvcal, SectionsOutOfPlaceFail) {
  const KvtcCalibration c = MakeCalibration({.grouping = KvtcGrouping::kLayer, .n_layers = 2});
  const std::vector<uint8_t> good = Write(c);
  const std::vector<size_t> at = SectionOffsets(good);

  // K bases 0 and 1 swapped: each section is intact, but not where it belongs.
  std::vector<uint8_t> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(at[0]));
  b.insert(b.end(), good.begin() + static_cast<std::ptrdiff_t>(at[1]),
           good.begin() + static_cast<std::ptrdiff_t>(at[2]));
  b.insert(b.end(), good.begin() + static_cast<std::ptrdiff_t>(at[0]),
           good.begin() + static_cast<std::ptrdiff_t>(at[1]));
  b.insert(b.end(), good.begin() + static_cast<std::ptrdiff_t>(at[2]), good.end());
  ExpectCorrupt(b, "K basis 0: index 1 where basis 0 belongs");

  // A V basis where a K basis belongs.
  b = good;
  std::memcpy(b.data() + at[0], "VBAS", 4);
  FixCrcs(b);
  ExpectCorrupt(b, "K basis 0: tag 0x53414256 'VBAS' where 0x5341424b 'KBAS' belongs");
}

TEST(Kvcal, InvalidValuesInsideSectionsFail) {
  const std::vector<uint8_t> good = TinyFile();
  const std::vector<size_t> at = SectionOffsets(good);
  std::vector<uint8_t> b = good;
  PutU32(b, at[0] + 16 + 12, 0x7f800000u);  // mean[0] = inf
  FixCrcs(b);
  ExpectCorrupt(b, "K basis 0: mean holds a non-finite value");

  b = good;
  b[at[2] + 16 + 4 + 12] = 9;  // first bit width of allocation 0
  FixCrcs(b);
  ExpectCorrupt(b, "allocation 0: group 0 has 9 bits, more than 8");
}

// ---- ValidateCalibration ----

struct Mutation {
  const char* name;
  std::function<void(KvtcCalibration&)> mutate;
  const char* needle;
};

TEST(ValidateCalibration, AcceptsTheTestCalibrations) {
  for (KvtcGrouping g : {KvtcGrouping::kLayerHead, KvtcGrouping::kLayer, KvtcGrouping::kAll}) {
    EXPECT_TRUE(ValidateCalibration(MakeCalibration({.grouping = g})).ok());
  }
}

TEST(ValidateCalibration, RejectsEachInconsistency) {
  const Mutation mutations[] = {
      {"n_layers 0", [](auto& c) { c.n_layers = 0; }, "n_layers 0 outside 1..1024"},
      {"n_kv_heads", [](auto& c) { c.n_kv_heads = 1025; }, "n_kv_heads 1025 outside 1..1024"},
      {"head_dim", [](auto& c) { c.head_dim = 0; }, "head_dim 0 outside 1..4096"},
      {"grouping", [](auto& c) { c.grouping = static_cast<KvtcGrouping>(7); }, "unknown grouping 7"},
      {"group_size 0", [](auto& c) { c.group_size = 0; }, "group_size 0 outside 1..4096"},
      {"group_size big", [](auto& c) { c.group_size = 4097; }, "group_size 4097 outside"},
      {"rope type", [](auto& c) { c.rope.type = static_cast<RopeType>(6); }, "unknown rope type 6"},
      {"undone without rope", [](auto& c) { c.rope.type = RopeType::kNone; },
       "keys_rope_undone is set, but rope type none is not undone"},
      {"undone with vision rope", [](auto& c) { c.rope.type = RopeType::kVision; },
       "keys_rope_undone is set, but rope type vision is not undone"},
      {"n_rot > head_dim", [](auto& c) { c.rope.n_rot = c.head_dim + 2; }, "not an even count within head_dim"},
      {"n_rot odd", [](auto& c) { c.rope.n_rot = 1; }, "rope n_rot 1 is not an even count"},
      {"freq_base", [](auto& c) { c.rope.freq_base = 0; }, "rope freq_base 0 is not finite and positive"},
      {"freq_scale", [](auto& c) { c.rope.freq_scale = INFINITY; }, "rope freq_scale inf"},
      {"basis dim",
       [](auto& c) { c.grouping = KvtcGrouping::kAll, c.n_layers = 1024, c.n_kv_heads = 8, c.head_dim = 16; },
       "basis dimension 131072 (grouping all) exceeds the limit 65536"},
      {"min floats",
       [](auto& c) { c.grouping = KvtcGrouping::kLayerHead, c.n_layers = c.n_kv_heads = 1024, c.head_dim = 128; },
       "2097152 bases of dimension 128 need at least 538968064 floats"},
      {"bases missing", [](auto& c) { c.bases.pop_back(); },
       "3 bases, expected 4 (K and V, 2 each for grouping layer)"},
      {"dim", [](auto& c) { c.bases[1].dim = 9; }, "K basis 1: dim 9 differs from the grouping's basis dimension 8"},
      {"no components", [](auto& c) { c.bases[2].n_components = 0; }, "V basis 0: n_components 0 outside 1..8"},
      {"too many components", [](auto& c) { c.bases[0].n_components = 9; }, "K basis 0: n_components 9 outside 1..8"},
      {"mean size", [](auto& c) { c.bases[0].mean.pop_back(); }, "K basis 0: mean has 7 values, expected 8"},
      {"components size", [](auto& c) { c.bases[0].components.push_back(0); }, "components has 65 values, expected 64"},
      {"eigenvalues size", [](auto& c) { c.bases[3].eigenvalues.pop_back(); }, "V basis 1: eigenvalues has"},
      {"mean nan", [](auto& c) { c.bases[0].mean[3] = NAN; }, "mean holds a non-finite value"},
      {"component inf", [](auto& c) { c.bases[0].components[5] = -INFINITY; }, "components holds a non-finite value"},
      {"eigenvalue nan", [](auto& c) { c.bases[0].eigenvalues[1] = NAN; }, "eigenvalues holds a non-finite value"},
      {"row not unit",
       [](auto& c) {
         for (uint32_t j = 0; j < 8; ++j) c.bases[0].components[8 + j] *= 1.01f;
       },
       "K basis 0: component 1 has norm 1.01"},
      {"row zero",
       [](auto& c) {
         for (uint32_t j = 0; j < 8; ++j) c.bases[0].components[j] = 0;
       },
       "component 0 has norm 0"},
      {"row repeated",
       [](auto& c) {
         for (uint32_t j = 0; j < 8; ++j) c.bases[1].components[16 + j] = c.bases[1].components[8 + j];
       },
       "K basis 1: components 1 and 2 are not orthogonal"},
      {"eigenvalue negative", [](auto& c) { c.bases[0].eigenvalues.back() = -1e-9f; }, "is negative"},
      {"eigenvalues rising", [](auto& c) { c.bases[0].eigenvalues[2] = c.bases[0].eigenvalues[1] * 1.01f; },
       "eigenvalue 2 ("},
      {"too many allocations", [](auto& c) { c.allocations.resize(257, c.allocations[0]); },
       "257 allocations exceed the limit 256"},
      {"ratio 0", [](auto& c) { c.allocations[0].target_ratio = 0; },
       "allocation 0: target_ratio 0 is not finite and positive"},
      {"ratio nan", [](auto& c) { c.allocations[1].target_ratio = NAN; }, "allocation 1: target_ratio nan"},
      {"ratio equal", [](auto& c) { c.allocations[1].target_ratio = c.allocations[0].target_ratio; },
       "allocation 1: target_ratio 4 does not exceed the previous one (4)"},
      {"ratio falling", [](auto& c) { std::swap(c.allocations[0], c.allocations[1]); }, "allocation 1: target_ratio 4"},
      {"mse nan", [](auto& c) { c.allocations[0].heldout_rel_mse = NAN; }, "heldout_rel_mse nan"},
      {"mse negative", [](auto& c) { c.allocations[0].heldout_rel_mse = -1; }, "heldout_rel_mse -1"},
      {"bits size", [](auto& c) { c.allocations[1].bits.pop_back(); },
       "allocation 1: 10 bit widths, expected 11 (one per component group)"},
      {"bits > 8", [](auto& c) { c.allocations[1].bits[3] = 9; }, "allocation 1: group 3 has 9 bits, more than 8"},
      {"version 0", [](auto& c) { c.format_version = 0; }, "format_version 0 outside 1..3"},
      {"version 4", [](auto& c) { c.format_version = 4; }, "format_version 4 outside 1..3"},
      {"version 3 with V", [](auto& c) { c.format_version = 3; }, "format version 3 holds only keys-only calibrations"},
      {"keys only in version 1", [](auto& c) { c.keys_only = true; },
       "a keys-only calibration is format version 3, not 1"},
      {"keys only with V bases", [](auto& c) { c.keys_only = true, c.format_version = 3; },
       "4 bases, expected 2 (K only, 2 each for grouping layer)"},
      {"v1 component", [](auto& c) { c.quantizer = KvtcQuantizer::kComponent; },
       "format version 1 holds only token-group calibrations"},
      {"v1 choice", [](auto& c) { c.choice = "x"; }, "format version 1 holds only token-group"},
      {"v1 coded bits", [](auto& c) { c.allocations[0].coded_bits_per_value = 1; }, "coded_bits_per_value 1"},
      {"quantizer", [](auto& c) { c.format_version = 2, c.quantizer = static_cast<KvtcQuantizer>(5); },
       "unknown quantizer 5"},
      {"component group size", [](auto& c) { c.format_version = 2, c.quantizer = KvtcQuantizer::kComponent; },
       "quantizer component needs group_size 1, not 3"},
      {"multipliers on token-group", [](auto& c) { c.bases[0].step_multipliers.assign(64, 1.0f); },
       "K basis 0: step_multipliers has 64 values, expected 0 for quantizer token-group"},
      {"choice newline", [](auto& c) { c.format_version = 2, c.choice = "a\nb"; }, "choice is not one line"},
      {"choice long", [](auto& c) { c.format_version = 2, c.choice.assign(4097, 'a'); }, "choice is 4097 bytes"},
      {"coded bits nan", [](auto& c) { c.format_version = 2, c.allocations[0].coded_bits_per_value = NAN; },
       "coded_bits_per_value nan"},
  };
  // kLayer, 2 layers of 2 heads x 4: two bases per kind of dim 8, component counts 8, 7, 6, 8.
  const KvtcCalibration good = MakeCalibration({.grouping = KvtcGrouping::kLayer});
  ASSERT_TRUE(ValidateCalibration(good).ok());
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(m.name);
    KvtcCalibration c = good;
    m.mutate(c);
    const Status s = ValidateCalibration(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(m.needle), std::string::npos) << "message: " << s.message() << "\nwanted: " << m.needle;
    // The writer refuses what the validator refuses.
    EXPECT_EQ(WriteKvcal(c).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ValidateCalibration, ComponentMultipliersAreChecked) {
  const KvtcCalibration good =
      MakeCalibration({.grouping = KvtcGrouping::kLayer, .format_version = 2, .quantizer = KvtcQuantizer::kComponent});
  ASSERT_TRUE(ValidateCalibration(good).ok()) << ValidateCalibration(good).ToString();
  KvtcCalibration c = good;
  c.bases[1].step_multipliers.pop_back();
  EXPECT_NE(ValidateCalibration(c).message().find("K basis 1: step_multipliers has 55 values, expected 56"),
            std::string::npos)
      << ValidateCalibration(c).message();
  for (float bad : {0.0f, 0.06f, 16.5f, NAN, INFINITY, -1.0f}) {
    c = good;
    c.bases[2].step_multipliers[3] = bad;
    EXPECT_NE(ValidateCalibration(c).message().find("V basis 0: step multiplier 3 is"), std::string::npos) << bad;
  }
}

TEST(ValidateCalibration, AllowsRoundingSlack) {
  KvtcCalibration c = MakeCalibration({.grouping = KvtcGrouping::kLayer});
  for (uint32_t j = 0; j < 8; ++j) c.bases[0].components[j] *= 1.0005f;
  c.bases[0].eigenvalues[2] = c.bases[0].eigenvalues[1] * (1 + 5e-5f);
  c.bases[0].eigenvalues.back() = 0;
  EXPECT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c).ToString();
}

// ---- files ----

class KvcalFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kvcal_test_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ASSERT_TRUE(fs::create_directories(dir_));
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<uint8_t> ReadAll(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  size_t Entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }

  fs::path dir_;
};

TEST_F(KvcalFiles, SaveThenLoad) {
  const KvtcCalibration c = MakeCalibration({.grouping = KvtcGrouping::kLayerHead});
  const std::string path = (dir_ / "model.kvcal").string();
  ASSERT_TRUE(SaveKvcal(c, path).ok());
  EXPECT_EQ(Entries(), 1u);  // no temporary file left behind
  EXPECT_EQ(ReadAll(path), Write(c));

  Hash128 hash{};
  auto loaded = LoadKvcal(path, &hash);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(Same(*loaded, c));
  EXPECT_EQ(hash, KvcalHash(ReadAll(path)));

  // Saving again replaces the file in place.
  const KvtcCalibration other = MakeCalibration({.grouping = KvtcGrouping::kAll, .seed = 7});
  ASSERT_TRUE(SaveKvcal(other, path).ok());
  EXPECT_EQ(Entries(), 1u);
  loaded = LoadKvcal(path);
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(Same(*loaded, other));
}

TEST_F(KvcalFiles, SaveFailures) {
  const KvtcCalibration c = MakeCalibration({});
  const std::string missing_dir = (dir_ / "no" / "such" / "x.kvcal").string();
  const Status s = SaveKvcal(c, missing_dir);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(missing_dir), std::string::npos) << s.message();

  KvtcCalibration bad = c;
  bad.group_size = 0;
  EXPECT_EQ(SaveKvcal(bad, (dir_ / "bad.kvcal").string()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Entries(), 0u);
}

TEST_F(KvcalFiles, LoadFailures) {
  const std::string missing = (dir_ / "missing.kvcal").string();
  auto r = LoadKvcal(missing);
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();

  r = LoadKvcal(dir_.string());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);

  const std::string junk = (dir_ / "junk.kvcal").string();
  std::ofstream(junk, std::ios::binary) << "KVC1 not a calibration";
  Hash128 hash{};
  hash[0] = 0x5A;
  r = LoadKvcal(junk, &hash);
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(r.status().message(), junk + ": not a .kvcal file (bad magic)");
  EXPECT_EQ(hash[0], 0x5A);  // untouched on failure
}

TEST(CheckCalibrationModel, NamesBothFingerprints) {
  const KvtcCalibration c = MakeCalibration({});
  EXPECT_TRUE(CheckCalibrationModel(c, c.model_fingerprint).ok());
  ModelFingerprint other = c.model_fingerprint;
  other[15] ^= 0xFF;
  const Status s = CheckCalibrationModel(c, other);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "calibration was made for model " + HexString(c.model_fingerprint) + ", not for this model " +
                             HexString(other));
}

// ---- fuzz seeds ----

const fs::path kCorpus = fs::path(KVCODEC_SOURCE_DIR) / "fuzz" / "corpus" / "kvcal";

struct Seed {
  const char* name;
  Spec spec;
};
const Seed kSeeds[] = {
    {"layer_head",
     {.grouping = KvtcGrouping::kLayerHead,
      .n_layers = 2,
      .n_kv_heads = 2,
      .head_dim = 2,
      .group_size = 1,
      .n_allocations = 2,
      .seed = 11}},
    {"layer",
     {.grouping = KvtcGrouping::kLayer,
      .n_layers = 2,
      .n_kv_heads = 1,
      .head_dim = 4,
      .group_size = 3,
      .n_allocations = 3,
      .seed = 12}},
    {"all",
     {.grouping = KvtcGrouping::kAll,
      .n_layers = 1,
      .n_kv_heads = 2,
      .head_dim = 2,
      .group_size = 2,
      .n_allocations = 1,
      .seed = 13}},
    {"minimal",
     {.grouping = KvtcGrouping::kAll,
      .n_layers = 1,
      .n_kv_heads = 1,
      .head_dim = 1,
      .group_size = 1,
      .n_allocations = 1,
      .seed = 15}},
    {"no_allocations",
     {.grouping = KvtcGrouping::kAll,
      .n_layers = 1,
      .n_kv_heads = 1,
      .head_dim = 2,
      .group_size = 1,
      .n_allocations = 0,
      .seed = 14}},
    {"v2_component",
     {.grouping = KvtcGrouping::kLayer,
      .n_layers = 2,
      .n_kv_heads = 1,
      .head_dim = 4,
      .n_allocations = 2,
      .seed = 15,
      .format_version = 2,
      .quantizer = KvtcQuantizer::kComponent}},
    {"v2_token_group",
     {.grouping = KvtcGrouping::kLayerHead,
      .n_layers = 1,
      .n_kv_heads = 2,
      .head_dim = 2,
      .group_size = 2,
      .n_allocations = 1,
      .seed = 16,
      .format_version = 2}},
};

std::vector<uint8_t> ReadSeed(const std::string& name) {
  std::ifstream in(kCorpus / name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The seeds are useful only while valid: a format change must regenerate them. (Compared by
// parsing rather than with freshly written bytes, which could differ in the last bit of a
// float on a machine that contracts the Gram-Schmidt arithmetic differently.)
TEST(KvcalFuzzCorpus, SeedsAreValid) {
  const char* regenerate =
      " (regenerate: kvcal_test --gtest_also_run_disabled_tests --gtest_filter=KvcalFuzzCorpus.DISABLED_Regenerate)";
  for (const Seed& seed : kSeeds) {
    const std::string name = std::string(seed.name) + ".kvcal";
    const std::vector<uint8_t> bytes = ReadSeed(name);
    auto read = ReadKvcal(bytes);
    ASSERT_TRUE(read.ok()) << name << ": " << read.status().ToString() << regenerate;
    EXPECT_EQ(read->grouping, seed.spec.grouping) << name << regenerate;
    EXPECT_EQ(read->allocations.size(), seed.spec.n_allocations) << name << regenerate;
    EXPECT_TRUE(Write(*read) == bytes) << name << " does not rewrite to itself" << regenerate;
  }
  const std::vector<uint8_t> truncated = ReadSeed("truncated.kvcal");
  EXPECT_FALSE(truncated.empty()) << regenerate;
  EXPECT_EQ(ReadStatus(truncated).code(), StatusCode::kCorrupt) << regenerate;
}

// Rewrites fuzz/corpus/kvcal/ in the source tree.
TEST(KvcalFuzzCorpus, DISABLED_Regenerate) {
  fs::create_directories(kCorpus);
  for (const Seed& seed : kSeeds) {
    const std::vector<uint8_t> bytes = Write(MakeCalibration(seed.spec));
    std::ofstream(kCorpus / (std::string(seed.name) + ".kvcal"), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  // Cut inside the first V basis, so the reader gets past the header and the K bases.
  std::vector<uint8_t> bytes = Write(MakeCalibration(kSeeds[0].spec));
  bytes.resize(SectionOffsets(bytes)[4] + 20);
  std::ofstream(kCorpus / "truncated.kvcal", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace
}  // namespace kvc
