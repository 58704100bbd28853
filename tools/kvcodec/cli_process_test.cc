// The kvcodec command run as a shell runs it, in a child process: what reaches the terminal from a
// hostile file, what an error names, and how it behaves under an address-space limit (ulimit -v).
// Every run is bounded by an alarm that survives exec, so a command that hangs fails its test
// instead of hanging the suite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "llama/archs_fixtures.h"
#include "llama/chunk_state.h"
#include "reuse/model_profile.h"

namespace {

namespace fs = std::filesystem;

const std::string kModel = KVCODEC_TEST_MODEL;
const fs::path kSource = KVCODEC_SOURCE_DIR;

struct Outcome {
  int status = 0;  // as waitpid gives it
  std::string out, err;

  bool exited() const { return WIFEXITED(status); }
  int code() const { return WEXITSTATUS(status); }
  std::string Describe() const {
    std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status)) +
                                                (WTERMSIG(status) == SIGALRM ? " (it hung)" : "")
                                          : "exit " + std::to_string(WEXITSTATUS(status));
    return how + "\nstdout:\n" + out + "\nstderr:\n" + err;
  }
};

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class Scratch {
 public:
  Scratch() : dir_(fs::temp_directory_path() / ("kvc_cli_process_" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

struct Limits {
  uint64_t address_space_bytes = 0;  // RLIMIT_AS, as `ulimit -v` sets it (0: none)
  unsigned alarm_s = 50;
  std::vector<std::pair<std::string, std::string>> env;
};

// kvcodec `args` in a child (stdout and stderr to files in `scratch`), waited for.
Outcome RunKvcodec(const std::vector<std::string>& args, const Scratch& scratch, const Limits& limits = {}) {
  const fs::path out = scratch.dir() / "stdout", err = scratch.dir() / "stderr";
  std::vector<std::string> argv_text = {KVCODEC_CLI};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(126);
    for (const auto& [name, value] : limits.env) ::setenv(name.c_str(), value.c_str(), 1);
    if (limits.address_space_bytes > 0) {
      const rlimit limit{limits.address_space_bytes, limits.address_space_bytes};
      if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(126);
    }
    ::alarm(limits.alarm_s);  // kept across exec: SIGALRM ends a command that hangs
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Outcome run;
  if (pid < 0) {
    run.status = -1;
    run.err = "fork failed";
    return run;
  }
  ::waitpid(pid, &run.status, 0);
  run.out = ReadAll(out);
  run.err = ReadAll(err);
  return run;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Nothing a terminal would act on: no ESC, BEL, CR, or other C0 control but the newline that
// ends each line, and no line that claims to be kvcodec's error unless `error_line_ok`.
void ExpectPlainLines(const std::string& text, bool error_line_ok, const std::string& what) {
  for (unsigned char c : text) {
    EXPECT_FALSE(c < 0x20 && c != '\n') << what << " holds control byte " << static_cast<int>(c) << ":\n" << text;
  }
  int error_lines = 0;
  for (const std::string& line : Lines(text)) error_lines += line.rfind("kvcodec: error:", 0) == 0 ? 1 : 0;
  EXPECT_LE(error_lines, error_line_ok ? 1 : 0) << what << ":\n" << text;
}

// ---- Item: text from files reaches the terminal as printable lines ------------------------

// A quality profile's text is the file's to say, checksum and all: escape sequences and a forged
// error line in it are printed as escaped text on one line.
TEST(CliOutput, AProfilesTextIsPrintedAsOnePrintableLine) {
  Scratch scratch;
  auto profile = kvc::LoadProfile(kvc::DefaultProfilePath(kModel));
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  profile->text =
      "\x1b[2J\x1b]0;owned\x07 calib.txt\nkvcodec: error: forged\r\n\xc2\x9b"
      "1m";
  const fs::path path = scratch.dir() / "hostile.kvprof.json";
  ASSERT_TRUE(kvc::SaveProfile(*profile, path.string()).ok());
  ASSERT_TRUE(kvc::LoadProfile(path.string()).ok()) << "the hostile profile must be a valid one";

  const Outcome run = RunKvcodec({"codecs", "--model", kModel, "--profile", path.string()}, scratch);
  ASSERT_TRUE(run.exited() && run.code() == 0) << run.Describe();
  ExpectPlainLines(run.out, false, "stdout");
  ExpectPlainLines(run.err, false, "stderr");
  EXPECT_EQ(run.out.find("\xc2\x9b"), std::string::npos) << "a C1 control (CSI) reached stdout";
  EXPECT_NE(run.out.find("from \\x1B[2J\\x1B]0;owned\\x07 calib.txt\\x0Akvcodec: error: forged\\x0D\\x0A\\x9B1m"),
            std::string::npos)
      << run.out;
}

// An error quoting a path shows it on the one error line, escaped.
TEST(CliOutput, AnErrorQuotingAHostilePathIsOneLine) {
  Scratch scratch;
  const Outcome run =
      RunKvcodec({"inspect", (scratch.dir() / "no\x1b[2J\nkvcodec: error: forged.kvc").string()}, scratch);
  ASSERT_TRUE(run.exited() && run.code() == 1) << run.Describe();
  EXPECT_EQ(run.out, "");
  ExpectPlainLines(run.err, true, "stderr");
  EXPECT_EQ(Lines(run.err).size(), 1u) << run.err;
}

// ---- Item: inspect reads a store's state chunk objects ---------------------------------------

// A memory whose chunk is keys-only cells (MLA's latent) and, at its end, a sliding window's
// cells: the token object and the boundary object, each inspected from a file.
TEST(CliInspect, StateChunkObjectsArePrinted) {
  Scratch scratch;
  const auto cells = [](int32_t pos_begin, uint32_t n_cells, uint64_t row_bytes, bool with_v) {
    kvc::AttentionSection a;
    a.pos_begin = pos_begin;
    a.n_cells = n_cells;
    for (int l = 0; l < 2; ++l) {
      const kvc::StateTensor t{.ggml_type = 1,
                               .elem_bytes = 0,
                               .row_bytes = row_bytes,
                               .rows = std::vector<uint8_t>(row_bytes * n_cells, static_cast<uint8_t>(l + 1))};
      a.k.push_back(t);
      if (with_v) a.v.push_back(t);
    }
    return a;
  };
  kvc::ChunkState chunk;
  chunk.pos_begin = 16;
  chunk.n_tokens = 8;
  chunk.at_boundary = {false, true};
  chunk.tokens.sections.push_back(cells(16, 8, 1152, false));
  chunk.boundary.sections.push_back(cells(20, 4, 64, true));
  const auto tokens = kvc::WriteChunkTokens(chunk);
  const auto boundary = kvc::WriteChunkBoundary(chunk);
  ASSERT_TRUE(tokens.ok() && boundary.ok());
  const fs::path tokens_path = scratch.dir() / "chunk.kvsc", boundary_path = scratch.dir() / "chunk.boundary";
  std::ofstream(tokens_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens->data()), static_cast<std::streamsize>(tokens->size()));
  std::ofstream(boundary_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(boundary->data()), static_cast<std::streamsize>(boundary->size()));

  Outcome run = RunKvcodec({"inspect", tokens_path.string()}, scratch);
  ASSERT_TRUE(run.exited() && run.code() == 0) << run.Describe();
  ExpectPlainLines(run.out, false, "stdout");
  EXPECT_EQ(
      run.out.rfind(tokens_path.string() + ": state chunk tokens, " + std::to_string(tokens->size()) + " bytes\n", 0),
      0u)
      << run.out;
  EXPECT_NE(run.out.find("8 tokens from position 16"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("section 0    attention, 8 cells from position 16, 2 layers: K f16 x 1152 B/row, no V\n"),
            std::string::npos)
      << run.out;

  run = RunKvcodec({"inspect", "--json", tokens_path.string()}, scratch);
  ASSERT_TRUE(run.exited() && run.code() == 0) << run.Describe();
  EXPECT_NE(run.out.find("\"kind\": \"state chunk tokens\""), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"keys_only\": true"), std::string::npos) << run.out;

  run = RunKvcodec({"inspect", boundary_path.string()}, scratch);
  ASSERT_TRUE(run.exited() && run.code() == 0) << run.Describe();
  EXPECT_NE(run.out.find(": state chunk boundary, "), std::string::npos) << run.out;
  EXPECT_NE(
      run.out.find("section 0    attention, 4 cells from position 20, 2 layers: K f16 x 64 B/row, V f16 x 64 B/row\n"),
      std::string::npos)
      << run.out;

  // A truncated token object: one error line, exit 1.
  std::ofstream(tokens_path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(tokens->data()), static_cast<std::streamsize>(tokens->size() / 2));
  run = RunKvcodec({"inspect", tokens_path.string()}, scratch);
  ASSERT_TRUE(run.exited() && run.code() == 1) << run.Describe();
  EXPECT_EQ(run.out, "");
  ExpectPlainLines(run.err, true, "stderr");
  EXPECT_EQ(Lines(run.err).size(), 1u) << run.err;
}

// ---- Item: -o names the path given --------------------------------------------------------

TEST(CliOutput, AnOutputIntoAMissingFolderNamesThePathGiven) {
  Scratch scratch;
  std::ofstream(scratch.dir() / "prompt.txt") << "And it came to pass, that the word came unto him.";
  const std::string out = (scratch.dir() / "missing" / "a.kvc").string();
  const Outcome run = RunKvcodec(
      {"encode", "--model", kModel, "--text", (scratch.dir() / "prompt.txt").string(), "--codec", "raw", "-o", out},
      scratch);
  ASSERT_TRUE(run.exited() && run.code() == 1) << run.Describe();
  EXPECT_NE(run.err.find("cannot create " + out + ": No such file or directory"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find(".tmp."), std::string::npos) << "names the temporary file: " << run.err;
}

// ---- Item: clear refusals for models without a tokenizer, a BOS or a KV cache -------------

// llama.cpp's random-weight fixtures (test-llama-archs): no tokenizer and no BOS; dream and
// llada are diffusion models, which keep no KV cache.
const fs::path kFixtures = kvc::archs::Dir();

#define SKIP_WITHOUT_FIXTURES()                                                                   \
  if (!fs::exists(kFixtures / "llama-dense.gguf") || !fs::exists(kFixtures / "dream-dense.gguf")) \
  GTEST_SKIP() << "no fixtures in " << kFixtures << " (scripts/setup-llama.sh writes them)"

// One document per line, `n_docs` lines of `n` ids under the fixtures' vocabulary of 128.
void WriteTokenFile(const fs::path& path, int n_docs, int n) {
  std::ofstream out(path);
  for (int d = 0; d < n_docs; ++d) {
    for (int i = 0; i < n; ++i) out << (i ? " " : "") << (d * 31 + i * 7) % 128;
    out << "\n";
  }
}

// Exit 1 (not a signal: llama.cpp used to abort the process) with one printable error line
// holding `fragment`.
void ExpectRefusal(const Outcome& run, const std::string& fragment) {
  ASSERT_TRUE(run.exited()) << run.Describe();
  EXPECT_EQ(run.code(), 1) << run.Describe();
  ExpectPlainLines(run.err, true, "stderr");
  EXPECT_NE(run.err.find("kvcodec: error: "), std::string::npos) << run.Describe();
  EXPECT_NE(run.err.find(fragment), std::string::npos) << run.Describe();
}

TEST(CliRefusals, TextForAModelWithoutATokenizerIsRefusedNotAborted) {
  SKIP_WITHOUT_FIXTURES();
  Scratch scratch;
  const std::string model = (kFixtures / "llama-dense.gguf").string();
  const std::string text = (scratch.dir() / "prompt.txt").string();
  std::ofstream(text) << "In the beginning";
  const std::string fragment = "model " + model + " has no tokenizer";
  const std::vector<std::vector<std::string>> commands = {
      {"tokenize", "--model", model, text},
      {"run", "--model", model, "--store", "mem://", text},
      {"eval", "--model", model, "--text", text, "--docs", "1", "--ctx", "8", "--cont", "4", "--quiet"},
      {"encode", "--model", model, "--text", text, "--codec", "raw", "-o", (scratch.dir() / "a.kvc").string()},
  };
  for (const auto& args : commands) {
    SCOPED_TRACE(args[0]);
    const Outcome run = RunKvcodec(args, scratch);
    ExpectRefusal(run, fragment);
    EXPECT_NE(run.err.find("--token-file"), std::string::npos) << run.Describe();
  }
}

// Token ids are the way in for such a model, used as given: no BOS (it has none) is prepended.
// A -1 prepended would be outside the vocabulary, and llama.cpp's decode would fail.
TEST(CliRefusals, TokenIdsForAModelWithoutBosRunAsGiven) {
  SKIP_WITHOUT_FIXTURES();
  Scratch scratch;
  const std::string model = (kFixtures / "llama-dense.gguf").string();
  const fs::path ids = scratch.dir() / "ids.txt";
  WriteTokenFile(ids, 2, 81);  // exactly ctx + cont + 1: a BOS would push a token out
  Outcome run = RunKvcodec({"eval", "--model", model, "--token-file", ids.string(), "--docs", "2", "--ctx", "64",
                            "--cont", "16", "--json", "--quiet"},
                           scratch);
  ASSERT_TRUE(run.exited() && run.code() == 0) << run.Describe();
  EXPECT_NE(run.out.find("\"n_docs\": 2"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"top1_agreement\": 1.0"), std::string::npos) << run.out;  // raw: lossless

  WriteTokenFile(ids, 1, 40);
  run = RunKvcodec({"encode", "--model", model, "--token-file", ids.string(), "--codec", "raw", "-o",
                    (scratch.dir() / "a.kvc").string()},
                   scratch);
  ASSERT_TRUE(run.exited() && run.code() == 0) << run.Describe();
  EXPECT_NE(run.out.find(": 40 tokens,"), std::string::npos) << run.out;
}

// `run --token-file` on a hybrid (attention + recurrent) model: the second run restores every
// stored state chunk and generates the same token ids.
TEST(CliRun, TokenIdsOfAHybridModelAreReusedOnTheSecondRun) {
  SKIP_WITHOUT_FIXTURES();
  Scratch scratch;
  const std::string model = (kFixtures / "jamba-dense.gguf").string();
  const fs::path ids = scratch.dir() / "ids.txt";
  WriteTokenFile(ids, 1, 45);
  const std::vector<std::string> args = {"run",
                                         "--model",
                                         model,
                                         "--token-file",
                                         ids.string(),
                                         "--store",
                                         "dir://" + (scratch.dir() / "store").string(),
                                         "--chunk",
                                         "8",
                                         "-n",
                                         "6",
                                         "--threads",
                                         "1"};
  const Outcome first = RunKvcodec(args, scratch);
  ASSERT_TRUE(first.exited() && first.code() == 0) << first.Describe();
  EXPECT_NE(first.out.find("stored 5 new chunks"), std::string::npos) << first.out;
  const Outcome second = RunKvcodec(args, scratch);
  ASSERT_TRUE(second.exited() && second.code() == 0) << second.Describe();
  EXPECT_NE(second.out.find("reused 40 of 45 prompt tokens"), std::string::npos) << second.out;
  const auto ids_line = [](const std::string& out) { return out.substr(0, out.find('\n')); };
  EXPECT_EQ(ids_line(second.out), ids_line(first.out));
  EXPECT_EQ(ids_line(first.out).rfind("token ids: ", 0), 0u) << first.out;
}

TEST(CliRefusals, AModelKeepingNoKvIsToldSoAtStart) {
  SKIP_WITHOUT_FIXTURES();
  Scratch scratch;
  const fs::path ids = scratch.dir() / "ids.txt";
  WriteTokenFile(ids, 4, 81);
  const std::string text = (scratch.dir() / "prompt.txt").string();
  std::ofstream(text) << "In the beginning";
  for (const char* name : {"dream-dense", "llada-dense"}) {
    const std::string model = (kFixtures / (std::string(name) + ".gguf")).string();
    const std::vector<std::vector<std::string>> commands = {
        {"run", "--model", model, "--store", "mem://", text},
        {"serve", "--model", model, "--store", "mem://", "--port", "0"},
        {"eval", "--model", model, "--token-file", ids.string(), "--docs", "2", "--ctx", "64", "--cont", "16",
         "--quiet"},
        {"calibrate", "--model", model, "--token-file", ids.string(), "--out", (scratch.dir() / "a.kvcal").string()},
    };
    for (const auto& args : commands) {
      SCOPED_TRACE(std::string(name) + " " + args[0]);
      const Outcome run = RunKvcodec(args, scratch, {.alarm_s = 30});
      ExpectRefusal(run, "model " + model + " keeps no KV cache");
      EXPECT_EQ(run.err.find("corrupt"), std::string::npos) << run.Describe();
    }
  }
}

// ---- Item: under an address-space limit every command exits --------------------------------

// `ulimit -v 300000`: far less than OpenBLAS's threads would map (128 MiB each, one per core but
// one, started before main) on a machine with a few cores.
constexpr uint64_t kSmallLimit = uint64_t{300000} * 1024;

TEST(CliUnderAddressSpaceLimit, VersionAndInspectExit) {
  Scratch scratch;
  Outcome run = RunKvcodec({"--version"}, scratch, {.address_space_bytes = kSmallLimit});
  ASSERT_TRUE(run.exited()) << run.Describe();
  EXPECT_EQ(run.code(), 0) << run.Describe();
  EXPECT_FALSE(run.out.empty()) << run.Describe();

  const std::string kvc = (kSource / "fuzz" / "corpus" / "codecs" / "quant8_f16.kvc").string();
  run = RunKvcodec({"inspect", kvc}, scratch, {.address_space_bytes = kSmallLimit});
  ASSERT_TRUE(run.exited()) << run.Describe();
  EXPECT_EQ(run.code(), 0) << run.Describe();
  EXPECT_NE(run.out.find("codec        quant"), std::string::npos) << run.Describe();

  // The same machine's OpenBLAS asked for many threads: still none started.
  run =
      RunKvcodec({"--version"}, scratch, {.address_space_bytes = kSmallLimit, .env = {{"OPENBLAS_NUM_THREADS", "64"}}});
  ASSERT_TRUE(run.exited()) << run.Describe();
  EXPECT_EQ(run.code(), 0) << run.Describe();
}

// kvtc's encode calls BLAS, whose first call on a thread maps a 128 MiB buffer: with room for it
// the encode succeeds, without it fails with one error line, never hangs. (Many threads each
// needing a buffer: src/transform_coding/pca_test.cc.)
TEST(CliUnderAddressSpaceLimit, KvtcEncodeSucceedsOrSaysWhy) {
  Scratch scratch;
  std::ofstream(scratch.dir() / "prompt.txt")
      << "And it came to pass, that the word of the LORD came unto him, saying, "
         "Arise, go to Nineveh, that great city, and cry against it.";
  const std::vector<std::string> args = {"encode",
                                         "--model",
                                         kModel,
                                         "--text",
                                         (scratch.dir() / "prompt.txt").string(),
                                         "--codec",
                                         "kvtc",
                                         "--level",
                                         "16",
                                         "--calibration",
                                         (kSource / "models" / "kvtiny" / "kvtiny.kvcal").string(),
                                         "-o",
                                         (scratch.dir() / "a.kvc").string()};
  Outcome run = RunKvcodec(args, scratch, {.address_space_bytes = uint64_t{1000000} * 1024});
  ASSERT_TRUE(run.exited()) << run.Describe();
  EXPECT_EQ(run.code(), 0) << run.Describe();
  run = RunKvcodec(args, scratch, {.address_space_bytes = kSmallLimit});
  ASSERT_TRUE(run.exited()) << run.Describe();
  if (run.code() != 0) {
    EXPECT_EQ(run.code(), 1) << run.Describe();
    ExpectPlainLines(run.err, true, "stderr");
    EXPECT_EQ(Lines(run.err).size(), 1u) << run.Describe();
  }
}

}  // namespace
