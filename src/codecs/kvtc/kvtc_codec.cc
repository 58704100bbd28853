#include "codecs/kvtc/kvtc_codec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "base/byte_io.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "entropy/block.h"
#include "entropy/deflate.h"
#include "entropy/rans.h"
#include "entropy/varint.h"
#include "tensor/rope.h"
#include "transform_coding/basis_layout.h"
#include "transform_coding/calibration_registry.h"
#include "transform_coding/code_stream.h"
#include "transform_coding/component_quantizer.h"
#include "transform_coding/decode_scratch.h"
#include "transform_coding/pca.h"
#include "transform_coding/quantizer.h"
#include "transform_coding/reconstruct_rows.h"

namespace kvc {
namespace {

constexpr uint32_t kTagExempt = 0x58;  // 'X': fp16 rows of the sink and window tokens
constexpr uint32_t kTagScales = 0x53;  // 'S': per-token group scales (fp16), block-coded
constexpr uint32_t kTagCodes = 0x43;   // 'C': quantised coefficients, entropy-coded
constexpr uint8_t kParamsVersion = 1;
constexpr size_t kParamsBytes = 1 + 16 + 4 + 4 + 4 + 1;

using CodesMethod = KvtcCodesMethod;

struct KvtcParams {
  Hash128 calibration{};
  float target_ratio = 0;
  uint32_t sinks = 0;
  uint32_t window = 0;
  // DEFLATE by measurement: on both test models it beat the order-0 rANS (one table per code
  // width) on ratio (about 17% smaller files) and on decode speed (docs/results.md).
  CodesMethod entropy = CodesMethod::kDeflate;
};

std::vector<uint8_t> WriteParams(const KvtcParams& p) {
  ByteWriter w;
  w.U8(kParamsVersion);
  w.Bytes(p.calibration.data(), p.calibration.size());
  w.F32(p.target_ratio);
  w.U32(p.sinks);
  w.U32(p.window);
  w.U8(static_cast<uint8_t>(p.entropy));
  return w.Take();
}

Result<KvtcParams> ReadParams(std::span<const uint8_t> bytes) {
  KVC_CHECK_CORRUPT(bytes.size() == kParamsBytes, "kvtc params are %zu bytes, expected %zu", bytes.size(),
                    kParamsBytes);
  ByteReader r(bytes);
  KvtcParams p;
  uint8_t version, entropy;
  RETURN_IF_ERROR(r.U8(&version, "kvtc params version"));
  KVC_CHECK_CORRUPT(version == kParamsVersion, "kvtc params version %u (expected %u)", version, kParamsVersion);
  std::span<const uint8_t> hash;
  RETURN_IF_ERROR(r.Bytes(16, &hash, "calibration hash"));
  std::memcpy(p.calibration.data(), hash.data(), 16);
  RETURN_IF_ERROR(r.F32(&p.target_ratio, "target ratio"));
  RETURN_IF_ERROR(r.U32(&p.sinks, "sinks"));
  RETURN_IF_ERROR(r.U32(&p.window, "window"));
  RETURN_IF_ERROR(r.U8(&entropy, "entropy method"));
  KVC_CHECK_CORRUPT(r.empty(), "kvtc params have %zu trailing bytes", r.remaining());
  KVC_CHECK_CORRUPT(entropy <= static_cast<uint8_t>(kLastKvtcCodesMethod), "unknown entropy method %u", entropy);
  KVC_CHECK_CORRUPT(std::isfinite(p.target_ratio) && p.target_ratio > 0, "target ratio is not a positive number");
  p.entropy = static_cast<CodesMethod>(entropy);
  return p;
}

// Tokens [0, prefix) are attention sinks and [n - suffix, n) the recent window: both fp16.
struct ExemptRanges {
  uint32_t prefix = 0;
  uint32_t suffix = 0;
  uint32_t middle() const { return total - prefix - suffix; }
  uint32_t total = 0;
};

ExemptRanges Exempt(uint32_t n_tokens, int32_t pos_begin, uint32_t sinks, uint32_t window) {
  ExemptRanges e;
  e.total = n_tokens;
  if (pos_begin < static_cast<int64_t>(sinks)) {
    e.prefix = static_cast<uint32_t>(std::min<int64_t>(int64_t{sinks} - pos_begin, n_tokens));
  }
  e.suffix = std::min(window, n_tokens - e.prefix);
  return e;
}

// Per-basis view into the flat bit allocation.
struct BasisPlan {
  std::span<const uint8_t> bits;  // groups kept (trailing all-zero groups dropped)
  uint32_t n_keep = 0;            // coefficients kept
  size_t n_codes = 0;             // per token
  size_t n_scales = 0;            // per token
};

std::vector<BasisPlan> PlanBases(const KvtcCalibration& c, const BitAllocation& alloc) {
  std::vector<BasisPlan> plans(c.bases.size());
  size_t offset = 0;
  for (uint32_t i = 0; i < c.bases.size(); ++i) {
    const uint32_t groups = c.n_groups(i);
    std::span<const uint8_t> bits(alloc.bits.data() + offset, groups);
    offset += groups;
    uint32_t kept = groups;
    while (kept > 0 && bits[kept - 1] == 0) --kept;
    BasisPlan& p = plans[i];
    p.bits = bits.first(kept);
    p.n_keep = std::min(kept * c.group_size, c.bases[i].n_components);
    for (uint32_t g = 0; g < kept; ++g) {
      const uint32_t len = std::min(c.group_size, p.n_keep - g * c.group_size);
      if (bits[g] > 0) {
        p.n_codes += len;
        p.n_scales += 1;
      }
    }
  }
  return plans;
}

const BitAllocation* FindAllocation(const KvtcCalibration& c, float ratio) {
  for (const auto& a : c.allocations)
    if (a.target_ratio == ratio) return &a;
  return nullptr;
}

std::string LevelsOf(const KvtcCalibration& c) {
  std::string s;
  for (const auto& a : c.allocations) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", a.target_ratio);
    s += (s.empty() ? "" : ", ") + std::string(buf);
  }
  return s;
}

Status CheckShape(const KvtcCalibration& c, const KvShape& s) {
  if (s.n_layers != c.n_layers || s.n_kv_heads != c.n_kv_heads || s.head_dim != c.head_dim) {
    return InvalidArgument(FormatMessage("KV shape %ux%ux%u does not match the calibration's %ux%ux%u", s.n_layers,
                                         s.n_kv_heads, s.head_dim, c.n_layers, c.n_kv_heads, c.head_dim));
  }
  // The bases and bit widths exist for the calibration's kinds only, so a cache must have
  // exactly those: V has no bases in a keys-only calibration, and a keys-only cache no V to code.
  if (s.keys_only != c.keys_only) {
    return InvalidArgument(s.keys_only ? "the KV holds keys only, but the calibration is for keys and values"
                                       : "the KV holds keys and values, but the calibration is for keys only");
  }
  return Status::Ok();
}

// The runs of code widths of every basis's codes, in file order (each basis in the quantiser's
// group-major order).
std::vector<KvtcCodeRun> CodeRuns(const KvtcCalibration& c, const std::vector<BasisPlan>& plans, uint32_t n_tokens) {
  std::vector<KvtcCodeRun> runs;
  for (const BasisPlan& p : plans) {
    for (uint32_t g = 0; g < p.bits.size(); ++g) {
      if (p.bits[g] == 0) continue;
      const uint32_t len = std::min(c.group_size, p.n_keep - g * c.group_size);
      runs.push_back({p.bits[g], size_t{len} * n_tokens});
    }
  }
  return runs;
}

// fp32 rows of the middle tokens, per kind and layer; keys with RoPE undone. V's stay empty
// for a keys-only cache.
using LayerRows = std::array<std::vector<std::vector<float>>, 2>;

Result<std::shared_ptr<const LoadedCalibration>> CalibrationForEncode(const EncodeOptions& options,
                                                                      const CodecContext& context,
                                                                      const KvShape& shape) {
  if (context.calibrations == nullptr) return InvalidArgument("kvtc needs a calibration registry");
  auto it = options.params.find("calibration");
  if (it != options.params.end()) return context.calibrations->Load(it->second);
  if (context.model != nullptr) {
    if (auto found = context.calibrations->FindForModel(*context.model, shape)) return found;
  }
  return InvalidArgument("kvtc needs a calibration: run `kvcodec calibrate` and pass calibration=FILE.kvcal");
}

}  // namespace

