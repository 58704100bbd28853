// llama.cpp's per-architecture fixtures, for tests: the small random-weight GGUF its own
// tests/test-llama-archs.cpp writes for every architecture its model saver supports (no
// tokenizer: token ids in and out). scripts/setup-llama.sh writes them into the llama.cpp cache;
// every test target is given the folder as KVCODEC_ARCHS_FIXTURES, and a test on a fixture that
// is missing skips, naming it.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

namespace kvc::archs {

inline std::filesystem::path Dir() { return KVCODEC_ARCHS_FIXTURES; }
inline std::filesystem::path Path(const std::string& name) { return Dir() / (name + ".gguf"); }

// One model of each memory kind: a unified cache (the codecs' path), a sliding-window pair, MLA,
// M-RoPE cell extensions, hybrid attention + recurrent, recurrent only.
inline const std::vector<std::string>& OneOfEachMemoryKind() {
  static const std::vector<std::string> kinds = {"llama-dense",   "gemma2-dense",  "deepseek2-moe",
                                                 "qwen2vl-dense", "qwen3next-moe", "mamba-dense"};
  return kinds;
}

// A test's name for a fixture's ("qwen2vl-dense" -> "qwen2vl_dense").
struct TestName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& info) const {
    std::string name = info.param;
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return name;
  }
};

}  // namespace kvc::archs

// Skips the test when fixture `name` is missing.
#define KVC_SKIP_WITHOUT_FIXTURE(name)                                                                    \
  do {                                                                                                    \
    if (!std::filesystem::exists(::kvc::archs::Path(name))) {                                             \
      GTEST_SKIP() << "no fixture " << ::kvc::archs::Path(name) << " (scripts/setup-llama.sh writes it)"; \
    }                                                                                                     \
  } while (0)
