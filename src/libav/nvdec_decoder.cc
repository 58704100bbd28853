#include "libav/nvdec_decoder.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

// The NVIDIA Video Codec SDK's types (Debian's libffmpeg-nvenc-dev, what libavcodec itself is
// built against), for the decoder capability query; the libraries are loaded at run time.
#include <ffnvcodec/dynlink_cuda.h>
#include <ffnvcodec/dynlink_cuviddec.h>

extern "C" {
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_cuda.h>
}

#include "base/log.h"
#include "libav/libav_decode.h"

namespace kvc {
namespace {

struct CudaDevice {
  AVBufferRef* ref = nullptr;  // held for the process's life: every NVDEC decode shares it
  Status status = Status::Ok();
  NvdecCaps caps;
};

// What the device's NVDEC reports for 8-bit 4:4:4 HEVC (cuvidGetDecoderCaps, on libavutil's
// CUDA context).
Result<NvdecCaps> QueryHevcCaps(void* cuda, AVBufferRef* device) {
  void* cuvid = dlopen("libnvcuvid.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuvid == nullptr) {
    const char* why = dlerror();
    return Unsupported(std::string("no NVDEC library: ") + (why != nullptr ? why : "libnvcuvid.so.1 not found"));
  }
  // The handles stay open: libavcodec loads the same libraries, and unloading buys nothing.
  auto* push = reinterpret_cast<tcuCtxPushCurrent_v2*>(dlsym(cuda, "cuCtxPushCurrent_v2"));
  auto* pop = reinterpret_cast<tcuCtxPopCurrent_v2*>(dlsym(cuda, "cuCtxPopCurrent_v2"));
  auto* get_caps = reinterpret_cast<tcuvidGetDecoderCaps*>(dlsym(cuvid, "cuvidGetDecoderCaps"));
  if (push == nullptr || pop == nullptr || get_caps == nullptr) {
    return Unsupported("the NVIDIA driver lacks cuCtxPushCurrent_v2, cuCtxPopCurrent_v2 or cuvidGetDecoderCaps");
  }
  const auto* hw = reinterpret_cast<const AVHWDeviceContext*>(device->data);
  const auto* cu = static_cast<const AVCUDADeviceContext*>(hw->hwctx);
  if (push(cu->cuda_ctx) != CUDA_SUCCESS) return Unsupported("cannot make the CUDA context current");
  CUVIDDECODECAPS c{};
  c.eCodecType = cudaVideoCodec_HEVC;
  c.eChromaFormat = cudaVideoChromaFormat_444;
  c.nBitDepthMinus8 = 0;
  const CUresult rc = get_caps(&c);
  CUcontext popped = nullptr;
  pop(&popped);
  if (rc != CUDA_SUCCESS)
    return Unsupported(FormatMessage("cuvidGetDecoderCaps failed (CUresult %d)", static_cast<int>(rc)));
  if (c.bIsSupported == 0) return Unsupported("this GPU's NVDEC does not decode 8-bit 4:4:4 HEVC");
  NvdecCaps caps;
  caps.min_width = c.nMinWidth;
  caps.min_height = c.nMinHeight;
  caps.max_width = c.nMaxWidth;
  caps.max_height = c.nMaxHeight;
  caps.max_macroblocks = c.nMaxMBCount;
  caps.engines = c.nNumNVDECs;
  return caps;
}

const CudaDevice& SharedDevice() {
  static const CudaDevice device = [] {
    CudaDevice d;
    // libavutil's own failure here is only "Operation not permitted"; the driver library's
    // absence is the usual reason, and dlerror says it plainly.
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda == nullptr) {
      const char* why = dlerror();
      d.status = Unsupported(std::string("no NVIDIA driver: ") + (why != nullptr ? why : "libcuda.so.1 not found"));
      return d;
    }
    // Kept open, as libavcodec keeps its own: the caps query below calls into it.
    av::QuietLogs();
    if (int rc = av_hwdevice_ctx_create(&d.ref, AV_HWDEVICE_TYPE_CUDA, nullptr, nullptr, 0); rc < 0) {
      d.ref = nullptr;
      d.status = Unsupported("no CUDA device could be opened: " + av::ErrorString(rc));
      return d;
    }
    auto caps = QueryHevcCaps(cuda, d.ref);
    if (caps.ok()) {
      d.caps = *caps;
    } else {
      d.status = caps.status();
    }
    return d;
  }();
  return device;
}

// The device's own bounds, which may be tighter than the documented ones NvdecCanDecode uses.
Status FitsDevice(const VideoStreamView& v, const NvdecCaps& caps) {
  const PictureShape& c = v.coded;
  const uint64_t macroblocks = (uint64_t{c.width} + 15) / 16 * ((uint64_t{c.height} + 15) / 16);
  if (c.width < caps.min_width || c.height < caps.min_height || c.width > caps.max_width ||
      c.height > caps.max_height || macroblocks > caps.max_macroblocks) {
    return Unsupported(FormatMessage("this GPU's NVDEC decodes HEVC 4:4:4 of %ux%u..%ux%u (%u macroblocks), not %ux%u",
                                     caps.min_width, caps.min_height, caps.max_width, caps.max_height,
                                     caps.max_macroblocks, c.width, c.height));
  }
  return Status::Ok();
}

AVPixelFormat PickCuda(AVCodecContext*, const AVPixelFormat* formats) {
  for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f) {
    if (*f == AV_PIX_FMT_CUDA) return *f;
  }
  return AV_PIX_FMT_NONE;  // the hwaccel could not start for this stream: an error, not software
}

