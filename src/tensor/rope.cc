#include "tensor/rope.h"

#include <cmath>
#include <vector>

namespace kvc {

void RotateRows(const RopeParams& params, float* rows, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim,
                int32_t pos_begin, bool inverse) {
  const uint32_t n_rot = params.n_rot == 0 || params.n_rot > head_dim ? head_dim : params.n_rot;
  const uint32_t half = n_rot / 2;
  // Same recurrence as ggml's rope cache (theta *= theta_scale in fp32), so angles match the
  // ones llama.cpp used to the last bit as far as libm allows.
  const float theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(n_rot));
  std::vector<float> cos_t(half), sin_t(half);
  const float sign = inverse ? -1.0f : 1.0f;
  for (uint32_t t = 0; t < n_tokens; ++t) {
    float theta = static_cast<float>(pos_begin + static_cast<int32_t>(t)) * params.freq_scale;
    for (uint32_t i = 0; i < half; ++i) {
      cos_t[i] = std::cos(theta);
      sin_t[i] = sign * std::sin(theta);
      theta *= theta_scale;
    }
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* x = rows + (size_t{t} * n_heads + h) * head_dim;
      for (uint32_t i = 0; i < half; ++i) {
        const uint32_t a = params.type == RopeType::kNormal ? 2 * i : i;
        const uint32_t b = params.type == RopeType::kNormal ? 2 * i + 1 : i + half;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * cos_t[i] - x1 * sin_t[i];
        x[b] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

RopeTable::RopeTable(const RopeParams& params, uint32_t head_dim, int32_t pos_begin, uint32_t n_tokens)
    : params_(params), head_dim_(head_dim), n_tokens_(n_tokens) {
  n_rot_ = params.n_rot == 0 || params.n_rot > head_dim ? head_dim : params.n_rot;
  const uint32_t half = n_rot_ / 2;
  const float theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(n_rot_));
  cos_.resize(size_t{n_tokens} * half);
  sin_.resize(size_t{n_tokens} * half);
  for (uint32_t t = 0; t < n_tokens; ++t) {
    float theta = static_cast<float>(pos_begin + static_cast<int32_t>(t)) * params.freq_scale;
    for (uint32_t i = 0; i < half; ++i) {
      cos_[size_t{t} * half + i] = std::cos(theta);
      sin_[size_t{t} * half + i] = std::sin(theta);
      theta *= theta_scale;
    }
  }
}

void RopeTable::Rotate(float* rows, uint32_t n_heads, bool inverse) const {
  const uint32_t half = n_rot_ / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  const bool normal = params_.type == RopeType::kNormal;
  for (uint32_t t = 0; t < n_tokens_; ++t) {
    const float* c = &cos_[size_t{t} * half];
    const float* s = &sin_[size_t{t} * half];
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* x = rows + (size_t{t} * n_heads + h) * head_dim_;
      for (uint32_t i = 0; i < half; ++i) {
        const uint32_t a = normal ? 2 * i : i;
        const uint32_t b = normal ? 2 * i + 1 : i + half;
        const float x0 = x[a], x1 = x[b], si = sign * s[i];
        x[a] = x0 * c[i] - x1 * si;
        x[b] = x0 * si + x1 * c[i];
      }
    }
  }
}

}  // namespace kvc
