#include <gtest/gtest.h>

#include <numeric>

#include "bench/evaluator.h"

namespace kvc {
namespace {

TEST(MakeDocuments, ConsecutiveWindowsEachWithBos) {
  std::vector<int32_t> stream(100);
  std::iota(stream.begin(), stream.end(), 10);
  auto docs = MakeDocuments(stream, 1, 3, 11);
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 3u);
  for (const auto& d : *docs) {
    ASSERT_EQ(d.size(), 11u);
    EXPECT_EQ(d[0], 1);
  }
  EXPECT_EQ((*docs)[0][1], 10);
  EXPECT_EQ((*docs)[1][1], 20);  // no overlap between documents
  EXPECT_EQ((*docs)[2][10], 39);
}

TEST(MakeDocuments, TooShortTextSaysHowManyFit) {
  std::vector<int32_t> stream(50);
  auto docs = MakeDocuments(stream, 1, 8, 11);
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("enough for 5 documents"), std::string::npos);
}

TEST(DocumentsFromTokenLines, EachLongEnoughLineIsOneDocumentWithBos) {
  const std::vector<std::vector<int32_t>> lines = {{5, 6, 7, 8}, {9}, {1, 2, 3, 4, 5}, {7, 7, 7, 7, 7, 7}};
  auto docs = DocumentsFromTokenLines(lines, 1, 3, 4);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  // A line already starting with BOS keeps it; others get one; short lines are skipped.
  EXPECT_EQ(*docs, (std::vector<std::vector<int32_t>>{{1, 5, 6, 7}, {1, 2, 3, 4}, {1, 7, 7, 7}}));
  auto too_few = DocumentsFromTokenLines(lines, 1, 4, 4);
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.status().message().find("3 documents of at least 4 tokens"), std::string::npos)
      << too_few.status().message();
}

}  // namespace
}  // namespace kvc
