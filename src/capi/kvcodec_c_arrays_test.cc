// K and V from and to the caller's own arrays (kvc_kv_from_arrays, kvc_kv_to_arrays), without a
// model: every layout a caller is likely to hold (dense, one buffer per layer, V transposed,
// padded rows, axes reversed) in and out, through lossless and lossy codecs; every refusal, by
// code and message; and hostile descriptions against a buffer that ends where an unmapped page
// begins, so any read or write past what the caller lent faults.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvcodec/kvcodec.h"
#include "kvcodec/kvcodec.hpp"

namespace {

size_t ElemSize(kvc_dtype dtype) { return dtype == KVC_F32 ? 4 : 2; }

// The element offset of (layer, token, head, channel) under `a`, as the header defines it, with
// the layer's base offset (0 with per-layer buffers).
int64_t Offset(const kvc_kv_array& a, uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
  return (a.layers ? 0 : l * a.layer_stride) + t * a.token_stride + h * a.head_stride + d * a.dim_stride;
}

// A caller's array of one of K or V: the buffers (one, or one per layer) and its description.
struct CallerArray {
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<void*> layer_ptrs;
  kvc_kv_array desc{};

  uint8_t* Element(const kvc_shape& s, uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
    uint8_t* base = desc.layers ? buffers[l].data() : buffers[0].data();
    return base + Offset(desc, l, t, h, d) * ElemSize(s.dtype);
  }
};

enum class Layout { kDense, kPerLayerHeadsFirst, kTransposed, kPadded, kReversed };
const Layout kLayouts[] = {Layout::kDense, Layout::kPerLayerHeadsFirst, Layout::kTransposed, Layout::kPadded,
                           Layout::kReversed};

// Strides of each layout, in elements, and a buffer of exactly the bytes it spans, filled with
// `fill` (so what a copy out did not write can be told apart).
CallerArray MakeArray(const kvc_shape& s, Layout layout, uint8_t fill = 0xCD) {
  const int64_t L = s.n_layers, T = s.n_tokens, H = s.n_kv_heads, D = s.head_dim;
  CallerArray a;
  kvc_kv_array& d = a.desc;
  size_t elems = 0;
  switch (layout) {
    case Layout::kDense:  // [layer][token][head][channel], as the library holds it
      d.dim_stride = 1, d.head_stride = D, d.token_stride = H * D, d.layer_stride = T * H * D;
      elems = L * T * H * D;
      break;
    case Layout::kPerLayerHeadsFirst:  // Hugging Face: a [head][token][channel] tensor per layer
      d.dim_stride = 1, d.token_stride = D, d.head_stride = T * D;
      elems = T * H * D;
      break;
    case Layout::kTransposed:  // [layer][head][channel][token]: llama.cpp's V without flash attention
      d.token_stride = 1, d.dim_stride = T, d.head_stride = D * T, d.layer_stride = H * D * T;
      elems = L * H * D * T;
      break;
    case Layout::kPadded:  // rows of a larger context, padded channels, a gap between layers
      d.dim_stride = 1, d.head_stride = D + 1, d.token_stride = H * (D + 1) + 3,
      d.layer_stride = (T + 2) * d.token_stride + 5;
      elems = (L - 1) * d.layer_stride + (T - 1) * d.token_stride + (H - 1) * d.head_stride + D;
      break;
    case Layout::kReversed:  // [channel][head][token][layer]
      d.layer_stride = 1, d.token_stride = L, d.head_stride = T * L, d.dim_stride = H * T * L;
      elems = L * T * H * D;
      break;
  }
  const size_t bytes = elems * ElemSize(s.dtype);
  d.size = bytes;
  if (layout == Layout::kPerLayerHeadsFirst) {
    a.buffers.assign(s.n_layers, std::vector<uint8_t>(bytes, fill));
    for (auto& b : a.buffers) a.layer_ptrs.push_back(b.data());
    d.layers = a.layer_ptrs.data();
  } else {
    a.buffers.assign(1, std::vector<uint8_t>(bytes, fill));
    d.data = a.buffers[0].data();
  }
  return a;
}

// A value for each (kind, layer, token, head, channel), as the element's bytes: f32 and f16 values
// exact in every dtype (multiples of 1/8 below 8: 7 significant bits, as bf16 holds).
float ValueAt(int kind, uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
  const uint32_t i = (((kind * 7 + l) * 131 + t) * 17 + h) * 13 + d;
  return static_cast<float>(static_cast<int>(i * 2654435761u % 127) - 63) / 8;
}

// fp32 -> the dtype's bits, for values ValueAt makes (exact in every dtype: truncation is exact).
void PutValue(kvc_dtype dtype, float v, uint8_t* out) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if (dtype == KVC_F32) {
    std::memcpy(out, &v, 4);
    return;
  }
  uint16_t h;
  if (dtype == KVC_BF16) {
    h = static_cast<uint16_t>(bits >> 16);
  } else {
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const int32_t exp = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
    const uint32_t mant = bits & 0x7fffffu;
    h = (bits & 0x7fffffffu) == 0 ? static_cast<uint16_t>(sign)
                                  : static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13));
  }
  std::memcpy(out, &h, 2);
}

