// Lossless video coding of 8-bit pictures through libavcodec: the encoder
// side, and the byte format of one coded stream, which any decoder backend parses the same way.
// A stream is a sequence of frames of one picture shape (1 plane: gray, 3 planes: yuv444p).
// Codecs have minimum and aligned picture sizes; pictures are padded by repeating their last
// row and column (cheap to predict) and cropped again on decode, so any size round-trips.
// Byte layout: docs/format.md ("video stream").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

// Values are stored in streams; never renumber.
enum class VideoCoder : uint8_t { kX265 = 0, kX264 = 1, kFfv1 = 2 };
inline constexpr VideoCoder kVideoCoders[] = {VideoCoder::kX265, VideoCoder::kX264, VideoCoder::kFfv1};

// "x265", "x264", "ffv1".
const char* VideoCoderName(VideoCoder coder);
std::optional<VideoCoder> ParseVideoCoder(std::string_view name);

struct PictureShape {
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t planes = 1;  // 1 (gray) or 3 (yuv444p)
  uint64_t plane_bytes() const { return uint64_t{width} * height; }
  uint64_t frame_bytes() const { return plane_bytes() * planes; }
  bool operator==(const PictureShape&) const = default;
};

// The largest picture side a stream may claim: far beyond any KV layout, small enough that a
// hostile stream cannot make a decoder allocate more than the caller's own bound.
inline constexpr uint32_t kMaxPictureSide = 16384;

// The smallest picture side NVDEC decodes in HEVC (NVIDIA's documented bound for the GPUs we
// design for, Turing and later). x265 streams may be padded to it (VideoEncodeOptions::
// nvdec_sizes) so that a GPU can decode them; a decoder accepts either padding.
inline constexpr uint32_t kNvdecMinSide = 144;

// The coded (padded) size of a picture of `shape` for `coder`; with `nvdec_sizes` (x265 only)
// each side is at least kNvdecMinSide.
PictureShape CodedShape(VideoCoder coder, const PictureShape& shape, bool nvdec_sizes = false);

// FFV1's entropy coders: the range coder with FFV1's adaptive state table (what every stream
// before this option held), the range coder with the default table, and Golomb-Rice.
enum class Ffv1Coder : uint8_t { kRangeTable, kRangeDefault, kGolomb };
std::optional<Ffv1Coder> ParseFfv1Coder(std::string_view name);  // "range", "range_def", "golomb"
const char* Ffv1CoderName(Ffv1Coder coder);

// The largest FFV1 slice count an encoder accepts (FFmpeg's MAX_SLICES is 256; more than this
// only costs ratio on KV pictures).
inline constexpr uint32_t kMaxFfv1Slices = 64;

struct VideoEncodeOptions {
  VideoCoder coder = VideoCoder::kFfv1;
  // x265/x264 speed preset ("ultrafast" .. "veryslow"); ignored by FFV1.
  std::string preset = "medium";
  // FFV1 slices per frame, each coded with its own contexts so that a decoder can run them on
  // several threads (VideoDecodeOptions::threads). 0: libavcodec's choice from the picture size,
  // 2 x 2 for any KV picture, what every stream before this option held. libavcodec tiles a
  // frame into v x h slices with v <= h < 2v (1, 4, 6, 9, 12, 16, ...; 1 only for pictures up
  // to 352x288, and no more rows of slices than pixel rows): any other count is an error.
  // The count comes from the caller, never from the cores, so bytes do not depend on the machine.
  uint32_t ffv1_slices = 0;
  Ffv1Coder ffv1_coder = Ffv1Coder::kRangeTable;
  // FFV1's large context model (more contexts per sample); ignored by the other coders.
  bool ffv1_large_context = false;
  // Pictures padded to sides NVDEC decodes (x265 only; an error for the other coders). Pixels
  // and decoders are unchanged; only small pictures grow.
  bool nvdec_sizes = false;
};

// Encodes `n_frames` frames, each `shape.frame_bytes()` bytes of planar 8-bit pixels (plane by
// plane, rows top to bottom), losslessly. Deterministic: single-threaded encoders, no
// timestamps from the clock.
Result<std::vector<uint8_t>> EncodeVideoStream(const PictureShape& shape, uint32_t n_frames,
                                               std::span<const uint8_t> pixels, const VideoEncodeOptions& options);

// Writes a stream from its parts (the encoder's last step; fuzzing builds streams around mutated
// packets with it). Packets must be non-empty and each under 4 GiB.
std::vector<uint8_t> AssembleVideoStream(VideoCoder coder, const PictureShape& shape, uint32_t n_frames,
                                         std::span<const uint8_t> extradata,
                                         std::span<const std::span<const uint8_t>> packets, bool nvdec_sizes = false);

// A parsed stream header and its packets (views into the stream's bytes).
struct VideoStreamView {
  VideoCoder coder = VideoCoder::kFfv1;
  PictureShape shape;  // as the caller encoded it
  PictureShape coded;  // padded, as the codec saw it
  uint32_t n_frames = 0;
  std::span<const uint8_t> extradata;
  std::vector<std::span<const uint8_t>> packets;
};

// Parses a stream; `expected` and `expected_frames` are what the caller's own header says, and
// a stream that claims anything else (a coded size other than the coder's padding of `expected`,
// or for x265 its NVDEC padding) is corrupt, as is one without exactly one packet per frame
// (what every encoder writes), so the stream's size bounds the frame count. kInvalidArgument
// for an `expected` no encoder accepts (planes not 1 or 3, a side outside 1..kMaxPictureSide).
// Cheap: nothing is decoded, nothing allocated beyond the packet list.
Result<VideoStreamView> ParseVideoStream(std::span<const uint8_t> bytes, const PictureShape& expected,
                                         uint32_t expected_frames);

}  // namespace kvc
