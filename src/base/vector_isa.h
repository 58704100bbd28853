// The vector instruction sets kvcodec's hot loops are dispatched to at run time (one binary for
// every x86-64 CPU). Each kernel keeps a path per set with the same results on all of them;
// tests and benchmarks name a set to compare the paths on one machine.
#pragma once

#include <vector>

namespace kvc {

enum class VectorIsa {
  kAuto,      // the widest this CPU runs
  kPortable,  // plain C++
  kAvx2,      // AVX2 + FMA
  kAvx512,    // AVX-512F (with AVX2 + FMA)
};

// Whether this CPU (and its OS) runs code for `isa`; kAuto and kPortable always.
bool VectorIsaSupported(VectorIsa isa);

// The set a kAuto call runs here.
VectorIsa BestVectorIsa();

// `isa` if this CPU runs it and it is not kAuto, else BestVectorIsa(): a request for a set the
// CPU lacks runs as kAuto.
VectorIsa ResolveVectorIsa(VectorIsa isa);

const char* VectorIsaName(VectorIsa isa);

// kPortable and every vector set this CPU runs, narrowest first: the paths a test compares.
std::vector<VectorIsa> SupportedVectorIsas();

}  // namespace kvc
