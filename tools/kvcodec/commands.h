// The subcommands, one file each (cmd_<name>.cc). Each registers its options on `parent` (the
// app, or `bench` for the benchmarks) and returns what runs it when it is the one given.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace kvcodec_cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddCodecsCommand(CLI::App* parent);
Command AddProfileCommand(CLI::App* parent);
Command AddEvalCommand(CLI::App* parent);
Command AddEncodeCommand(CLI::App* parent);
Command AddCalibrateCommand(CLI::App* parent);
Command AddBenchCodecCommand(CLI::App* parent);
Command AddBenchVideoCommand(CLI::App* parent);
Command AddBenchRotQuantCommand(CLI::App* parent);
Command AddServeCommand(CLI::App* parent);
// A `serve` command line with llama-server's multi-letter one-dash flags (-np, -fa on|off|auto)
// spelled as kvcodec's (--parallel, --flash-attn); any other command line as it is.
std::vector<std::string> SpellOutLlamaServerFlags(std::vector<std::string> args);
Command AddBenchTtftCommand(CLI::App* parent);
Command AddBenchServeCommand(CLI::App* parent);
Command AddRunCommand(CLI::App* parent);
Command AddDecodeCommand(CLI::App* parent);
Command AddInspectCommand(CLI::App* parent);
Command AddTokenizeCommand(CLI::App* parent);

}  // namespace kvcodec_cli
