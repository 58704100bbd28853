#include "codecs/kvc_inspect.h"

#include <cstdio>

#include "base/hash.h"
#include "base/report_json.h"
#include "codecs/codec.h"
#include "format/container.h"

namespace kvc {

Result<std::string> InspectKvcJson(std::span<const uint8_t> bytes) {
  ASSIGN_OR_RETURN(const KvcFile file, ReadKvc(bytes));
  const KvcHeader& h = file.header;
  const Codec* codec = FindCodecById(h.codec_id);
  ReportJson sections = ReportJson::array();
  for (const auto& s : file.sections) {
    char tag[16];
    std::snprintf(tag, sizeof tag, "0x%08x", s.tag);
    sections.push_back({{"tag", tag}, {"bytes", s.bytes.size()}});
  }
  const double ratio = static_cast<double>(h.shape.fp16_bytes()) / static_cast<double>(bytes.size());
  const ReportJson j = {{"format_version", kKvcFormatVersion},
                        {"file_bytes", bytes.size()},
                        {"codec", codec ? codec->info().name : "unknown"},
                        {"codec_id", h.codec_id},
                        {"codec_version", h.codec_version},
                        {"level", h.level},
                        {"codec_params_bytes", h.codec_params.size()},
                        {"n_layers", h.shape.n_layers},
                        {"n_kv_heads", h.shape.n_kv_heads},
                        {"head_dim", h.shape.head_dim},
                        {"n_tokens", h.shape.n_tokens},
                        {"keys_only", h.shape.keys_only},
                        {"dtype", DTypeName(h.dtype)},
                        {"model_fingerprint", HexString(h.model_fingerprint)},
                        {"token_begin", h.token_begin},
                        {"pos_begin", h.pos_begin},
                        {"bytes_fp16", h.shape.fp16_bytes()},
                        {"compression_ratio", ratio},
                        {"sections", sections}};
  return DumpReport(j);
}

std::string CodecListJson() {
  ReportJson list = ReportJson::array();
  for (const Codec* codec : AllCodecs()) {
    const CodecInfo& info = codec->info();
    list.push_back({{"name", info.name},
                    {"id", info.id},
                    {"version", info.version},
                    {"levels", info.levels},
                    {"default_level", info.default_level},
                    {"params", info.params},
                    {"description", info.description},
                    {"needs_calibration", info.needs_calibration},
                    {"lossless", info.lossless}});
  }
  return DumpReport(list);
}

}  // namespace kvc
