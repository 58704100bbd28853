#include "llama/kv_planes.h"

#include <cstring>
#include <optional>
#include <variant>

#include "base/hash.h"
#include "llama/llama_state.h"

namespace kvc {
namespace {

// What makes two layers one plane: the same element type, and the same row widths.
struct LayerForm {
  int32_t type = 0;
  uint64_t k_row_bytes = 0;
  uint64_t v_row_bytes = 0;  // 0: no V
  bool operator==(const LayerForm&) const = default;
};

LayerForm FormOf(const AttentionSection& a, size_t layer) {
  return {a.k[layer].ggml_type, a.k[layer].row_bytes, a.v.empty() ? 0 : a.v[layer].row_bytes};
}

// Whether a layer's V has K's type (planes hold one dtype).
bool OneType(const AttentionSection& a, size_t layer) {
  return a.v.empty() || a.v[layer].ggml_type == a.k[layer].ggml_type;
}

std::pair<uint32_t, uint32_t> SplitRow(uint64_t row_values, bool keys_only, const PlaneHeads& heads) {
  if (heads.head_dim > 0 && row_values == uint64_t{heads.n_kv_heads} * heads.head_dim) {
    return {heads.n_kv_heads, heads.head_dim};
  }
  if (!keys_only && heads.head_dim > 0 && row_values % heads.head_dim == 0 &&
      row_values / heads.head_dim <= kMaxKvHeads) {
    return {static_cast<uint32_t>(row_values / heads.head_dim), heads.head_dim};
  }
  return {1, static_cast<uint32_t>(row_values)};
}

}  // namespace

Result<std::vector<KvPlane>> SplitPlanes(const SeqState& state, const PlaneHeads& heads) {
  std::vector<KvPlane> planes;
  for (size_t s = 0; s < state.sections.size(); ++s) {
    const auto* a = std::get_if<AttentionSection>(&state.sections[s]);
    if (a == nullptr || a->n_cells == 0 || a->k.empty()) continue;
    if (!a->v.empty() && a->v.size() != a->k.size()) {
      return InvalidArgument(
          FormatMessage("section %zu has %zu K layers but %zu V layers", s, a->k.size(), a->v.size()));
    }
    size_t begin = 0;
    while (begin < a->k.size()) {
      const LayerForm form = FormOf(*a, begin);
      size_t end = begin + 1;
      while (end < a->k.size() && FormOf(*a, end) == form && OneType(*a, end)) ++end;
      const Result<DType> dtype = DTypeFromGgml(form.type);
      if (!dtype.ok() || !OneType(*a, begin) || (form.v_row_bytes != 0 && form.v_row_bytes != form.k_row_bytes) ||
          form.k_row_bytes == 0 || form.k_row_bytes % DTypeSize(*dtype) != 0) {
        begin = end;  // kept as written: not a float cache, or K and V of different widths
        continue;
      }
      const auto [n_heads, head_dim] = SplitRow(form.k_row_bytes / DTypeSize(*dtype), form.v_row_bytes == 0, heads);
      KvShape shape{.n_layers = static_cast<uint32_t>(end - begin),
                    .n_kv_heads = n_heads,
                    .head_dim = head_dim,
                    .n_tokens = a->n_cells,
                    .keys_only = a->v.empty()};
      if (!ValidateShape(shape, *dtype).ok()) {
        begin = end;  // beyond what a codec takes: kept as written
        continue;
      }
      ASSIGN_OR_RETURN(KvCache kv, KvCache::CreateForOverwrite(shape, *dtype, a->pos_begin));
      for (size_t l = begin; l < end; ++l) {
        for (KvKind kind : shape.kinds()) {
          const StateTensor& t = kind == KvKind::kKey ? a->k[l] : a->v[l];
          const auto dst = kv.RowBytes(kind, static_cast<uint32_t>(l - begin), 0, a->n_cells);
          if (t.rows.size() != dst.size()) {
            return InvalidArgument(FormatMessage("section %zu layer %zu %s holds %zu bytes, not %zu cells' %zu", s, l,
                                                 KvKindName(kind), t.rows.size(), static_cast<size_t>(a->n_cells),
                                                 dst.size()));
          }
          if (!dst.empty()) std::memcpy(dst.data(), t.rows.data(), dst.size());
        }
      }
      const bool model_heads = !shape.keys_only && n_heads == heads.n_kv_heads && head_dim == heads.head_dim;
      planes.push_back({.section = static_cast<uint32_t>(s),
                        .layer_begin = static_cast<uint32_t>(begin),
                        .model_heads = model_heads,
                        .kv = std::move(kv)});
      begin = end;
    }
  }
  return planes;
}

Status MergePlanes(std::span<const KvPlane> planes, SeqState* state) {
  for (size_t p = 0; p < planes.size(); ++p) {
    const KvPlane& plane = planes[p];
    auto* a = plane.section < state->sections.size() ? std::get_if<AttentionSection>(&state->sections[plane.section])
                                                     : nullptr;
    if (a == nullptr) return InvalidArgument(FormatMessage("plane %zu names no attention section", p));
    const KvShape& shape = plane.kv.shape();
    if (plane.layer_begin > a->k.size() || shape.n_layers > a->k.size() - plane.layer_begin) {
      return InvalidArgument(FormatMessage("plane %zu's layers are past its section's %zu", p, a->k.size()));
    }
    if (shape.n_tokens != a->n_cells || shape.keys_only != a->v.empty() || plane.kv.pos_begin() != a->pos_begin) {
      return InvalidArgument(FormatMessage("plane %zu holds other cells than its section", p));
    }
    std::optional<KvCache> converted;
    const KvCache* kv = &plane.kv;
    const int32_t type = a->k[plane.layer_begin].ggml_type;
    const Result<DType> section_dtype = DTypeFromGgml(type);
    if (!section_dtype.ok()) return InvalidArgument(FormatMessage("plane %zu's section is not a float cache", p));
    if (*section_dtype != plane.kv.dtype()) {
      ASSIGN_OR_RETURN(converted, plane.kv.ConvertTo(*section_dtype));
      kv = &*converted;
    }
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      for (KvKind kind : shape.kinds()) {
        StateTensor& t = kind == KvKind::kKey ? a->k[plane.layer_begin + l] : a->v[plane.layer_begin + l];
        const auto src = kv->RowBytes(kind, l, 0, shape.n_tokens);
        if (t.ggml_type != GgmlFromDType(*section_dtype) || t.rows.size() != src.size()) {
          return InvalidArgument(
              FormatMessage("plane %zu's layer %u %s does not fit its section's", p, l, KvKindName(kind)));
        }
        if (!src.empty()) std::memcpy(t.rows.data(), src.data(), src.size());
      }
    }
  }
  return Status::Ok();
}

ModelFingerprint PlaneFingerprint(const ModelFingerprint& model, uint32_t plane_index) {
  if (plane_index == 0) return model;
  Xxh3Hasher hasher;
  static constexpr char kDomain[] = "kvcodec plane";
  hasher.Update(kDomain, sizeof kDomain - 1);
  hasher.Update(model.data(), model.size());
  const uint8_t index[4] = {static_cast<uint8_t>(plane_index), static_cast<uint8_t>(plane_index >> 8),
                            static_cast<uint8_t>(plane_index >> 16), static_cast<uint8_t>(plane_index >> 24)};
  hasher.Update(index, sizeof index);
  return hasher.Digest();
}

}  // namespace kvc
