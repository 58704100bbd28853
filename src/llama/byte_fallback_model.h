// Test support: byte-fallback models made from the test model. Real SentencePiece and BPE models
// spell anything outside their vocabulary (an emoji, most CJK) as byte tokens ("<0xE4>"), so
// one character arrives over several tokens and a single token's text is often not valid UTF-8;
// a model may also emit bytes that never form a character. The test model, trained on ASCII
// text, never does either. These helpers make a copy of it (same weights) that does, at places
// chosen from what it generates, for tests of every path that turns tokens into text.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "llama/llama_model.h"

namespace kvc {

// Writes to `dst_path` a copy of the GGUF model at `src_path` in which each token of `bytes` is
// the byte token of its byte: it trades text, score and type with the token that was that byte's
// ("<0xHH>", type BYTE), so every string stays unique and the tokenizer makes the same choices
// for any text that does not contain those tokens. The tensors are copied unchanged (the model
// fingerprint is the same). Each byte may appear once. Returns dst_path.
Result<std::string> MakeByteFallbackModel(const std::string& src_path, const std::string& dst_path,
                                          const std::map<int32_t, uint8_t>& bytes);

// "中" (U+4E2D) and "😀" (U+1F600) as UTF-8, and a byte that is never UTF-8.
inline constexpr char kByteFallbackCjk[] = "\xE4\xB8\xAD";
inline constexpr char kByteFallbackEmoji[] = "\xF0\x9F\x98\x80";
inline constexpr char kByteFallbackNever[] = "\xFF";

struct ByteFallbackPlan {
  std::vector<int32_t> prompt_tokens;  // the prompt as the model tokenizes it (with BOS)
  std::vector<int32_t> generated;      // what the original model generates for it, greedily
  std::map<int32_t, uint8_t> bytes;    // for MakeByteFallbackModel
};

// Generates `n_tokens` greedily for `prompt` with `model` (fewer if it ends first) and picks
// eight distinct generated tokens to become bytes: three consecutive ones spell kByteFallbackCjk,
// four consecutive ones later spell kByteFallbackEmoji, one more is kByteFallbackNever;
// wherever else the first seven occur, they are stray bytes that are not UTF-8 either. Only ordinary tokens that are
// not in the prompt are chosen, so the modified model reads the prompt as the same tokens and, with the same weights,
// generates the same ones. Fails when the generation has no such runs (try a longer one).
Result<ByteFallbackPlan> PlanByteFallback(const LlamaModel& model, const std::string& prompt, uint32_t n_tokens);

// The text a model's tokens stand for: their pieces' bytes joined.
std::string TokenBytes(const LlamaModel& model, const std::vector<int32_t>& tokens);

}  // namespace kvc