// An HEVC decoder on the shared CUDA device for a stream NVDEC takes, opened.
Result<av::CodecContextPtr> OpenNvdec(const VideoStreamView& v) {
  RETURN_IF_ERROR(NvdecCanDecode(v));
  const CudaDevice& device = SharedDevice();
  RETURN_IF_ERROR(device.status);
  RETURN_IF_ERROR(FitsDevice(v, device.caps));
  const AVCodec* decoder = avcodec_find_decoder(AV_CODEC_ID_HEVC);
  if (decoder == nullptr) return Unsupported("this libavcodec has no HEVC decoder");
  av::CodecContextPtr ctx(avcodec_alloc_context3(decoder));
  if (!ctx) return Internal("out of memory allocating a video decoder");
  ctx->hw_device_ctx = av_buffer_ref(device.ref);
  if (ctx->hw_device_ctx == nullptr) return Internal("out of memory referencing the CUDA device");
  ctx->get_format = PickCuda;
  ctx->thread_count = 1;
  RETURN_IF_ERROR(av::OpenDecoder(ctx.get(), decoder, v));
  return ctx;
}

class NvdecBackend final : public VideoDecoderBackend {
 public:
  const char* name() const override { return "nvdec"; }
  Status Decode(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                std::span<uint8_t> out) const override {
    ASSIGN_OR_RETURN(const VideoStreamView v, av::ParseForDecode(stream, expected, expected_frames, out));
    ASSIGN_OR_RETURN(av::CodecContextPtr ctx, OpenNvdec(v));
    av::FramePtr host(av_frame_alloc());
    if (!host) return Internal("out of memory allocating a video frame");
    return av::DecodePackets(ctx.get(), v, out, [&](AVFrame* decoded) -> Result<const AVFrame*> {
      if (decoded->format != AV_PIX_FMT_CUDA) return Unsupported("NVDEC did not decode this stream");
      av_frame_unref(host.get());
      if (int rc = av_hwframe_transfer_data(host.get(), decoded, 0); rc < 0) {
        return Unsupported("copying an NVDEC frame to host memory: " + av::ErrorString(rc));
      }
      return host.get();
    });
  }
};

class AutoBackend final : public VideoDecoderBackend {
 public:
  const char* name() const override { return "auto"; }
  Status Decode(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                std::span<uint8_t> out) const override {
    return DecodeWithOptions(stream, expected, expected_frames, out, {});
  }
  Status DecodeWithOptions(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                           std::span<uint8_t> out, const VideoDecodeOptions& options) const override {
    const VideoDecoderBackend& cpu = CpuVideoDecoder();
    if (!UseNvdec()) return cpu.DecodeWithOptions(stream, expected, expected_frames, out, options);
    const auto v = av::ParseForDecode(stream, expected, expected_frames, out);
    if (!v.ok() || !NvdecCanDecode(*v).ok() || !FitsDevice(*v, SharedDevice().caps).ok()) {
      return cpu.DecodeWithOptions(stream, expected, expected_frames, out, options);
    }
    const Status gpu = NvdecVideoDecoder().Decode(stream, expected, expected_frames, out);
    if (gpu.ok()) return gpu;
    Status on_cpu = cpu.DecodeWithOptions(stream, expected, expected_frames, out, options);
    // A stream the CPU decodes was fine: the device failed it, and may fail the next one too.
    if (on_cpu.ok() && !nvdec_failed_.exchange(true)) {
      KVC_LOG_WARN("NVDEC failed a stream the CPU decodes (%s); video decodes on the CPU from now on",
                   gpu.ToString().c_str());
    }
    return on_cpu;
  }