const CodecInfo& KvtcCodec::info() const {
  static const CodecInfo info{
      .name = "kvtc",
      .id = 3,
      .version = 1,
      .levels = {"4", "8", "12", "16", "20", "24", "32", "48", "64"},
      .default_level = "16",
      .description =
          "transform coding: PCA basis and quantiser from `kvcodec calibrate` (per-component or "
          "per-token group scales, chosen per model), a bit allocation per target ratio (the level) "
          "met after entropy coding, rANS (component) or DEFLATE (token-group); sink/window tokens "
          "fp16 when asked",
      .params = {"calibration=<file.kvcal> (default: the one loaded for the model)", "sinks=0", "window=0",
                 "entropy=deflate|rans|rans-codes|none"},
      .needs_calibration = true,
  };
  return info;
}

// Messages here start without "kvtc: ": EncodeKvc and DecodeKvc put the codec's name before
// whatever a codec returns.
Result<EncodedKv> KvtcCodec::Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const {
  static constexpr std::string_view kKnown[] = {"calibration", "sinks", "window", "entropy"};
  RETURN_IF_ERROR(CheckKnownParams(options, kKnown));
  ASSIGN_OR_RETURN(auto loaded, CalibrationForEncode(options, context, kv.shape()));
  const KvtcCalibration& cal = loaded->calibration;
  if (context.model != nullptr && cal.model_fingerprint != *context.model) {
    return InvalidArgument("calibration " + loaded->path + " was made for another model");
  }
  RETURN_IF_ERROR(CheckShape(cal, kv.shape()));

  KvtcParams p;
  p.calibration = loaded->hash;
  const std::string level = options.level.empty() ? info().default_level : options.level;
  float ratio = 0;
  auto [ptr, ec] = std::from_chars(level.data(), level.data() + level.size(), ratio);
  if (ec != std::errc() || ptr != level.data() + level.size())
    return InvalidArgument("kvtc level '" + level + "' is not a number");
  const BitAllocation* alloc = FindAllocation(cal, ratio);
  if (alloc == nullptr) {
    return InvalidArgument("kvtc level " + level + " is not in the calibration (has " + LevelsOf(cal) + ")");
  }
  p.target_ratio = ratio;
  // 0 by measurement: with the component quantiser, keeping the first 4 tokens in fp16 changed no
  // figure of kvh32 or kvtiny (KL, top-1, perplexity) but cost up to 40% of the ratio of short chunks.
  ASSIGN_OR_RETURN(p.sinks, ParamU32(options, "sinks", 0, 0, kMaxTokens));
  ASSIGN_OR_RETURN(p.window, ParamU32(options, "window", 0, 0, kMaxTokens));
  // Component codes are draws of one shape per width, which rANS with a table per width codes
  // better than DEFLATE's matches (docs/results.md); over tuples of neighbouring codes it needs
  // a half to a quarter of the decode steps.
  if (cal.quantizer == KvtcQuantizer::kComponent) p.entropy = CodesMethod::kRansTuplesWide;
  if (auto it = options.params.find("entropy"); it != options.params.end()) {
    if (it->second == "rans")
      p.entropy = CodesMethod::kRansTuplesWide;
    else if (it->second == "rans-codes")
      p.entropy = CodesMethod::kRans;
    else if (it->second == "deflate")
      p.entropy = CodesMethod::kDeflate;
    else if (it->second == "none")
      p.entropy = CodesMethod::kPacked;
    else
      return InvalidArgument("kvtc entropy must be rans, rans-codes, deflate or none");
  }

  const KvShape shape = kv.shape();
  const ExemptRanges ex = Exempt(shape.n_tokens, kv.pos_begin(), p.sinks, p.window);
  const uint32_t n = ex.middle();
  const size_t row = shape.row_elems();

  // Exempt rows as fp16.
  KvcSection exempt{kTagExempt, {}};
  {
    std::vector<float> buf(row * std::max(ex.prefix, ex.suffix));
    std::vector<uint16_t> half(buf.size());
    for (KvKind kind : shape.kinds()) {
      for (uint32_t l = 0; l < shape.n_layers; ++l) {
        for (auto [begin, count] : {std::pair{0u, ex.prefix}, std::pair{shape.n_tokens - ex.suffix, ex.suffix}}) {
          if (count == 0) continue;
          kv.ReadRowsF32(kind, l, begin, count, buf.data());
          if (!AllInFp16Range(buf.data(), count * row)) {
            return InvalidArgument(FormatMessage("%s layer %u holds a value fp16 cannot store", KvKindName(kind), l));
          }
          Fp32ToFp16(buf.data(), half.data(), count * row);
          const auto* bytes = reinterpret_cast<const uint8_t*>(half.data());
          for (size_t i = 0; i < count * row; ++i) {  // little-endian on every platform we write
            exempt.bytes.push_back(bytes[2 * i]);
            exempt.bytes.push_back(bytes[2 * i + 1]);
          }
        }
      }
    }
  }

  // Middle tokens: K with RoPE undone, as fp32 rows per layer.
  LayerRows rows;
  const RopeTable rope(cal.rope, shape.head_dim, kv.pos_begin() + static_cast<int32_t>(ex.prefix), n);
  for (KvKind kind : shape.kinds()) {
    auto& layers = rows[static_cast<int>(kind)];
    layers.assign(shape.n_layers, std::vector<float>(row * n));
    ParallelForOrSerial(context.pool, shape.n_layers, [&](size_t l) {
      if (n == 0) return;
      kv.ReadRowsF32(kind, static_cast<uint32_t>(l), ex.prefix, n, layers[l].data());
      if (kind == KvKind::kKey && cal.keys_rope_undone) rope.Rotate(layers[l].data(), shape.n_kv_heads, true);
    });
  }
  for (KvKind kind : shape.kinds()) {
    for (const auto& layer : rows[static_cast<int>(kind)]) {
      if (!AllFinite(layer.data(), layer.size())) return InvalidArgument("KV holds a NaN or infinity");
    }
  }

  const std::vector<BasisPlan> plans = PlanBases(cal, *alloc);
  const uint32_t n_bases = cal.n_bases();
  std::vector<QuantizedBlock> blocks(plans.size());
  std::vector<Status> projected(plans.size(), Status::Ok());
  ParallelForOrSerial(context.pool, plans.size(), [&](size_t i) {
    const BasisPlan& plan = plans[i];
    if (n == 0 || plan.n_keep == 0) return;
    const PcaBasis& basis = cal.bases[i];
    const auto& layers = rows[i < n_bases ? 0 : 1];
    const uint32_t b = static_cast<uint32_t>(i % n_bases);
    const bool by_component = cal.quantizer == KvtcQuantizer::kComponent;
    // The component path projects a basis within one layer straight from its rows.
    const std::optional<InPlaceSlice> in_place = by_component ? InPlace(cal, b) : std::nullopt;
    std::vector<float> x, coeffs(size_t{n} * plan.n_keep);
    if (!in_place) {
      x.resize(size_t{n} * basis.dim);
      GatherBasis(cal, b, layers, n, x.data());
    }
    if (by_component) {
      // Component-major coefficients: the quantiser reads each component's tokens contiguously.
      projected[i] = in_place ? ProjectByComponent(basis, layers[in_place->layer].data() + in_place->offset, row, n,
                                                   plan.n_keep, coeffs.data())
                              : ProjectByComponent(basis, x.data(), basis.dim, n, plan.n_keep, coeffs.data());
      if (!projected[i].ok()) return;
      QuantizeComponentBlock(coeffs.data(), n, plan.n_keep, plan.bits, basis.step_multipliers, &blocks[i]);
    } else {
      projected[i] = Project(basis, x.data(), n, plan.n_keep, coeffs.data());
      if (!projected[i].ok()) return;
      QuantizeBlock(coeffs.data(), n, plan.n_keep, cal.group_size, plan.bits, &blocks[i]);
    }
  });
  for (const Status& s : projected) RETURN_IF_ERROR(s);

  std::vector<uint8_t> codes;
  ByteWriter scales;
  size_t expected_codes = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    codes.insert(codes.end(), blocks[i].codes.begin(), blocks[i].codes.end());
    expected_codes += plans[i].n_codes * n;
    for (uint16_t s : blocks[i].scales) scales.U16(s);
  }
  if (codes.size() != expected_codes) return Internal("quantiser produced an unexpected number of codes");
  const std::vector<KvtcCodeRun> runs = CodeRuns(cal, plans, n);

  EncodedKv out;
  char canonical_level[32];  // "16", whatever spelling ("16.0") the caller used
  std::snprintf(canonical_level, sizeof canonical_level, "%g", p.target_ratio);
  out.level = canonical_level;
  out.params = WriteParams(p);
  out.sections.push_back(std::move(exempt));
  ASSIGN_OR_RETURN(std::vector<uint8_t> scale_block, EncodeBlock(scales.bytes(), EntropyMethod::kRans));
  out.sections.push_back({kTagScales, std::move(scale_block)});
  ASSIGN_OR_RETURN(std::vector<uint8_t> code_bytes, EncodeKvtcCodes(codes, runs, p.entropy));
  out.sections.push_back({kTagCodes, std::move(code_bytes)});
  return out;
}

