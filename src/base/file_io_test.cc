#include "base/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
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

// The temporary file is ours: an error names the path the caller gave.
TEST(ReplaceFileAtomically, AMissingFolderIsReportedForThePathGiven) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc_missing_" + std::to_string(getpid()));
  const std::string path = (dir / "missing" / "out.kvc").string();
  std::filesystem::create_directories(dir);
  const Status s = ReplaceFileAtomically(path, {});
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "cannot create " + path + ": No such file or directory");
  std::filesystem::remove_all(dir);
}

TEST(ReplaceFileAtomically, SetsTheModeItIsGiven) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc_mode_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "f";
  const std::string a = "x";
  ASSERT_TRUE(
      ReplaceFileAtomically(path.string(), std::span(reinterpret_cast<const uint8_t*>(a.data()), 1), 0640).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  std::filesystem::remove_all(dir);
}

TEST(ReadFileBytes, ReadsWithinTheLimitAndRefusesWhatIsNotAFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc_read_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "f";
  std::ofstream(path) << "0123456789";
  auto ten = ReadFileBytes(path.string(), 10);
  ASSERT_TRUE(ten.ok()) << ten.status().ToString();
  EXPECT_EQ(std::string(ten->begin(), ten->end()), "0123456789");
  auto over = ReadFileBytes(path.string(), 9);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("over the limit of 9"), std::string::npos) << over.status().message();
  EXPECT_EQ(ReadFileBytes((dir / "missing").string(), 10).status().code(), StatusCode::kNotFound);
  auto folder = ReadFileBytes(dir.string(), 10);
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(folder.status().message().find("is a directory, not a file"), std::string::npos);
  auto device = ReadFileBytes("/dev/zero", 10);  // endless: refused before a byte is read
  EXPECT_EQ(device.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(device.status().message().find("a character device"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvc
