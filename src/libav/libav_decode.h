// The part of decoding a stream every libavcodec-based backend shares (CPU and NVDEC): checks
// before anything is allocated, opening a decoder for a parsed stream, and feeding its packets
// while every frame is checked and copied, cropped, into the caller's buffer. Internal to the
// video module.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "libav/av_util.h"
#include "libav/video_stream.h"

namespace kvc::av {

AVCodecID CodecIdOf(VideoCoder coder);

// ParseVideoStream, and `out` holding exactly the expected frames.
Result<VideoStreamView> ParseForDecode(std::span<const uint8_t> stream, const PictureShape& expected,
                                       uint32_t expected_frames, std::span<uint8_t> out);

// Sets the stream's picture size and extradata, refuses concealment, opens the decoder.
Status OpenDecoder(AVCodecContext* ctx, const AVCodec* decoder, const VideoStreamView& v);

// A decoded frame as host pixels: the frame itself for a software decoder, a copy out of device
// memory for a hardware one. The returned frame stays valid until the next call.
using HostFrame = std::function<Result<const AVFrame*>(AVFrame* decoded)>;

// Sends every packet, flushes, and writes each frame (checked against the stream's pixel
// format and coded size) into its slot of `out`; exactly v.n_frames frames or an error.
Status DecodePackets(AVCodecContext* ctx, const VideoStreamView& v, std::span<uint8_t> out, const HostFrame& host);

// The same loop with each decoded frame handed to `sink` as libavcodec returns it (with its
// index), for a caller that keeps frames where they were decoded; exactly v.n_frames or an error.
using FrameSink = std::function<Status(AVFrame* decoded, uint32_t index)>;
Status DecodePacketsTo(AVCodecContext* ctx, const VideoStreamView& v, const FrameSink& sink);

}  // namespace kvc::av
