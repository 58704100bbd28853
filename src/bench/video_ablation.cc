#include "bench/video_ablation.h"

#include <zstd.h>

#include <map>
#include <nlohmann/json.hpp>

#include "base/progress.h"
#include "bench/round_rate.h"
#include "codecs/codec.h"
#include "codecs/video/video_codec.h"
#include "codecs/video/video_layout.h"
#include "entropy/deflate.h"
#include "llama/llama_model.h"
#include "llama/model_files.h"
#include "tensor/rope.h"

namespace kvc {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kZstdLevel = 19;

template <typename F>
Result<double> RoundsPerSecond(double min_seconds, F&& round) {
  ASSIGN_OR_RETURN(const RoundRate rate, MeasureRounds(min_seconds, round));
  return rate.per_s;
}

// One chunk's 8-bit codes (the video codec's quantiser and default group), K then V, each
// [layer][token][channel], with their scales: the symbols every row of the ablation codes.
struct ChunkCodes {
  KvShape shape;
  std::vector<uint8_t> codes;
  std::vector<std::vector<GroupScale>> scales;  // [kind * layers + layer]
  uint64_t scale_bytes() const {
    uint64_t n = 0;
    for (const auto& s : scales) n += s.size() * 4;
    return n;
  }
};

ChunkCodes QuantiseChunk(const KvView& view) {
  ChunkCodes c;
  c.shape = view.shape();
  const uint32_t channels = static_cast<uint32_t>(c.shape.row_elems());
  c.codes.resize(2 * c.shape.elems());
  std::vector<float> x(c.shape.layer_elems());
  size_t at = 0;
  for (KvKind kind : kKvKinds) {
    for (uint32_t l = 0; l < c.shape.n_layers; ++l) {
      view.ReadLayerF32(kind, l, x.data());
      QuantiseLayer(x.data(), c.shape.n_tokens, channels, VideoCodec::kDefaultGroup, 8, &c.scales.emplace_back(),
                    c.codes.data() + at);
      at += c.shape.layer_elems();
    }
  }
  return c;
}

// Dequantises every layer of a chunk: the work a decoder of 8-bit codes does after its
// lossless stage, counted in every row's decode speed.
void DequantiseChunk(const ChunkCodes& c, std::vector<float>& x) {
  const uint32_t channels = static_cast<uint32_t>(c.shape.row_elems());
  x.resize(c.shape.layer_elems());
  for (size_t i = 0; i < c.scales.size(); ++i) {
    DequantiseLayer(c.codes.data() + i * c.shape.layer_elems(), c.shape.n_tokens, channels, VideoCodec::kDefaultGroup,
                    c.scales[i], x.data());
  }
}

Result<std::vector<uint8_t>> ZstdCompress(std::span<const uint8_t> in) {
  std::vector<uint8_t> out(ZSTD_compressBound(in.size()));
  const size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), kZstdLevel);
  if (ZSTD_isError(n)) return Internal(std::string("zstd: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

Status ZstdDecompress(std::span<const uint8_t> in, std::span<uint8_t> out) {
  const size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(n) || n != out.size()) return Corrupt("zstd stream");
  return Status::Ok();
}

struct LayoutStep {
  const char* step;
  std::map<std::string, std::string> params;
};

// The published layout first, then the steps from tokens-along-an-axis up to the default.
const std::vector<LayoutStep>& LayoutSteps() {
  static const std::vector<LayoutStep> steps = {
      {"tokens as frames (published layout)",
       {{"layout", "frames"}, {"order", "0"}, {"token_order", "0"}, {"planes", "0"}, {"center", "0"}}},
      {"tokens as frames + channel ordering + layers as planes",
       {{"layout", "frames"}, {"order", "1"}, {"token_order", "0"}, {"planes", "1"}, {"center", "0"}}},
      {"tokens as frames + ordering + planes + token ordering",
       {{"layout", "frames"}, {"order", "1"}, {"token_order", "1"}, {"planes", "1"}, {"center", "0"}}},
      {"tokens along x, channels along y",
       {{"layout", "axis"}, {"order", "0"}, {"token_order", "0"}, {"planes", "0"}, {"center", "0"}}},
      {"+ channel ordering",
       {{"layout", "axis"}, {"order", "1"}, {"token_order", "0"}, {"planes", "0"}, {"center", "0"}}},
      {"+ layers as planes",
       {{"layout", "axis"}, {"order", "1"}, {"token_order", "0"}, {"planes", "1"}, {"center", "0"}}},
      {"+ token ordering",
       {{"layout", "axis"}, {"order", "1"}, {"token_order", "1"}, {"planes", "1"}, {"center", "0"}}},
      {"token ordering without planes",
       {{"layout", "axis"}, {"order", "1"}, {"token_order", "1"}, {"planes", "0"}, {"center", "0"}}},
      {"+ per-channel centring",
       {{"layout", "axis"}, {"order", "1"}, {"token_order", "1"}, {"planes", "1"}, {"center", "1"}}},
  };
  return steps;
}

}  // namespace

