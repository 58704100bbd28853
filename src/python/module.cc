// The extension's entry point; everything it defines is in kvcodec_python.cc.
#include "python/kvcodec_python.h"

PYBIND11_MODULE(_kvcodec, m) { kvc::DefineBindings(m); }
