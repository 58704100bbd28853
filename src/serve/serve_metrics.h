// The completion server's counters and latency histograms, written as Prometheus text.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvc {

// Appends a metric family's `# HELP` and `# TYPE` lines (Prometheus text format 0.0.4), which
// every family gets before its series (`promtool check metrics` wants both).
void WriteMetricFamily(std::string& out, const char* name, const char* type, const char* help);

// A Prometheus histogram of seconds.
class LatencyHistogram {
 public:
  void Add(double seconds);
  // Appends the _bucket, _sum and _count series; `labels` like `stage="fetch"` (or empty).
  void Write(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  static constexpr double kBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(std::size(kBuckets) + 1, 0);
  double sum_ = 0;
  uint64_t n_ = 0;
};

struct ServeMetrics {
  std::mutex mu;                             // guards everything below
  std::map<std::string, uint64_t> requests;  // "endpoint,status" -> count
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0, fetched_bytes = 0, stored_bytes = 0;
  // Tokens whose KV was stored (whole chunks and tails): stored_bytes / stored_tokens is what the
  // store costs a token.
  uint64_t stored_tokens = 0;
  uint64_t store_failures = 0, reuse_failures = 0, damaged_chunks = 0, disconnects = 0;
  // Requests that reused KV, and the prompt tokens they did not prefill, per tier: "hot" (a kept
  // sequence in llama.cpp's memory) and "store" (fetched chunks).
  uint64_t hot_hits = 0, hot_tokens = 0, store_hits = 0, store_tokens = 0;
  // ... and "memory" (decoded chunks the host-memory tier held). A request restored partly from
  // memory and partly from the store counts a hit in each.
  uint64_t memory_hits = 0, memory_tokens = 0;
  // Store hits whose first chunks were prefilled while the rest were fetched (a split).
  uint64_t split_joins = 0;
  // Continuous batching: llama.cpp batches run, the sequences they carried, the most at once.
  uint64_t batches = 0, batched_sequences = 0, peak_batch_sequences = 0;
  LatencyHistogram ttft, queue, lookup, fetch, restore, prefill;

  void CountRequest(const std::string& endpoint, const std::string& status);
  // Every counter and histogram above as Prometheus text (takes mu).
  std::string Text();
};

}  // namespace kvc
