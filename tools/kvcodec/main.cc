// kvcodec: compress, inspect and evaluate LLM KV caches from the command line. One file per
// subcommand (cmd_<name>.cc); this one builds the app, parses and runs the command given. Which
// commands call the public C API and which the C++ modules: CMakeLists.txt. Every error is one
// line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "libav/video_decoder.h"

// OpenBLAS's thread counts (see OneBlasThread below).
extern "C" int blas_num_threads;
extern "C" int blas_cpu_number;

namespace {

using kvcodec_cli::Fail;

// OpenBLAS starts its threads in its library constructor, before main: one per core but the
// first (or OPENBLAS_NUM_THREADS of them), each mapping a 128 MiB buffer as it starts. Under an
// address-space limit (ulimit -v) a mapping that fails is retried forever, so every command, even
// --version, would spin a core and then wait for that thread at exit, never returning. kvcodec
// calls BLAS single-threaded (src/transform_coding/pca.h) and needs none of those threads, so it sets the
// count before the constructor runs: from the executable's .preinit_array, which runs before any
// shared library's constructor. Setting OPENBLAS_NUM_THREADS there would not do: libc's own
// initialisation, which comes after, resets the environment to the one the process started with.
// These are the variables OPENBLAS_NUM_THREADS=1 sets (OpenBLAS reads them first when nonzero,
// and starts count - 1 threads).
void OneBlasThread(int, char**, char**) {
  blas_num_threads = 1;
  blas_cpu_number = 1;
}
[[gnu::section(".preinit_array"), gnu::used]] void (*one_blas_thread)(int, char**, char**) = &OneBlasThread;

int Main(int argc, char** argv) {
  CLI::App app{"kvcodec: compress, inspect and evaluate LLM KV caches"};
  app.require_subcommand(1);
  app.set_version_flag("--version", KVCODEC_VERSION);
  // One choice for the whole process (the machine's GPU), given before or after the command:
  // subcommands pass options they do not know up to here.
  app.fallthrough();
  std::string video_decoder = "auto";
  app.add_option("--video-decoder", video_decoder,
                 "Engine that decodes video KV: auto (NVDEC where a CUDA device is present and the stream is one it "
                 "decodes, else the CPU), cpu, or nvdec (an error without a device)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "nvdec"}));

  // In the order `kvcodec --help` lists them.
  std::vector<kvcodec_cli::Command> commands;
  commands.push_back(kvcodec_cli::AddCodecsCommand(&app));
  commands.push_back(kvcodec_cli::AddProfileCommand(&app));
  commands.push_back(kvcodec_cli::AddEvalCommand(&app));
  commands.push_back(kvcodec_cli::AddEncodeCommand(&app));
  commands.push_back(kvcodec_cli::AddDecodeCommand(&app));
  commands.push_back(kvcodec_cli::AddCalibrateCommand(&app));
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  commands.push_back(kvcodec_cli::AddBenchCodecCommand(bench));
  commands.push_back(kvcodec_cli::AddBenchVideoCommand(bench));
  commands.push_back(kvcodec_cli::AddBenchRotQuantCommand(bench));
  commands.push_back(kvcodec_cli::AddServeCommand(&app));
  commands.push_back(kvcodec_cli::AddBenchTtftCommand(bench));
  commands.push_back(kvcodec_cli::AddBenchServeCommand(bench));
  commands.push_back(kvcodec_cli::AddRunCommand(&app));
  commands.push_back(kvcodec_cli::AddInspectCommand(&app));
  commands.push_back(kvcodec_cli::AddTokenizeCommand(&app));

  // llama-server's flags of several letters after one dash, which CLI11 reads as bundled short
  // flags: spelled out for `serve`, so a llama-server command line runs as it is.
  std::vector<std::string> args = kvcodec_cli::SpellOutLlamaServerFlags(std::vector<std::string>(argv, argv + argc));
  std::vector<char*> arg_pointers;
  for (std::string& a : args) arg_pointers.push_back(a.data());
  arg_pointers.push_back(nullptr);
  argc = static_cast<int>(args.size());
  argv = arg_pointers.data();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(std::string(e.what()) + " (see --help)");
  }

  if (kvc::Status set = kvc::SetDefaultVideoDecoder(video_decoder); !set.ok()) return Fail(set);
  for (const kvcodec_cli::Command& command : commands) {
    if (*command.app) return command.run();
  }
  return Fail("no command");
}

}  // namespace

// No exception ends the process with an abort: whatever escapes (a bug, memory exhaustion) is one
// error line and exit status 1.
int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::bad_alloc&) {
    return Fail("out of memory");
  } catch (const std::exception& e) {
    return Fail(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return Fail("unexpected exception");
  }
}
