#include "serve/serve_metrics.h"

#include "base/status.h"

namespace kvc {

void WriteMetricFamily(std::string& out, const char* name, const char* type, const char* help) {
  out += FormatMessage("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void LatencyHistogram::Add(double seconds) {
  size_t i = 0;
  while (i < std::size(kBuckets) && seconds > kBuckets[i]) ++i;
  ++counts_[i];
  sum_ += seconds;
  ++n_;
}

void LatencyHistogram::Write(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  const std::string sep = labels.empty() ? "" : labels + ",";
  for (size_t i = 0; i < std::size(kBuckets); ++i) {
    cumulative += counts_[i];
    out += FormatMessage("%s_bucket{%sle=\"%g\"} %llu\n", name.c_str(), sep.c_str(), kBuckets[i],
                         static_cast<unsigned long long>(cumulative));
  }
  cumulative += counts_.back();
  out += FormatMessage("%s_bucket{%sle=\"+Inf\"} %llu\n", name.c_str(), sep.c_str(),
                       static_cast<unsigned long long>(cumulative));
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += FormatMessage("%s_sum%s %.6f\n%s_count%s %llu\n", name.c_str(), braces.c_str(), sum_, name.c_str(),
                       braces.c_str(), static_cast<unsigned long long>(n_));
}

void ServeMetrics::CountRequest(const std::string& endpoint, const std::string& status) {
  std::lock_guard lock(mu);
  ++requests[endpoint + "," + status];
}

std::string ServeMetrics::Text() {
  std::lock_guard lock(mu);
  std::string out;
  WriteMetricFamily(out, "kvcodec_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, n] : requests) {
    const size_t comma = key.find(',');
    out += FormatMessage("kvcodec_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", key.substr(0, comma).c_str(),
                         key.substr(comma + 1).c_str(), static_cast<unsigned long long>(n));
  }
  auto counter = [&](const char* name, uint64_t v, const char* help) {
    WriteMetricFamily(out, name, "counter", help);
    out += FormatMessage("%s %llu\n", name, static_cast<unsigned long long>(v));
  };
  counter("kvcodec_prompt_tokens_total", prompt_tokens, "Prompt tokens of completed requests.");
  counter("kvcodec_cached_prompt_tokens_total", cached_tokens,
          "Prompt tokens not prefilled: kept in memory or restored from stored KV.");
  WriteMetricFamily(out, "kvcodec_reuse_hits_total", "counter",
                    "Requests that reused KV, by tier: hot (kept in llama.cpp's memory), memory (decoded chunks held "
                    "in host memory) or store (fetched).");
  out += FormatMessage(
      "kvcodec_reuse_hits_total{tier=\"hot\"} %llu\nkvcodec_reuse_hits_total{tier=\"memory\"} "
      "%llu\nkvcodec_reuse_hits_total{tier=\"store\"} %llu\n",
      static_cast<unsigned long long>(hot_hits), static_cast<unsigned long long>(memory_hits),
      static_cast<unsigned long long>(store_hits));
  WriteMetricFamily(out, "kvcodec_reused_tokens_total", "counter", "Prompt tokens reused, not prefilled, by tier.");
  out += FormatMessage(
      "kvcodec_reused_tokens_total{tier=\"hot\"} %llu\nkvcodec_reused_tokens_total{tier=\"memory\"} "
      "%llu\nkvcodec_reused_tokens_total{tier=\"store\"} %llu\n",
      static_cast<unsigned long long>(hot_tokens), static_cast<unsigned long long>(memory_tokens),
      static_cast<unsigned long long>(store_tokens));
  counter("kvcodec_split_reuses_total", split_joins,
          "Store hits whose first chunks were prefilled while the later ones were fetched (a slow link).");
  counter("kvcodec_completion_tokens_total", completion_tokens, "Tokens generated.");
  counter("kvcodec_fetched_bytes_total", fetched_bytes, "Bytes of stored KV chunks fetched.");
  counter("kvcodec_stored_bytes_total", stored_bytes, "Bytes of KV chunks stored.");
  counter("kvcodec_stored_tokens_total", stored_tokens,
          "Tokens whose KV was stored (chunks and tails); stored bytes over these: the store's bytes per token.");
  counter("kvcodec_store_failures_total", store_failures, "Chunks that could not be stored.");
  counter("kvcodec_reuse_failures_total", reuse_failures,
          "Reuses abandoned for recomputation (missing or bad chunks).");
  counter("kvcodec_damaged_chunks_total", damaged_chunks, "Stored chunks that failed their checks when fetched.");
  counter("kvcodec_client_disconnects_total", disconnects, "Requests cancelled because the client went away.");
  counter("kvcodec_batches_total", batches, "llama.cpp batches decoded.");
  counter("kvcodec_batched_sequences_total", batched_sequences, "Sequences summed over the batches decoded.");
  WriteMetricFamily(out, "kvcodec_batch_sequences_peak", "gauge", "Most sequences decoded in one batch so far.");
  out += FormatMessage("kvcodec_batch_sequences_peak %llu\n", static_cast<unsigned long long>(peak_batch_sequences));
  WriteMetricFamily(out, "kvcodec_ttft_seconds", "histogram", "Time from a request's arrival to its first token.");
  ttft.Write(out, "kvcodec_ttft_seconds", "");
  WriteMetricFamily(
      out, "kvcodec_stage_seconds", "histogram",
      "Time a request spent in each stage before its first token (queue, lookup, fetch, restore, prefill).");
  queue.Write(out, "kvcodec_stage_seconds", "stage=\"queue\"");
  lookup.Write(out, "kvcodec_stage_seconds", "stage=\"lookup\"");
  fetch.Write(out, "kvcodec_stage_seconds", "stage=\"fetch\"");
  restore.Write(out, "kvcodec_stage_seconds", "stage=\"restore\"");
  prefill.Write(out, "kvcodec_stage_seconds", "stage=\"prefill\"");
  return out;
}

}  // namespace kvc
