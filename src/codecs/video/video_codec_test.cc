#include "codecs/video/video_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>

#include "base/half.h"
#include "base/thread_pool.h"
#include "codecs/test_kv.h"
#include "codecs/video/video_layout.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kFp{7, 8, 9};

EncodeOptions Options(std::string level, std::map<std::string, std::string> params = {}) {
  return EncodeOptions{std::move(level), std::move(params)};
}

Result<std::vector<uint8_t>> Encode(const KvCache& cache, const EncodeOptions& options) {
  return EncodeKvc(*FindCodec("video"), cache.View(), options, kFp, 0);
}

// What the decoder must return exactly: the input quantised and dequantised by the codec's
// quantiser, independently of layout, ordering and video coder.
std::vector<float> Quantised(const KvCache& cache, KvKind kind, uint32_t layer, uint32_t bits, uint32_t group) {
  const KvShape s = cache.shape();
  std::vector<float> x(s.layer_elems());
  cache.View().ReadLayerF32(kind, layer, x.data());
  std::vector<GroupScale> scales;
  std::vector<uint8_t> codes(x.size());
  QuantiseLayer(x.data(), s.n_tokens, static_cast<uint32_t>(s.row_elems()), group, bits, &scales, codes.data());
  DequantiseLayer(codes.data(), s.n_tokens, static_cast<uint32_t>(s.row_elems()), group, scales, x.data());
  // The cache stores fp16: round as the decoder's cache does.
  for (float& v : x) v = Fp16ToFp32(Fp32ToFp16(v));
  return x;
}

void ExpectExact(const KvCache& input, const KvCache& decoded, uint32_t bits, uint32_t group, const std::string& what) {
  const KvShape s = input.shape();
  ASSERT_EQ(decoded.shape(), s) << what;
  std::vector<float> got(s.layer_elems());
  for (KvKind kind : s.kinds()) {
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      decoded.View().ReadLayerF32(kind, l, got.data());
      ASSERT_EQ(got, Quantised(input, kind, l, bits, group)) << what << " " << KvKindName(kind) << " layer " << l;
    }
  }
}

// Bit-exact over every coder, layout, ordering and plane setting, at shapes whose pictures are
// tiny or odd (1 token, 1 head, head_dim 6, 5 layers: a partial plane group).
TEST(VideoCodec, BitExactForEveryCoderLayoutAndShape) {
  const KvShape shapes[] = {{5, 3, 6, 9}, {1, 1, 4, 1}, {4, 2, 16, 33}};
  for (const KvShape& shape : shapes) {
    const KvCache cache = MakeCache(shape, shape.n_tokens);
    for (const char* coder : {"x265", "x264", "ffv1"}) {
      for (const char* layout : {"frames", "axis"}) {
        for (const char* planes : {"0", "1"}) {
          for (const char* order : {"0", "1"}) {
            const char* token_order = order;  // both orderings on, or both off
            const std::string what = std::string(coder) + " " + layout + " planes=" + planes + " order=" + order +
                                     " shape " + std::to_string(shape.n_layers) + "x" +
                                     std::to_string(shape.n_kv_heads) + "x" + std::to_string(shape.head_dim) + "x" +
                                     std::to_string(shape.n_tokens);
            auto bytes = Encode(cache, Options("8", {{"coder", coder},
                                                     {"layout", layout},
                                                     {"planes", planes},
                                                     {"order", order},
                                                     {"token_order", token_order},
                                                     {"preset", "ultrafast"}}));
            ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status().ToString();
            auto decoded = DecodeKvc(*bytes, &kFp);
            ASSERT_TRUE(decoded.ok()) << what << ": " << decoded.status().ToString();
            ExpectExact(cache, *decoded, 8, VideoCodec::kDefaultGroup, what);
          }
        }
      }
    }
  }
}

TEST(VideoCodec, LevelsAndGroupsRoundTripAndShrink) {
  const KvShape shape{.n_layers = 4, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 64};
  const KvCache cache = MakeCache(shape, 5);
  size_t previous = SIZE_MAX;
  for (const auto& [level, bits] : {std::pair{"8", 8u}, {"6", 6u}, {"4", 4u}}) {
    for (uint32_t group : {1u, 4u, 32u}) {
      auto bytes = Encode(cache, Options(level, {{"group", std::to_string(group)}}));
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      auto decoded = DecodeKvc(*bytes, &kFp);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_EQ(decoded->View().shape(), shape);
      ExpectExact(cache, *decoded, bits, group, std::string("level ") + level);
      if (group == 1) {
        EXPECT_LT(bytes->size(), previous) << "level " << level;
        previous = bytes->size();
      }
    }
  }
}