float GetValue(kvc_dtype dtype, const uint8_t* in) {
  if (dtype == KVC_F32) {
    float f;
    std::memcpy(&f, in, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, in, 2);
  uint32_t bits;
  if (dtype == KVC_BF16) {
    bits = uint32_t{h} << 16;
  } else {
    const uint32_t sign = uint32_t{h & 0x8000u} << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    if (exp == 0 && mant == 0) {
      bits = sign;
    } else if (exp == 0) {  // subnormal: value mant * 2^-24
      const float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    } else if (exp == 31) {
      bits = sign | 0x7f800000u | (mant << 13);
    } else {
      bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <typename Fn>
void ForEachValue(const kvc_shape& s, Fn&& fn) {
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t t = 0; t < s.n_tokens; ++t)
      for (uint32_t h = 0; h < s.n_kv_heads; ++h)
        for (uint32_t d = 0; d < s.head_dim; ++d) fn(l, t, h, d);
}

void Fill(const kvc_shape& s, int kind, CallerArray& a) {
  ForEachValue(s, [&](uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
    PutValue(s.dtype, ValueAt(kind, l, t, h, d), a.Element(s, l, t, h, d));
  });
}

// Every value of `a` as ValueAt says; every byte no value of it covers still `fill`.
void ExpectHolds(const kvc_shape& s, int kind, CallerArray& a, uint8_t fill = 0xCD) {
  std::vector<std::vector<bool>> covered;
  for (const auto& b : a.buffers) covered.emplace_back(b.size(), false);
  size_t wrong = 0;
  ForEachValue(s, [&](uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
    const uint8_t* e = a.Element(s, l, t, h, d);
    if (GetValue(s.dtype, e) != ValueAt(kind, l, t, h, d)) ++wrong;
    auto& c = covered[a.desc.layers ? l : 0];
    const size_t at = e - (a.desc.layers ? a.buffers[l].data() : a.buffers[0].data());
    for (size_t i = 0; i < ElemSize(s.dtype); ++i) c[at + i] = true;
  });
  EXPECT_EQ(wrong, 0u);
  size_t touched = 0;
  for (size_t b = 0; b < a.buffers.size(); ++b) {
    for (size_t i = 0; i < a.buffers[b].size(); ++i) touched += !covered[b][i] && a.buffers[b][i] != fill;
  }
  EXPECT_EQ(touched, 0u) << "bytes between the values were written";
}

kvcodec::Kv FromArrays(const kvc_shape& s, CallerArray& k, CallerArray* v) {
  kvc_kv* kv = nullptr;
  EXPECT_EQ(kvc_kv_from_arrays(&s, &k.desc, v ? &v->desc : nullptr, &kv), KVC_OK) << kvc_last_error();
  return kvcodec::Kv(kv);
}

const kvc_shape kShape = {/*n_layers=*/3, /*n_kv_heads=*/2, /*head_dim=*/5,
                          /*n_tokens=*/7, KVC_F16,          /*pos_begin=*/4};

TEST(CApiArrays, EveryLayoutInEveryLayoutOutIsExact) {
  for (kvc_dtype dtype : {KVC_F16, KVC_BF16, KVC_F32}) {
    kvc_shape s = kShape;
    s.dtype = dtype;
    for (Layout in : kLayouts) {
      CallerArray k = MakeArray(s, in), v = MakeArray(s, in == Layout::kDense ? Layout::kTransposed : in);
      Fill(s, 0, k);
      Fill(s, 1, v);
      kvcodec::Kv kv = FromArrays(s, k, &v);
      ASSERT_TRUE(kv);
      const kvc_shape got = kvcodec::Shape(kv);
      EXPECT_EQ(got.n_layers, s.n_layers);
      EXPECT_EQ(got.n_kv_heads, s.n_kv_heads);
      EXPECT_EQ(got.head_dim, s.head_dim);
      EXPECT_EQ(got.n_tokens, s.n_tokens);
      EXPECT_EQ(got.dtype, dtype);
      EXPECT_EQ(got.pos_begin, s.pos_begin);
      EXPECT_FALSE(kvcodec::KeysOnly(kv));
      for (Layout out : kLayouts) {
        SCOPED_TRACE(testing::Message() << "dtype " << dtype << ", in " << static_cast<int>(in) << ", out "
                                        << static_cast<int>(out));
        CallerArray k_out = MakeArray(s, out), v_out = MakeArray(s, out == Layout::kDense ? Layout::kReversed : out);
        ASSERT_EQ(kvc_kv_to_arrays(kv.get(), dtype, &k_out.desc, &v_out.desc), KVC_OK) << kvc_last_error();
        ExpectHolds(s, 0, k_out);
        ExpectHolds(s, 1, v_out);
      }
    }
  }
}

// A cache of another dtype comes out converted; values exact in both dtypes come out equal.
TEST(CApiArrays, CopiesOutConvertToTheDtypeAsked) {
  kvc_shape s = kShape;
  s.dtype = KVC_F32;
  CallerArray k = MakeArray(s, Layout::kDense), v = MakeArray(s, Layout::kTransposed);
  Fill(s, 0, k);
  Fill(s, 1, v);
  kvcodec::Kv kv = FromArrays(s, k, &v);
  ASSERT_TRUE(kv);
  for (kvc_dtype to : {KVC_F16, KVC_BF16}) {
    kvc_shape as = s;
    as.dtype = to;
    CallerArray k_out = MakeArray(as, Layout::kPerLayerHeadsFirst), v_out = MakeArray(as, Layout::kPadded);
    ASSERT_EQ(kvc_kv_to_arrays(kv.get(), to, &k_out.desc, &v_out.desc), KVC_OK) << kvc_last_error();
    ExpectHolds(as, 0, k_out);
    ExpectHolds(as, 1, v_out);
  }
  // Rounding to f16 is to nearest, ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  kvc_shape one = {1, 1, 1, 1, KVC_F32, 0};
  float value = 1.0f + std::ldexp(1.0f, -11);
  kvc_kv_array a{};
  a.data = &value;
  a.size = sizeof value;
  kvc_kv* single = nullptr;
  ASSERT_EQ(kvc_kv_from_arrays(&one, &a, &a, &single), KVC_OK) << kvc_last_error();
  uint16_t k16 = 0, v16 = 0;
  kvc_kv_array ko{}, vo{};
  ko.data = &k16, vo.data = &v16;
  ko.size = vo.size = 2;
  ASSERT_EQ(kvc_kv_to_arrays(single, KVC_F16, &ko, &vo), KVC_OK) << kvc_last_error();
  EXPECT_EQ(k16, 0x3c00);  // 1.0
  kvc_kv_free(single);
}

// Through codecs: lossless ones give back every bit, quant 8 each value within one quantisation
// step of the cache's range (a group's step is at most that), in another layout than it came in.
TEST(CApiArrays, CodecsRoundTripTheCallersArrays) {
  kvc_shape s = {4, 2, 64, 48, KVC_F16, 0};
  CallerArray k = MakeArray(s, Layout::kPerLayerHeadsFirst), v = MakeArray(s, Layout::kTransposed);
  // Smooth data a quantiser meets: a channel offset plus noise.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  float lo = 0, hi = 0;
  std::vector<float> ks, vs;
  ForEachValue(s, [&](uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
    const float kv_k = std::round((0.5f * static_cast<float>(d % 7) + normal(rng)) * 256) / 256;
    const float kv_v = std::round(normal(rng) * 256) / 256;
    PutValue(s.dtype, kv_k, k.Element(s, l, t, h, d));
    PutValue(s.dtype, kv_v, v.Element(s, l, t, h, d));
    lo = std::min({lo, kv_k, kv_v});
    hi = std::max({hi, kv_k, kv_v});
  });
  auto made = kvcodec::KvFromArrays(s, k.desc, &v.desc);
  ASSERT_TRUE(made.ok()) << made.error().message;
  const kvcodec::Kv& kv = made.value();
  const std::vector<uint8_t> fp(16, 7);
  for (const char* codec : {"raw", "planes", "quant"}) {
    SCOPED_TRACE(codec);
    const bool lossless = std::string(codec) != "quant";
    auto bytes = kvcodec::Encode(kv, codec, lossless ? "" : "8", "", fp);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    auto decoded = kvcodec::Decode(bytes.value(), &fp);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    CallerArray k_out = MakeArray(s, Layout::kReversed), v_out = MakeArray(s, Layout::kPadded);
    ASSERT_FALSE(kvcodec::KvToArrays(decoded.value(), KVC_F16, k_out.desc, &v_out.desc).has_value());
    const float step = (hi - lo) / 255;
    double worst = 0;
    size_t differ = 0;
    ForEachValue(s, [&](uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
      for (auto [in, out] : {std::pair{&k, &k_out}, std::pair{&v, &v_out}}) {
        const uint8_t* a = in->Element(s, l, t, h, d);
        const uint8_t* b = out->Element(s, l, t, h, d);
        differ += std::memcmp(a, b, 2) != 0;
        worst = std::max(worst, std::fabs(double{GetValue(s.dtype, a)} - GetValue(s.dtype, b)));
      }
    });
    if (lossless) {
      EXPECT_EQ(differ, 0u);
    } else {
      EXPECT_GT(differ, 0u);  // it is lossy: the check below is not vacuous
      EXPECT_LE(worst, step) << "quant 8 error beyond a quantisation step";
    }
  }
}

TEST(CApiArrays, KeysAloneAndTheLlamaLayout) {
  kvc_shape s = kShape;
  CallerArray k = MakeArray(s, Layout::kTransposed);
  Fill(s, 0, k);
  kvcodec::Kv kv = FromArrays(s, k, nullptr);
  ASSERT_TRUE(kv);
  EXPECT_TRUE(kvcodec::KeysOnly(kv));
  CallerArray k_out = MakeArray(s, Layout::kDense), v_out = MakeArray(s, Layout::kDense);
  EXPECT_EQ(kvc_kv_to_arrays(kv.get(), s.dtype, &k_out.desc, &v_out.desc), KVC_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvc_last_error()).find("keys alone"), std::string::npos) << kvc_last_error();
  ASSERT_EQ(kvc_kv_to_arrays(kv.get(), s.dtype, &k_out.desc, nullptr), KVC_OK) << kvc_last_error();
  ExpectHolds(s, 0, k_out);
  // It has no llama.cpp state (no V to write), and says so.
  uint8_t* state = nullptr;
  size_t state_size = 0;
  EXPECT_EQ(kvc_kv_to_llama_state(kv.get(), &state, &state_size), KVC_UNSUPPORTED);
  // Keys alone survive a codec (planes keeps any cache bit for bit).
  auto bytes = kvcodec::Encode(kv, "planes", "", "", std::vector<uint8_t>(16, 0));
  ASSERT_TRUE(bytes.ok()) << bytes.error().message;
  auto decoded = kvcodec::Decode(bytes.value(), nullptr);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_TRUE(kvcodec::KeysOnly(decoded.value()));

  // A cache made from arrays is written for a context without flash attention until told.
  CallerArray v = MakeArray(s, Layout::kDense);
  Fill(s, 1, v);
  kvcodec::Kv full = FromArrays(s, k, &v);
  EXPECT_EQ(kvc_kv_llama_v_trans(full.get()), 1);
  EXPECT_EQ(kvc_kv_set_llama_v_trans(full.get(), 2), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_kv_set_llama_v_trans(full.get(), -1), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_kv_llama_v_trans(full.get()), 1);
  ASSERT_FALSE(kvcodec::SetLlamaVTrans(full, false).has_value());
  EXPECT_EQ(kvc_kv_llama_v_trans(full.get()), 0);
  auto state0 = kvcodec::KvToLlamaState(full);
  ASSERT_TRUE(state0.ok()) << state0.error().message;
  auto back = kvcodec::KvFromLlamaState(state0.value(), s.n_kv_heads);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_FALSE(kvcodec::LlamaVTrans(back.value()));  // the state's layout is kept
  EXPECT_EQ(kvcodec::KvToLlamaState(back.value()).value(), state0.value());
  EXPECT_EQ(kvc_kv_llama_v_trans(nullptr), -1);
  EXPECT_EQ(kvc_kv_set_llama_v_trans(nullptr, 1), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_kv_keys_only(nullptr), 0);
}

// One refused call: its status, a one-line message that says `why`, no handle.
void ExpectFromRefused(const kvc_shape* s, const kvc_kv_array* k, const kvc_kv_array* v, const std::string& why) {
  kvc_kv* kv = reinterpret_cast<kvc_kv*>(0x1);
  EXPECT_EQ(kvc_kv_from_arrays(s, k, v, &kv), KVC_INVALID_ARGUMENT) << why;
  const std::string message = kvc_last_error();
  EXPECT_NE(message.find(why), std::string::npos) << "message: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_EQ(kv, reinterpret_cast<kvc_kv*>(0x1)) << "a refused call handed out a handle";
}

TEST(CApiArrays, FromArraysRefusesEveryBadDescription) {
  const kvc_shape good = kShape;
  CallerArray k = MakeArray(good, Layout::kDense), v = MakeArray(good, Layout::kDense);
  kvc_kv* out = nullptr;
  EXPECT_EQ(kvc_kv_from_arrays(nullptr, &k.desc, &v.desc, &out), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_kv_from_arrays(&good, nullptr, &v.desc, &out), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_kv_from_arrays(&good, &k.desc, &v.desc, nullptr), KVC_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvc_last_error()).find("NULL"), std::string::npos);

  const auto with_shape = [&](auto change, const std::string& why) {
    kvc_shape s = good;
    change(s);
    ExpectFromRefused(&s, &k.desc, &v.desc, why);
  };
  with_shape([](kvc_shape& s) { s.n_layers = 0; }, "n_layers 0");
  with_shape([](kvc_shape& s) { s.n_kv_heads = 0; }, "n_kv_heads 0");
  with_shape([](kvc_shape& s) { s.head_dim = 0; }, "head_dim 0");
  with_shape([](kvc_shape& s) { s.n_tokens = 0; }, "n_tokens is 0");
  with_shape([](kvc_shape& s) { s.n_layers = 1025; }, "n_layers 1025");
  with_shape([](kvc_shape& s) { s.head_dim = 5000; }, "head_dim 5000");
  with_shape([](kvc_shape& s) { s.n_tokens = (1u << 22) + 1; }, "n_tokens");
  // Each dimension within its limit, the product past 16 GiB.
  with_shape([](kvc_shape& s) { s.n_layers = 1024, s.n_kv_heads = 1024, s.head_dim = 4096, s.n_tokens = 1u << 22; },
             "exceeds");
  with_shape([](kvc_shape& s) { s.pos_begin = -1; }, "pos_begin is -1");
  with_shape([](kvc_shape& s) { s.pos_begin = INT32_MAX - 3; }, "overflow int32");
  for (int bad : {3, 7, -1, 256}) {
    kvc_shape s = good;
    std::memcpy(&s.dtype, &bad, sizeof bad);  // whatever bits a C caller leaves there
    ExpectFromRefused(&s, &k.desc, &v.desc, "is not a kvc_dtype");
  }

  const auto with_k = [&](auto change, const std::string& why) {
    kvc_kv_array a = k.desc;
    change(a);
    ExpectFromRefused(&good, &a, &v.desc, why);
  };
  with_k([](kvc_kv_array& a) { a.data = nullptr; }, "k has neither data nor layers");
  void* layer_ptrs[3] = {k.buffers[0].data(), nullptr, k.buffers[0].data()};
  with_k([&](kvc_kv_array& a) { a.layers = layer_ptrs; }, "k has both data and layers");
  with_k([&](kvc_kv_array& a) { a.data = nullptr, a.layers = layer_ptrs; }, "k.layers[1] is NULL");
  with_k([](kvc_kv_array& a) { a.token_stride = -10; }, "k.token_stride is -10: strides must not be negative");
  with_k([](kvc_kv_array& a) { a.dim_stride = -1; }, "k.dim_stride is -1");
  with_k([](kvc_kv_array& a) { a.size -= 1; }, "past its size");
  with_k([](kvc_kv_array& a) { a.size = 0; }, "past its size of 0 bytes");
  with_k([](kvc_kv_array& a) { a.layer_stride += 1; }, "past its size");
  // Strides whose extent overflows 64 bits, alone or summed, or only once scaled to bytes.
  with_k([](kvc_kv_array& a) { a.token_stride = INT64_MAX; }, "overflow");
  with_k([](kvc_kv_array& a) { a.token_stride = INT64_MAX / 6, a.layer_stride = INT64_MAX / 2; }, "overflow");
  with_k([](kvc_kv_array& a) { a.head_stride = INT64_MAX - 8; }, "overflow");
  with_k(
      [](kvc_kv_array& a) {
        a.size = SIZE_MAX;
        a.token_stride = INT64_MAX / 4;  // 6 steps of it fit 64 bits; in bytes they do not
      },
      "overflow");
  // Within 64 bits, but far past what was lent.
  with_k([](kvc_kv_array& a) { a.head_stride = INT64_MAX / 2; }, "past its size of 420 bytes");
  // A claimed size that runs off the end of the address space is refused before any read.
  with_k(
      [](kvc_kv_array& a) {
        a.data = reinterpret_cast<void*>(UINTPTR_MAX - 64);
        a.size = 1024;
      },
      "address space");
  void* high_layers[3] = {reinterpret_cast<void*>(UINTPTR_MAX - 64), reinterpret_cast<void*>(UINTPTR_MAX - 64),
                          reinterpret_cast<void*>(UINTPTR_MAX - 64)};
  with_k([&](kvc_kv_array& a) { a.data = nullptr, a.layers = high_layers, a.layer_stride = 0, a.size = 1024; },
         "address space");
  // V is checked as K is, and named.
  kvc_kv_array bad_v = v.desc;
  bad_v.head_stride = -2;
  ExpectFromRefused(&good, &k.desc, &bad_v, "v.head_stride is -2");
  bad_v = v.desc;
  bad_v.size = 8;
  ExpectFromRefused(&good, &k.desc, &bad_v, "v's strides reach");

  // A stride along an axis of one value means nothing and is not refused, negative or not.
  kvc_shape one_head = good;
  one_head.n_kv_heads = 1;
  CallerArray k1 = MakeArray(one_head, Layout::kDense), v1 = MakeArray(one_head, Layout::kDense);
  k1.desc.head_stride = -5;
  v1.desc.head_stride = INT64_MAX;
  kvc_kv* ok = nullptr;
  EXPECT_EQ(kvc_kv_from_arrays(&one_head, &k1.desc, &v1.desc, &ok), KVC_OK) << kvc_last_error();
  kvc_kv_free(ok);
  // Reading, a stride of 0 repeats one value: allowed.
  kvc_kv_array broadcast = k.desc;
  broadcast.token_stride = 0;
  EXPECT_EQ(kvc_kv_from_arrays(&good, &broadcast, &v.desc, &ok), KVC_OK) << kvc_last_error();
  kvc_kv_free(ok);
}

// One refused copy out: its status and message, and not a byte of either array written.
void ExpectToRefused(const kvc_kv* kv, kvc_dtype dtype, CallerArray* k, CallerArray* v, const kvc_kv_array* k_desc,
                     const kvc_kv_array* v_desc, const std::string& why) {
  const auto k_before = k->buffers;
  const auto v_before = v ? v->buffers : std::vector<std::vector<uint8_t>>{};
  EXPECT_NE(kvc_kv_to_arrays(kv, dtype, k_desc, v_desc), KVC_OK) << why;
  const std::string message = kvc_last_error();
  EXPECT_NE(message.find(why), std::string::npos) << "message: " << message;
  EXPECT_EQ(k->buffers, k_before) << why << ": K written by a refused call";
  if (v) {
    EXPECT_EQ(v->buffers, v_before) << why << ": V written by a refused call";
  }
}

TEST(CApiArrays, ToArraysRefusesEveryBadDestinationAndWritesNothing) {
  const kvc_shape s = kShape;
  CallerArray k = MakeArray(s, Layout::kDense), v = MakeArray(s, Layout::kDense);
  Fill(s, 0, k);
  Fill(s, 1, v);
  kvcodec::Kv kv = FromArrays(s, k, &v);
  ASSERT_TRUE(kv);
  CallerArray ko = MakeArray(s, Layout::kDense), vo = MakeArray(s, Layout::kTransposed);
  EXPECT_EQ(kvc_kv_to_arrays(nullptr, s.dtype, &ko.desc, &vo.desc), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_kv_to_arrays(kv.get(), s.dtype, nullptr, &vo.desc), KVC_INVALID_ARGUMENT);
  ExpectToRefused(kv.get(), s.dtype, &ko, &vo, &ko.desc, nullptr, "v is NULL, but the cache holds V");
  // 3 only: passing C++ an enum value outside its range is undefined behaviour of the caller
  // (tests/install/consumer.c passes -1 and 99, as C may).
  for (int bad : {3}) {
    kvc_dtype dtype;
    std::memcpy(&dtype, &bad, sizeof bad);
    ExpectToRefused(kv.get(), dtype, &ko, &vo, &ko.desc, &vo.desc, "is not a kvc_dtype");
  }
  const auto with_k = [&](auto change, const std::string& why) {
    kvc_kv_array a = ko.desc;
    change(a);
    ExpectToRefused(kv.get(), s.dtype, &ko, &vo, &a, &vo.desc, why);
  };
  with_k([](kvc_kv_array& a) { a.size -= 1; }, "past its size");
  with_k([](kvc_kv_array& a) { a.head_stride = -1; }, "must not be negative");
  with_k([](kvc_kv_array& a) { a.data = nullptr; }, "neither data nor layers");
  // Two values into one element: a stride of 0, a stride inside a lower axis' span, equal strides.
  with_k([](kvc_kv_array& a) { a.dim_stride = 0; }, "k.dim_stride of 0 writes two values into one element");
  with_k([](kvc_kv_array& a) { a.token_stride = 3; }, "writes two values into one element");
  with_k([&](kvc_kv_array& a) { a.head_stride = 1, a.dim_stride = 1; }, "writes two values into one element");
  with_k([&](kvc_kv_array& a) { a.layer_stride = a.token_stride; }, "writes two values into one element");
  // A wider dtype than the buffers were sized for reaches past them.
  ExpectToRefused(kv.get(), KVC_F32, &ko, &vo, &ko.desc, &vo.desc, "past its size");
  // The same array for K and V, and per-layer buffers that meet.
  ExpectToRefused(kv.get(), s.dtype, &ko, &vo, &ko.desc, &ko.desc, "k and v start at the same element in layer 0");
  CallerArray per_layer = MakeArray(s, Layout::kPerLayerHeadsFirst);
  per_layer.layer_ptrs[2] = per_layer.layer_ptrs[0];
  ExpectToRefused(kv.get(), s.dtype, &per_layer, &vo, &per_layer.desc, &vo.desc, "two layers' buffers meet");
  per_layer.layer_ptrs[2] = per_layer.buffers[2].data();
  // Reading, the same per-layer pointers were fine: only writing refuses aliasing.
  kvc_kv_array aliased = per_layer.desc;
  void* same[3] = {per_layer.buffers[0].data(), per_layer.buffers[0].data(), per_layer.buffers[0].data()};
  aliased.layers = same;
  kvc_kv* read = nullptr;
  EXPECT_EQ(kvc_kv_from_arrays(&s, &aliased, &aliased, &read), KVC_OK) << kvc_last_error();
  kvc_kv_free(read);
  // The same destinations, described right, take the copy.
  ASSERT_EQ(kvc_kv_to_arrays(kv.get(), s.dtype, &per_layer.desc, &vo.desc), KVC_OK) << kvc_last_error();
  ExpectHolds(s, 0, per_layer);
  ExpectHolds(s, 1, vo);
}

// Hostile descriptions, as a fuzzer would make them, against memory that ends at an unmapped
// page: whatever the shape, strides and size (the size always true: it is the caller's word the
// library has to rely on), a call either fails, writing nothing, or touches exactly the elements
// described, all within the size given. A read or write past it faults and ends the test.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t capacity) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    usable_ = (capacity + page - 1) / page * page;
    void* m = mmap(nullptr, usable_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    map_ = static_cast<uint8_t*>(m);
    mprotect(map_ + usable_, page, PROT_NONE);
    total_ = usable_ + page;
  }
  ~GuardedBuffer() {
    if (map_) munmap(map_, total_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  bool ok() const { return map_ != nullptr; }
  // `size` bytes that end where the unmapped page begins.
  uint8_t* Tail(size_t size) const { return map_ + usable_ - size; }
  size_t capacity() const { return usable_; }

 private:
  uint8_t* map_ = nullptr;
  size_t usable_ = 0, total_ = 0;
};

int64_t HostileStride(std::mt19937_64& rng, int64_t natural) {
  switch (rng() % 10) {
    case 0:
      return 0;
    case 1:
      return -static_cast<int64_t>(rng() % 4) - 1;
    case 2:
      return INT64_MAX - static_cast<int64_t>(rng() % 3);
    case 3:
      return static_cast<int64_t>(rng() >> 1);
    case 4:
      return static_cast<int64_t>(rng() % 64);
    default:
      return natural;
  }
}

TEST(CApiArrays, HostileDescriptionsNeverReachPastTheSizeGiven) {
  constexpr size_t kCapacity = 1 << 16;
  GuardedBuffer in(kCapacity), out(kCapacity);
  ASSERT_TRUE(in.ok() && out.ok());
  uint8_t* const out_begin = out.Tail(out.capacity());
  std::mt19937_64 rng(20240611);
  size_t accepted_from = 0, accepted_to = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    kvc_shape s{};
    s.n_layers = rng() % 50 == 0 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(1 + rng() % 3);
    s.n_kv_heads = static_cast<uint32_t>(1 + rng() % 3);
    s.head_dim = static_cast<uint32_t>(1 + rng() % 6);
    s.n_tokens = static_cast<uint32_t>(rng() % 8);      // 0 included
    const int raw_dtype = static_cast<int>(rng() % 4);  // 3: unknown
    std::memcpy(&s.dtype, &raw_dtype, sizeof raw_dtype);
    s.pos_begin = rng() % 20 == 0 ? -1 : 0;
    const size_t elem = raw_dtype == KVC_F32 ? 4 : 2;
    const int64_t T = s.n_tokens, H = s.n_kv_heads, D = s.head_dim;
    const uint32_t listed_layers = std::min<uint32_t>(s.n_layers, 3);
    const auto describe = [&](const GuardedBuffer& buffer, std::vector<void*>* layers) {
      kvc_kv_array a{};
      a.dim_stride = HostileStride(rng, 1);
      a.head_stride = HostileStride(rng, D);
      a.token_stride = HostileStride(rng, H * D);
      a.layer_stride = HostileStride(rng, T * H * D);
      // Mostly about what the dense layout needs, give or take a byte; the size is always true
      // (the memory is there): it is the caller's word, which the library has to rely on.
      const uint64_t need = uint64_t{listed_layers} * std::max<int64_t>(T, 1) * H * D * elem;
      uint64_t size = need + rng() % 3;
      if (size > 0 && rng() % 2 == 0) size -= 1;
      if (rng() % 3 == 0) size = rng() % (kCapacity + 1);
      a.size = static_cast<size_t>(std::min<uint64_t>(size, kCapacity));
      if (rng() % 4 == 0 && listed_layers == s.n_layers) {
        layers->assign(s.n_layers, buffer.Tail(a.size));  // every layer in one buffer: aliasing
        a.layers = layers->data();
      } else {
        a.data = buffer.Tail(a.size);
      }
      return a;
    };
    // Element (l, t, h, d) of an accepted description: inside its size, its address.
    const auto element = [&](const kvc_kv_array& a, uint32_t l, uint32_t t, uint32_t h, uint32_t d) -> uint8_t* {
      const int64_t at = Offset(a, l, t, h, d);
      EXPECT_TRUE(at >= 0 && static_cast<uint64_t>(at + 1) * elem <= a.size) << "accepted past its size";
      return static_cast<uint8_t*>(a.layers ? a.layers[l] : a.data) + at * elem;
    };
    std::vector<void*> k_layers, v_layers, ko_layers, vo_layers;
    const kvc_kv_array k = describe(in, &k_layers);
    const kvc_kv_array v = describe(in, &v_layers);
    const bool keys_only = rng() % 8 == 0;
    kvc_kv* kv = nullptr;
    if (kvc_kv_from_arrays(&s, &k, keys_only ? nullptr : &v, &kv) != KVC_OK) {
      EXPECT_EQ(kv, nullptr);
      EXPECT_EQ(std::string(kvc_last_error()).find('\n'), std::string::npos);
      continue;
    }
    ++accepted_from;
    kvcodec::Kv owned(kv);
    // Accepted: each value is the one at the offset the description gives.
    std::vector<uint8_t> dense_k(size_t{s.n_layers} * T * H * D * elem), dense_v(dense_k.size());
    const kvc_kv_array dk = kvcodec::DenseArray(s, dense_k.data()), dv = kvcodec::DenseArray(s, dense_v.data());
    ASSERT_EQ(kvc_kv_to_arrays(kv, s.dtype, &dk, keys_only ? nullptr : &dv), KVC_OK) << kvc_last_error();
    size_t wrong = 0;
    ForEachValue(s, [&](uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
      const size_t i = (((size_t{l} * T + t) * H + h) * D + d) * elem;
      wrong += std::memcmp(element(k, l, t, h, d), dense_k.data() + i, elem) != 0;
      if (!keys_only) wrong += std::memcmp(element(v, l, t, h, d), dense_v.data() + i, elem) != 0;
    });
    EXPECT_EQ(wrong, 0u);

    // And out again, into hostile destinations: written exactly where described, or not at all.
    const kvc_kv_array ko = describe(out, &ko_layers), vo = describe(out, &vo_layers);
    std::memset(out_begin, 0xA5, out.capacity());
    if (kvc_kv_to_arrays(kv, s.dtype, &ko, keys_only ? nullptr : &vo) != KVC_OK) {
      EXPECT_EQ(std::count(out_begin, out_begin + out.capacity(), 0xA5), static_cast<ptrdiff_t>(out.capacity()))
          << "written on failure";
      continue;
    }
    ++accepted_to;
    // No two values of one array shared an element, and each holds its value.
    for (const kvc_kv_array* a : {&ko, &vo}) {
      if (a == &vo && keys_only) continue;
      const std::vector<uint8_t>& dense = a == &ko ? dense_k : dense_v;
      std::vector<ptrdiff_t> at;
      ForEachValue(s, [&](uint32_t l, uint32_t t, uint32_t h, uint32_t d) {
        at.push_back(element(*a, l, t, h, d) - out_begin);
      });
      std::vector<ptrdiff_t> sorted = at;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end(),
                                   [&](ptrdiff_t x, ptrdiff_t y) { return y - x < static_cast<ptrdiff_t>(elem); }),
                sorted.end());
      // K's values where V does not overlap them (V, written second, wins where it does).
      if (a == &vo || keys_only) {
        size_t i = 0, differ = 0;
        for (ptrdiff_t p : at) differ += std::memcmp(out_begin + p, dense.data() + (i++) * elem, elem) != 0;
        EXPECT_EQ(differ, 0u);
      }
    }
  }
  RecordProperty("accepted_from", static_cast<int>(accepted_from));
  RecordProperty("accepted_to", static_cast<int>(accepted_to));
  // The sweep reached both outcomes of both calls.
  EXPECT_GT(accepted_from, 200u);
  EXPECT_GT(accepted_to, 50u);
}

}  // namespace
