// A saved slot (llama-server's POST /slots/{id}?action=save): which tokens a sequence held, under
// the name the client gave, for the model that computed them. Its KV is not in it: the chunk
// store holds that already (every finished request's tokens are stored as chunks and a tail),
// so a restore reads the record and then fetches the tokens' KV as any request would, at
// whatever rung the link allows. docs/format.md "Slot records".
//
// Records come back from a store, which may hold anything: the reader checks every size before
// it reads or allocates (fuzz target slot_record).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/container.h"

namespace kvc {

// The most tokens a record holds (a context llama.cpp can hold is far below).
inline constexpr uint32_t kMaxSlotRecordTokens = uint32_t{1} << 24;

struct SlotRecord {
  ModelFingerprint model{};
  std::vector<int32_t> tokens;
};

std::vector<uint8_t> SerializeSlotRecord(const SlotRecord& record);
Result<SlotRecord> ParseSlotRecord(std::span<const uint8_t> bytes);

// A slot file name as llama-server takes it: 1..255 bytes of valid UTF-8, no path separator, no
// control character, not "." or ".." and no leading dot (it names an object, never a path).
Status CheckSlotFileName(std::string_view name);

// The store object a model's slot file of that name is saved as.
std::string SlotRecordObjectName(const ModelFingerprint& model, std::string_view file_name);

}  // namespace kvc
