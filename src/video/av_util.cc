#include "video/av_util.h"

#include <cstdlib>
#include <mutex>

extern "C" {
#include <libavutil/error.h>
#include <libavutil/log.h>
}

namespace kvc::av {

std::string ErrorString(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof(buf));
  return buf;
}

void QuietLogs() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(getenv("KVC_AVLOG") ? AV_LOG_DEBUG : AV_LOG_QUIET); });
}

}  // namespace kvc::av
