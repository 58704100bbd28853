#include "codecs/cachegen/cachegen_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "base/byte_io.h"
#include "base/half.h"
#include "codecs/test_kv.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kFp{4, 5, 6};
const KvShape kShape{.n_layers = 4, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 100};

EncodeOptions Options(std::string level, uint32_t group = 0) {
  EncodeOptions o;
  o.level = std::move(level);
  if (group != 0) o.params["group"] = std::to_string(group);
  return o;
}

Result<std::vector<uint8_t>> Encode(const KvCache& cache, const EncodeOptions& options) {
  return EncodeKvc(*FindCodec("cachegen"), cache.View(), options, kFp, 0);
}

// What docs/format.md says a layer block starts with, read independently of the codec.
struct LayerStats {
  std::vector<float> anchor_scale;
  std::vector<float> step;
  uint8_t mode = 0;
};

std::vector<LayerStats> ReadLayerStats(std::span<const uint8_t> section, size_t layers, size_t channels) {
  std::vector<LayerStats> out;
  ByteReader r(section);
  for (size_t l = 0; l < layers; ++l) {
    uint32_t len = 0;
    std::span<const uint8_t> block;
    EXPECT_TRUE(r.U32(&len, "len").ok());
    EXPECT_TRUE(r.Bytes(len, &block, "block").ok());
    if (block.size() < channels * 6 + 1) return out;
    LayerStats s;
    for (size_t c = 0; c < channels; ++c) {
      const uint8_t* p = block.data() + 6 * c;
      s.anchor_scale.push_back(Fp16ToFp32(static_cast<uint16_t>(p[2] | (p[3] << 8))));
      s.step.push_back(Fp16ToFp32(static_cast<uint16_t>(p[4] | (p[5] << 8))));
    }
    s.mode = block[channels * 6];
    out.push_back(std::move(s));
  }
  EXPECT_TRUE(r.empty());
  return out;
}

// |decoded - input| <= step/2 per element, the step being the anchor scale for anchor tokens
// and the channel's delta step for the others (plus fp32 rounding and the output dtype's).
// Returns the mean absolute error.
double ExpectWithinHalfStep(const KvCache& in, const KvCache& out, const std::vector<uint8_t>& file_bytes,
                            uint32_t group) {
  const KvcFile file = ReadKvc(file_bytes).value();
  const KvShape& shape = in.shape();
  const size_t channels = shape.row_elems();
  if (shape.layer_elems() == 0) return 0;
  const double dtype_rel = in.dtype() == DType::kF16 ? 1.0 / 2048 : in.dtype() == DType::kBF16 ? 1.0 / 256 : 0;
  std::vector<float> x(shape.layer_elems());
  std::vector<float> y(shape.layer_elems());
  double sum = 0;
  size_t n = 0;
  for (KvKind kind : shape.kinds()) {
    const auto stats = ReadLayerStats(file.sections[kind == KvKind::kKey ? 0 : 1].bytes, shape.n_layers, channels);
    EXPECT_EQ(stats.size(), shape.n_layers);
    if (stats.size() != shape.n_layers) return 0;
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      in.ReadRowsF32(kind, l, 0, shape.n_tokens, x.data());
      out.ReadRowsF32(kind, l, 0, shape.n_tokens, y.data());
      for (uint32_t t = 0; t < shape.n_tokens; ++t) {
        for (size_t c = 0; c < channels; ++c) {
          const size_t i = size_t{t} * channels + c;
          const double step = t % group == 0 ? stats[l].anchor_scale[c] : stats[l].step[c];
          const double err = std::fabs(double{x[i]} - y[i]);
          const double tol = step / 2 * (1 + 1e-5) + 1e-5 * std::fabs(x[i]) + dtype_rel * std::fabs(y[i]) + 1e-7;
          if (err > tol) {
            ADD_FAILURE() << KvKindName(kind) << " layer " << l << " token " << t << " channel " << c << ": |" << x[i]
                          << " - " << y[i] << "| = " << err << " > " << tol;
            return 0;
          }
          sum += err;
          ++n;
        }
      }
    }
  }
  return sum / static_cast<double>(n);
}

double Ratio(const KvShape& shape, size_t file_bytes) {
  return static_cast<double>(shape.fp16_bytes()) / static_cast<double>(file_bytes);
}

