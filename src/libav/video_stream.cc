#include "libav/video_stream.h"

#include <algorithm>
#include <cstring>

extern "C" {
#include <libavutil/opt.h>
}

#include "base/byte_io.h"
#include "libav/av_util.h"

namespace kvc {
namespace {

constexpr uint8_t kStreamVersion = 1;

struct CoderTraits {
  const char* name;
  const char* encoder;
  uint32_t min_side;  // smallest coded width and height
  uint32_t align;     // coded sides are multiples of this
};

// x265's motion search reads its reference margins uninitialised when a picture is smaller than
// one 64x64 coding tree unit (valgrind; the decoded pictures then differ from the input with the
// heap's contents), so its pictures are at least one CTU. x264 refuses pictures under one 16x16
// macroblock. FFV1 (version 3) mis-decodes pictures with a side of 1 or 2 pixels.
// Bit-exactness at every small size: video_stream_test.
const CoderTraits& TraitsOf(VideoCoder coder) {
  static const CoderTraits kTraits[] = {
      {"x265", "libx265", 64, 8},
      {"x264", "libx264", 16, 2},
      {"ffv1", "ffv1", 4, 1},
  };
  return kTraits[static_cast<size_t>(coder)];
}

uint32_t PadSide(uint32_t side, const CoderTraits& t) {
  const uint32_t s = std::max(side, t.min_side);
  return (s + t.align - 1) / t.align * t.align;
}

bool IsH26x(VideoCoder coder) { return coder == VideoCoder::kX265 || coder == VideoCoder::kX264; }

// Drops SEI NAL units from an Annex-B packet: x264 and x265 write their version and full option
// string there (hundreds of bytes per stream), which no decoder needs to rebuild the pixels.
void AppendWithoutSei(VideoCoder coder, std::span<const uint8_t> packet, ByteWriter* w) {
  auto is_start = [&](size_t i) {
    return i + 3 <= packet.size() && packet[i] == 0 && packet[i + 1] == 0 && packet[i + 2] == 1;
  };
  std::vector<size_t> starts;  // offsets of each NAL's first payload byte
  for (size_t i = 0; i + 3 <= packet.size(); ++i) {
    if (is_start(i)) {
      starts.push_back(i + 3);
      i += 2;
    }
  }
  if (starts.empty()) {
    w->Bytes(packet);
  } else {
    for (size_t k = 0; k < starts.size(); ++k) {
      const size_t nal = starts[k];
      size_t end = k + 1 < starts.size() ? starts[k + 1] - 3 : packet.size();
      // A 4-byte start code's leading zero belongs to the next NAL.
      if (k + 1 < starts.size() && end > nal && packet[end - 1] == 0) --end;
      if (nal >= packet.size()) continue;
      const uint8_t type = coder == VideoCoder::kX264 ? (packet[nal] & 0x1f) : ((packet[nal] >> 1) & 0x3f);
      const bool sei = coder == VideoCoder::kX264 ? type == 6 : (type == 39 || type == 40);
      if (sei) continue;
      static constexpr uint8_t kStartCode[] = {0, 0, 0, 1};
      w->Bytes(kStartCode);
      w->Bytes(packet.subspan(nal, end - nal));
    }
  }
}

Status DrainPackets(AVCodecContext* ctx, AVPacket* pkt, VideoCoder coder, std::vector<std::vector<uint8_t>>* packets) {
  for (;;) {
    const int rc = avcodec_receive_packet(ctx, pkt);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return Status::Ok();
    if (rc < 0) return Internal(std::string("video encoder: ") + av::ErrorString(rc));
    const std::span<const uint8_t> data(pkt->data, static_cast<size_t>(pkt->size));
    ByteWriter w;
    if (IsH26x(coder)) {
      AppendWithoutSei(coder, data, &w);
    } else {
      w.Bytes(data);
    }
    if (w.size() > 0) packets->push_back(w.Take());
    av_packet_unref(pkt);
  }
}

// Copies one frame's planes into `frame`, repeating the last column and row into the padding.
void FillFrame(const uint8_t* src, const PictureShape& shape, AVFrame* frame) {
  const uint32_t ch = static_cast<uint32_t>(frame->height);
  for (uint32_t p = 0; p < shape.planes; ++p) {
    const uint8_t* plane = src + p * shape.plane_bytes();
    for (uint32_t y = 0; y < ch; ++y) {
      uint8_t* row = frame->data[p] + static_cast<ptrdiff_t>(y) * frame->linesize[p];
      const uint8_t* in = plane + size_t{std::min(y, shape.height - 1)} * shape.width;
      std::memcpy(row, in, shape.width);
      // Up to the line stride, not just the coded width: encoders' SIMD reads past the width.
      std::memset(row + shape.width, in[shape.width - 1], static_cast<size_t>(frame->linesize[p]) - shape.width);
    }
  }
}

}  // namespace

const char* VideoCoderName(VideoCoder coder) { return TraitsOf(coder).name; }

const char* Ffv1CoderName(Ffv1Coder coder) {
  static constexpr const char* kNames[] = {"range", "range_def", "golomb"};
  return kNames[static_cast<size_t>(coder)];
}

std::optional<Ffv1Coder> ParseFfv1Coder(std::string_view name) {
  for (Ffv1Coder c : {Ffv1Coder::kRangeTable, Ffv1Coder::kRangeDefault, Ffv1Coder::kGolomb}) {
    if (name == Ffv1CoderName(c)) return c;
  }
  return std::nullopt;
}

std::optional<VideoCoder> ParseVideoCoder(std::string_view name) {
  for (VideoCoder c : kVideoCoders) {
    if (name == VideoCoderName(c)) return c;
  }
  return std::nullopt;
}

PictureShape CodedShape(VideoCoder coder, const PictureShape& shape, bool nvdec_sizes) {
  CoderTraits t = TraitsOf(coder);
  if (nvdec_sizes && coder == VideoCoder::kX265) t.min_side = std::max(t.min_side, kNvdecMinSide);
  return {PadSide(shape.width, t), PadSide(shape.height, t), shape.planes};
}

Result<std::vector<uint8_t>> EncodeVideoStream(const PictureShape& shape, uint32_t n_frames,
                                               std::span<const uint8_t> pixels, const VideoEncodeOptions& options) {
  if (shape.planes != 1 && shape.planes != 3) return InvalidArgument(FormatMessage("%u planes (1 or 3)", shape.planes));
  if (shape.width == 0 || shape.height == 0 || shape.width > kMaxPictureSide || shape.height > kMaxPictureSide) {
    return InvalidArgument(FormatMessage("picture %ux%u outside 1..%u", shape.width, shape.height, kMaxPictureSide));
  }
  if (n_frames == 0) return InvalidArgument("no frames to encode");
  if (options.nvdec_sizes && options.coder != VideoCoder::kX265) {
    return InvalidArgument(std::string("NVDEC picture sizes are for x265 streams, not ") +
                           VideoCoderName(options.coder));
  }
  if (options.ffv1_slices > kMaxFfv1Slices) {
    return InvalidArgument(FormatMessage("%u FFV1 slices (at most %u)", options.ffv1_slices, kMaxFfv1Slices));
  }
  if (pixels.size() != shape.frame_bytes() * n_frames) {
    return InvalidArgument(FormatMessage("%zu pixel bytes for %u frames of %llu", pixels.size(), n_frames,
                                         static_cast<unsigned long long>(shape.frame_bytes())));
  }
  av::QuietLogs();
  const CoderTraits& traits = TraitsOf(options.coder);
  const AVCodec* encoder = avcodec_find_encoder_by_name(traits.encoder);
  if (encoder == nullptr) return Unsupported(std::string("this libavcodec has no ") + traits.encoder + " encoder");
  const PictureShape coded = CodedShape(options.coder, shape, options.nvdec_sizes);

  av::CodecContextPtr ctx(avcodec_alloc_context3(encoder));
  if (!ctx) return Internal("out of memory allocating a video encoder");
  ctx->width = static_cast<int>(coded.width);
  ctx->height = static_cast<int>(coded.height);
  ctx->pix_fmt = shape.planes == 3 ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_GRAY8;
  ctx->time_base = AVRational{1, 25};
  ctx->framerate = AVRational{25, 1};
  // One thread: libx264/libx265 output depends on the thread count, and bytes must not depend
  // on the machine. Chunks are encoded in parallel a level above.
  ctx->thread_count = 1;
  // One group of pictures per stream: every frame may predict from the previous ones.
  ctx->gop_size = static_cast<int>(std::min<uint32_t>(n_frames, 600));
  AVDictionary* opts = nullptr;
  switch (options.coder) {
    case VideoCoder::kX265:
      av_dict_set(&opts, "preset", options.preset.c_str(), 0);
      // Lossless, no version SEI, one thread. x265 3.5 reads uninitialised memory (valgrind) in
      // its SAO and weighted-prediction analysis and, with 64x64 CTUs on small pictures, in motion
      // search: the bytes then depend on the heap. SAO and weighted prediction do nothing for a
      // lossless stream, 32x32 CTUs fit KV pictures, and without B-frames the streams measured
      // smaller as well; with these the default and ultrafast presets run clean.
      av_dict_set(&opts, "x265-params",
                  "lossless=1:info=0:log-level=none:pools=none:frame-threads=1:wpp=0:ctu=32:bframes=0:weightp=0:sao=0",
                  0);
      break;
    case VideoCoder::kX264:
      av_dict_set(&opts, "preset", options.preset.c_str(), 0);
      av_dict_set(&opts, "qp", "0", 0);
      break;
    case VideoCoder::kFfv1: {
      // Version 3 keeps its parameters (coder, context model, slice tiling) in extradata, so the
      // decoder needs no options. Defaults and their trade: docs/results.md, "video: coder
      // settings".
      av_dict_set(&opts, "level", "3", 0);
      static constexpr const char* kCoderOption[] = {"range_tab", "range_def", "rice"};
      av_dict_set(&opts, "coder", kCoderOption[static_cast<size_t>(options.ffv1_coder)], 0);
      av_dict_set(&opts, "context", options.ffv1_large_context ? "1" : "0", 0);
      av_dict_set(&opts, "slicecrc", "0", 0);
      ctx->slices = static_cast<int>(options.ffv1_slices);
      break;
    }
  }
  const int open_rc = avcodec_open2(ctx.get(), encoder, &opts);
  av_dict_free(&opts);
  if (open_rc < 0 && options.coder == VideoCoder::kFfv1 && options.ffv1_slices != 0) {
    return InvalidArgument(FormatMessage("FFV1 cannot cut a %ux%u picture into %u slices (try 4, 6, 9, 12, 16)",
                                         coded.width, coded.height, options.ffv1_slices));
  }
  if (open_rc < 0) {
    return Internal(FormatMessage("cannot open the %s encoder for %ux%u: %s", traits.name, coded.width, coded.height,
                                  av::ErrorString(open_rc).c_str()));
  }

  av::FramePtr frame(av_frame_alloc());
  av::PacketPtr pkt(av_packet_alloc());
  if (!frame || !pkt) return Internal("out of memory allocating video frames");
  frame->format = ctx->pix_fmt;
  frame->width = ctx->width;
  frame->height = ctx->height;
  if (int rc = av_frame_get_buffer(frame.get(), 0); rc < 0) return Internal("video frame: " + av::ErrorString(rc));

  std::vector<std::vector<uint8_t>> packets;
  for (uint32_t i = 0; i < n_frames; ++i) {
    if (int rc = av_frame_make_writable(frame.get()); rc < 0) return Internal("video frame: " + av::ErrorString(rc));
    FillFrame(pixels.data() + i * shape.frame_bytes(), shape, frame.get());
    frame->pts = i;
    if (int rc = avcodec_send_frame(ctx.get(), frame.get()); rc < 0) {
      return Internal(FormatMessage("%s encoder refused frame %u: %s", traits.name, i, av::ErrorString(rc).c_str()));
    }
    RETURN_IF_ERROR(DrainPackets(ctx.get(), pkt.get(), options.coder, &packets));
  }
  if (int rc = avcodec_send_frame(ctx.get(), nullptr); rc < 0) return Internal("video flush: " + av::ErrorString(rc));
  RETURN_IF_ERROR(DrainPackets(ctx.get(), pkt.get(), options.coder, &packets));

  const size_t extradata_len = ctx->extradata != nullptr ? static_cast<size_t>(ctx->extradata_size) : 0;
  std::vector<std::span<const uint8_t>> views(packets.begin(), packets.end());
  return AssembleVideoStream(options.coder, shape, n_frames, std::span(ctx->extradata, extradata_len), views,
                             options.nvdec_sizes);
}

std::vector<uint8_t> AssembleVideoStream(VideoCoder coder, const PictureShape& shape, uint32_t n_frames,
                                         std::span<const uint8_t> extradata,
                                         std::span<const std::span<const uint8_t>> packets, bool nvdec_sizes) {
  const PictureShape coded = CodedShape(coder, shape, nvdec_sizes);
  ByteWriter w;
  w.U8(kStreamVersion);
  w.U8(static_cast<uint8_t>(coder));
  w.U8(static_cast<uint8_t>(shape.planes));
  w.U32(shape.width);
  w.U32(shape.height);
  w.U32(coded.width);
  w.U32(coded.height);
  w.U32(n_frames);
  w.U32(static_cast<uint32_t>(extradata.size()));
  w.Bytes(extradata);
  w.U32(static_cast<uint32_t>(packets.size()));
  for (const auto& p : packets) {
    w.U32(static_cast<uint32_t>(p.size()));
    w.Bytes(p);
  }
  return w.Take();
}

Result<VideoStreamView> ParseVideoStream(std::span<const uint8_t> bytes, const PictureShape& expected,
                                         uint32_t expected_frames) {
  // The caller's shape bounds what the decoder will write: it must be one an encoder can make.
  if (expected.planes != 1 && expected.planes != 3) {
    return InvalidArgument(FormatMessage("video picture with %u planes (1 or 3)", expected.planes));
  }
  if (expected.width == 0 || expected.height == 0 || expected.width > kMaxPictureSide ||
      expected.height > kMaxPictureSide) {
    return InvalidArgument(
        FormatMessage("video picture %ux%u outside 1..%u", expected.width, expected.height, kMaxPictureSide));
  }
  ByteReader r(bytes);
  uint8_t version;
  uint8_t coder;
  uint8_t planes;
  VideoStreamView v;
  RETURN_IF_ERROR(r.U8(&version, "video stream version"));
  KVC_CHECK_CORRUPT(version == kStreamVersion, "video stream version %u, expected %u", version, kStreamVersion);
  RETURN_IF_ERROR(r.U8(&coder, "video coder"));
  KVC_CHECK_CORRUPT(coder <= static_cast<uint8_t>(VideoCoder::kFfv1), "video coder %u unknown", coder);
  v.coder = static_cast<VideoCoder>(coder);
  RETURN_IF_ERROR(r.U8(&planes, "video planes"));
  v.shape.planes = planes;
  v.coded.planes = planes;
  RETURN_IF_ERROR(r.U32(&v.shape.width, "video width"));
  RETURN_IF_ERROR(r.U32(&v.shape.height, "video height"));
  RETURN_IF_ERROR(r.U32(&v.coded.width, "video coded width"));
  RETURN_IF_ERROR(r.U32(&v.coded.height, "video coded height"));
  RETURN_IF_ERROR(r.U32(&v.n_frames, "video frame count"));
  KVC_CHECK_CORRUPT(v.shape == expected, "video picture %ux%ux%u, expected %ux%ux%u", v.shape.width, v.shape.height,
                    v.shape.planes, expected.width, expected.height, expected.planes);
  KVC_CHECK_CORRUPT(v.coded == CodedShape(v.coder, expected) || v.coded == CodedShape(v.coder, expected, true),
                    "video coded picture %ux%u is not %s's padding of %ux%u", v.coded.width, v.coded.height,
                    VideoCoderName(v.coder), expected.width, expected.height);
  KVC_CHECK_CORRUPT(v.n_frames == expected_frames, "video holds %u frames, expected %u", v.n_frames, expected_frames);
  uint32_t extradata_len;
  RETURN_IF_ERROR(r.U32(&extradata_len, "video extradata length"));
  RETURN_IF_ERROR(r.Bytes(extradata_len, &v.extradata, "video extradata"));
  uint32_t n_packets;
  RETURN_IF_ERROR(r.U32(&n_packets, "video packet count"));
  // Encoders write one packet per frame, and each packet is at least its length and one byte:
  // so the frame count, which sizes the caller's output, is backed by 5 bytes a frame.
  KVC_CHECK_CORRUPT(n_packets == v.n_frames, "video holds %u packets for %u frames", n_packets, v.n_frames);
  KVC_CHECK_CORRUPT(n_packets <= r.remaining() / 5, "video claims %u packets in %zu bytes", n_packets, r.remaining());
  v.packets.reserve(n_packets);
  for (uint32_t i = 0; i < n_packets; ++i) {
    uint32_t len;
    std::span<const uint8_t> packet;
    RETURN_IF_ERROR(r.U32(&len, "video packet length"));
    RETURN_IF_ERROR(r.Bytes(len, &packet, "video packet"));
    KVC_CHECK_CORRUPT(len > 0, "video packet %u is empty", i);
    v.packets.push_back(packet);
  }
  KVC_CHECK_CORRUPT(r.empty(), "%zu bytes after the last video packet", r.remaining());
  return v;
}

}  // namespace kvc
