// Small RAII and error helpers over libavcodec shared by the encoder and the CPU decoder. Not
// installed; only this module includes libav headers.
#pragma once

#include <memory>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
}

#include "base/status.h"

namespace kvc::av {

struct CodecContextFree {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextFree>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFree>;

// libavcodec's message for an error code, e.g. "Invalid data found when processing input".
std::string ErrorString(int code);

// Silences libav's logging once per process: errors reach callers as Status, and a hostile
// stream must not fill stderr.
void QuietLogs();

}  // namespace kvc::av
