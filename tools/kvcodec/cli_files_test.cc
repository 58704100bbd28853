#include "cli_files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace kvcodec_cli {
namespace {

namespace fs = std::filesystem;

class CliFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvcodec_cli_files_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // Everything in the test directory: a failed or finished write leaves no temporary file.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

  fs::path dir_;
};

TEST_F(CliFiles, WritesANewFileAndLeavesNothingElse) {
  const fs::path p = dir_ / "a.kvc";
  EXPECT_EQ(WriteOutputFile(p, Bytes("hello")), "");
  EXPECT_EQ(Slurp(p), "hello");
  EXPECT_EQ(Entries(), std::vector<std::string>{"a.kvc"});
}

TEST_F(CliFiles, ReplacesARegularFileKeepingItsMode) {
  const fs::path p = dir_ / "a.kvc";
  std::ofstream(p) << "old contents";
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  EXPECT_EQ(WriteOutputFile(p, Bytes("new")), "");
  EXPECT_EQ(Slurp(p), "new");
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(Entries(), std::vector<std::string>{"a.kvc"});
}

TEST_F(CliFiles, ASymlinkStaysALinkAndItsTargetIsReplaced) {
  const fs::path target = dir_ / "target.kvc";
  const fs::path link = dir_ / "link.kvc";
  std::ofstream(target) << "old";
  fs::create_symlink(target, link);
  EXPECT_EQ(WriteOutputFile(link, Bytes("new")), "");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(Slurp(target), "new");
  EXPECT_EQ(Entries(), (std::vector<std::string>{"link.kvc", "target.kvc"}));
}

TEST_F(CliFiles, ADirectoryIsRefused) {
  const std::string error = WriteOutputFile(dir_, Bytes("x"));
  EXPECT_NE(error.find("a directory"), std::string::npos) << error;
  EXPECT_TRUE(Entries().empty());
}

// Device nodes of our own (as /dev/full and /dev/null are: 1,7 and 1,3), so the test never risks
// the machine's. Needs root (CI runs as root); skipped otherwise.
TEST_F(CliFiles, ADeviceIsWrittenInPlaceNeverReplaced) {
  const fs::path full = dir_ / "full";
  const fs::path null = dir_ / "null";
  if (::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0 ||
      ::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "cannot create device nodes here (not root)";
  }
  const std::string error = WriteOutputFile(full, Bytes("x"));
  EXPECT_NE(error.find("No space left"), std::string::npos) << error;
  EXPECT_EQ(WriteOutputFile(null, Bytes("x")), "");
  struct stat st;
  ASSERT_EQ(::lstat(full.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_EQ(::lstat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(Entries(), (std::vector<std::string>{"full", "null"}));
}

// A full disk, emulated with a file-size limit in a child process: the write fails, the old file
// is intact and the temporary file is gone.
TEST_F(CliFiles, AFailedWriteKeepsTheOldFileAndRemovesTheTemporary) {
  const fs::path p = dir_ / "a.kvc";
  std::ofstream(p) << "old contents";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit limit = {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string error = WriteOutputFile(p, std::vector<uint8_t>(1 << 20, 7));
    ::_exit(error.find("cannot write") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the write did not fail with 'cannot write'";
  EXPECT_EQ(Slurp(p), "old contents");
  EXPECT_EQ(Entries(), std::vector<std::string>{"a.kvc"});
}

TEST_F(CliFiles, ReadsRegularFilesAndPipesWithinTheLimit) {
  const fs::path p = dir_ / "text";
  std::ofstream(p) << "0123456789";
  std::vector<uint8_t> bytes;
  EXPECT_EQ(ReadInputFile(p, 10, &bytes), "");
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "0123456789");
  EXPECT_NE(ReadInputFile(p, 9, &bytes).find("over the limit"), std::string::npos);

  const fs::path empty = dir_ / "empty";
  std::ofstream(empty).flush();
  EXPECT_EQ(ReadInputFile(empty, 10, &bytes), "");
  EXPECT_TRUE(bytes.empty());

  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo) << std::string(100, 'x'); });
  const std::string error = ReadInputFile(fifo, 50, &bytes);
  writer.join();
  EXPECT_NE(error.find("more than the limit"), std::string::npos) << error;
}

TEST_F(CliFiles, DirectoriesAndDevicesAreNotInputs) {
  std::vector<uint8_t> bytes;
  std::string error = ReadInputFile(dir_, 1 << 20, &bytes);
  EXPECT_NE(error.find("is a directory, not a file"), std::string::npos) << error;
  // /dev/zero never ends: a bounded read would still allocate its whole limit.
  error = ReadInputFile("/dev/zero", 1 << 20, &bytes);
  EXPECT_NE(error.find("is a character device, not a file"), std::string::npos) << error;
  error = ReadInputFile(dir_ / "missing", 1 << 20, &bytes);
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

}  // namespace
}  // namespace kvcodec_cli