Result<std::string> RunVideoAblationJson(const VideoAblationOptions& o) {
  if (o.chunk == 0 || o.ctx < o.chunk) return InvalidArgument("need ctx >= chunk > 0");
  ASSIGN_OR_RETURN(PrefilledText prefilled, PrefillModelText(o.model_path, o.text_path, o.ctx));
  const auto& model = prefilled.model;
  const KvCache& kv = prefilled.kv;
  const KvShape shape = kv.shape();
  const ModelFingerprint& fp = model->fingerprint();

  const uint32_t n_chunks = o.ctx / o.chunk;
  std::vector<KvView> views;
  std::vector<ChunkCodes> chunks;
  uint64_t fp16_bytes = 0;
  for (uint32_t c = 0; c < n_chunks; ++c) {
    ASSIGN_OR_RETURN(KvView v, kv.View(c * o.chunk, o.chunk));
    views.push_back(v);
    chunks.push_back(QuantiseChunk(v));
    fp16_bytes += v.shape().fp16_bytes();
  }
  const double mb = static_cast<double>(fp16_bytes) / 1e6;
  Json steps = Json::array();
  auto add_step = [&](const std::string& step, const std::string& coder, uint64_t stored, double decode_rounds_s) {
    Json j;
    j["step"] = step;
    j["coder"] = coder;
    j["stored_bytes"] = stored;
    j["compression_ratio"] = static_cast<double>(fp16_bytes) / static_cast<double>(stored);
    j["decode_mb_s"] = decode_rounds_s * mb;
    steps.push_back(std::move(j));
  };

  // Reference: the quant codec at 8 bits on the same chunks.
  uint64_t quant_bytes = 0;
  for (uint32_t c = 0; c < n_chunks; ++c) {
    EncodeOptions eo;
    eo.level = "8";
    ASSIGN_OR_RETURN(auto bytes, EncodeKvc(*FindCodec("quant"), views[c], eo, fp, c * o.chunk));
    quant_bytes += bytes.size();
  }

  std::vector<float> scratch;
  uint64_t codes_bytes = 0;
  for (const ChunkCodes& c : chunks) codes_bytes += c.codes.size() + c.scale_bytes();
  ASSIGN_OR_RETURN(double rate, RoundsPerSecond(o.min_seconds, [&]() -> Status {
                     for (const ChunkCodes& c : chunks) DequantiseChunk(c, scratch);
                     return Status::Ok();
                   }));
  add_step("8-bit codes", "none", codes_bytes, rate);

  // The same codes in the video codec's default arrangement (channels x tokens per layer, both
  // chained by similarity, the orders stored): how much of the video rows' gain the reordering
  // alone gives a general-purpose coder.
  std::vector<std::vector<uint8_t>> reordered(chunks.size());
  std::vector<std::vector<std::vector<uint32_t>>> channel_orders(chunks.size()), token_orders(chunks.size());
  uint64_t order_bytes = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkCodes& c = chunks[i];
    const uint32_t channels = static_cast<uint32_t>(c.shape.row_elems());
    const uint32_t tokens = c.shape.n_tokens;
    reordered[i].resize(c.codes.size());
    for (size_t l = 0; l < c.scales.size(); ++l) {
      const uint8_t* in = c.codes.data() + l * c.shape.layer_elems();
      uint8_t* out = reordered[i].data() + l * c.shape.layer_elems();
      channel_orders[i].push_back(OrderChannels(in, tokens, channels));
      token_orders[i].push_back(OrderTokens(in, tokens, channels));
      const auto& co = channel_orders[i].back();
      const auto& to = token_orders[i].back();
      for (uint32_t p = 0; p < channels; ++p) {
        for (uint32_t r = 0; r < tokens; ++r) out[size_t{p} * tokens + r] = in[size_t{to[r]} * channels + co[p]];
      }
      order_bytes += uint64_t{channels} * (channels <= 256 ? 1 : 2) + uint64_t{tokens} * (tokens <= 256 ? 1 : 2);
    }
  }
  auto undo_order = [&](size_t i, const std::vector<uint8_t>& from, ChunkCodes& to) {
    const uint32_t channels = static_cast<uint32_t>(to.shape.row_elems());
    const uint32_t tokens = to.shape.n_tokens;
    for (size_t l = 0; l < to.scales.size(); ++l) {
      const uint8_t* in = from.data() + l * to.shape.layer_elems();
      uint8_t* out = to.codes.data() + l * to.shape.layer_elems();
      const auto& co = channel_orders[i][l];
      const auto& tk = token_orders[i][l];
      for (uint32_t p = 0; p < channels; ++p) {
        for (uint32_t r = 0; r < tokens; ++r) out[size_t{tk[r]} * channels + co[p]] = in[size_t{p} * tokens + r];
      }
    }
  };

  for (bool in_video_order : {false, true}) {
    for (const char* coder : {"deflate-12", "zstd-19"}) {
      const bool zstd = std::string(coder) == "zstd-19";
      std::vector<std::vector<uint8_t>> packed;
      uint64_t stored = in_video_order ? order_bytes : 0;
      for (size_t i = 0; i < chunks.size(); ++i) {
        const std::vector<uint8_t>& symbols = in_video_order ? reordered[i] : chunks[i].codes;
        ASSIGN_OR_RETURN(auto bytes, zstd ? ZstdCompress(symbols) : DeflateCompress(symbols, kMaxDeflateLevel));
        stored += bytes.size() + chunks[i].scale_bytes();
        packed.push_back(std::move(bytes));
      }
      std::vector<ChunkCodes> out = chunks;
      std::vector<uint8_t> staging;
      ASSIGN_OR_RETURN(rate, RoundsPerSecond(o.min_seconds, [&]() -> Status {
                         for (size_t i = 0; i < chunks.size(); ++i) {
                           std::vector<uint8_t>& dst = in_video_order ? staging : out[i].codes;
                           dst.resize(chunks[i].codes.size());
                           RETURN_IF_ERROR(zstd ? ZstdDecompress(packed[i], dst) : DeflateDecompress(packed[i], dst));
                           if (in_video_order) undo_order(i, staging, out[i]);
                           DequantiseChunk(out[i], scratch);
                         }
                         return Status::Ok();
                       }));
      add_step(in_video_order ? "general-purpose coder, codes reordered as the video layout"
                              : "+ general-purpose coder on the same codes",
               coder, stored, rate);
    }
  }

  const Codec& video = *FindCodec("video");
  // Each coder, and x265 as NVDEC decodes it (three layers per 4:4:4 picture whatever the step
  // says, pictures padded to 144 pixels a side): what hardware decodability costs per layout.
  struct CoderColumn {
    std::string label;
    std::map<std::string, std::string> params;
  };
  std::vector<CoderColumn> columns;
  for (VideoCoder coder : kVideoCoders) columns.push_back({VideoCoderName(coder), {{"coder", VideoCoderName(coder)}}});
  columns.push_back({"x265-nvdec", {{"nvdec", "1"}, {"planes", "1"}}});
  ProgressBar progress("video ablation", LayoutSteps().size() * columns.size(), o.progress);
  for (const LayoutStep& s : LayoutSteps()) {
    for (const CoderColumn& column : columns) {
      EncodeOptions eo;
      eo.level = "8";
      eo.params = s.params;
      for (const auto& [key, value] : column.params) eo.params[key] = value;
      eo.params["preset"] = o.preset;
      std::vector<std::vector<uint8_t>> files;
      uint64_t stored = 0;
      for (uint32_t c = 0; c < n_chunks; ++c) {
        ASSIGN_OR_RETURN(auto bytes, EncodeKvc(video, views[c], eo, fp, c * o.chunk));
        stored += bytes.size();
        files.push_back(std::move(bytes));
      }
      ASSIGN_OR_RETURN(rate, RoundsPerSecond(o.min_seconds, [&]() -> Status {
                         for (const auto& f : files) RETURN_IF_ERROR(DecodeKvc(f, &fp).status());
                         return Status::Ok();
                       }));
      add_step(s.step, column.label, stored, rate);
      progress.Advance();
    }
  }
  progress.Finish();

  // Neighbouring-token similarity per layer, over each chunk (what one stream sees), averaged:
  // in text order, with RoPE undone on the keys, and in the codec's token order.
  Json correlation = Json::array();
  const uint32_t channels = static_cast<uint32_t>(shape.row_elems());
  const uint32_t t = o.chunk;
  std::vector<float> x(size_t{t} * channels);
  std::vector<float> x_ordered(x.size());
  std::vector<uint8_t> codes(x.size());
  std::vector<GroupScale> scales;
  auto in_token_order = [&]() {
    QuantiseLayer(x.data(), t, channels, VideoCodec::kDefaultGroup, 8, &scales, codes.data());
    const std::vector<uint32_t> order = OrderTokens(codes.data(), t, channels);
    for (uint32_t r = 0; r < t; ++r) {
      std::copy_n(x.data() + size_t{order[r]} * channels, channels, x_ordered.data() + size_t{r} * channels);
    }
    return NeighbourDifferenceRatio(x_ordered.data(), t, channels);
  };
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    double k = 0, k_rope = 0, k_ordered = 0, v = 0, v_ordered = 0;
    for (uint32_t c = 0; c < n_chunks; ++c) {
      const RopeTable rope(model->info().rope, shape.head_dim, views[c].pos_begin(), t);
      views[c].ReadLayerF32(KvKind::kKey, l, x.data());
      k += NeighbourDifferenceRatio(x.data(), t, channels);
      k_ordered += in_token_order();
      rope.Rotate(x.data(), shape.n_kv_heads, true);
      k_rope += NeighbourDifferenceRatio(x.data(), t, channels);
      views[c].ReadLayerF32(KvKind::kValue, l, x.data());
      v += NeighbourDifferenceRatio(x.data(), t, channels);
      v_ordered += in_token_order();
    }
    Json j;
    j["layer"] = l;
    j["k"] = k / n_chunks;
    j["k_rope_undone"] = k_rope / n_chunks;
    j["k_token_ordered"] = k_ordered / n_chunks;
    j["v"] = v / n_chunks;
    j["v_token_ordered"] = v_ordered / n_chunks;
    correlation.push_back(std::move(j));
  }

  Json report;
  report["model"] = model->path();
  report["ctx"] = o.ctx;
  report["chunk"] = o.chunk;
  report["n_chunks"] = n_chunks;
  report["fp16_bytes"] = fp16_bytes;
  report["preset"] = o.preset;
  report["quant8_ratio"] = static_cast<double>(fp16_bytes) / static_cast<double>(quant_bytes);
  report["steps"] = std::move(steps);
  report["neighbour_difference_ratio"] = std::move(correlation);
  return report.dump(2);
}

}  // namespace kvc