TEST(CacheGen, InfoAndLevels) {
  const Codec* codec = FindCodec("cachegen");
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(codec->info().id, CacheGenCodec::kId);
  EXPECT_EQ(FindCodecById(4), codec);
  EXPECT_EQ(codec->info().levels, (std::vector<std::string>{"high", "medium", "low"}));
  EXPECT_EQ(codec->info().default_level, "medium");
  // Port numbers for a 32-layer model at "medium": K 32 bins in layers 0-9, V in layers 0-1.
  EXPECT_EQ(CacheGenCodec::KeyBands(1, 32), (CacheGenCodec::Bands{32, 16, 10}));
  EXPECT_EQ(CacheGenCodec::ValueBands(1, 32), (CacheGenCodec::Bands{32, 16, 2}));
  EXPECT_EQ(CacheGenCodec::KeyBands(0, 4), (CacheGenCodec::Bands{64, 32, 2}));
  EXPECT_EQ(CacheGenCodec::ValueBands(2, 4), (CacheGenCodec::Bands{16, 8, 1}));
  EXPECT_EQ(CacheGenCodec::ValueBands(2, 1), (CacheGenCodec::Bands{16, 8, 1}));
}

TEST(CacheGen, EveryLevelRoundTripsWithinHalfStepAndReportsRatio) {
  const KvCache cache = MakeCache(kShape, 1);
  double prev_err = 0;
  double prev_ratio = 0;
  for (const char* level : {"high", "medium", "low"}) {
    auto bytes = Encode(cache, Options(level));
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto out = DecodeKvc(*bytes, &kFp);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->shape(), cache.shape());
    EXPECT_EQ(out->dtype(), DType::kF16);
    EXPECT_EQ(ReadKvc(*bytes)->header.level, level);
    const double err = ExpectWithinHalfStep(cache, *out, *bytes, CacheGenCodec::kDefaultGroup);
    const double ratio = Ratio(kShape, bytes->size());
    std::printf("cachegen %-6s: %zu bytes, %.2fx smaller than fp16, mean |err| %.4f\n", level, bytes->size(), ratio,
                err);
    // Fewer bins: larger error, smaller file.
    EXPECT_GT(err, prev_err);
    EXPECT_GT(ratio, prev_ratio);
    prev_err = err;
    prev_ratio = ratio;
  }
}

TEST(CacheGen, DefaultLevelIsMedium) {
  const KvCache cache = MakeCache(kShape, 2);
  EXPECT_EQ(Encode(cache, Options("")).value(), Encode(cache, Options("medium")).value());
}

TEST(CacheGen, UsesRansOnRealisticChunks) {
  const KvCache cache = MakeCache(kShape, 3);
  const auto bytes = Encode(cache, Options("medium")).value();
  const KvcFile file = ReadKvc(bytes).value();
  for (const auto& s : file.sections) {
    for (const LayerStats& l : ReadLayerStats(s.bytes, kShape.n_layers, kShape.n_kv_heads * kShape.head_dim)) {
      EXPECT_NE(l.mode, 0);
    }
  }
}

TEST(CacheGen, CorrelatedTokensCompressBetterThanWhiteNoise) {
  for (const char* level : {"high", "medium", "low"}) {
    const size_t correlated = Encode(MakeCache(kShape, 4, true), Options(level)).value().size();
    const size_t white = Encode(MakeCache(kShape, 4, false), Options(level)).value().size();
    std::printf("cachegen %-6s: correlated %.2fx, white noise %.2fx\n", level, Ratio(kShape, correlated),
                Ratio(kShape, white));
    EXPECT_LT(correlated, white) << level;
  }
}

TEST(CacheGen, LargerChunkRatios) {
  // Closer to the paper's chunk sizes: per-chunk tables cost less per token.
  const KvShape shape{.n_layers = 8, .n_kv_heads = 2, .head_dim = 32, .n_tokens = 1000};
  const KvCache cache = MakeCache(shape, 5);
  for (const char* level : {"high", "medium", "low"}) {
    const auto bytes = Encode(cache, Options(level)).value();
    auto out = DecodeKvc(bytes);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const double err = ExpectWithinHalfStep(cache, *out, bytes, CacheGenCodec::kDefaultGroup);
    std::printf("cachegen %-6s (8x2x32x1000): %.2fx smaller than fp16, mean |err| %.4f\n", level,
                Ratio(shape, bytes.size()), err);
    // Which table layout won is a property of the data (channels alike in shape favour the
    // shared table); entropy coding must beat fixed-width codes at this length either way.
    const KvcFile file = ReadKvc(bytes).value();
    int modes[3] = {0, 0, 0};
    for (const auto& s : file.sections) {
      for (const LayerStats& l : ReadLayerStats(s.bytes, shape.n_layers, shape.row_elems())) {
        EXPECT_NE(l.mode, 0);
        if (l.mode < 3) ++modes[l.mode];
      }
    }
    std::printf("  layer blocks: %d packed, %d per-channel tables, %d shared table\n", modes[0], modes[1], modes[2]);
  }
}

