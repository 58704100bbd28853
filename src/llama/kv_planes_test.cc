#include "llama/kv_planes.h"

#include <gtest/gtest.h>

#include <random>

#include "llama/llama_state.h"

namespace kvc {
namespace {

StateTensor Rows(int32_t type, uint64_t row_bytes, uint32_t n_cells, std::mt19937& rng) {
  StateTensor t{
      .ggml_type = type, .elem_bytes = 0, .row_bytes = row_bytes, .rows = std::vector<uint8_t>(row_bytes * n_cells)};
  // Small fp16 values (the high byte kept low) so a plane's rows are finite numbers.
  for (size_t i = 0; i < t.rows.size(); ++i) t.rows[i] = static_cast<uint8_t>(i % 2 == 1 ? rng() % 0x3c : rng());
  return t;
}

// A section of layers whose K rows are `k_row_bytes[l]` wide, with V of the same width unless
// `keys_only`.
AttentionSection Section(int32_t pos_begin, uint32_t n_cells, std::vector<uint64_t> k_row_bytes, bool keys_only,
                         uint32_t seed, int32_t type = kGgmlTypeF16) {
  std::mt19937 rng(seed);
  AttentionSection a;
  a.pos_begin = pos_begin;
  a.n_cells = n_cells;
  a.v_trans = true;
  for (uint64_t row : k_row_bytes) {
    a.k.push_back(Rows(type, row, n_cells, rng));
    if (!keys_only) a.v.push_back(Rows(type, row, n_cells, rng));
  }
  return a;
}

constexpr PlaneHeads kHeads{.n_kv_heads = 2, .head_dim = 64};

TEST(KvPlanes, EachCacheAndEachRunOfLayersIsAPlaneOfItsOwnShape) {
  SeqState state;
  // MLA: K alone, a 576-value latent per token.
  state.sections.push_back(Section(0, 10, {1152, 1152}, true, 1));
  // The model's own heads, then a layer with another head count, then the model's again.
  state.sections.push_back(Section(0, 10, {256, 256, 384, 256}, false, 2));
  // A sliding window: only the last cells.
  state.sections.push_back(Section(4, 6, {256}, false, 3));
  state.sections.push_back(RecurrentSection{});
  auto planes = SplitPlanes(state, kHeads);
  ASSERT_TRUE(planes.ok()) << planes.status().ToString();
  ASSERT_EQ(planes->size(), 5u);
  const struct {
    uint32_t section, layer_begin, n_layers, heads, dim;
    bool keys_only, model_heads;
    int32_t pos_begin;
    uint32_t tokens;
  } want[] = {{0, 0, 2, 1, 576, true, false, 0, 10},
              {1, 0, 2, 2, 64, false, true, 0, 10},
              {1, 2, 1, 3, 64, false, false, 0, 10},
              {1, 3, 1, 2, 64, false, true, 0, 10},
              {2, 0, 1, 2, 64, false, true, 4, 6}};
  for (size_t i = 0; i < planes->size(); ++i) {
    SCOPED_TRACE(i);
    const KvPlane& p = (*planes)[i];
    EXPECT_EQ(p.section, want[i].section);
    EXPECT_EQ(p.layer_begin, want[i].layer_begin);
    EXPECT_EQ(p.kv.shape(), (KvShape{want[i].n_layers, want[i].heads, want[i].dim, want[i].tokens, want[i].keys_only}));
    EXPECT_EQ(p.model_heads, want[i].model_heads);
    EXPECT_EQ(p.kv.pos_begin(), want[i].pos_begin);
    EXPECT_EQ(p.kv.dtype(), DType::kF16);
  }
  // The plane holds the section's rows as they were.
  const auto& k = std::get<AttentionSection>(state.sections[1]).k[3].rows;
  const auto got = (*planes)[3].kv.RowBytes(KvKind::kKey, 0, 0, 10);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), k.begin(), k.end()));
}

