// `kvcodec tokenize`: the token ids a model gives a text, as `kvcodec run` prefills it (with the
// BOS where the model's tokenizer adds one; a model without a tokenizer is refused, not aborted):
// what a program outside kvcodec (the Python package, a serving stack) needs to compute the chunk
// keys `run` and `serve` look stored KV up by, and the token-file format calibrate and eval read.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
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

struct TokenizeArgs {
  std::string model = DefaultModel(), text;
  bool no_bos = false, json = false;
};

int RunTokenize(const TokenizeArgs& a) {
  std::vector<uint8_t> text;
  if (auto e = kvcodec_cli::ReadInputFile(a.text, kMaxTextFileBytes, &text); !e.empty()) return Fail(e);
  auto model = kvcodec::Model::Load(a.model);
  if (!model.ok()) return Fail(model.error());
  auto tokens = model.value().Tokenize(std::string(text.begin(), text.end()), !a.no_bos);
  if (!tokens.ok()) return Fail(tokens.error());
  if (a.json) {
    auto info = model.value().InfoJson();
    if (!info.ok()) return Fail(info.error());
    const nlohmann::ordered_json j = {{"model", nlohmann::ordered_json::parse(info.value())},
                                      {"tokens", tokens.value()}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < tokens.value().size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(tokens.value()[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

Command AddTokenizeCommand(CLI::App* parent) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* tokenize = parent->add_subcommand(
      "tokenize", "Print a text's token ids as `kvcodec run` prefills it (a line of ids: the --token-file format)");
  tokenize->add_option("text", a->text, "Text file")->required();
  tokenize->add_option("--model", a->model, "GGUF model")->capture_default_str();
  tokenize->add_flag("--no-bos", a->no_bos,
                     "Do not start with the model's BOS token (only models whose tokenizer adds one start with it)");
  tokenize->add_flag("--json", a->json,
                     "Print {\"model\": the model's geometry, RoPE and fingerprint, \"tokens\": [...]}");
  return {tokenize, [a] { return RunTokenize(*a); }};
}

}  // namespace kvcodec_cli