 private:
  bool UseNvdec() const {
    if (nvdec_failed_.load(std::memory_order_relaxed)) return false;
    const Status& device = SharedDevice().status;
    if (!device.ok()) {
      std::call_once(logged_absent_, [&] { KVC_LOG_INFO("video decodes on the CPU: %s", device.ToString().c_str()); });
      return false;
    }
    return true;
  }
  mutable std::atomic<bool> nvdec_failed_{false};
  mutable std::once_flag logged_absent_;
};

}  // namespace

Status NvdecDeviceStatus() { return SharedDevice().status; }

Status NvdecDecodeToDevice(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                           const std::function<Status(const NvdecDeviceFrame&)>& on_frame) {
  ASSIGN_OR_RETURN(const VideoStreamView v, ParseVideoStream(stream, expected, expected_frames));
  ASSIGN_OR_RETURN(av::CodecContextPtr ctx, OpenNvdec(v));
  return av::DecodePacketsTo(ctx.get(), v, [&](AVFrame* decoded, uint32_t index) -> Status {
    if (decoded->format != AV_PIX_FMT_CUDA || decoded->hw_frames_ctx == nullptr) {
      return Unsupported("NVDEC did not decode this stream");
    }
    const auto* frames = reinterpret_cast<const AVHWFramesContext*>(decoded->hw_frames_ctx->data);
    if (frames->sw_format != AV_PIX_FMT_YUV444P) {
      return Unsupported(FormatMessage("NVDEC returned pixel format %d, not planar 8-bit 4:4:4", frames->sw_format));
    }
    KVC_CHECK_CORRUPT(static_cast<uint32_t>(decoded->width) == v.coded.width &&
                          static_cast<uint32_t>(decoded->height) == v.coded.height,
                      "video frame %u decoded as %dx%d, expected %ux%u", index, decoded->width, decoded->height,
                      v.coded.width, v.coded.height);
    NvdecDeviceFrame f;
    f.index = index;
    for (int p = 0; p < 3; ++p) {
      f.planes[p] = reinterpret_cast<uintptr_t>(decoded->data[p]);
      f.pitch[p] = static_cast<uint32_t>(decoded->linesize[p]);
    }
    f.coded_width = v.coded.width;
    f.coded_height = v.coded.height;
    f.picture = v.shape;
    return on_frame(f);
  });
}

Result<NvdecCaps> NvdecDeviceCaps() {
  RETURN_IF_ERROR(SharedDevice().status);
  return SharedDevice().caps;
}

Status NvdecCanDecode(const VideoStreamView& stream) {
  if (stream.coder != VideoCoder::kX265) {
    return Unsupported(std::string("NVDEC decodes HEVC (x265) streams, not ") + VideoCoderName(stream.coder));
  }
  if (stream.shape.planes != 3) return Unsupported("NVDEC has no 4:0:0 (gray) HEVC: a stream for it has 3 planes");
  const PictureShape& c = stream.coded;
  if (c.width < kNvdecHevcMinSide || c.height < kNvdecHevcMinSide || c.width > kNvdecHevcMaxSide ||
      c.height > kNvdecHevcMaxSide) {
    return Unsupported(FormatMessage("a %ux%u picture is outside NVDEC's HEVC sizes (%u..%u a side)", c.width, c.height,
                                     kNvdecHevcMinSide, kNvdecHevcMaxSide));
  }
  return Status::Ok();
}

const VideoDecoderBackend& NvdecVideoDecoder() {
  static const NvdecBackend backend;
  return backend;
}

const VideoDecoderBackend& AutoVideoDecoder() {
  static const AutoBackend backend;
  return backend;
}

}  // namespace kvc