TEST(VideoCodec, EncodingTwiceGivesTheSameBytes) {
  const KvCache cache = MakeCache({3, 2, 8, 40}, 2);
  for (const char* coder : {"x265", "x264", "ffv1"}) {
    auto a = Encode(cache, Options("6", {{"coder", coder}}));
    auto b = Encode(cache, Options("6", {{"coder", coder}}));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << coder;
  }
}

// A pool in the CodecContext lends libavcodec its threads: the same values as without one, for
// every coder and level.
TEST(VideoCodec, DecodesAlikeWithAPool) {
  const KvShape shape{.n_layers = 5, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 48};
  const KvCache cache = MakeCache(shape, 8);
  ThreadPool pool(3);
  const CodecContext with_pool{nullptr, nullptr, &pool};
  for (const char* coder : {"x265", "x264", "ffv1"}) {
    for (const auto& [level, bits] : {std::pair{"8", 8u}, {"6", 6u}, {"4", 4u}}) {
      for (const char* layout : {"axis", "frames"}) {
        const std::string what = std::string(coder) + " level " + level + " " + layout;
        auto bytes = Encode(cache, Options(level, {{"coder", coder}, {"layout", layout}, {"preset", "ultrafast"}}));
        ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status().ToString();
        auto decoded = DecodeKvc(*bytes, &kFp, with_pool);
        ASSERT_TRUE(decoded.ok()) << what << ": " << decoded.status().ToString();
        ExpectExact(cache, *decoded, bits, VideoCodec::kDefaultGroup, what);
      }
    }
  }
}

// FFV1's encoder settings are the encoder's alone (each stream records its own): every one
// round-trips at every level, and `auto` is Golomb-Rice at 8 and 6 bits, the range coder at 4.
TEST(VideoCodec, Ffv1SettingsRoundTrip) {
  const KvShape shape{.n_layers = 3, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 40};
  const KvCache cache = MakeCache(shape, 9);
  for (const auto& [level, bits] : {std::pair{"8", 8u}, {"6", 6u}, {"4", 4u}}) {
    for (const char* coder : {"range", "range_def", "golomb"}) {
      for (const char* slices : {"0", "1", "4", "9"}) {
        for (const char* context : {"0", "1"}) {
          const std::string what =
              std::string("level ") + level + " " + coder + " slices " + slices + " context " + context;
          auto bytes =
              Encode(cache, Options(level, {{"ffv1_coder", coder}, {"slices", slices}, {"ffv1_context", context}}));
          ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status().ToString();
          auto decoded = DecodeKvc(*bytes, &kFp);
          ASSERT_TRUE(decoded.ok()) << what << ": " << decoded.status().ToString();
          ExpectExact(cache, *decoded, bits, VideoCodec::kDefaultGroup, what);
        }
      }
    }
    const char* by_default = bits == 4 ? "range" : "golomb";
    EXPECT_EQ(Encode(cache, Options(level)).value(),
              Encode(cache, Options(level, {{"ffv1_coder", by_default}})).value())
        << "level " << level;
    EXPECT_EQ(Encode(cache, Options(level)).value(), Encode(cache, Options(level, {{"ffv1_coder", "auto"}})).value())
        << "level " << level;
  }
}

// The centring transform and channel groups round-trip with every other option.
TEST(VideoCodec, CentringRoundTrips) {
  const KvShape shape{.n_layers = 3, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 20};
  const KvCache cache = MakeCache(shape, 11);
  for (const auto& [level, bits] : {std::pair{"8", 8u}, {"4", 4u}}) {
    auto bytes = Encode(cache, Options(level, {{"center", "1"}, {"group", "3"}, {"planes", "1"}}));
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto decoded = DecodeKvc(*bytes, &kFp);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ExpectExact(cache, *decoded, bits, 3, std::string("centred level ") + level);
  }
}

