// Fuzz target for the codecs' decoders. Two kinds of input:
//   mode 1, a .kvc file (first byte 'K'): DecodeKvc on the whole input, the real entry point.
//   mode 2, anything else: the CRCs stop blind mutation at the container, so the input is
//     handed to one codec's Decode directly, as params and sections of a KvcFile with a small
//     valid shape. Layout (little-endian):
//       u8 selector: bits 0-3 codec index in AllCodecs() (modulo their count),
//                    bits 4-5 dtype (0 f16, 1 f32, 2 bf16, 3 f16), bits 6-7 index in kShapes
//       u8 level length, level bytes
//       u16 params length, params bytes
//       u8 section count, then per section: u32 tag, u32 length, bytes
// Whatever a decoder accepts must match the header it was given. Seeds: fuzz/corpus/codecs/,
// written by codecs_test --gtest_also_run_disabled_tests --gtest_filter=FuzzCorpus.DISABLED_Regenerate.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "base/byte_io.h"
#include "codecs/codec.h"
#include "codecs/fuzz_input.h"

namespace {

using kvc::ByteReader;
using kvc::DType;
using kvc::KvShape;

constexpr KvShape kShapes[4] = {{1, 1, 4, 3}, {2, 2, 8, 5}, {1, 3, 5, 7}, {3, 2, 4, 9}};
constexpr DType kDTypes[4] = {DType::kF16, DType::kF32, DType::kBF16, DType::kF16};
constexpr uint8_t kMaxSectionsPerInput = 8;

void Check(bool ok, const char* what) {
  if (ok) return;
  (void)std::fprintf(stderr, "codecs_fuzz: %s\n", what);
  std::abort();
}

void CheckMatchesHeader(const kvc::KvCache& cache, const kvc::KvcHeader& h) {
  const char* mismatch = kvc::DecodedMismatch(cache, h);
  Check(mismatch == nullptr, mismatch);
}

void DirectDecode(const uint8_t* data, size_t size) {
  ByteReader r({data, size});
  uint8_t selector;
  uint8_t level_len;
  uint16_t params_len;
  std::span<const uint8_t> level;
  std::span<const uint8_t> params;
  kvc::KvcFile file;
  if (!r.U8(&selector, "selector").ok() || !r.U8(&level_len, "level length").ok() ||
      !r.Bytes(level_len, &level, "level").ok() || !r.U16(&params_len, "params length").ok() ||
      !r.Bytes(params_len, &params, "params").ok() || !kvc::ReadFuzzSections(r, kMaxSectionsPerInput, &file.sections)) {
    return;
  }
  const auto codecs = kvc::AllCodecs();
  const kvc::Codec* codec = codecs[(selector & 15) % codecs.size()];

  kvc::KvcHeader& h = file.header;
  h.codec_id = codec->info().id;
  h.codec_version = codec->info().version;
  h.level.assign(level.begin(), level.end());
  h.codec_params.assign(params.begin(), params.end());
  h.shape = kShapes[selector >> 6];
  h.dtype = kDTypes[(selector >> 4) & 3];
  h.pos_begin = 7;
  if (!r.empty()) return;  // one encoding per input keeps the corpus free of duplicates

  auto decoded = codec->Decode(file, {});
  if (decoded.ok()) CheckMatchesHeader(*decoded, h);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] != 'K') {
    DirectDecode(data, size);
    return 0;
  }
  auto decoded = kvc::DecodeKvc({data, size});
  if (!decoded.ok()) return 0;
  auto file = kvc::ReadKvc({data, size});
  Check(file.ok(), "DecodeKvc accepted what ReadKvc rejects");
  CheckMatchesHeader(*decoded, file->header);
  return 0;
}
