#include "tensor/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

KvCache Counting(DType dtype, uint32_t tokens) {
  auto cache = KvCache::Create({2, 2, 4, tokens}, dtype, 5).value();
  std::vector<float> row(cache.shape().layer_elems());
  for (KvKind kind : kKvKinds)
    for (uint32_t l = 0; l < 2; ++l) {
      std::iota(row.begin(), row.end(), static_cast<float>(1000 * l + (kind == KvKind::kValue ? 500 : 0)));
      cache.WriteRowsF32(kind, l, 0, tokens, row.data());
    }
  return cache;
}

TEST(KvCache, ShapeArithmetic) {
  KvShape s{6, 2, 64, 1024};
  EXPECT_EQ(s.row_elems(), 128u);
  EXPECT_EQ(s.elems(), 6u * 128 * 1024);
  EXPECT_EQ(s.fp16_bytes(), 2u * 2 * 6 * 128 * 1024);
}

TEST(KvCache, AKeysOnlyCacheHoldsKAlone) {
  const KvShape s{.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 5, .keys_only = true};
  EXPECT_EQ(s.n_kinds(), 1u);
  ASSERT_EQ(s.kinds().size(), 1u);
  EXPECT_EQ(s.kinds()[0], KvKind::kKey);
  EXPECT_EQ(s.fp16_bytes(), 2u * 576 * 5 * 2);
  KvCache cache = KvCache::Create(s, DType::kF16, 3).value();
  EXPECT_EQ(cache.Bytes(KvKind::kKey).size(), 2u * 576 * 5 * 2);
  EXPECT_TRUE(cache.Bytes(KvKind::kValue).empty());
  std::vector<float> row(576, 0.5f);
  cache.WriteRowsF32(KvKind::kKey, 1, 4, 1, row.data());
  // Copies and conversions keep it keys-only.
  const KvCache copy = cache.View(4, 1).value().Copy().value();
  EXPECT_TRUE(copy.shape().keys_only);
  EXPECT_TRUE(copy.Bytes(KvKind::kValue).empty());
  const KvCache wide = cache.ConvertTo(DType::kF32).value();
  EXPECT_TRUE(wide.Bytes(KvKind::kValue).empty());
  std::vector<float> back(576);
  wide.ReadRowsF32(KvKind::kKey, 1, 4, 1, back.data());
  EXPECT_EQ(back, row);
  // Outside bytes: V must be empty.
  const std::vector<uint8_t> k(cache.Bytes(KvKind::kKey).begin(), cache.Bytes(KvKind::kKey).end());
  EXPECT_TRUE(KvView::Over(s, DType::kF16, 0, k, {}).ok());
  EXPECT_FALSE(KvView::Over(s, DType::kF16, 0, k, k).ok());
  // The byte limit counts K alone.
  EXPECT_TRUE(ValidateShape({kMaxLayers, 4, 1024, 1024, true}, DType::kF32).ok());
  EXPECT_FALSE(ValidateShape({kMaxLayers, 4, 1024, 1024, false}, DType::kF32).ok());
}

TEST(KvCache, CreateRejectsBadShapes) {
  EXPECT_FALSE(KvCache::Create({0, 2, 4, 1}, DType::kF16).ok());
  EXPECT_FALSE(KvCache::Create({2, 0, 4, 1}, DType::kF16).ok());
  EXPECT_FALSE(KvCache::Create({2, 2, kMaxHeadDim + 1, 1}, DType::kF16).ok());
  EXPECT_FALSE(KvCache::Create({kMaxLayers, kMaxKvHeads, kMaxHeadDim, kMaxTokens}, DType::kF32).ok());
  EXPECT_TRUE(KvCache::Create({2, 2, 4, 0}, DType::kF16).ok());  // empty ranges are allowed
}

TEST(KvCache, ViewsAreTokenRanges) {
  const KvCache cache = Counting(DType::kF32, 10);
  auto view = cache.View(3, 4);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->shape().n_tokens, 4u);
  EXPECT_EQ(view->pos_begin(), 8);
  std::vector<float> rows(4 * 8);
  view->ReadLayerF32(KvKind::kValue, 1, rows.data());
  EXPECT_EQ(rows[0], 1000 + 500 + 3 * 8);  // layer 1, V, token 3, first value
  EXPECT_FALSE(cache.View(8, 3).ok());
  EXPECT_FALSE(cache.View(11, 0).ok());
}

TEST(KvCache, ACopyOfAViewAndASliceWriteBackRebuildTheCache) {
  const KvCache cache = Counting(DType::kF16, 9);
  KvCache rebuilt = KvCache::Create(cache.shape(), DType::kF16, cache.pos_begin()).value();
  for (auto [begin, n] : {std::pair{0u, 4u}, {4u, 5u}}) {
    const KvCache part = cache.View(begin, n).value().Copy().value();
    const KvSlice slice = rebuilt.Slice(begin, n).value();
    EXPECT_EQ(slice.pos_begin(), cache.pos_begin() + static_cast<int32_t>(begin));
    for (KvKind kind : kKvKinds) {
      for (uint32_t l = 0; l < cache.shape().n_layers; ++l) {
        const auto from = part.RowBytes(kind, l, 0, n);
        std::copy(from.begin(), from.end(), slice.RowBytes(kind, l, 0, n).begin());
      }
    }
  }
  EXPECT_EQ(rebuilt, cache);
  EXPECT_FALSE(rebuilt.Slice(5, 5).ok());
}

