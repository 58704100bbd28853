#include "libav/libav_decode.h"

#include <cstring>

namespace kvc::av {
namespace {

// Copies a host frame, cropped, into frame slot `index` of `out`.
Status TakeFrame(const AVFrame* f, const VideoStreamView& v, uint32_t index, std::span<uint8_t> out) {
  const AVPixelFormat want = v.shape.planes == 3 ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_GRAY8;
  // H.264's decoder returns monochrome pictures as 4:2:0 with flat chroma; only luma is ours.
  const bool gray_as_420 = v.shape.planes == 1 && v.coder == VideoCoder::kX264 && f->format == AV_PIX_FMT_YUV420P;
  KVC_CHECK_CORRUPT(index < v.n_frames, "video decodes to more than %u frames", v.n_frames);
  KVC_CHECK_CORRUPT(f->format == want || gray_as_420, "video frame %u decoded as pixel format %d, expected %d", index,
                    f->format, static_cast<int>(want));
  KVC_CHECK_CORRUPT(
      static_cast<uint32_t>(f->width) == v.coded.width && static_cast<uint32_t>(f->height) == v.coded.height,
      "video frame %u decoded as %dx%d, expected %ux%u", index, f->width, f->height, v.coded.width, v.coded.height);
  uint8_t* dst = out.data() + index * v.shape.frame_bytes();
  for (uint32_t p = 0; p < v.shape.planes; ++p) {
    for (uint32_t y = 0; y < v.shape.height; ++y) {
      std::memcpy(dst + p * v.shape.plane_bytes() + size_t{y} * v.shape.width,
                  f->data[p] + static_cast<ptrdiff_t>(y) * f->linesize[p], v.shape.width);
    }
  }
  return Status::Ok();
}

Status ReceiveFrames(AVCodecContext* ctx, AVFrame* frame, const VideoStreamView& v, uint32_t* n_decoded,
                     const FrameSink& sink) {
  for (;;) {
    const int rc = avcodec_receive_frame(ctx, frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return Status::Ok();
    if (rc < 0) return Corrupt("video decode: " + ErrorString(rc));
    KVC_CHECK_CORRUPT(*n_decoded < v.n_frames, "video decodes to more than %u frames", v.n_frames);
    Status s = sink(frame, *n_decoded);
    av_frame_unref(frame);
    RETURN_IF_ERROR(s);
    ++*n_decoded;
  }
}

}  // namespace

AVCodecID CodecIdOf(VideoCoder coder) {
  switch (coder) {
    case VideoCoder::kX265:
      return AV_CODEC_ID_HEVC;
    case VideoCoder::kX264:
      return AV_CODEC_ID_H264;
    case VideoCoder::kFfv1:
      return AV_CODEC_ID_FFV1;
  }
  return AV_CODEC_ID_NONE;
}

Result<VideoStreamView> ParseForDecode(std::span<const uint8_t> stream, const PictureShape& expected,
                                       uint32_t expected_frames, std::span<uint8_t> out) {
  ASSIGN_OR_RETURN(VideoStreamView v, ParseVideoStream(stream, expected, expected_frames));
  if (out.size() != expected.frame_bytes() * expected_frames) {
    return InvalidArgument(FormatMessage("output holds %zu bytes, %u frames need %llu", out.size(), expected_frames,
                                         static_cast<unsigned long long>(expected.frame_bytes() * expected_frames)));
  }
  return v;
}

Status OpenDecoder(AVCodecContext* ctx, const AVCodec* decoder, const VideoStreamView& v) {
  // FFV1 keeps no picture size in its stream and refuses to open without one.
  ctx->width = static_cast<int>(v.coded.width);
  ctx->height = static_cast<int>(v.coded.height);
  // Decoders must not guess past damage: a corrupt stream is an error, never concealed pixels.
  ctx->err_recognition = AV_EF_EXPLODE | AV_EF_CRCCHECK | AV_EF_BITSTREAM;
  ctx->flags2 |= AV_CODEC_FLAG2_SHOW_ALL;
  if (!v.extradata.empty()) {
    ctx->extradata = static_cast<uint8_t*>(av_mallocz(v.extradata.size() + AV_INPUT_BUFFER_PADDING_SIZE));
    if (ctx->extradata == nullptr) return Internal("out of memory for video extradata");
    std::memcpy(ctx->extradata, v.extradata.data(), v.extradata.size());
    ctx->extradata_size = static_cast<int>(v.extradata.size());
  }
  if (int rc = avcodec_open2(ctx, decoder, nullptr); rc < 0) {
    return Corrupt(FormatMessage("cannot open the %s decoder: %s", VideoCoderName(v.coder), ErrorString(rc).c_str()));
  }
  return Status::Ok();
}

Status DecodePackets(AVCodecContext* ctx, const VideoStreamView& v, std::span<uint8_t> out, const HostFrame& host) {
  return DecodePacketsTo(ctx, v, [&](AVFrame* decoded, uint32_t index) -> Status {
    ASSIGN_OR_RETURN(const AVFrame* pixels, host(decoded));
    return TakeFrame(pixels, v, index, out);
  });
}

Status DecodePacketsTo(AVCodecContext* ctx, const VideoStreamView& v, const FrameSink& sink) {
  FramePtr frame(av_frame_alloc());
  PacketPtr pkt(av_packet_alloc());
  if (!frame || !pkt) return Internal("out of memory allocating a video decoder");
  // libavcodec reads up to AV_INPUT_BUFFER_PADDING_SIZE bytes past a packet's end: each packet
  // is copied into a padded buffer, never handed over in place.
  uint32_t n_decoded = 0;
  for (size_t i = 0; i < v.packets.size(); ++i) {
    if (int rc = av_new_packet(pkt.get(), static_cast<int>(v.packets[i].size())); rc < 0) {
      return Internal("video packet: " + ErrorString(rc));
    }
    std::memcpy(pkt->data, v.packets[i].data(), v.packets[i].size());
    const int rc = avcodec_send_packet(ctx, pkt.get());
    av_packet_unref(pkt.get());
    if (rc < 0 && rc != AVERROR(EAGAIN))
      return Corrupt(FormatMessage("video packet %zu: %s", i, ErrorString(rc).c_str()));
    RETURN_IF_ERROR(ReceiveFrames(ctx, frame.get(), v, &n_decoded, sink));
  }
  if (int rc = avcodec_send_packet(ctx, nullptr); rc < 0) return Corrupt("video flush: " + ErrorString(rc));
  RETURN_IF_ERROR(ReceiveFrames(ctx, frame.get(), v, &n_decoded, sink));
  KVC_CHECK_CORRUPT(n_decoded == v.n_frames, "video decoded %u of %u frames", n_decoded, v.n_frames);
  return Status::Ok();
}

}  // namespace kvc::av
