#include "quality/token_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kvc {
namespace {

using Docs = std::vector<std::vector<int32_t>>;

TEST(TokenFile, OneDocumentPerLine) {
  auto docs = ParseTokenDocuments("1 5 7\n\n  2\t3 \r\n4", 8);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  EXPECT_EQ(*docs, (Docs{{1, 5, 7}, {2, 3}, {4}}));
  docs = ParseTokenDocuments("0 4294967295\n", 4294967295u);
  ASSERT_FALSE(docs.ok());
}

TEST(TokenFile, HostileInputNamesTheLineAndColumn) {
  struct Case {
    const char* text;
    uint32_t n_vocab;
    const char* needle;
  } cases[] = {
      {"1 2\n3 x\n", 10, "line 2, column 3: byte 0x78 is not a digit, space or tab"},
      {"1 2 -3", 10, "line 1, column 5: byte 0x2d"},
      {"12345678901", 10, "line 1, column 11: number too long"},
      {"1 2\n9 10", 10, "line 2, column 3: token id 10 is not below the vocabulary size 10"},
      {"4294967296", 4294967295u, "token id 4294967296 is not below"},
      {"", 10, "no documents"},
      {"\n \n\t\n", 10, "no documents"},
      {"1,2", 10, "byte 0x2c"},
      {"1\xc3\xa9", 10, "byte 0xc3"},
  };
  for (const Case& c : cases) {
    auto docs = ParseTokenDocuments(c.text, c.n_vocab);
    ASSERT_FALSE(docs.ok()) << c.text;
    EXPECT_EQ(docs.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(docs.status().message().find(c.needle), std::string::npos) << docs.status().message();
  }
}

TEST(TokenFile, ReadsFilesAndRefusesWhatIsNotOne) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvc_token_file_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "ok.txt") << "1 2 3\n4 5\n";
  auto docs = ReadTokenFile((dir / "ok.txt").string(), 100);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  EXPECT_EQ(docs->size(), 2u);
  std::ofstream(dir / "bad.txt") << "1 2 3\n4 500\n";
  docs = ReadTokenFile((dir / "bad.txt").string(), 100);
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("bad.txt: line 2, column 3: token id 500"), std::string::npos)
      << docs.status().message();
  EXPECT_EQ(ReadTokenFile(dir.string(), 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile((dir / "missing.txt").string(), 100).status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvc
