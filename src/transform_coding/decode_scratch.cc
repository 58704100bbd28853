#include "transform_coding/decode_scratch.h"

namespace kvc {

KvtcDecodeScratch& ThreadDecodeScratch() {
  thread_local KvtcDecodeScratch scratch;
  return scratch;
}

}  // namespace kvc
