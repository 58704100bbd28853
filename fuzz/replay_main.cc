// Runs a fuzz target over saved inputs as a plain test: `<target>_replay DIR_OR_FILE...`.
// Fails if a path is missing or nothing ran, so an emptied corpus cannot pass silently.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

namespace {

bool RunFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot open %s\n", path.c_str());
    return false;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    std::fprintf(stderr, "replay: error reading %s\n", path.c_str());
    return false;
  }
  // A heap copy of exactly the file's size, so ASan flags any read past the end.
  std::vector<uint8_t> exact(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(exact.data(), exact.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(arg, ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      if (ec) {
        std::fprintf(stderr, "replay: cannot list %s: %s\n", arg.c_str(), ec.message().c_str());
        return 1;
      }
      std::sort(files.begin(), files.end());  // a stable order makes failures reproducible
      for (const auto& file : files) {
        if (!RunFile(file)) return 1;
        ++ran;
      }
    } else if (fs::is_regular_file(arg, ec)) {
      if (!RunFile(arg)) return 1;
      ++ran;
    } else {
      std::fprintf(stderr, "replay: %s does not exist or is not a file or directory\n", arg.c_str());
      return 1;
    }
  }
  std::printf("replay: ran %zu inputs\n", ran);
  if (ran == 0) {
    std::fprintf(stderr, "replay: no inputs found; a replay that runs nothing fails\n");
    return 1;
  }
  return 0;
}