TEST(CacheGen, HeterogeneousChannelsUsePerChannelTables) {
  // Half the channels barely move, half are white noise: one table per channel is worth its bytes.
  const KvShape shape{.n_layers = 2, .n_kv_heads = 1, .head_dim = 8, .n_tokens = 2000};
  KvCache cache = KvCache::Create(shape, DType::kF16).value();
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> buf(shape.layer_elems());
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    for (KvKind kind : kKvKinds) {
      for (size_t i = 0; i < buf.size(); ++i) {
        buf[i] = i % 2 == 0 ? 1.0f + 0.002f * normal(rng) + ((i / 8) % 500 == 0 ? 3.0f : 0.0f) : normal(rng);
      }
      cache.WriteRowsF32(kind, l, 0, shape.n_tokens, buf.data());
    }
  }
  const auto bytes = Encode(cache, Options("medium")).value();
  auto out = DecodeKvc(bytes);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectWithinHalfStep(cache, *out, bytes, CacheGenCodec::kDefaultGroup);
  const KvcFile file = ReadKvc(bytes).value();
  for (const auto& s : file.sections) {
    for (const LayerStats& l : ReadLayerStats(s.bytes, shape.n_layers, shape.row_elems())) EXPECT_EQ(l.mode, 1);
  }
  // Damage inside per-channel tables and stream is caught too.
  size_t failed = 0;
  const size_t len = file.sections[1].bytes.size();
  for (size_t pos = 0; pos < len; pos += 7) {
    auto r = DecodeKvc(Rewrite(bytes, [&](KvcHeader&, auto& secs) { secs[1].bytes[pos] ^= 0x10; }));
    failed += !r.ok();
  }
  EXPECT_GT(failed, 0u);
}

TEST(CacheGen, Deterministic) {
  const KvCache cache = MakeCache(kShape, 6);
  for (const char* level : {"high", "low"}) {
    EXPECT_EQ(Encode(cache, Options(level)).value(), Encode(cache, Options(level)).value());
  }
}

TEST(CacheGen, OddShapesAndGroups) {
  struct Case {
    uint32_t tokens;
    uint32_t group;
    DType dtype;
  };
  for (const Case& k :
       {Case{1, 10, DType::kF16}, Case{37, 10, DType::kF16}, Case{100, 1, DType::kF16}, Case{5, 64, DType::kF16},
        Case{23, 7, DType::kF32}, Case{31, 3, DType::kBF16}, Case{0, 10, DType::kF16}}) {
    const KvShape shape{.n_layers = 3, .n_kv_heads = 1, .head_dim = 8, .n_tokens = k.tokens};
    const KvCache cache = MakeCache(shape, 7 + k.tokens, true, k.dtype);
    for (const char* level : {"high", "medium", "low"}) {
      SCOPED_TRACE(testing::Message() << "tokens " << k.tokens << " group " << k.group << " level " << level);
      auto bytes = Encode(cache, Options(level, k.group));
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      auto out = DecodeKvc(*bytes);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->shape(), shape);
      EXPECT_EQ(out->dtype(), k.dtype);
      ExpectWithinHalfStep(cache, *out, *bytes, k.group);
      // Never expands past stats + 8-bit anchors + fixed-width deltas (at most 6 bits: "high").
      const KvcFile file = ReadKvc(*bytes).value();
      for (KvKind kind : kKvKinds) {
        const size_t c = shape.row_elems();
        const size_t groups = (k.tokens + k.group - 1) / k.group;
        const size_t bound =
            k.tokens == 0 ? 0 : shape.n_layers * (5 + 6 * c + groups * c + ((k.tokens - groups) * c * 6 + 7) / 8);
        EXPECT_LE(file.sections[kind == KvKind::kKey ? 0 : 1].bytes.size(), bound);
      }
    }
  }
}

