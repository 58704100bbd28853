#include <gtest/gtest.h>

#include <numeric>

#include "quality/evaluator.h"

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

// A model without a BOS (bos -1, as LlamaModel::bos_token() says it) gets none: a -1 prepended
// would be a token id outside every vocabulary.
TEST(MakeDocuments, WithoutBosWindowsAreTheStreamAlone) {
  std::vector<int32_t> stream(100);
  std::iota(stream.begin(), stream.end(), 10);
  auto docs = MakeDocuments(stream, -1, 3, 11);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  ASSERT_EQ(docs->size(), 3u);
  EXPECT_EQ((*docs)[0], std::vector<int32_t>(stream.begin(), stream.begin() + 11));
  EXPECT_EQ((*docs)[1][0], 21);  // consecutive, no token lost to a BOS slot
  EXPECT_EQ((*docs)[2][10], 42);
  auto too_short = MakeDocuments(std::vector<int32_t>(50), -1, 8, 11);
  ASSERT_FALSE(too_short.ok());
  EXPECT_NE(too_short.status().message().find("enough for 4 documents"), std::string::npos)
      << too_short.status().message();
}

TEST(DocumentsFromTokenLines, WithoutBosLinesAreUsedAsGiven) {
  const std::vector<std::vector<int32_t>> lines = {{5, 6, 7, 8}, {9}, {1, 2, 3}, {7, 7, 7, 7, 7}};
  auto docs = DocumentsFromTokenLines(lines, -1, 3, 3);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  EXPECT_EQ(*docs, (std::vector<std::vector<int32_t>>{{5, 6, 7}, {1, 2, 3}, {7, 7, 7}}));
  auto too_few = DocumentsFromTokenLines(lines, -1, 4, 4);
  ASSERT_FALSE(too_few.ok());
  const std::string message = too_few.status().message();
  EXPECT_NE(message.find("2 documents of at least 4 tokens (ctx + cont + 1)"), std::string::npos) << message;
  EXPECT_EQ(message.find("BOS"), std::string::npos) << message;
}

}  // namespace
}  // namespace kvc