Status KvtcCodec::DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const {
  const KvcHeader& h = file.header;
  ASSIGN_OR_RETURN(KvtcParams p, ReadParams(h.codec_params));
  if (context.calibrations == nullptr) return InvalidArgument("kvtc needs a calibration registry to decode");
  auto loaded = context.calibrations->FindByHash(p.calibration);
  if (loaded == nullptr) {
    return NotFound("calibration " + HexString(p.calibration) +
                    " is not loaded (pass the .kvcal the file was encoded with)");
  }
  const KvtcCalibration& cal = loaded->calibration;
  if (cal.model_fingerprint != h.model_fingerprint) {
    return InvalidArgument("the file's calibration was made for another model than the file claims");
  }
  // The file names its calibration by hash, and was encoded with a calibration of its shape and
  // kinds: a header that disagrees with it has been damaged (or forged).
  if (Status s = CheckShape(cal, h.shape); !s.ok()) {
    return Corrupt("the header disagrees with the calibration the file names: " + s.message());
  }
  const BitAllocation* alloc = FindAllocation(cal, p.target_ratio);
  KVC_CHECK_CORRUPT(alloc != nullptr, "kvtc target ratio %g is not in the calibration", p.target_ratio);
  char ratio_text[32];
  std::snprintf(ratio_text, sizeof ratio_text, "%g", p.target_ratio);
  KVC_CHECK_CORRUPT(h.level == ratio_text, "kvtc level '%s' does not match the target ratio %s", h.level.c_str(),
                    ratio_text);
  KVC_CHECK_CORRUPT(file.sections.size() == 3 && file.sections[0].tag == kTagExempt &&
                        file.sections[1].tag == kTagScales && file.sections[2].tag == kTagCodes,
                    "kvtc expects sections X, S, C");

  const KvShape& shape = h.shape;
  const ExemptRanges ex = Exempt(shape.n_tokens, h.pos_begin, p.sinks, p.window);
  const uint32_t n = ex.middle();
  const size_t row = shape.row_elems();
  // Every size below is checked against the section that must hold it before the output (or
  // any buffer as large as the token count) is allocated: the header's n_tokens is only a claim.
  const size_t exempt_values = shape.n_kinds() * shape.n_layers * (ex.prefix + ex.suffix) * row;
  KVC_CHECK_CORRUPT(file.sections[0].bytes.size() == exempt_values * 2,
                    "kvtc exempt section is %zu bytes, expected %zu", file.sections[0].bytes.size(), exempt_values * 2);
  auto write_exempt_rows = [&] {
    const uint8_t* src = file.sections[0].bytes.data();
    std::vector<uint16_t> half(row * std::max(ex.prefix, ex.suffix));
    std::vector<float> buf(half.size());
    for (KvKind kind : shape.kinds()) {
      for (uint32_t l = 0; l < shape.n_layers; ++l) {
        for (auto [begin, count] : {std::pair{0u, ex.prefix}, std::pair{shape.n_tokens - ex.suffix, ex.suffix}}) {
          if (count == 0) continue;
          for (size_t i = 0; i < count * row; ++i, src += 2) half[i] = static_cast<uint16_t>(src[0] | (src[1] << 8));
          Fp16ToFp32(half.data(), buf.data(), count * row);
          out.WriteRowsF32(kind, l, begin, count, buf.data());
        }
      }
    }
  };
  if (n == 0) {
    write_exempt_rows();
    return Status::Ok();
  }

  const std::vector<BasisPlan> plans = PlanBases(cal, *alloc);
  // A token-group scale per token, a component scale per chunk.
  const size_t scale_rows = cal.quantizer == KvtcQuantizer::kComponent ? 1 : n;
  size_t total_codes = 0, total_scales = 0;
  for (const auto& plan : plans) {
    total_codes += plan.n_codes * n;
    total_scales += plan.n_scales * scale_rows;
  }
  const std::vector<KvtcCodeRun> runs = CodeRuns(cal, plans, n);
  RETURN_IF_ERROR(CheckKvtcScaleBlock(file.sections[1].bytes, uint64_t{total_scales} * 2).WithContext("kvtc scales"));
  RETURN_IF_ERROR(CheckKvtcCodesSection(file.sections[2].bytes, TotalCodeBits(runs)).WithContext("kvtc codes"));

  // The calling thread's scratch holds the chunk's codes and scales; decode tasks only read them.
  KvtcDecodeScratch& mine = ThreadDecodeScratch();
  const ScratchTrim trim_mine(mine, /*chunk_buffers=*/true);
  std::vector<uint8_t> scale_bytes(total_scales * 2);
  RETURN_IF_ERROR(DecodeBlockInto(file.sections[1].bytes, scale_bytes).WithContext("kvtc scales"));
  const std::span<uint16_t> scales(ScratchData(mine.scales, total_scales), total_scales);
  for (size_t s = 0; s < total_scales; ++s) {
    scales[s] = static_cast<uint16_t>(scale_bytes[2 * s] | (scale_bytes[2 * s + 1] << 8));
  }
  const std::span<uint8_t> codes(ScratchData(mine.codes, total_codes), total_codes);
  RETURN_IF_ERROR(DecodeKvtcCodes(file.sections[2].bytes, runs, codes).WithContext("kvtc codes"));

  write_exempt_rows();

  const uint32_t n_bases = cal.n_bases();
  std::vector<size_t> code_offset(plans.size() + 1, 0), scale_offset(plans.size() + 1, 0);
  for (size_t i = 0; i < plans.size(); ++i) {
    code_offset[i + 1] = code_offset[i] + plans[i].n_codes * n;
    scale_offset[i + 1] = scale_offset[i] + plans[i].n_scales * scale_rows;
  }
  const bool by_component = cal.quantizer == KvtcQuantizer::kComponent;
  // Basis i's reconstruction of every middle token, written to x (rows x_stride floats apart).
  auto decode_basis = [&](size_t i, float* x, size_t x_stride, KvtcDecodeScratch& scratch) -> Status {
    const BasisPlan& plan = plans[i];
    const PcaBasis& basis = cal.bases[i];
    const auto block_codes = codes.subspan(code_offset[i], code_offset[i + 1] - code_offset[i]);
    const auto block_scales = scales.subspan(scale_offset[i], scale_offset[i + 1] - scale_offset[i]);
    if (by_component) {
      // Dequantised inside the product, where it packs each band: no coefficient buffer.
      std::vector<CodedComponent>& coded = scratch.coded;
      coded.clear();
      if (plan.n_keep > 0) {
        RETURN_IF_ERROR(
            CodedComponentBlock(block_codes, block_scales, n, plan.n_keep, plan.bits, basis.step_multipliers, &coded));
      }
      ReconstructFromCodes(basis.mean.data(), basis.components.data(), basis.dim, coded, n, x, x_stride);
      return Status::Ok();
    }
    // Uninitialised: the dequantiser writes every coefficient (0 for a width of 0) on success.
    float* const coeffs = ScratchData(scratch.coeffs, size_t{n} * plan.n_keep);
    if (plan.n_keep > 0) {
      RETURN_IF_ERROR(DequantizeBlock(block_codes, block_scales, n, plan.n_keep, cal.group_size, plan.bits, coeffs));
    }
    Reconstruct(basis, coeffs, n, plan.n_keep, x, x_stride);
    return Status::Ok();
  };
  const RopeTable rope(cal.rope, shape.head_dim, h.pos_begin + static_cast<int32_t>(ex.prefix), n);
  // RoPE back on, the fp16 range, and out: rows holds one kind and layer of middle tokens.
  auto finish_layer = [&](KvKind kind, uint32_t l, float* layer) {
    const bool rotate = kind == KvKind::kKey && cal.keys_rope_undone;
    if (out.dtype() != DType::kF16) {
      if (rotate) rope.Rotate(layer, shape.n_kv_heads, false);
      ClampToFp16Range(layer, row * n);
      out.WriteRowsF32(kind, l, ex.prefix, n, layer);
      return;
    }
    // An fp16 cache (the usual one) is rotated, clamped and stored in one pass over the rows,
    // with the same bits as the passes above.
    auto* const dst = reinterpret_cast<uint16_t*>(out.RowBytes(kind, l, ex.prefix, n).data());
    if (rotate) {
      rope.RotateTokensToFp16(layer, 0, n, shape.n_kv_heads, false, dst);
    } else {
      Fp32ToFp16Clamped(layer, dst, row * n);
    }
  };

  if (cal.grouping != KvtcGrouping::kAll) {
    // Every basis lies within one layer, so each task decodes one kind and layer start to end in
    // one layer-sized buffer that stays in cache from the product to the fp16 store.
    const uint32_t bases_per_layer = n_bases / shape.n_layers;
    std::vector<Status> statuses(shape.n_kinds() * shape.n_layers);
    ParallelForOrSerial(context.pool, statuses.size(), [&](size_t j) {
      const KvKind kind = j < shape.n_layers ? KvKind::kKey : KvKind::kValue;
      const uint32_t l = static_cast<uint32_t>(j % shape.n_layers);
      KvtcDecodeScratch& scratch = ThreadDecodeScratch();
      const ScratchTrim trim(scratch, /*chunk_buffers=*/false);
      // Uninitialised: the layer's bases tile its rows, and each writes every value of its slice.
      float* const layer = ScratchData(scratch.rows, row * n);
      for (uint32_t b = l * bases_per_layer; b < (l + 1) * bases_per_layer; ++b) {
        const std::optional<InPlaceSlice> in_place = InPlace(cal, b);
        if (!in_place || in_place->layer != l) {
          statuses[j] = Internal("a basis is not within its layer");
          return;
        }
        const size_t i = (kind == KvKind::kKey ? 0 : n_bases) + b;
        statuses[j] = decode_basis(i, layer + in_place->offset, row, scratch);
        if (!statuses[j].ok()) return;
      }
      finish_layer(kind, l, layer);
    });
    for (const Status& s : statuses) RETURN_IF_ERROR(s);
  } else {
    // One basis spans every layer: decode each into its own buffer and scatter it into the rows.
    LayerRows rows;
    for (KvKind kind : shape.kinds()) {
      auto& layers = rows[static_cast<int>(kind)];
      layers.resize(shape.n_layers);
      for (auto& layer : layers) layer.resize(row * n);
    }
    std::vector<Status> statuses(plans.size());
    // Each basis writes only its own slice of its kind's rows, so the tasks never share memory.
    ParallelForOrSerial(context.pool, plans.size(), [&](size_t i) {
      std::vector<float> x(size_t{n} * cal.bases[i].dim);
      KvtcDecodeScratch& scratch = ThreadDecodeScratch();
      const ScratchTrim trim(scratch, /*chunk_buffers=*/false);
      statuses[i] = decode_basis(i, x.data(), cal.bases[i].dim, scratch);
      if (!statuses[i].ok()) return;
      ScatterBasis(cal, static_cast<uint32_t>(i % n_bases), x.data(), n, &rows[i < n_bases ? 0 : 1]);
    });
    for (const Status& s : statuses) RETURN_IF_ERROR(s);
    ParallelForOrSerial(context.pool, shape.n_kinds() * shape.n_layers, [&](size_t j) {
      const KvKind kind = j < shape.n_layers ? KvKind::kKey : KvKind::kValue;
      const uint32_t l = static_cast<uint32_t>(j % shape.n_layers);
      finish_layer(kind, l, rows[static_cast<int>(kind)][l].data());
    });
  }
  return Status::Ok();
}

}  // namespace kvc