TEST(CacheGen, ConstantAndExtremeValues) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_tokens = 25};
  KvCache cache = KvCache::Create(shape, DType::kF32).value();
  std::vector<float> buf(shape.layer_elems());
  for (size_t i = 0; i < buf.size(); ++i)
    buf[i] = (i % 4 == 0) ? 1.5f : (i % 4 == 1 ? 65504.0f : (i % 2 ? -65504.0f : 0.1f * i));
  for (uint32_t l = 0; l < 2; ++l) {
    cache.WriteRowsF32(KvKind::kKey, l, 0, shape.n_tokens, buf.data());
    cache.WriteRowsF32(KvKind::kValue, l, 0, shape.n_tokens, buf.data());
  }
  const auto bytes = Encode(cache, Options("low")).value();
  auto out = DecodeKvc(bytes);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectWithinHalfStep(cache, *out, bytes, CacheGenCodec::kDefaultGroup);
  std::vector<float> y(shape.layer_elems());
  out->ReadRowsF32(KvKind::kKey, 0, 0, shape.n_tokens, y.data());
  for (size_t t = 0; t < shape.n_tokens; ++t) EXPECT_EQ(y[t * 4], 1.5f);  // a constant channel is exact

  // A channel of -0 only (found by the capi fuzzer): its anchor scale came out as -0, whose sign
  // bit the decoder rejects, so the encoder wrote a file it could not read.
  std::vector<float> zeros = buf;
  for (size_t t = 0; t < shape.n_tokens; ++t) zeros[t * 4 + 2] = -0.0f;
  cache.WriteRowsF32(KvKind::kValue, 0, 0, shape.n_tokens, zeros.data());
  const auto negative_zero = DecodeKvc(Encode(cache, Options("high")).value());
  ASSERT_TRUE(negative_zero.ok()) << negative_zero.status().ToString();

  buf[3] = std::nanf("");
  cache.WriteRowsF32(KvKind::kValue, 1, 0, shape.n_tokens, buf.data());
  EXPECT_EQ(Encode(cache, Options("low")).status().code(), StatusCode::kInvalidArgument);
  buf[3] = 70000.0f;
  cache.WriteRowsF32(KvKind::kValue, 1, 0, shape.n_tokens, buf.data());
  EXPECT_EQ(Encode(cache, Options("low")).status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheGen, OptionValidation) {
  const KvCache cache = MakeCache(kShape, 8);
  EXPECT_EQ(Encode(cache, Options("ultra")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8")).status().code(), StatusCode::kInvalidArgument);
  EncodeOptions unknown = Options("medium");
  unknown.params["group_size"] = "10";
  EXPECT_EQ(Encode(cache, unknown).status().code(), StatusCode::kInvalidArgument);
  for (const char* bad : {"0", "65537", "x", "-1"}) {
    EncodeOptions o = Options("medium");
    o.params["group"] = bad;
    EXPECT_EQ(Encode(cache, o).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EncodeOptions ok = Options("medium");
  ok.params["group"] = "65536";
  EXPECT_TRUE(Encode(cache, ok).ok());
}

void ExpectCorrupt(const std::vector<uint8_t>& bytes, const char* what) {
  auto out = DecodeKvc(bytes);
  ASSERT_FALSE(out.ok()) << what;
  EXPECT_EQ(out.status().code(), StatusCode::kCorrupt) << what << ": " << out.status().ToString();
}

TEST(CacheGen, BadParamsAndHeaderAreCorrupt) {
  const auto bytes = Encode(MakeCache(kShape, 9), Options("medium")).value();
  const size_t params_size = ReadKvc(bytes)->header.codec_params.size();
  ASSERT_EQ(params_size, 18u);
  // Every params byte matters: version, group, level, and the bins recorded for each kind.
  for (size_t i = 0; i < params_size; ++i) {
    ExpectCorrupt(Rewrite(bytes, [&](KvcHeader& h, auto&) { h.codec_params[i] ^= 0x40; }), "params byte");
  }
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader& h, auto&) { h.codec_params.pop_back(); }), "short params");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader& h, auto&) { h.codec_params.push_back(0); }), "long params");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader& h, auto&) { h.level = "high"; }), "level mismatch");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader& h, auto&) { h.shape.n_layers = 5; }), "layer count");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader& h, auto&) { h.shape.n_tokens = 1000; }), "token count");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader& h, auto&) { h.shape.n_tokens = 0; }), "zero tokens");
  ExpectCorrupt(Rewrite(bytes,
                        [](KvcHeader& h, auto&) {
                          h.shape.head_dim = 4096;
                          h.shape.n_tokens = 1u << 16;
                        }),
                "huge shape");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader&, auto& s) { s.pop_back(); }), "one section");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader&, auto& s) { std::swap(s[0], s[1]); }), "swapped sections");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader&, auto& s) { s.push_back({0x4B, {1, 2, 3}}); }), "extra section");
}

