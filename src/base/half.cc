#include "base/half.h"

namespace kvc {

void Fp16ToFp32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp16ToFp32(in[i]);
}
void Fp32ToFp16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp32ToFp16(in[i]);
}
void Bf16ToFp32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFp32(in[i]);
}
void Fp32ToBf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp32ToBf16(in[i]);
}

}  // namespace kvc
