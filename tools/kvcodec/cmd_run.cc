// `kvcodec run`, the main job, reuses a prompt's stored KV prefix, prefills the rest, generates, and stores the new
// chunks.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "base/comma_list.h"
#include "cli_common.h"
#include "cli_files.h"
#include "commands.h"
#include "reuse/run_job.h"

namespace kvcodec_cli {
namespace {

struct RunArgs {
  kvc::RunOptions o;  // bound to the options; the prompt, levels and flags below are set from theirs
  std::string prompt_file, token_file, levels;
  bool json = false, no_store = false, no_reuse = false, always_fetch = false;
  RunArgs() { o.model_path = DefaultModel(); }
};

void PrintRunReport(const kvc::RunReport& r) {
  std::string ids;
  for (const int32_t id : r.generated_ids) ids += (ids.empty() ? "" : " ") + std::to_string(id);
  // A model without a tokenizer spells no text: its tokens are what it generated.
  std::printf("%s\n\n", r.text.empty() && !ids.empty() ? ("token ids: " + ids).c_str() : r.text.c_str());
  std::string variants;
  for (const std::string& v : r.variants) variants += (variants.empty() ? "" : " ") + Printable(v);
  const std::string tail = r.tail_tokens > 0 ? kvc::FormatMessage(" and a tail of %u tokens", r.tail_tokens) : "";
  std::printf("store %s: reused %u of %u prompt tokens (%u of %u whole chunks%s%s%s), prefilled %u\n",
              Printable(r.store).c_str(), r.reused_tokens, r.prompt_tokens, r.chunks_fetched, r.chunks_reusable,
              tail.c_str(), variants.empty() ? "" : ": ", variants.c_str(), r.prefilled_tokens);
  if (!r.quality_floor.empty()) std::printf("quality floor: %s\n", Printable(r.quality_floor).c_str());
  if (!r.fallback.empty()) {
    std::printf("reuse stopped early, recomputed from there: %s\n", Printable(r.fallback).c_str());
  }
  std::printf("TTFT %.3f s = lookup %.3f + fetch %.3f (decode %.3f, overlapped) + restore %.3f + prefill %.3f\n",
              r.ttft_s, r.lookup_s, r.fetch_s, r.decode_s, r.restore_s, r.prefill_s);
  std::string stored_levels;
  for (const std::string& v : r.stored_levels) stored_levels += (stored_levels.empty() ? "" : " ") + Printable(v);
  std::printf(
      "fetched %llu bytes (link %s); generated %u tokens in %.3f s; stored %u new chunks%s (%llu bytes, %s) "
      "in %.3f s\n",
      static_cast<unsigned long long>(r.bytes_fetched), r.link_gbps > 0 ? FormatGbps(r.link_gbps).c_str() : "uncapped",
      r.generated_tokens, r.generate_s, r.chunks_stored,
      r.tail_tokens_stored > 0 ? kvc::FormatMessage(" and a tail of %u tokens", r.tail_tokens_stored).c_str() : "",
      static_cast<unsigned long long>(r.bytes_stored), stored_levels.c_str(), r.store_s);
}

int RunRun(RunArgs& a) {
  if (a.prompt_file.empty() == a.token_file.empty())
    return Fail("give a prompt file or --token-file FILE, one of them");
  kvc::RunOptions& o = a.o;
  if (!a.token_file.empty()) {
    // Ids are checked against the model's vocabulary by the job.
    auto ids = ReadTokenIds(a.token_file, INT32_MAX);
    if (!ids.ok()) return Fail(ids.status());
    o.prompt_tokens = std::move(ids).value();
  } else {
    std::vector<uint8_t> prompt_bytes;
    if (auto e = ReadInputFile(a.prompt_file, kMaxTextFileBytes, &prompt_bytes); !e.empty()) return Fail(e);
    o.prompt.assign(prompt_bytes.begin(), prompt_bytes.end());
  }
  o.levels = kvc::SplitCommaList(a.levels);
  o.store_new_chunks = !a.no_store;
  o.reuse = !a.no_reuse;
  o.plan_recompute = !a.always_fetch;
  auto report = kvc::RunJob(o);
  if (!report.ok()) return Fail(report.status());
  if (a.json) {
    std::cout << kvc::RunReportJson(*report) << "\n";
  } else {
    PrintRunReport(*report);
  }
  return 0;
}

}  // namespace

// The sampling parameters, the chunk size, the link rate, the fetch threads and the quality
// limits are checked by kvc::RunJob (its message is the one the user sees), not here.
Command AddRunCommand(CLI::App* parent) {
  auto ru = std::make_shared<RunArgs>();
  kvc::RunOptions& o = ru->o;
  auto* run = parent->add_subcommand("run",
                                     "The main job: reuse a prompt's stored KV prefix, prefill the rest, generate, "
                                     "store the new chunks; prints the text and the TTFT breakdown");
  run->add_option("prompt", ru->prompt_file, "Prompt text file");
  run->add_option("--token-file", ru->token_file,
                  "Token ids to prefill instead of a prompt text, as given (no BOS added): ids separated by spaces "
                  "or newlines; the only prompt a model without a tokenizer takes");
  AddModelOption(run, &o.model_path);
  run->add_option("--store", o.store_url,
                  "Store URL: dir:///path, mem://, redis://[user[:password]@]host:port, "
                  "redis-cluster://[user[:password]@]h:p,... (default: the embedded disk store: $KVCODEC_STORE, else "
                  "$XDG_CACHE_HOME/kvcodec/store, else ~/.cache/kvcodec/store)");
  run->add_option("--store-secret", o.store_secret, kStoreSecretHelp)->envname("KVCODEC_STORE_SECRET");
  run->add_option("--codec", o.codec,
                  "Codec for new chunks, stored beside raw fp16 at its levels within the model's quality floor "
                  "(--levels: exactly those). Without a quality profile measured on the model only the lossless "
                  "rungs (raw fp16, planes) are stored and fetched; `kvcodec calibrate --text T` writes the profile "
                  "and kvtc's calibration")
      ->capture_default_str();
  run->add_option("--levels", ru->levels,
                  "Levels to store, comma-separated, exactly these (default: the codec's levels within the floor)");
  AddCalibrationOption(run, &o.calibration);
  AddQualityOptions(run, &o.profile, &o.quality);
  run->add_option("--link-gbps", o.link_gbps, "Cap the fetch link at this rate (emulated in process; 0: none)")
      ->capture_default_str();
  run->add_option("--chunk", o.chunk_tokens, "Tokens per chunk")->capture_default_str();
  run->add_option("-n,--generate", o.n_generate, "Tokens to generate")->capture_default_str();
  AddThreadsOption(run, &o.threads);
  run->add_option("--fetch-threads", o.fetch_threads,
                  "Workers fetched chunks decode on and new chunks encode on (0: one per core)");
  kvc::SamplingParams& s = o.sampling;
  run->add_option("--temp", s.temperature, "Sampling temperature (0: greedy decoding)")->capture_default_str();
  run->add_option("--top-p", s.top_p, "Nucleus sampling: keep the most likely tokens holding this probability")
      ->capture_default_str();
  run->add_option("--top-k", s.top_k, "Keep only the k most likely tokens (0: off)")->capture_default_str();
  run->add_option("--min-p", s.min_p, "Drop tokens under this fraction of the best one's probability")
      ->capture_default_str();
  run->add_option("--presence-penalty", s.presence_penalty, "Subtracted once from a token already generated")
      ->capture_default_str();
  run->add_option("--frequency-penalty", s.frequency_penalty, "Subtracted per time a token was generated")
      ->capture_default_str();
  run->add_option("--seed", s.seed, "Seed for sampling: the same seed and prompt give the same text (default: random)");
  run->add_flag("--no-store", ru->no_store, "Do not store the prompt's new chunks");
  run->add_flag("--no-reuse", ru->no_reuse, "Ignore stored chunks (recompute everything)");
  run->add_flag("--always-fetch", ru->always_fetch,
                "Fetch every stored chunk (by default the planner prefills one it predicts faster to recompute)");
  AddJsonFlag(run, &ru->json);
  return {run, [ru] { return RunRun(*ru); }};
}

}  // namespace kvcodec_cli