TEST(CacheGen, TruncatedSectionsFailCleanly) {
  for (uint32_t tokens : {100u, 1u}) {
    KvShape shape = kShape;
    shape.n_tokens = tokens;
    const auto bytes = Encode(MakeCache(shape, 10), Options("medium")).value();
    const KvcFile file = ReadKvc(bytes).value();
    for (size_t s = 0; s < 2; ++s) {
      const size_t len = file.sections[s].bytes.size();
      for (size_t keep : {size_t{0}, size_t{1}, size_t{4}, len / 3, len / 2, len - 16, len - 1}) {
        ExpectCorrupt(Rewrite(bytes, [&](KvcHeader&, auto& secs) { secs[s].bytes.resize(keep); }), "truncated");
      }
      ExpectCorrupt(Rewrite(bytes, [&](KvcHeader&, auto& secs) { secs[s].bytes.push_back(0); }), "extended");
    }
  }
}

// Damaged payloads (re-wrapped so the container's CRCs pass) must decode or fail, never crash or
// read out of bounds; damage to lengths, modes, tables and streams must almost always fail.
TEST(CacheGen, FlippedBytesNeverCrash) {
  for (const char* level : {"high", "low"}) {
    for (uint32_t tokens : {100u, 3u}) {
      KvShape shape = kShape;
      shape.n_tokens = tokens;
      const auto bytes = Encode(MakeCache(shape, 11), Options(level)).value();
      const KvcFile file = ReadKvc(bytes).value();
      size_t failed = 0;
      size_t tried = 0;
      for (size_t s = 0; s < 2; ++s) {
        const size_t len = file.sections[s].bytes.size();
        for (size_t pos = 0; pos < len; pos += 1 + len / 400) {
          for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
            auto out = DecodeKvc(Rewrite(bytes, [&](KvcHeader&, auto& secs) { secs[s].bytes[pos] ^= mask; }));
            ++tried;
            if (!out.ok()) {
              EXPECT_EQ(out.status().code(), StatusCode::kCorrupt) << out.status().ToString();
              ++failed;
            }
          }
        }
      }
      std::printf("cachegen %s, %u tokens: %zu of %zu byte flips rejected\n", level, tokens, failed, tried);
      EXPECT_GT(failed, 0u);
    }
  }
}

TEST(CacheGen, DamagedStatsAreCorrupt) {
  const auto bytes = Encode(MakeCache(kShape, 12), Options("medium")).value();
  // Layer 0 of K: u32 length, then channel 0's {min, scale, step}.
  const auto set = [&](size_t offset, uint16_t v) {
    return Rewrite(bytes, [&](KvcHeader&, auto& secs) {
      secs[0].bytes[4 + offset] = static_cast<uint8_t>(v);
      secs[0].bytes[5 + offset] = static_cast<uint8_t>(v >> 8);
    });
  };
  ExpectCorrupt(set(0, 0x7c00), "inf min");
  ExpectCorrupt(set(2, 0x7e00), "NaN scale");
  ExpectCorrupt(set(2, 0x8000), "negative zero scale");
  ExpectCorrupt(set(4, 0xbc00), "negative step");
  ExpectCorrupt(Rewrite(bytes, [](KvcHeader&, auto& secs) { secs[0].bytes[4 + 6 * 32] = 7; }), "unknown mode");
  for (uint8_t other : {0, 1, 2}) {
    auto damaged = Rewrite(bytes, [&](KvcHeader&, auto& secs) {
      if (secs[0].bytes[4 + 6 * 32] == other) other = 3;  // an unknown mode is corrupt too
      secs[0].bytes[4 + 6 * 32] = other;
    });
    ExpectCorrupt(damaged, "mode switched");
  }
}