TEST(KvCache, DTypeConversion) {
  const KvCache f32 = Counting(DType::kF32, 3);
  for (DType to : {DType::kF16, DType::kBF16}) {
    auto converted = f32.ConvertTo(to);
    ASSERT_TRUE(converted.ok());
    auto back = converted->ConvertTo(DType::kF32).value();
    std::vector<float> a(f32.shape().layer_elems()), b(a.size());
    f32.ReadRowsF32(KvKind::kKey, 1, 0, 3, a.data());
    back.ReadRowsF32(KvKind::kKey, 1, 0, 3, b.data());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], std::abs(a[i]) * (to == DType::kF16 ? 1e-3 : 8e-3));
  }
  EXPECT_EQ(ParseDType("bf16").value(), DType::kBF16);
  EXPECT_FALSE(ParseDType("q8_0").ok());
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

TEST(KvCache, ZeroTokenCachesAreHandled) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    auto empty = KvCache::Create({2, 2, 4, 0}, dtype).value();
    std::vector<float> none;
    empty.ReadRowsF32(KvKind::kKey, 1, 0, 0, none.data());
    empty.WriteRowsF32(KvKind::kValue, 0, 0, 0, none.data());
    auto copy = empty.View().Copy();
    ASSERT_TRUE(copy.ok());
    EXPECT_EQ(*copy, empty);
    EXPECT_EQ(empty.Slice(0, 0).value().n_tokens(), 0u);
  }
}

TEST(KvView, OverOutsideBytesReadsAsTheCacheDoes) {
  const KvShape shape{.n_layers = 3, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 5};
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    const KvCache cache = NoiseKv(shape, dtype, 7, /*pos_begin=*/11);
    auto view = KvView::Over(shape, dtype, 11, cache.Bytes(KvKind::kKey), cache.Bytes(KvKind::kValue));
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->shape(), shape);
    EXPECT_EQ(view->dtype(), dtype);
    EXPECT_EQ(view->pos_begin(), 11);
    std::vector<float> a(shape.layer_elems()), b(shape.layer_elems());
    for (KvKind kind : kKvKinds) {
      for (uint32_t l = 0; l < shape.n_layers; ++l) {
        const auto ours = view->RowBytes(kind, l, 1, 3);
        const auto theirs = cache.RowBytes(kind, l, 1, 3);
        EXPECT_TRUE(std::equal(ours.begin(), ours.end(), theirs.begin(), theirs.end()));
        EXPECT_EQ(ours.data(), theirs.data());  // the same memory, not a copy
        view->ReadLayerF32(kind, l, a.data());
        cache.View().ReadLayerF32(kind, l, b.data());
        EXPECT_EQ(a, b);
      }
    }
    auto copy = view->Copy();
    ASSERT_TRUE(copy.ok());
    EXPECT_TRUE(*copy == cache);
  }
}

TEST(KvView, ViewsOfViewsAreTheCachesTokenRanges) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 2, .head_dim = 4, .n_tokens = 10};
  const KvCache cache = NoiseKv(shape, DType::kF16, 3, /*pos_begin=*/20);
  auto over = KvView::Over(shape, DType::kF16, 20, cache.Bytes(KvKind::kKey), cache.Bytes(KvKind::kValue));
  ASSERT_TRUE(over.ok());
  for (const KvView& whole : {cache.View(1, 8).value(), over->View(1, 8).value()}) {
    auto inner = whole.View(2, 5);
    ASSERT_TRUE(inner.ok());
    EXPECT_EQ(inner->n_tokens(), 5u);
    EXPECT_EQ(inner->pos_begin(), 23);
    for (KvKind kind : kKvKinds) {
      const auto ours = inner->RowBytes(kind, 1, 0, 5);
      const auto theirs = cache.RowBytes(kind, 1, 3, 5);
      EXPECT_EQ(ours.data(), theirs.data());
      EXPECT_EQ(ours.size(), theirs.size());
    }
    EXPECT_TRUE(whole.View(8, 0).ok());
    EXPECT_EQ(whole.View(4, 5).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(whole.View(9, 0).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(KvView, OverRefusesBytesThatDoNotMatchTheShape) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_tokens = 3};
  std::vector<uint8_t> k(shape.elems() * 2), v(shape.elems() * 2 - 2);
  EXPECT_EQ(KvView::Over(shape, DType::kF16, 0, k, v).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KvView::Over(shape, DType::kF32, 0, k, k).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KvView::Over(KvShape{}, DType::kF16, 0, {}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(KvView::Over(shape, DType::kF16, 0, k, k).ok());
}

}  // namespace
}  // namespace kvc