// nvdec=1: x265 pictures of three layers, padded to NVDEC's smallest side, decoding (on any
// backend) to exactly what the same codes give without it; it refuses the settings NVDEC cannot
// decode instead of silently changing them.
TEST(VideoCodec, StreamsForNvdecRoundTripAndRefuseWhatNvdecCannotDecode) {
  const KvShape shape{.n_layers = 4, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 64};  // 64x32 pictures
  const KvCache cache = MakeCache(shape, 7);
  for (const char* layout : {"axis", "frames"}) {
    auto gpu = Encode(cache, Options("8", {{"nvdec", "1"}, {"layout", layout}, {"preset", "ultrafast"}}));
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    auto cpu =
        Encode(cache, Options("8", {{"coder", "x265"}, {"planes", "1"}, {"layout", layout}, {"preset", "ultrafast"}}));
    ASSERT_TRUE(cpu.ok());
    EXPECT_GT(gpu->size(), cpu->size()) << layout << ": the padding to 144 pixels costs bytes";
    auto decoded = DecodeKvc(*gpu, &kFp);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ExpectExact(cache, *decoded, 8, VideoCodec::kDefaultGroup, std::string("nvdec=1 ") + layout);
  }
  EXPECT_TRUE(Encode(cache, Options("8", {{"nvdec", "1"}, {"coder", "x265"}, {"planes", "1"}})).ok());
  EXPECT_EQ(Encode(cache, Options("8", {{"nvdec", "1"}, {"coder", "ffv1"}})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"nvdec", "1"}, {"planes", "0"}})).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(VideoCodec, ZeroTokensRoundTrip) {
  const KvCache cache = KvCache::Create({2, 1, 4, 0}, DType::kF16).value();
  auto bytes = Encode(cache, Options(""));
  ASSERT_TRUE(bytes.ok());
  auto decoded = DecodeKvc(*bytes, &kFp);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->shape().n_tokens, 0u);
}

TEST(VideoCodec, RejectsBadOptionsAndInput) {
  const KvCache cache = MakeCache({2, 1, 4, 5}, 1);
  EXPECT_EQ(Encode(cache, Options("7")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"coder", "vp9"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"layout", "spiral"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"order", "2"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"group", "0"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"colour", "1"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"ffv1_coder", "huffman"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"ffv1_context", "2"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"slices", "65"}})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Encode(cache, Options("8", {{"slices", "2"}})).status().code(), StatusCode::kInvalidArgument);
  KvCache bad = MakeCache({2, 1, 4, 5}, 1, true, DType::kF32);
  std::vector<float> row(4, std::nanf(""));
  bad.WriteRowsF32(KvKind::kValue, 1, 2, 1, row.data());
  EXPECT_EQ(Encode(bad, Options("8")).status().code(), StatusCode::kInvalidArgument);
}

// Damage that passes the container's CRCs (a file rewritten with consistent checksums) must
// still be a clear error.
TEST(VideoCodec, DamagedPayloadsAreErrors) {
  const KvShape shape{3, 2, 8, 12};
  const KvCache cache = MakeCache(shape, 4);
  const auto good = Encode(cache, Options("6")).value();
  auto expect_corrupt = [&](const char* what, const std::function<void(KvcHeader&, std::vector<KvcSection>&)>& edit) {
    const auto bytes = Rewrite(good, edit);
    const auto decoded = DecodeKvc(bytes, &kFp);
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorrupt) << what << ": " << decoded.status().ToString();
  };
  expect_corrupt("level disagrees", [](KvcHeader& h, auto&) { h.level = "8"; });
  expect_corrupt("unknown coder", [](KvcHeader& h, auto&) { h.codec_params[2] = 9; });
  expect_corrupt("params short", [](KvcHeader& h, auto&) { h.codec_params.pop_back(); });
  expect_corrupt("one section", [](KvcHeader&, auto& s) { s.pop_back(); });
  expect_corrupt("section truncated", [](KvcHeader&, auto& s) { s[0].bytes.resize(s[0].bytes.size() / 2); });
  expect_corrupt("trailing byte", [](KvcHeader&, auto& s) { s[1].bytes.push_back(0); });
  // Per layer (docs/format.md): one scale group of 4 bytes (16 channels, group 64), 16
  // channel-order bytes, 12 token-order bytes.
  constexpr size_t kChannelOrder = 4;
  constexpr size_t kTokenOrder = kChannelOrder + 16;
  constexpr size_t kFirstStream = 3 * (kTokenOrder + 12);
  expect_corrupt("negative scale", [](KvcHeader&, auto& s) { s[0].bytes[3] |= 0x80; });
  expect_corrupt("channel order not a permutation",
                 [](KvcHeader&, auto& s) { s[0].bytes[kChannelOrder + 1] = s[0].bytes[kChannelOrder]; });
  expect_corrupt("token order not a permutation",
                 [](KvcHeader&, auto& s) { s[1].bytes[kTokenOrder + 1] = s[1].bytes[kTokenOrder]; });
  // A stream claiming another shape: the width field of K's stream header.
  expect_corrupt("stream shape", [](KvcHeader&, auto& s) { s[0].bytes[kFirstStream + 4 + 3] ^= 1; });
  // 6-bit codes decoded from an 8-bit picture: a forged level below the stored one.
  const auto eight = Encode(cache, Options("8")).value();
  const auto forged = Rewrite(eight, [](KvcHeader& h, auto&) {
    h.level = "4";
    h.codec_params[1] = 4;
  });
  EXPECT_EQ(DecodeKvc(forged, &kFp).status().code(), StatusCode::kCorrupt);
}

