// A Store decorator that binds every object to its name (stored_object.h): Put seals, Get and
// GetMany open and check against the name asked for. OpenStore returns every backend behind it,
// so everything that reads a store (the fetcher, `run`, `serve`) gets only objects that were
// written under the name it asked for, and, with a secret, only objects written by a holder of
// that secret. Exists, Delete and Stats pass through (Stats counts envelope bytes too). A read's
// bound is on the payload: the backend is asked for at most that plus the envelope.
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

namespace kvc {

// `backend` with objects sealed by `secret` (empty: CRC32C only). Errors of the backend pass
// through unchanged; an object that does not open is kCorrupt in its slot, never kNotFound, so a
// reader can tell (and count) a damaged or misplaced chunk from an absent one.
std::unique_ptr<Store> MakeBoundStore(std::unique_ptr<Store> backend, std::string secret);

}  // namespace kvc
