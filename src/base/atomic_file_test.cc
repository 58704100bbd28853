#include "base/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kvc {
namespace {

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ReplaceFileAtomically, ReplacesAndLeavesNoTemporary) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc_atomic_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "f";
  const std::string a = "first", b = "second, longer";
  ASSERT_TRUE(
      ReplaceFileAtomically(path.string(), std::span(reinterpret_cast<const uint8_t*>(a.data()), a.size())).ok());
  EXPECT_EQ(Read(path), a);
  ASSERT_TRUE(
      ReplaceFileAtomically(path.string(), std::span(reinterpret_cast<const uint8_t*>(b.data()), b.size())).ok());
  EXPECT_EQ(Read(path), b);
  // The target is a directory: the rename fails, the temporary is removed, the error names it.
  std::filesystem::create_directories(dir / "d");
  const Status s = ReplaceFileAtomically((dir / "d").string(), {});
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("cannot rename"), std::string::npos) << s.message();
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2u);  // f and d
  // No folder to write in: a clear error.
  EXPECT_EQ(ReplaceFileAtomically((dir / "missing" / "f").string(), {}).code(), StatusCode::kIoError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvc
