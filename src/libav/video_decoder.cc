#include "libav/video_decoder.h"

#include <algorithm>
#include <atomic>

#include "libav/av_util.h"
#include "libav/libav_decode.h"
#include "libav/nvdec_decoder.h"

namespace kvc {
namespace {

class CpuBackend final : public VideoDecoderBackend {
 public:
  const char* name() const override { return "cpu"; }
  Status Decode(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                std::span<uint8_t> out) const override {
    return DecodeWithOptions(stream, expected, expected_frames, out, {});
  }
  Status DecodeWithOptions(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                           std::span<uint8_t> out, const VideoDecodeOptions& options) const override;
};

// libavcodec's threads for one stream. FFV1 slices are independent within a frame, so slice
// threads run them side by side (a stream of 4 slices a frame keeps up to 4 busy). H.264 and
// HEVC get none: their streams have one slice a frame, and frame threads measured no faster on
// KV pictures (8-16 block rows high, so a frame waits for nearly all of the frame it predicts
// from) while spending up to 40% more CPU (docs/results-video-settings.md).
void SetThreads(AVCodecContext* ctx, VideoCoder coder, uint32_t threads) {
  constexpr uint32_t kMaxThreads = 16;  // libavcodec's own bound on automatic threads
  if (coder == VideoCoder::kFfv1 && threads > 1) {
    ctx->thread_type = FF_THREAD_SLICE;
    ctx->thread_count = static_cast<int>(std::min(threads, kMaxThreads));
  } else {
    ctx->thread_count = 1;
  }
}

Status CpuBackend::DecodeWithOptions(std::span<const uint8_t> stream, const PictureShape& expected,
                                     uint32_t expected_frames, std::span<uint8_t> out,
                                     const VideoDecodeOptions& options) const {
  ASSIGN_OR_RETURN(const VideoStreamView v, av::ParseForDecode(stream, expected, expected_frames, out));
  av::QuietLogs();
  const AVCodec* decoder = avcodec_find_decoder(av::CodecIdOf(v.coder));
  if (decoder == nullptr)
    return Unsupported(std::string("this libavcodec has no decoder for ") + VideoCoderName(v.coder));
  av::CodecContextPtr ctx(avcodec_alloc_context3(decoder));
  if (!ctx) return Internal("out of memory allocating a video decoder");
  SetThreads(ctx.get(), v.coder, options.threads);
  RETURN_IF_ERROR(av::OpenDecoder(ctx.get(), decoder, v));
  return av::DecodePackets(ctx.get(), v, out, [](AVFrame* decoded) -> Result<const AVFrame*> { return decoded; });
}

}  // namespace

const VideoDecoderBackend& CpuVideoDecoder() {
  static const CpuBackend backend;
  return backend;
}

namespace {
std::span<const VideoDecoderBackend* const> Backends() {
  static const VideoDecoderBackend* const backends[] = {&AutoVideoDecoder(), &CpuVideoDecoder(), &NvdecVideoDecoder()};
  return backends;
}
}  // namespace

const VideoDecoderBackend* FindVideoDecoder(std::string_view name) {
  for (const VideoDecoderBackend* backend : Backends()) {
    if (name == backend->name()) return backend;
  }
  return nullptr;
}

std::vector<std::string> VideoDecoderNames() {
  std::vector<std::string> names;
  for (const VideoDecoderBackend* backend : Backends()) names.emplace_back(backend->name());
  return names;
}

Result<const VideoDecoderBackend*> SelectVideoDecoder(std::string_view name) {
  const VideoDecoderBackend* backend = FindVideoDecoder(name);
  if (backend == nullptr) {
    const std::vector<std::string> names = VideoDecoderNames();
    std::string known;
    for (size_t i = 0; i < names.size(); ++i) known += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return InvalidArgument("unknown video decoder '" + std::string(name) + "' (" + known + ")");
  }
  if (backend == &NvdecVideoDecoder()) {
    // Asked for by name: a machine that cannot run it is the caller's error, said up front,
    // not a silent CPU decode.
    if (Status device = NvdecDeviceStatus(); !device.ok()) return device.WithContext("--video-decoder nvdec");
  }
  return backend;
}

namespace {
std::atomic<const VideoDecoderBackend*> g_default_decoder{nullptr};
}  // namespace

Status SetDefaultVideoDecoder(std::string_view name) {
  ASSIGN_OR_RETURN(const VideoDecoderBackend* backend, SelectVideoDecoder(name));
  g_default_decoder.store(backend);
  return Status::Ok();
}

const VideoDecoderBackend& DefaultVideoDecoder() {
  const VideoDecoderBackend* set = g_default_decoder.load();
  return set != nullptr ? *set : AutoVideoDecoder();
}

}  // namespace kvc