// Keys-only caches (MLA's latent, an indexer's keys): the MLA shape is one 576-wide "head" per
// token (512 latent + 64 rope dims), whose frame tile (32x18) is neither square nor a power of two
// high; one and two 128-wide heads are the indexer caches.
const KvShape kKeysOnlyShapes[] = {
    {.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 37, .keys_only = true},
    {.n_layers = 3, .n_kv_heads = 1, .head_dim = 128, .n_tokens = 19, .keys_only = true},
    {.n_layers = 4, .n_kv_heads = 2, .head_dim = 128, .n_tokens = 23, .keys_only = true},
    {.n_layers = 5, .n_kv_heads = 3, .head_dim = 6, .n_tokens = 9, .keys_only = true},
};

std::string ShapeName(const KvShape& s) {
  return std::to_string(s.n_layers) + "x" + std::to_string(s.n_kv_heads) + "x" + std::to_string(s.head_dim) + "x" +
         std::to_string(s.n_tokens) + (s.keys_only ? " (K)" : "");
}

// Every level and layout of a keys-only cache: one 'K' section, a keys-only cache of the header's
// shape back, with K exactly the quantiser's values.
TEST(VideoCodec, KeysOnlyRoundTripsAtEveryLevelWithKAlone) {
  for (const KvShape& shape : kKeysOnlyShapes) {
    const KvCache cache = MakeCache(shape, 21);
    ASSERT_TRUE(cache.Bytes(KvKind::kValue).empty());
    for (const auto& [level, bits] : {std::pair{"8", 8u}, {"6", 6u}, {"4", 4u}}) {
      for (const char* layout : {"axis", "frames"}) {
        for (const char* planes : {"0", "1"}) {
          const std::string what = ShapeName(shape) + " level " + level + " " + layout + " planes=" + planes;
          auto bytes = Encode(cache, Options(level, {{"layout", layout}, {"planes", planes}}));
          ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status().ToString();
          const KvcFile file = ReadKvc(*bytes).value();
          EXPECT_EQ(file.header.shape, shape) << what;
          ASSERT_EQ(file.sections.size(), 1u) << what;
          EXPECT_EQ(file.sections[0].tag, KvSectionTag(KvKind::kKey)) << what;
          // Past a few thousand values, K alone at 8 bits or fewer is under K's fp16 bytes (a tiny
          // cache is all stream headers).
          if (shape.elems() >= 4096) {
            EXPECT_LT(bytes->size(), shape.fp16_bytes()) << what;
          }

          auto decoded = DecodeKvc(*bytes, &kFp);
          ASSERT_TRUE(decoded.ok()) << what << ": " << decoded.status().ToString();
          EXPECT_EQ(decoded->shape(), file.header.shape) << what;
          EXPECT_TRUE(decoded->shape().keys_only) << what;
          EXPECT_TRUE(decoded->Bytes(KvKind::kValue).empty()) << what;
          ExpectExact(cache, *decoded, bits, VideoCodec::kDefaultGroup, what);
        }
      }
    }
  }
}

// The MLA geometry through every video coder (x264 and x265 pad pictures to their blocks, a
// 32x18 tile or a 576-high axis picture included), keys-only and with V present too.
TEST(VideoCodec, MlaShapeRoundTripsWithEveryCoder) {
  for (bool keys_only : {true, false}) {
    const KvShape shape{.n_layers = 4, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 29, .keys_only = keys_only};
    const KvCache cache = MakeCache(shape, 22);
    for (const char* coder : {"x265", "x264", "ffv1"}) {
      for (const char* layout : {"axis", "frames"}) {
        const std::string what = ShapeName(shape) + " " + coder + " " + layout;
        auto bytes = Encode(cache, Options("8", {{"coder", coder}, {"layout", layout}, {"preset", "ultrafast"}}));
        ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status().ToString();
        EXPECT_EQ(ReadKvc(*bytes).value().sections.size(), shape.n_kinds()) << what;
        auto decoded = DecodeKvc(*bytes, &kFp);
        ASSERT_TRUE(decoded.ok()) << what << ": " << decoded.status().ToString();
        ExpectExact(cache, *decoded, 8, VideoCodec::kDefaultGroup, what);
      }
    }
  }
}

