// The .kvcal file: a KvtcCalibration on disk. Layout and every field: docs/format.md (.kvcal).
// The reader treats every byte as hostile; the layout is canonical, so writing what was read
// reproduces the file byte for byte and KvcalHash names one calibration exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/hash.h"
#include "base/status.h"
#include "transform_coding/calibration.h"

namespace kvc {

// Written by this build for K and V calibrations; version 1 files (token-group quantiser only)
// are still read.
inline constexpr uint32_t kKvcalFormatVersion = 2;
// Written for keys-only calibrations, and only for them: version 2's layout with a flags byte
// and no V bases. A new version rather than a flag in an old field, so that every version 1
// and 2 file keeps its bytes (and its hash), and a reader from before it refuses a keys-only
// file as an unsupported version instead of reporting its missing V bases as damage.
inline constexpr uint32_t kKvcalKeysOnlyFormatVersion = 3;
// The newest version this build reads.
inline constexpr uint32_t kKvcalMaxFormatVersion = kKvcalKeysOnlyFormatVersion;
// Version 3's flags byte: bit 0 keys only (always set in version 3); the others must be 0.
inline constexpr uint8_t kKvcalFlagKeysOnly = 0x01;

// Limits ValidateCalibration enforces on top of the KV shape limits (tensor/kv_cache.h), so a
// hostile file can never make a reader allocate more than about 1 GiB of floats.
inline constexpr uint32_t kMaxKvtcBasisDim = 65536;
inline constexpr uint64_t kMaxKvtcFloats = uint64_t{1} << 28;  // means + components + eigenvalues
inline constexpr uint32_t kMaxKvtcAllocations = 256;
inline constexpr uint64_t kMaxKvtcAllocationBits = uint64_t{1} << 28;  // bit widths, all allocations together
inline constexpr uint32_t kMaxKvtcGroupSize = 4096;
inline constexpr uint8_t kMaxKvtcBits = 8;
inline constexpr uint32_t kMaxKvtcChoiceBytes = 4096;
// A multiplier outside this range would mean the Gaussian step is off by more than the
// calibration grid spans; a reader refuses it rather than make steps of 0 or inf.
inline constexpr float kKvtcMinStepMultiplier = 0.0625f;
inline constexpr float kKvtcMaxStepMultiplier = 16.0f;
// How far a component row's norm may stray from 1, and the dot product of two neighbouring
// rows from 0.
inline constexpr double kKvtcUnitNormTolerance = 1e-3;
inline constexpr double kKvtcAdjacentDotTolerance = 1e-2;
// Eigenvalue i may exceed eigenvalue i-1 by this fraction of eigenvalue i-1 plus
// kKvtcEigenvalueAbsSlack times eigenvalue 0 (rounding, not a wrong order).
inline constexpr double kKvtcEigenvalueRelSlack = 1e-4;
inline constexpr double kKvtcEigenvalueAbsSlack = 1e-6;

// The part of ValidateCalibration that needs neither bases nor allocations: shape, grouping,
// group size, RoPE parameters, basis dimension, and whether the smallest possible bases for
// the grouping fit the float limit. A reader checks it before allocating anything.
[[nodiscard]] Status ValidateCalibrationHeader(const KvtcCalibration& calibration);

// Serialises a calibration; kInvalidArgument (from ValidateCalibration) for one that a reader
// would reject.
[[nodiscard]] Result<std::vector<uint8_t>> WriteKvcal(const KvtcCalibration& calibration);

// Parses and verifies a .kvcal image: magic, version, limits, every CRC, no trailing bytes,
// then ValidateCalibration. Damage is kCorrupt, an unknown format version kUnsupported.
[[nodiscard]] Result<KvtcCalibration> ReadKvcal(std::span<const uint8_t> bytes);

// xxh3-128 of the whole file: the name a .kvc file uses for the calibration it was encoded with.
Hash128 KvcalHash(std::span<const uint8_t> file_bytes);

// Writes `path` atomically: the bytes go to a temporary file beside it, which is renamed over
// `path` only once complete, so readers see the old file or the new one, never a partial one.
[[nodiscard]] Status SaveKvcal(const KvtcCalibration& calibration, const std::string& path);

// Reads and verifies `path`; kIoError naming the path if it cannot be read, and parse errors
// prefixed with the path. `hash_out`, when given, receives KvcalHash of the file's bytes.
[[nodiscard]] Result<KvtcCalibration> LoadKvcal(const std::string& path, Hash128* hash_out = nullptr);

// Refuses a calibration fitted on another model: kInvalidArgument naming both fingerprints.
[[nodiscard]] Status CheckCalibrationModel(const KvtcCalibration& calibration, const ModelFingerprint& model);

}  // namespace kvc
