// Codec throughput on a real KV cache: encode and decode MB/s (fp16 bytes per second), on one
// thread, on two threads within a chunk (decode) and on every core, beside this machine's memcpy
// bandwidth measured in the same run.
#pragma once

#include <string>

#include "base/status.h"
#include "codecs/codec.h"
#include "llama/llama_model.h"

namespace kvc {

struct CodecBenchOptions {
  std::string model_path;
  std::string text_path;    // empty: eval.txt beside the model
  std::string calibration;  // empty: <model>.kvcal beside the model, if present
  std::string codec = "kvtc";
  EncodeOptions encode;
  uint32_t ctx = 1024;       // tokens prefilled
  uint32_t chunk = 256;      // tokens per encoded chunk (each chunk is one .kvc)
  double min_seconds = 1.0;  // per measurement
  int threads = 0;           // for the all-cores figures; 0: every core
};

struct CodecBenchReport {
  std::string codec, level;
  uint32_t ctx = 0, chunk = 0, n_chunks = 0, threads = 0;
  uint64_t bytes_fp16 = 0, bytes_stored = 0;
  double compression_ratio = 0;
  double encode_mb_s_1t = 0, decode_mb_s_1t = 0;
  // Chunks one after another, each decoded with a pool of 2 threads in its CodecContext: what a
  // codec gains from threads of its own within one chunk.
  double decode_mb_s_2t = 0;
  // The same three per second of the process's CPU time (all threads): robust to other work on
  // the machine; for 2 threads, what the threads cost rather than what they earn.
  double encode_mb_cpu_s_1t = 0, decode_mb_cpu_s_1t = 0, decode_mb_cpu_s_2t = 0;
  double encode_mb_s_all = 0, decode_mb_s_all = 0;
  double memcpy_mb_s_1t = 0, memcpy_mb_s_all = 0;
};

Result<CodecBenchReport> RunCodecBench(const CodecBenchOptions& options);
std::string CodecBenchReportJson(const CodecBenchReport& report);

}  // namespace kvc
