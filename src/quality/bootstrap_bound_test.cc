#include "quality/bootstrap_bound.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvc {
namespace {

// A document of `n` positions, `agree` of them with the same argmax, each costing `nll_extra`
// more nats restored than not and `kl` nats of KL.
DocumentSums Doc(uint64_t n, uint64_t agree, double nll_extra, double kl) {
  DocumentSums d;
  for (uint64_t i = 0; i < n; ++i) {
    d.Add({.nll_base = 2.0, .nll_codec = 2.0 + nll_extra, .kl = kl, .agree = i < agree});
  }
  return d;
}

TEST(BootstrapBound, PointFiguresAreTheWholeSample) {
  const std::vector<DocumentSums> docs = {Doc(8, 8, 0.0, 0.0), Doc(8, 6, 0.02, 0.004)};
  const WindowScore w = BoundedWindowScore(8, docs, 1000, 0.95);
  EXPECT_EQ(w.tokens, 8u);
  EXPECT_EQ(w.positions, 16u);
  EXPECT_DOUBLE_EQ(w.top1_agreement, 14.0 / 16);
  EXPECT_NEAR(w.ppl_delta_pct, 100 * std::expm1(0.01), 1e-12);
  EXPECT_DOUBLE_EQ(w.kl_mean, 0.002);
}

// Alike documents leave nothing to doubt; one bad document among good ones moves the bounds to
// its side, more so at a higher confidence, and less so among more documents.
TEST(BootstrapBound, BoundsSitOnTheBadSideAndNarrowWithMoreDocuments) {
  const std::vector<DocumentSums> alike(20, Doc(8, 7, 0.01, 0.001));
  WindowScore w = BoundedWindowScore(8, alike, 1000, 0.95);
  EXPECT_DOUBLE_EQ(w.top1_agreement_bound, w.top1_agreement);
  EXPECT_NEAR(w.ppl_delta_pct_bound, w.ppl_delta_pct, 1e-9);
  EXPECT_NEAR(w.kl_mean_bound, w.kl_mean, 1e-12);

  auto mixed = [](size_t good) {
    std::vector<DocumentSums> docs(good, Doc(8, 8, 0.0, 0.0001));
    docs.push_back(Doc(8, 2, 0.5, 0.2));
    return docs;
  };
  const WindowScore few = BoundedWindowScore(8, mixed(9), 2000, 0.95);
  EXPECT_LT(few.top1_agreement_bound, few.top1_agreement);
  EXPECT_GT(few.ppl_delta_pct_bound, few.ppl_delta_pct);
  EXPECT_GT(few.kl_mean_bound, few.kl_mean);
  const WindowScore stricter = BoundedWindowScore(8, mixed(9), 2000, 0.99);
  EXPECT_LE(stricter.top1_agreement_bound, few.top1_agreement_bound);
  EXPECT_GE(stricter.kl_mean_bound, few.kl_mean_bound);
  // Ten times the documents with the same share of bad ones: the same point, a tighter bound.
  std::vector<DocumentSums> many;
  for (int i = 0; i < 10; ++i) {
    const auto m = mixed(9);
    many.insert(many.end(), m.begin(), m.end());
  }
  const WindowScore more = BoundedWindowScore(8, many, 2000, 0.95);
  EXPECT_NEAR(more.top1_agreement, few.top1_agreement, 1e-12);
  EXPECT_GT(more.top1_agreement_bound, few.top1_agreement_bound);
  EXPECT_LT(more.kl_mean_bound, few.kl_mean_bound);
}

TEST(BootstrapBound, TheSameInputGivesTheSameBounds) {
  std::vector<DocumentSums> docs;
  for (uint64_t i = 0; i < 12; ++i) docs.push_back(Doc(8, 8 - i % 3, 0.01 * static_cast<double>(i % 4), 0.001 * i));
  const WindowScore a = BoundedWindowScore(8, docs, 500, 0.95);
  const WindowScore b = BoundedWindowScore(8, docs, 500, 0.95);
  EXPECT_EQ(a.top1_agreement_bound, b.top1_agreement_bound);
  EXPECT_EQ(a.ppl_delta_pct_bound, b.ppl_delta_pct_bound);
  EXPECT_EQ(a.kl_mean_bound, b.kl_mean_bound);
}

}  // namespace
}  // namespace kvc