// Keys-only caches (an MLA latent, an indexer's keys): a 'K' section alone, at every level within
// the same bounds as K of a K+V cache. MLA's is one 576-wide head (512 latent + 64 rope dims).
TEST(CacheGen, KeysOnlyEveryLevelRoundTripsWithinHalfStep) {
  const KvShape shapes[] = {
      {.n_layers = 4, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 100, .keys_only = true},
      {.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 64, .keys_only = true},
      {.n_layers = 3, .n_kv_heads = 1, .head_dim = 128, .n_tokens = 37, .keys_only = true},
  };
  for (const KvShape& shape : shapes) {
    const KvCache cache = MakeCache(shape, 20);
    for (const char* level : {"high", "medium", "low"}) {
      SCOPED_TRACE(testing::Message() << "head_dim " << shape.head_dim << " level " << level);
      auto bytes = Encode(cache, Options(level));
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      const KvcFile file = ReadKvc(*bytes).value();
      EXPECT_EQ(file.header.shape, shape);
      ASSERT_EQ(file.sections.size(), 1u);
      EXPECT_EQ(file.sections[0].tag, KvSectionTag(KvKind::kKey));
      auto out = DecodeKvc(*bytes, &kFp, {}, DecodeExpect().Shape(shape));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->shape(), shape);
      EXPECT_TRUE(out->Bytes(KvKind::kValue).empty());
      ExpectWithinHalfStep(cache, *out, *bytes, CacheGenCodec::kDefaultGroup);
      EXPECT_GT(Ratio(shape, bytes->size()), 1.0);
    }
  }
}

TEST(CacheGen, MlaShapeWithValuesRoundTrips) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 45};
  const KvCache cache = MakeCache(shape, 21, true, DType::kF32);
  for (const char* level : {"high", "low"}) {
    const auto bytes = Encode(cache, Options(level, 7)).value();
    auto out = DecodeKvc(bytes);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->shape(), shape);
    ExpectWithinHalfStep(cache, *out, bytes, 7);
  }
}

// A keys-only section is the K section of the same keys with V: K's bins follow the layer count and
// level alone, and the params blob is the same (it records V's bands whether or not V is there).
TEST(CacheGen, KeysOnlySectionIsTheFullFilesK) {
  const KvCache full = MakeCache(kShape, 22);
  KvShape keys_shape = kShape;
  keys_shape.keys_only = true;
  KvCache keys = KvCache::Create(keys_shape, DType::kF16).value();
  std::ranges::copy(full.Bytes(KvKind::kKey), keys.Bytes(KvKind::kKey).begin());
  for (const char* level : {"high", "medium", "low"}) {
    const auto full_bytes = Encode(full, Options(level)).value();
    const auto keys_bytes = Encode(keys, Options(level)).value();
    const KvcFile a = ReadKvc(full_bytes).value();  // spans into the bytes, kept alive above
    const KvcFile b = ReadKvc(keys_bytes).value();
    EXPECT_TRUE(std::ranges::equal(a.sections[0].bytes, b.sections[0].bytes)) << level;
    EXPECT_EQ(a.header.codec_params, b.header.codec_params) << level;
  }
}

TEST(CacheGen, KeysOnlyKindMismatchesAreCorrupt) {
  KvShape shape = kShape;
  shape.keys_only = true;
  const auto keys = Encode(MakeCache(shape, 23), Options("medium")).value();
  const auto both = Encode(MakeCache(kShape, 23), Options("medium")).value();
  ASSERT_TRUE(DecodeKvc(keys).ok());
  ExpectKindMismatchesAreCorrupt(keys, both);
  ExpectCorrupt(Rewrite(keys, [](KvcHeader& h, auto&) { h.shape.n_layers = 5; }), "keys-only layer count");
  const size_t len = ReadKvc(keys)->sections[0].bytes.size();
  for (size_t keep : {size_t{0}, size_t{4}, len / 2}) {
    ExpectCorrupt(Rewrite(keys, [&](KvcHeader&, auto& s) { s[0].bytes.resize(keep); }), "keys-only truncated");
  }
}

}  // namespace
}  // namespace kvc
