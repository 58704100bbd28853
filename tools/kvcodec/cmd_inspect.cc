// `kvcodec inspect`: print a .kvc file's header and sections, or a stored state chunk's (the token
// object or the boundary object of a memory that is not one uniform KV cache).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_common.h"
#include "cli_files.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"

namespace kvcodec_cli {
namespace {

// A section's K or V over its layers: "f16 x 1152 B/row", or each distinct type and row size with
// its count of layers when they differ.
std::string TensorSummary(const nlohmann::json& layers, const char* which) {
  std::vector<std::pair<std::string, size_t>> kinds;
  for (const auto& layer : layers) {
    const auto& t = layer[which];
    const std::string kind = t.is_object() ? Printable(t["type_name"]) + " x " +
                                                 std::to_string(t["row_bytes"].get<unsigned long long>()) + " B/row"
                                           : "none";
    if (!kinds.empty() && kinds.back().first == kind) {
      ++kinds.back().second;
    } else {
      kinds.emplace_back(kind, 1);
    }
  }
  if (kinds.size() == 1) return kinds[0].first;
  std::string out;
  for (const auto& [kind, n] : kinds) {
    out += (out.empty() ? "" : ", ") + kind + " (" + std::to_string(n) + (n == 1 ? " layer)" : " layers)");
  }
  return out;
}

void PrintChunkState(const std::string& path, const nlohmann::json& j) {
  const bool tokens = j["kind"] == "state chunk tokens";
  std::printf("%s: %s, %llu bytes%s\n", Printable(path).c_str(), Printable(j["kind"]).c_str(),
              j["file_bytes"].get<unsigned long long>(), tokens ? "" : " (llama.cpp sequence-state bytes)");
  if (tokens) {
    const unsigned n_tokens = j["n_tokens"].get<unsigned>();
    std::printf("  chunk        %u tokens from position %d, sequence %d\n", n_tokens, j["pos_begin"].get<int>(),
                j["seq_id"].get<int>());
    // The memory's sections in order, where each is stored: "tokens, boundary: 1 section here
    // (attention), 1 in the boundary object".
    std::string layout;
    size_t in_boundary = 0;
    for (const auto& where : j["layout"]) {
      layout += (layout.empty() ? "" : ", ") + Printable(where);
      in_boundary += where == "boundary" ? 1 : 0;
    }
    const size_t here = j["sections"].size();
    std::printf("  layout       %s: %zu section%s here (%s)", layout.c_str(), here, here == 1 ? "" : "s",
                Printable(j["memory"]).c_str());
    if (in_boundary > 0) std::printf(", %zu in the boundary object", in_boundary);
    std::printf("\n");
  } else {
    std::printf("  memory       %s, sequence %d\n", Printable(j["memory"]).c_str(), j["seq_id"].get<int>());
  }
  int i = 0;
  for (const auto& s : j["sections"]) {
    if (s["kind"] == "recurrent") {
      const unsigned layers = s["n_layer"].get<unsigned>();
      std::printf("  section %-4d recurrent, %llu bytes, %u cell%s", i++, s["bytes"].get<unsigned long long>(),
                  s["cells"].get<unsigned>(), s["cells"].get<unsigned>() == 1 ? "" : "s");
      if (s["cells"].get<unsigned>() > 0) std::printf(" at position %d", s["pos"].get<int>());
      std::printf(", %u layer%s (%u recurrent): R %llu B/row", layers, layers == 1 ? "" : "s",
                  s["n_recurrent_layers"].get<unsigned>(), s["r_row_bytes"].get<unsigned long long>());
      if (s["history_row_bytes"].get<unsigned long long>() > 0) {
        std::printf(" + history %llu B/row", s["history_row_bytes"].get<unsigned long long>());
      }
      std::printf(", S %llu B/row\n", s["s_row_bytes"].get<unsigned long long>());
      continue;
    }
    const auto& layers = s["layers"];
    std::string v = "no V";
    if (!s["keys_only"].get<bool>()) {
      v = "V " + TensorSummary(layers, "v") + (s["v_trans"].get<bool>() ? " (transposed)" : "");
    }
    std::printf("  section %-4d attention, %u cells from position %d, %zu layer%s: K %s, %s", i++,
                s["cells"].get<unsigned>(), s["pos_begin"].get<int>(), layers.size(), layers.size() == 1 ? "" : "s",
                layers.empty() ? "none" : TensorSummary(layers, "k").c_str(), layers.empty() ? "no V" : v.c_str());
    if (s["cell_ext_bytes"].get<unsigned>() > 0) {
      std::printf(", %u-byte cell extension", s["cell_ext_bytes"].get<unsigned>());
    }
    if (s["n_stream"].get<unsigned>() > 1) {
      std::printf(", stream %u of %u", s["stream"].get<unsigned>(), s["n_stream"].get<unsigned>());
    }
    std::printf("\n");
  }
}

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
  if (j.contains("kind")) {
    PrintChunkState(path, j);
    return 0;
  }
  // The header's names and tags are the file's: each printed as one printable line.
  std::printf("%s: .kvc v%u, %llu bytes\n", Printable(path).c_str(), j["format_version"].get<unsigned>(),
              j["file_bytes"].get<unsigned long long>());
  std::printf("  codec        %s (id %u, v%u), level %s, %llu param bytes\n", Printable(j["codec"]).c_str(),
              j["codec_id"].get<unsigned>(), j["codec_version"].get<unsigned>(), Printable(j["level"]).c_str(),
              j["codec_params_bytes"].get<unsigned long long>());
  std::printf("  shape        %u layers x %u tokens x %u kv heads x %u dims, %s%s\n", j["n_layers"].get<unsigned>(),
              j["n_tokens"].get<unsigned>(), j["n_kv_heads"].get<unsigned>(), j["head_dim"].get<unsigned>(),
              Printable(j["dtype"]).c_str(), j["keys_only"].get<bool>() ? ", keys only" : "");
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
  auto* inspect =
      parent->add_subcommand("inspect", "Print a .kvc file's header and sections, or a stored state chunk's");
  inspect->add_option("file", a->in, ".kvc file or state chunk object")->required();
  AddJsonFlag(inspect, &a->json);
  return {inspect, [a] { return RunInspect(a->in, a->json); }};
}

}  // namespace kvcodec_cli
