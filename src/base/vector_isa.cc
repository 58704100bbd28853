#include "base/vector_isa.h"

namespace kvc {

bool VectorIsaSupported(VectorIsa isa) {
#if defined(__x86_64__)
  // libgcc's checks include the OS's saving of the wider registers (XGETBV).
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
#else
  constexpr bool avx2 = false, avx512 = false;
#endif
  switch (isa) {
    case VectorIsa::kAvx2:
      return avx2;
    case VectorIsa::kAvx512:
      return avx512;
    case VectorIsa::kAuto:
    case VectorIsa::kPortable:
      return true;
  }
  return false;
}

VectorIsa BestVectorIsa() {
  for (const VectorIsa isa : {VectorIsa::kAvx512, VectorIsa::kAvx2}) {
    if (VectorIsaSupported(isa)) return isa;
  }
  return VectorIsa::kPortable;
}

VectorIsa ResolveVectorIsa(VectorIsa isa) {
  return isa == VectorIsa::kAuto || !VectorIsaSupported(isa) ? BestVectorIsa() : isa;
}

std::vector<VectorIsa> SupportedVectorIsas() {
  std::vector<VectorIsa> out;
  for (const VectorIsa isa : {VectorIsa::kPortable, VectorIsa::kAvx2, VectorIsa::kAvx512}) {
    if (VectorIsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

const char* VectorIsaName(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAuto:
      return "auto";
    case VectorIsa::kPortable:
      return "portable";
    case VectorIsa::kAvx2:
      return "avx2";
    case VectorIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace kvc
