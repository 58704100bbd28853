// `kvcodec encode`: encode a KV cache (from a model + text, or a KV dump) into a .kvc file.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cli_files.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"

namespace kvcodec_cli {
namespace {

struct EncodeArgs {
  std::string model = DefaultModel(), text, token_file, kv_dump, codec = "raw", level, out, cache_type = "f16",
              calibration;
  std::vector<std::string> params;
  uint32_t tokens = 0, kv_heads = 0, token_begin = 0, n_tokens = 0;
};

int RunEncode(const EncodeArgs& a) {
  if (!a.calibration.empty()) {
    if (auto err = kvcodec::LoadCalibration(a.calibration)) return Fail(*err);
  }
  kvcodec::Kv kv;
  std::vector<uint8_t> fingerprint(16, 0);
  if (!a.kv_dump.empty()) {
    std::vector<uint8_t> bytes;
    if (auto e = kvcodec_cli::ReadInputFile(a.kv_dump, kMaxKvFileBytes, &bytes); !e.empty()) return Fail(e);
    uint32_t heads = a.kv_heads;
    if (heads == 0 || !a.text.empty()) {
      auto model = kvcodec::Model::Load(a.model);
      if (!model.ok()) return Fail(model.error());
      fingerprint = model.value().Fingerprint();
      if (heads == 0) heads = nlohmann::json::parse(model.value().InfoJson().value())["n_kv_heads"].get<uint32_t>();
    }
    auto parsed = kvcodec::KvFromLlamaState(bytes, heads);
    if (!parsed.ok()) return Fail(parsed.error());
    kv = std::move(parsed.value());
  } else {
    if (a.text.empty() == a.token_file.empty())
      return Fail("give --text FILE or --token-file FILE (with --model), or --kv DUMP");
    auto model = kvcodec::Model::Load(a.model);
    if (!model.ok()) return Fail(model.error());
    fingerprint = model.value().Fingerprint();
    std::vector<int32_t> ids;
    if (!a.token_file.empty()) {
      auto info = model.value().InfoJson();
      if (!info.ok()) return Fail(info.error());
      auto read = ReadTokenIds(a.token_file, nlohmann::json::parse(info.value())["n_vocab"].get<uint32_t>());
      if (!read.ok()) return Fail(read.status());
      ids = std::move(read).value();
    } else {
      std::vector<uint8_t> text;
      if (auto e = kvcodec_cli::ReadInputFile(a.text, kMaxTextFileBytes, &text); !e.empty()) return Fail(e);
      auto tokens = model.value().Tokenize(std::string(text.begin(), text.end()), true);
      if (!tokens.ok()) return Fail(tokens.error());
      ids = std::move(tokens.value());
    }
    if (a.tokens > 0 && ids.size() > a.tokens) ids.resize(a.tokens);
    // The whole document goes into one context: one longer than the model's is refused before
    // llama.cpp allocates a cache for it.
    auto info = model.value().InfoJson();
    if (!info.ok()) return Fail(info.error());
    const uint32_t n_ctx_train = nlohmann::json::parse(info.value())["n_ctx_train"].get<uint32_t>();
    if (n_ctx_train > 0 && ids.size() > n_ctx_train) {
      return Fail("the document has " + std::to_string(ids.size()) + " tokens, more than the model's context of " +
                  std::to_string(n_ctx_train) + " (n_ctx_train): pass --tokens " + std::to_string(n_ctx_train) +
                  " or fewer");
    }
    kvc_session_params sp;
    kvc_session_default_params(&sp);
    sp.n_ctx = static_cast<uint32_t>(ids.size()) + 8;
    sp.cache_type = a.cache_type == "f32" ? KVC_F32 : a.cache_type == "bf16" ? KVC_BF16 : KVC_F16;
    auto session = kvcodec::Session::Create(model.value(), sp);
    if (!session.ok()) return Fail(session.error());
    if (auto err = session.value().Eval(ids)) return Fail(*err);
    auto extracted = session.value().Extract();
    if (!extracted.ok()) return Fail(extracted.error());
    kv = std::move(extracted.value());
  }
  auto bytes = kvcodec::Encode(kv, a.codec, a.level, JoinParams(a.params), fingerprint, a.token_begin, a.n_tokens);
  if (!bytes.ok()) return Fail(bytes.error());
  if (auto e = kvcodec_cli::WriteOutputFile(a.out, bytes.value()); !e.empty()) return Fail(e);
  const kvc_shape s = kvcodec::Shape(kv);
  const uint32_t covered = a.n_tokens ? a.n_tokens : s.n_tokens - a.token_begin;
  const double fp16 = 4.0 * s.n_layers * s.n_kv_heads * s.head_dim * covered;
  std::printf("wrote %s: %u tokens, %zu bytes (%.2fx vs fp16)\n", Printable(a.out).c_str(), covered,
              bytes.value().size(), fp16 / static_cast<double>(bytes.value().size()));
  return 0;
}

}  // namespace

Command AddEncodeCommand(CLI::App* parent) {
  auto en = std::make_shared<EncodeArgs>();
  auto* encode =
      parent->add_subcommand("encode", "Encode a KV cache (from a model + text, or a KV dump) into a .kvc file");
  encode->add_option("--model", en->model, "GGUF model (prefills --text; fingerprints the file)")
      ->capture_default_str();
  encode->add_option("--text", en->text, "Text file to prefill");
  encode->add_option("--token-file", en->token_file,
                     "Token ids to prefill instead of --text, as given (no BOS added): ids separated by spaces, "
                     "lines one after another (`kvcodec tokenize` writes them)");
  encode->add_option("--tokens", en->tokens, "Keep at most this many tokens of the text");
  encode->add_option("--kv", en->kv_dump, "KV dump: llama.cpp sequence-state bytes (llama_state_seq_get_data)");
  encode->add_option("--kv-heads", en->kv_heads, "KV heads of the dump (default: from --model)");
  encode->add_option("--codec", en->codec, "Codec")->capture_default_str();
  encode->add_option("--level", en->level, "Codec level");
  AddParamOption(encode, &en->params);
  encode->add_option("--token-begin", en->token_begin, "First token to encode");
  encode->add_option("--n-tokens", en->n_tokens, "Tokens to encode (0: to the end)");
  AddCacheTypeOption(encode, &en->cache_type);
  encode->add_option("--calibration", en->calibration, "KVTC calibration (.kvcal)");
  encode->add_option("-o,--out", en->out, "Output .kvc file")->required();
  return {encode, [en] { return RunEncode(*en); }};
}

}  // namespace kvcodec_cli