// A keys-only file's section is the K section of the same keys with V: V never shapes how K is
// coded, so nothing of a keys-only cache's absent V can leak into its bytes.
TEST(VideoCodec, KeysOnlySectionIsTheFullFilesK) {
  const KvShape full_shape{.n_layers = 3, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 24};
  const KvCache full = MakeCache(full_shape, 23);
  KvShape keys_shape = full_shape;
  keys_shape.keys_only = true;
  KvCache keys = KvCache::Create(keys_shape, DType::kF16).value();
  std::ranges::copy(full.Bytes(KvKind::kKey), keys.Bytes(KvKind::kKey).begin());
  const auto full_bytes = Encode(full, Options("6")).value();
  const auto keys_bytes = Encode(keys, Options("6")).value();
  EXPECT_TRUE(std::ranges::equal(ReadKvc(full_bytes)->sections[0].bytes, ReadKvc(keys_bytes)->sections[0].bytes));
}

// A chunk of a longer keys-only cache decoded in place, and a keys-only cache of no tokens.
TEST(VideoCodec, KeysOnlyDecodesIntoASliceAndWithZeroTokens) {
  const KvShape shape = kKeysOnlyShapes[2];
  const KvCache whole = MakeCache(shape, 24);
  const KvCache chunk = whole.View(5, 10).value().Copy().value();
  const auto bytes = Encode(chunk, Options("8")).value();
  KvCache restored = MakeCache(shape, 25);
  const Status s = DecodeKvcInto(bytes, restored.Slice(5, 10).value(), &kFp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectExact(chunk, restored.View(5, 10).value().Copy().value(), 8, VideoCodec::kDefaultGroup, "slice");

  const KvCache empty =
      KvCache::Create({.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 0, .keys_only = true}, DType::kF16)
          .value();
  auto empty_bytes = Encode(empty, Options(""));
  ASSERT_TRUE(empty_bytes.ok()) << empty_bytes.status().ToString();
  EXPECT_EQ(ReadKvc(*empty_bytes).value().sections.size(), 1u);
  auto decoded = DecodeKvc(*empty_bytes, &kFp);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->shape(), empty.shape());
}

// Files whose kinds disagree with their header, rewritten with valid CRCs: the codec meets them
// before any picture or V byte is touched, and each is kCorrupt, never a crash.
TEST(VideoCodec, KeysOnlyKindMismatchesAreCorrupt) {
  const KvShape shape = kKeysOnlyShapes[2];
  const auto keys = Encode(MakeCache(shape, 26), Options("8")).value();
  KvShape both_shape = shape;
  both_shape.keys_only = false;
  const auto both = Encode(MakeCache(both_shape, 26), Options("8")).value();
  const auto empty_keys = Encode(KvCache::Create({2, 1, 128, 0, true}, DType::kF16).value(), Options("8")).value();
  ExpectEditIsCorrupt(empty_keys, "keys-only zero tokens with a V section", [](KvcHeader&, std::vector<KvcSection>& s) {
    s.push_back({KvSectionTag(KvKind::kValue), {}});
  });
  ExpectKindMismatchesAreCorrupt(keys, both);
}

// Called directly (not through DecodeKvcInto, which matches them first), the codec refuses an
// output whose kinds are not the header's rather than writing V into a keys-only cache.
TEST(VideoCodec, DecodeIntoRefusesAnOutputOfOtherKinds) {
  const KvShape shape = kKeysOnlyShapes[1];
  const auto keys = Encode(MakeCache(shape, 27), Options("8")).value();
  KvShape both_shape = shape;
  both_shape.keys_only = false;
  const auto both = Encode(MakeCache(both_shape, 27), Options("8")).value();
  const Codec& codec = *FindCodec("video");
  KvCache keys_out = KvCache::Create(shape, DType::kF16).value();
  KvCache both_out = KvCache::Create(both_shape, DType::kF16).value();
  EXPECT_EQ(codec.DecodeInto(ReadKvc(both).value(), {}, keys_out.Slice()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.DecodeInto(ReadKvc(keys).value(), {}, both_out.Slice()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(codec.DecodeInto(ReadKvc(keys).value(), {}, keys_out.Slice()).ok());
}

}  // namespace
}  // namespace kvc
