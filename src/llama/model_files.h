// The files that travel with a model: texts beside it (eval.txt, calib.txt), read the same way by
// every command, and the prefilled KV cache of one the benchmarks measure on.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "llama/llama_model.h"
#include "tensor/kv_cache.h"

namespace kvc {

// The whole of a regular file of at most `max_bytes` (default 1 GiB): kNotFound if it cannot be
// opened, kInvalidArgument for a directory, a device or one that is too large.
Result<std::string> ReadTextFile(const std::string& path, uint64_t max_bytes = uint64_t{1} << 30);

// `explicit_path` if given, else `name` in the model's folder.
std::string BesideModel(const std::string& model_path, const std::string& name, const std::string& explicit_path);

// A model and the KV cache of the first `ctx` tokens of a text (eval.txt beside the model
// unless `text_path` is given), prefilled in a fresh context: what the benchmarks measure on.
struct PrefilledText {
  std::unique_ptr<LlamaModel> model;
  KvCache kv;
};
Result<PrefilledText> PrefillModelText(const std::string& model_path, const std::string& text_path, uint32_t ctx);

}  // namespace kvc
