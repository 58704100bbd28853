// `kvcodec run`: the main job: reuse a prompt's stored KV prefix, prefill the rest, generate, store.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cli_files.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"
#include "kvcodec_tools.h"

namespace kvcodec_cli {
namespace {

struct RunArgs {
  std::string model = DefaultModel(), store, store_secret, codec = "kvtc", levels, calibration, prompt_file, token_file;
  double link_gbps = 0;
  uint32_t chunk = 256, n_generate = 32;
  int threads = 0, fetch_threads = 0;
  bool json = false, no_store = false, no_reuse = false, always_fetch = false;
  QualityArgs quality;
  double temperature = 0, top_p = 1, min_p = 0, presence_penalty = 0, frequency_penalty = 0;
  int32_t top_k = 0;
  std::optional<uint64_t> seed;
};

int RunRun(const RunArgs& a) {
  if (a.prompt_file.empty() == a.token_file.empty())
    return Fail("give a prompt file or --token-file FILE, one of them");
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  if (!a.token_file.empty()) {
    // Ids are checked against the model's vocabulary by the job.
    auto read = kvcodec::ReadTokenFile(a.token_file, INT32_MAX);
    if (!read.ok()) return Fail(read.error());
    prompt_tokens = std::move(read.value());
  } else {
    std::vector<uint8_t> prompt_bytes;
    if (auto e = kvcodec_cli::ReadInputFile(a.prompt_file, kMaxTextFileBytes, &prompt_bytes); !e.empty()) {
      return Fail(e);
    }
    prompt.assign(prompt_bytes.begin(), prompt_bytes.end());
  }
  kvc_run_params p{};
  p.model_path = a.model.c_str();
  p.prompt = a.token_file.empty() ? prompt.c_str() : nullptr;
  p.prompt_tokens = prompt_tokens.empty() ? nullptr : prompt_tokens.data();
  p.n_prompt_tokens = prompt_tokens.size();
  p.store_url = a.store.empty() ? nullptr : a.store.c_str();
  p.codec = a.codec.c_str();
  p.levels = a.levels.empty() ? nullptr : a.levels.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.link_gbps = a.link_gbps;
  p.chunk_tokens = a.chunk;
  p.n_generate = a.n_generate;
  p.n_threads = a.threads;
  p.no_store = a.no_store ? 1 : 0;
  p.no_reuse = a.no_reuse ? 1 : 0;
  p.always_fetch = a.always_fetch ? 1 : 0;
  p.store_secret = a.store_secret.empty() ? nullptr : a.store_secret.c_str();
  a.quality.Set(&p);
  p.temperature = a.temperature;
  p.top_p = a.top_p;
  p.top_k = a.top_k;
  p.min_p = a.min_p;
  p.presence_penalty = a.presence_penalty;
  p.frequency_penalty = a.frequency_penalty;
  p.has_seed = a.seed.has_value() ? 1 : 0;
  p.seed = a.seed.value_or(0);
  p.n_fetch_threads = a.fetch_threads;
  auto report = kvcodec::RunJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::string ids;
  for (const auto& id : j["generated_ids"]) ids += (ids.empty() ? "" : " ") + std::to_string(id.get<int32_t>());
  // A model without a tokenizer spells no text: its tokens are what it generated.
  const std::string text = j["text"].get<std::string>();
  std::printf("%s\n\n", text.empty() && !ids.empty() ? ("token ids: " + ids).c_str() : text.c_str());
  std::string variants;
  for (const auto& v : j["variants"]) variants += (variants.empty() ? "" : " ") + Printable(v);
  std::printf("store %s: reused %u of %u prompt tokens (%u of %u whole chunks%s%s), prefilled %u\n",
              Printable(j["store"]).c_str(), j["reused_tokens"].get<unsigned>(), j["prompt_tokens"].get<unsigned>(),
              j["chunks_fetched"].get<unsigned>(), j["chunks_reusable"].get<unsigned>(), variants.empty() ? "" : ": ",
              variants.c_str(), j["prefilled_tokens"].get<unsigned>());
  if (!j["quality_floor"].get<std::string>().empty()) {
    std::printf("quality floor: %s\n", Printable(j["quality_floor"]).c_str());
  }
  if (!j["fallback"].get<std::string>().empty()) {
    std::printf("reuse stopped early, recomputed from there: %s\n", Printable(j["fallback"]).c_str());
  }
  std::printf("TTFT %.3f s = lookup %.3f + fetch %.3f (decode %.3f, overlapped) + restore %.3f + prefill %.3f\n",
              j["ttft_s"].get<double>(), j["lookup_s"].get<double>(), j["fetch_s"].get<double>(),
              j["decode_s"].get<double>(), j["restore_s"].get<double>(), j["prefill_s"].get<double>());
  const double link = j["link_gbps"].get<double>();
  std::string stored_levels;
  for (const auto& v : j["stored_levels"]) stored_levels += (stored_levels.empty() ? "" : " ") + Printable(v);
  std::printf(
      "fetched %llu bytes (link %s); generated %u tokens in %.3f s; stored %u new chunks (%llu bytes, %s) "
      "in %.3f s\n",
      static_cast<unsigned long long>(j["bytes_fetched"].get<uint64_t>()),
      link > 0 ? FormatGbps(link).c_str() : "uncapped", j["generated_tokens"].get<unsigned>(),
      j["generate_s"].get<double>(), j["chunks_stored"].get<unsigned>(),
      static_cast<unsigned long long>(j["bytes_stored"].get<uint64_t>()), stored_levels.c_str(),
      j["store_s"].get<double>());
  return 0;
}

}  // namespace

Command AddRunCommand(CLI::App* parent) {
  auto ru = std::make_shared<RunArgs>();
  auto* run = parent->add_subcommand("run",
                                     "The main job: reuse a prompt's stored KV prefix, prefill the rest, generate, "
                                     "store the new chunks; prints the text and the TTFT breakdown");
  run->add_option("prompt", ru->prompt_file, "Prompt text file");
  run->add_option("--token-file", ru->token_file,
                  "Token ids to prefill instead of a prompt text, as given (no BOS added): ids separated by spaces "
                  "or newlines; the only prompt a model without a tokenizer takes");
  AddModelOption(run, &ru->model);
  run->add_option("--store", ru->store,
                  "Store URL: dir:///path, mem://, redis://[user[:password]@]host:port, "
                  "redis-cluster://[user[:password]@]h:p,... (default: the embedded disk store, $KVCODEC_STORE or "
                  "~/.cache/kvcodec/store)");
  run->add_option("--store-secret", ru->store_secret, kStoreSecretHelp)->envname("KVCODEC_STORE_SECRET");
  run->add_option("--codec", ru->codec,
                  "Codec for new chunks, stored beside raw fp16 at its levels within the model's quality floor "
                  "(without a profile measured on the model: raw fp16 only, lossless; `kvcodec calibrate` writes "
                  "the profile and kvtc's calibration)")
      ->capture_default_str();
  run->add_option("--levels", ru->levels,
                  "Levels to store, comma-separated, exactly these (default: the codec's levels within the floor)");
  AddCalibrationOption(run, &ru->calibration);
  ru->quality.AddTo(run);
  run->add_option("--link-gbps", ru->link_gbps, "Cap the fetch link at this rate (emulated in process; 0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--chunk", ru->chunk, "Tokens per chunk")->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  run->add_option("-n,--generate", ru->n_generate, "Tokens to generate")->capture_default_str();
  AddThreadsOption(run, &ru->threads);
  run->add_option("--fetch-threads", ru->fetch_threads,
                  "Workers fetched chunks decode on and new chunks encode on (0: one per core)")
      ->check(CLI::Range(0, 64));
  run->add_option("--temp", ru->temperature, "Sampling temperature (0: greedy decoding)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  run->add_option("--top-p", ru->top_p, "Nucleus sampling: keep the most likely tokens holding this probability")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  run->add_option("--top-k", ru->top_k, "Keep only the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--min-p", ru->min_p, "Drop tokens under this fraction of the best one's probability")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--presence-penalty", ru->presence_penalty, "Subtracted once from a token already generated")
      ->capture_default_str()
      ->check(CLI::Range(-2.0, 2.0));
  run->add_option("--frequency-penalty", ru->frequency_penalty, "Subtracted per time a token was generated")
      ->capture_default_str()
      ->check(CLI::Range(-2.0, 2.0));
  run->add_option("--seed", ru->seed,
                  "Seed for sampling: the same seed and prompt give the same text (default: random)");
  run->add_flag("--no-store", ru->no_store, "Do not store the prompt's new chunks");
  run->add_flag("--no-reuse", ru->no_reuse, "Ignore stored chunks (recompute everything)");
  run->add_flag("--always-fetch", ru->always_fetch,
                "Fetch every stored chunk (by default the planner prefills one it predicts faster to recompute)");
  AddJsonFlag(run, &ru->json);
  return {run, [ru] { return RunRun(*ru); }};
}

}  // namespace kvcodec_cli