TEST(KvPlanes, MergingThePlanesBackWritesTheirRowsWhereTheyCameFrom) {
  SeqState state;
  state.sections.push_back(Section(0, 5, {1152}, true, 4));
  state.sections.push_back(Section(0, 5, {256, 256}, false, 5));
  auto planes = SplitPlanes(state, kHeads).value();
  SeqState merged = state;
  ASSERT_TRUE(MergePlanes(planes, &merged).ok());
  EXPECT_EQ(merged, state);  // unchanged planes: the same state, byte for byte

  // Changed values land in their layer and kind only.
  std::vector<float> ones(planes[1].kv.shape().layer_elems(), 1.0f);
  planes[1].kv.WriteRowsF32(KvKind::kValue, 1, 0, 5, ones.data());
  ASSERT_TRUE(MergePlanes(planes, &merged).ok());
  const auto& a = std::get<AttentionSection>(merged.sections[1]);
  const auto& before = std::get<AttentionSection>(state.sections[1]);
  EXPECT_EQ(a.k, before.k);
  EXPECT_EQ(a.v[0], before.v[0]);
  ASSERT_EQ(a.v[1].rows.size(), 5u * 256);
  for (size_t i = 0; i < a.v[1].rows.size(); i += 2) {
    EXPECT_EQ(a.v[1].rows[i], 0x00);  // fp16 1.0 = 0x3c00, little-endian
    EXPECT_EQ(a.v[1].rows[i + 1], 0x3c);
  }
}

TEST(KvPlanes, AnF32PlaneMergesIntoAnF16SectionConverted) {
  SeqState state;
  state.sections.push_back(Section(0, 3, {256}, false, 6));
  auto planes = SplitPlanes(state, kHeads).value();
  ASSERT_EQ(planes.size(), 1u);
  planes[0].kv = planes[0].kv.ConvertTo(DType::kF32).value();
  SeqState merged = state;
  ASSERT_TRUE(MergePlanes(planes, &merged).ok());
  EXPECT_EQ(merged, state);  // fp16 -> f32 -> fp16 is exact
}

TEST(KvPlanes, CachesOfOtherTypesAndEmptyCachesAreKeptAsWritten) {
  SeqState state;
  state.sections.push_back(Section(0, 4, {68}, false, 7, /*q8_0*/ 8));
  state.sections.push_back(Section(0, 0, {256}, false, 8));
  AttentionSection no_layers;
  no_layers.n_cells = 4;
  state.sections.push_back(no_layers);
  auto planes = SplitPlanes(state, kHeads);
  ASSERT_TRUE(planes.ok()) << planes.status().ToString();
  EXPECT_TRUE(planes->empty());
}

TEST(KvPlanes, APlaneThatDoesNotFitItsSectionIsRefused) {
  SeqState state;
  state.sections.push_back(Section(0, 4, {256, 256}, false, 9));
  state.sections.push_back(RecurrentSection{});
  const auto planes = SplitPlanes(state, kHeads).value();
  auto check = [&](auto&& change) {
    std::vector<KvPlane> bad = planes;
    change(bad[0]);
    SeqState target = state;
    EXPECT_EQ(MergePlanes(bad, &target).code(), StatusCode::kInvalidArgument);
  };
  check([](KvPlane& p) { p.section = 1; });  // a recurrent section
  check([](KvPlane& p) { p.section = 7; });  // no such section
  check([](KvPlane& p) { p.layer_begin = 1; });
  check([](KvPlane& p) { p.kv = KvCache::Create({2, 2, 64, 3}, DType::kF16).value(); });
  check([](KvPlane& p) { p.kv = KvCache::Create({2, 2, 64, 4, true}, DType::kF16).value(); });
  check([](KvPlane& p) { p.kv = KvCache::Create({2, 1, 64, 4}, DType::kF16).value(); });
  check([](KvPlane& p) { p.kv.set_pos_begin(1); });
}

TEST(KvPlanes, RowsThatDoNotHoldTheCellsAreRefused) {
  SeqState state;
  state.sections.push_back(Section(0, 4, {256}, false, 10));
  std::get<AttentionSection>(state.sections[0]).v[0].rows.pop_back();
  EXPECT_EQ(SplitPlanes(state, kHeads).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvPlanes, PlaneZeroKeepsTheModelsFingerprintTheOthersEachTheirOwn) {
  ModelFingerprint model{};
  model[0] = 7;
  EXPECT_EQ(PlaneFingerprint(model, 0), model);
  EXPECT_NE(PlaneFingerprint(model, 1), model);
  EXPECT_NE(PlaneFingerprint(model, 1), PlaneFingerprint(model, 2));
  EXPECT_EQ(PlaneFingerprint(model, 2), PlaneFingerprint(model, 2));
  ModelFingerprint other = model;
  other[1] = 1;
  EXPECT_NE(PlaneFingerprint(other, 1), PlaneFingerprint(model, 1));
}

}  // namespace
}  // namespace kvc
