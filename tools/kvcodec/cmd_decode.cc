// `kvcodec decode`: decode and verify a .kvc file (optionally to a llama.cpp sequence state).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cli_files.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"

namespace kvcodec_cli {
namespace {

struct DecodeArgs {
  std::string in, out, model;
  std::vector<std::string> calibrations;
};

int RunDecode(const std::string& in, const std::string& out, const std::string& model_path,
              const std::vector<std::string>& calibrations) {
  for (const auto& c : calibrations) {
    if (auto err = kvcodec::LoadCalibration(c)) return Fail(*err);
  }
  std::vector<uint8_t> bytes;
  if (auto e = kvcodec_cli::ReadInputFile(in, kMaxKvFileBytes, &bytes); !e.empty()) return Fail(e);
  std::vector<uint8_t> fingerprint;
  if (!model_path.empty()) {
    auto model = kvcodec::Model::Load(model_path);
    if (!model.ok()) return Fail(model.error());
    fingerprint = model.value().Fingerprint();
  }
  auto kv = kvcodec::Decode(bytes, fingerprint.empty() ? nullptr : &fingerprint);
  if (!kv.ok()) return Fail(in + ": " + kv.error().message);
  const kvc_shape s = kvcodec::Shape(kv.value());
  if (!out.empty()) {
    auto state = kvcodec::KvToLlamaState(kv.value());
    if (!state.ok()) return Fail(state.error());
    if (auto e = kvcodec_cli::WriteOutputFile(out, state.value()); !e.empty()) return Fail(e);
  }
  std::printf("decoded %s: %u layers x %u tokens x %u kv heads x %u dims%s%s\n", Printable(in).c_str(), s.n_layers,
              s.n_tokens, s.n_kv_heads, s.head_dim, out.empty() ? "" : " -> llama.cpp sequence state ",
              Printable(out).c_str());
  return 0;
}

}  // namespace

Command AddDecodeCommand(CLI::App* parent) {
  auto a = std::make_shared<DecodeArgs>();
  auto* decode =
      parent->add_subcommand("decode", "Decode and verify a .kvc file (optionally to a llama.cpp sequence state)");
  decode->add_option("file", a->in, ".kvc file")->required();
  decode->add_option("-o,--out", a->out, "Write the KV as llama.cpp sequence-state bytes");
  decode->add_option("--model", a->model, "Check the file was made for this model");
  decode->add_option("--calibration", a->calibrations, "KVTC calibration(s) the file may name");
  return {decode, [a] { return RunDecode(a->in, a->out, a->model, a->calibrations); }};
}

}  // namespace kvcodec_cli
