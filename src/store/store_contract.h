// The one contract every store backend is tested against (store_contract_test.cc). A backend's
// test file instantiates the suite with a factory that opens a fresh, empty store:
//   INSTANTIATE_TEST_SUITE_P(Memory, StoreContract, ::testing::Values(StoreFactory{"memory", ...}));
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace kvc {

struct StoreFactory {
  std::string name;
  // A fresh, empty store bounded to `capacity_bytes` (0: the backend's default). Backends that
  // cannot bound their bytes themselves (Redis) say so with bounded = false.
  std::function<Result<std::unique_ptr<Store>>(uint64_t capacity_bytes)> open;
  bool bounded = true;
  // The bytes Stats counts for a payload of `payload_bytes` stored under `name`: the payload
  // itself for a bare backend, more for a store that wraps objects (bound_store.h). Empty: the
  // payload.
  std::function<uint64_t(std::string_view name, uint64_t payload_bytes)> stored_bytes;
};

inline std::string StoreFactoryName(const ::testing::TestParamInfo<StoreFactory>& info) { return info.param.name; }
// Reproducible test payloads.
inline std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  return b;
}

// For gtest's listings (ctest shows them): the backend's name, not the struct's bytes.
inline void PrintTo(const StoreFactory& factory, std::ostream* os) { *os << factory.name; }

class StoreContract : public ::testing::TestWithParam<StoreFactory> {};

}  // namespace kvc
