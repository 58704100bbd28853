// Fuzz target for the kvtc decoder. A registry with the small calibrations of
// kvtc_test_calibration.h (FuzzCalibrations) is built once; the seeds in fuzz/corpus/kvtc/ are
// encoded with them, so their hashes match. Two kinds of input, told apart by the first byte:
//   whole file (bits 5-7 of the first byte not all zero, e.g. 'K'): DecodeKvc on the input.
//   direct (bits 5-7 zero): the CRCs stop blind mutation at the container, so the input is
//     handed to KvtcCodec::Decode as the params and sections of a KvcFile whose shape is the
//     selected calibration's. Layout (little-endian):
//       u8  selector: bits 0-1 calibration index (3: the component-quantiser one), bits 2-3 dtype (0 f16, 1 f32,
//           2 bf16, 3 f16), bit 4 keep the params' calibration hash as given (clear: when the
//           params hold at least 17 bytes, bytes 1..16 are replaced by the selected
//           calibration's hash, so mutations get past the lookup)
//       u16 n_tokens (at most kMaxFuzzTokens)
//       i32 pos_begin (pos_begin + n_tokens must fit in i32, as ReadKvc guarantees)
//       u16 params length, params bytes
//       u8  section count (at most 8), then per section: u32 tag, u32 length, bytes
// Whatever decodes must match the header, and decode to the same cache with a thread pool.
// Seeds: codecs_test --gtest_also_run_disabled_tests --gtest_filter=KvtcFuzzCorpus.DISABLED_Regenerate
// (kvtc_codec_test.cc).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "base/byte_io.h"
#include "base/thread_pool.h"
#include "codecs/codec.h"
#include "codecs/fuzz_input.h"
#include "codecs/kvtc/kvtc_test_calibration.h"
#include "transform_coding/calibration_registry.h"

namespace {

using kvc::ByteReader;
using kvc::DType;

constexpr DType kDTypes[4] = {DType::kF16, DType::kF32, DType::kBF16, DType::kF16};
constexpr uint8_t kMaxSectionsPerInput = 8;
constexpr uint16_t kMaxFuzzTokens = 4096;

struct State {
  State() : pool(2) {
    for (auto& c : kvc::kvtc_test::FuzzCalibrations()) {
      auto added = registry.Add(std::move(c));
      if (!added.ok()) {
        (void)std::fprintf(stderr, "kvtc_fuzz: test calibration rejected: %s\n", added.status().ToString().c_str());
        std::abort();
      }
      entries.push_back(*added);
    }
  }
  kvc::CalibrationRegistry registry;
  std::vector<std::shared_ptr<const kvc::LoadedCalibration>> entries;
  kvc::ThreadPool pool;
};

State& GetState() {
  static State* state = new State();  // never destroyed: worker threads outlive static teardown otherwise
  return *state;
}

void Check(bool ok, const char* what) {
  if (ok) return;
  (void)std::fprintf(stderr, "kvtc_fuzz: %s\n", what);
  std::abort();
}

// Checks the result against the header, reads every byte (so ASan sees a short buffer), and
// decodes again with a thread pool, which must give the same cache.
void CheckDecoded(const kvc::KvCache& cache, const kvc::KvcHeader& h,
                  const std::function<kvc::Result<kvc::KvCache>(kvc::ThreadPool*)>& decode) {
  const char* mismatch = kvc::DecodedMismatch(cache, h);
  Check(mismatch == nullptr, mismatch);
  auto again = decode(&GetState().pool);
  Check(again.ok(), "decoding with a thread pool failed where decoding without one succeeded");
  Check(*again == cache, "decoding with a thread pool gave a different cache");
}

void DirectDecode(const uint8_t* data, size_t size) {
  State& state = GetState();
  ByteReader r({data, size});
  uint8_t selector;
  uint16_t n_tokens;
  int32_t pos_begin;
  uint16_t params_len;
  std::span<const uint8_t> params;
  kvc::KvcFile file;
  if (!r.U8(&selector, "selector").ok() || !r.U16(&n_tokens, "n_tokens").ok() || !r.I32(&pos_begin, "pos").ok() ||
      !r.U16(&params_len, "params length").ok() || !r.Bytes(params_len, &params, "params").ok() ||
      !kvc::ReadFuzzSections(r, kMaxSectionsPerInput, &file.sections)) {
    return;
  }
  if (n_tokens > kMaxFuzzTokens || int64_t{pos_begin} + n_tokens > std::numeric_limits<int32_t>::max()) return;
  const auto& loaded = state.entries[(selector & 3) % state.entries.size()];
  const kvc::KvtcCalibration& cal = loaded->calibration;

  kvc::KvcHeader& h = file.header;
  const kvc::Codec* codec = kvc::FindCodec("kvtc");
  h.codec_id = codec->info().id;
  h.codec_version = codec->info().version;
  h.codec_params.assign(params.begin(), params.end());
  if ((selector & 0x10) == 0 && h.codec_params.size() >= 17) {
    std::memcpy(h.codec_params.data() + 1, loaded->hash.data(), loaded->hash.size());
  }
  h.level = "fuzz";
  h.shape = {cal.n_layers, cal.n_kv_heads, cal.head_dim, n_tokens, cal.keys_only};
  h.dtype = kDTypes[(selector >> 2) & 3];
  h.model_fingerprint = cal.model_fingerprint;
  h.pos_begin = pos_begin;
  if (!r.empty()) return;  // one encoding per input keeps the corpus free of duplicates

  auto decode = [&](kvc::ThreadPool* pool) { return codec->Decode(file, {&state.registry, nullptr, pool}); };
  auto decoded = decode(nullptr);
  if (decoded.ok()) CheckDecoded(*decoded, h, decode);
}

void WholeFileDecode(const uint8_t* data, size_t size) {
  State& state = GetState();
  auto decode = [&](kvc::ThreadPool* pool) {
    return kvc::DecodeKvc({data, size}, nullptr, {&state.registry, nullptr, pool});
  };
  auto decoded = decode(nullptr);
  if (!decoded.ok()) return;
  auto file = kvc::ReadKvc({data, size});
  Check(file.ok(), "DecodeKvc accepted what ReadKvc rejects");
  CheckDecoded(*decoded, file->header, decode);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 0xE0) == 0) {
    DirectDecode(data, size);
  } else {
    WholeFileDecode(data, size);
  }
  return 0;
}
