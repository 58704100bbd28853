// What the subcommands share: the one-line error, defaults and limits, and option helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvcodec/kvcodec.hpp"
#include "reuse/model_profile.h"
#include "tensor/kv_cache.h"

namespace kvcodec_cli {

// One line on stderr, whatever the message quotes: a path or a name with a newline or an escape
// sequence in it can neither forge another line nor reach the terminal as a control sequence.
// (The library's own messages are already escaped this way.) Returns the exit status, 1.
int Fail(const std::string& message);
int Fail(const kvcodec::Error& error);  // the C API's (its message)
int Fail(const kvc::Status& status);    // the library's (its code and message, as the C API words it)

// `text` as one printable line (kvc::PrintableOneLine): every string a report prints goes through
// it, since most come from files (a profile's text, a .kvc header's names, a calibration's
// choice) or from the command line, and a control character in one would otherwise reach the
// terminal as an escape sequence or forge a line such as "kvcodec: error: ...".
std::string Printable(const std::string& text);
// The same for a JSON member that holds a string.
std::string Printable(const nlohmann::json& value);

// $KVCODEC_MODEL, else models/kvtiny/kvtiny.gguf relative to the current directory (the test
// model, run from a source checkout's root); no absolute path is compiled in.
std::string DefaultModel();

// Input limits: a .kvc or KV dump holds at most a 16 GiB cache (the library's own limit) plus its
// headers; texts and prompts are far smaller than a gigabyte.
constexpr uint64_t kMaxKvFileBytes = (uint64_t{16} << 30) + (uint64_t{64} << 20);
constexpr uint64_t kMaxTextFileBytes = uint64_t{1} << 30;

constexpr const char* kStoreSecretHelp =
    "Seal and check every stored object with HMAC-SHA256 keyed with this secret, so that only writers "
    "holding it can supply chunks (for shared stores); prefer $KVCODEC_STORE_SECRET, which `ps` does not show";

// --param values as the C API takes them: "k=v,k=v" (the C++ commands: ParseCodecParams).
std::string JoinParams(const std::vector<std::string>& params);
// "f32", "bf16", else fp16 (the option's check admits only those three).
kvc::DType ParseCacheType(const std::string& s);

// A --token-file's ids (kvc::ReadTokenFile), every document one after another, each id checked
// against n_vocab.
kvc::Result<std::vector<int32_t>> ReadTokenIds(const std::string& path, uint32_t n_vocab);

// "10 Gbps", "0.3 Gbps": a link rate in reports.
std::string FormatGbps(double gbps);

// Options most subcommands take, worded the same everywhere.
void AddModelOption(CLI::App* app, std::string* model);           // --model, default shown
void AddThreadsOption(CLI::App* app, int* threads);               // --threads for llama.cpp
void AddJsonFlag(CLI::App* app, bool* json);                      // --json
void AddQuietFlag(CLI::App* app, bool* quiet);                    // --quiet: no progress line
void AddCalibrationOption(CLI::App* app, std::string* path);      // --calibration, default beside the model
void AddParamOption(CLI::App* app, std::vector<std::string>* p);  // --param key=value, repeatable
void AddCacheTypeOption(CLI::App* app, std::string* type);        // --cache-type f16|f32|bf16

// --max-ppl-delta and --min-top1 for the C API (`codecs --model`), which reads a limit of 0 as
// its default: each is checked to be above 0 here.
void AddQualityLimitOptions(CLI::App* app, double* max_ppl_delta, double* min_top1);

// The quality-floor options of run, serve and bench ttft, bound to their options' profile path
// and limits (default: kvc::QualityLimits's), which the library checks: --profile,
// --max-ppl-delta, --min-top1.
void AddQualityOptions(CLI::App* app, std::string* profile, kvc::QualityLimits* limits);

}  // namespace kvcodec_cli
