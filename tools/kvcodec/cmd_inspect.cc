// `kvcodec inspect`: print a .kvc file's header and sections.

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

int RunInspect(const std::string& path, bool json) {
  std::vector<uint8_t> bytes;
  if (auto e = kvcodec_cli::ReadInputFile(path, kMaxKvFileBytes, &bytes); !e.empty()) return Fail(e);
  auto info = kvcodec::InspectJson(bytes);
  if (!info.ok()) return Fail(path + ": " + info.error().message);
  if (json) {
    std::cout << info.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(info.value());
  // The header's names and tags are the file's: each printed as one printable line.
  std::printf("%s: .kvc v%u, %llu bytes\n", Printable(path).c_str(), j["format_version"].get<unsigned>(),
              j["file_bytes"].get<unsigned long long>());
  std::printf("  codec        %s (id %u, v%u), level %s, %llu param bytes\n", Printable(j["codec"]).c_str(),
              j["codec_id"].get<unsigned>(), j["codec_version"].get<unsigned>(), Printable(j["level"]).c_str(),
              j["codec_params_bytes"].get<unsigned long long>());
  std::printf("  shape        %u layers x %u tokens x %u kv heads x %u dims, %s\n", j["n_layers"].get<unsigned>(),
              j["n_tokens"].get<unsigned>(), j["n_kv_heads"].get<unsigned>(), j["head_dim"].get<unsigned>(),
              Printable(j["dtype"]).c_str());
  std::printf("  tokens       [%u, %u), first position %d\n", j["token_begin"].get<unsigned>(),
              j["token_begin"].get<unsigned>() + j["n_tokens"].get<unsigned>(), j["pos_begin"].get<int>());
  std::printf("  model        %s\n", Printable(j["model_fingerprint"]).c_str());
  std::printf("  ratio        %.2fx vs fp16 (%llu bytes)\n", j["compression_ratio"].get<double>(),
              j["bytes_fp16"].get<unsigned long long>());
  int i = 0;
  for (const auto& s : j["sections"]) {
    std::printf("  section %-4d tag %s, %llu bytes\n", i++, Printable(s["tag"]).c_str(),
                s["bytes"].get<unsigned long long>());
  }
  return 0;
}

}  // namespace

Command AddInspectCommand(CLI::App* parent) {
  struct InspectArgs {
    std::string in;
    bool json = false;
  };
  auto a = std::make_shared<InspectArgs>();
  auto* inspect = parent->add_subcommand("inspect", "Print a .kvc file's header and sections");
  inspect->add_option("file", a->in, ".kvc file")->required();
  AddJsonFlag(inspect, &a->json);
  return {inspect, [a] { return RunInspect(a->in, a->json); }};
}

}  // namespace kvcodec_cli
