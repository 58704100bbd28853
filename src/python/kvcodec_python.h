// The bindings of the Python package's native part, defined on the module kvcodec._kvcodec.
#pragma once

#include <pybind11/pybind11.h>

namespace kvc {

void DefineBindings(pybind11::module_& m);

}  // namespace kvc
