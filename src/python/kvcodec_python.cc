// The Python package's native part (kvcodec._kvcodec): codecs, calibrations, stores and chunk keys
// over K and V arrays in kvcodec's layout [layers, tokens, kv_heads, head_dim]. python/kvcodec/
// wraps it: numpy and torch tensors (or any 4-D buffer) in, the same dtype out. It takes and gives
// buffers only (the buffer protocol, never numpy's C API), so the package works where numpy is not
// installed. Every error is a kvcodec.Error subclass carrying the library's one-line message; no
// C++ exception reaches Python otherwise.
#include "python/kvcodec_python.h"

#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "base/hash.h"
#include "base/hex.h"
#include "base/status.h"
#include "codecs/codec.h"
#include "codecs/kvc_inspect.h"
#include "codecs/kvtc/kvtc_fit.h"
#include "fetch/store_chunks.h"
#include "store/chunk_key.h"
#include "store/store.h"
#include "tensor/kv_cache.h"
#include "transform_coding/calibration_registry.h"
#include "transform_coding/kvcal.h"

namespace py = pybind11;

namespace kvc {
namespace {

// kvcodec.Error and one subclass per status code, made once at import.
struct Errors {
  py::object base, invalid_argument, corrupt, unsupported, not_found, io, internal;
};
Errors& ErrorClasses() {
  static Errors errors;
  return errors;
}

[[noreturn]] void Raise(const Status& status) {
  const Errors& e = ErrorClasses();
  const py::object* cls = &e.internal;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      cls = &e.invalid_argument;
      break;
    case StatusCode::kCorrupt:
      cls = &e.corrupt;
      break;
    case StatusCode::kUnsupported:
      cls = &e.unsupported;
      break;
    case StatusCode::kNotFound:
      cls = &e.not_found;
      break;
    case StatusCode::kIoError:
      cls = &e.io;
      break;
    case StatusCode::kOk:
    case StatusCode::kInternal:
      break;
  }
  PyErr_SetString(cls->ptr(), status.ToString().c_str());
  throw py::error_already_set();
}

template <typename T>
T Take(Result<T> result) {
  if (!result.ok()) Raise(result.status());
  return std::move(result).value();
}
void Check(const Status& status) {
  if (!status.ok()) Raise(status);
}

// The calibrations this process has loaded: kvtc encodes with one named by the caller and decodes
// with whichever a file's header names (by hash), as the C API's kvc_calibration_load does.
CalibrationRegistry& Calibrations() {
  static CalibrationRegistry registry;
  return registry;
}

// A model named as the C++ side names it: its 16-byte fingerprint, as bytes or 32 hex digits
// (what `kvcodec inspect` and the .kvc header show). None: all zeros, a model not named.
ModelFingerprint FingerprintFrom(const py::object& model) {
  ModelFingerprint fp{};
  if (model.is_none()) return fp;
  const Status bad = InvalidArgument("a model fingerprint is 16 bytes or 32 hex digits");
  if (py::isinstance<py::bytes>(model)) {
    const std::string bytes = model.cast<std::string>();
    if (bytes.size() != fp.size()) Raise(bad);
    std::memcpy(fp.data(), bytes.data(), fp.size());
    return fp;
  }
  if (!py::isinstance<py::str>(model)) Raise(bad);
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(model.ptr(), &size);
  if (utf8 == nullptr) PyErr_Clear();  // a lone surrogate: no UTF-8 form, so no hex digits either
  if (utf8 == nullptr || !ParseHexBytes(std::string_view(utf8, static_cast<size_t>(size)), fp)) Raise(bad);
  return fp;
}

// A bytes-like argument (bytes, bytearray, a memoryview of bytes), requested for as long as this
// lives.
struct ByteBuffer {
  py::buffer_info info;
  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size)};
  }
};

ByteBuffer RequestBytes(const py::buffer& data) {
  ByteBuffer buffer{data.request()};
  if (buffer.info.ndim != 1 || buffer.info.itemsize != 1) {
    Raise(InvalidArgument("data must be bytes (a 1-D byte buffer)"));
  }
  return buffer;
}

const Codec& CodecNamed(const std::string& name) {
  const Codec* codec = FindCodec(name);
  if (codec == nullptr) Raise(InvalidArgument("unknown codec '" + name + "'"));
  return *codec;
}

// K or V as the Python layer hands it: a C-contiguous 4-D buffer whose item size matches dtype
// (bf16 arrives as 16-bit integers, numpy having no bf16).
py::buffer_info Tensor(const py::buffer& b, const char* which, DType dtype) {
  py::buffer_info info = b.request();
  if (info.ndim != 4) {
    Raise(InvalidArgument(FormatMessage("%s must have 4 dimensions [layers, tokens, kv_heads, head_dim], not %zd",
                                        which, static_cast<ssize_t>(info.ndim))));
  }
  if (static_cast<size_t>(info.itemsize) != DTypeSize(dtype)) {
    Raise(InvalidArgument(FormatMessage("%s has %zd-byte items, %s needs %zu", which,
                                        static_cast<ssize_t>(info.itemsize), DTypeName(dtype), DTypeSize(dtype))));
  }
  ssize_t stride = info.itemsize;
  for (ssize_t d = 3; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != stride)
      Raise(InvalidArgument(std::string(which) + " is not contiguous"));
    stride *= info.shape[d];
  }
  return info;
}

// What a K or V shape must be, checked on the shape alone: every dimension in 1..2^22 and the
// cache within the library's limits (ValidateShape). The Python layer asks before it copies an
// array into a contiguous buffer, so a broadcast view of a huge shape is refused here rather
// than allocated (or failed by numpy's MemoryError); the buffers are checked again below.
void CheckShape(const std::string& which, const std::vector<int64_t>& dims, const std::string& dtype_name) {
  const DType dtype = Take(ParseDType(dtype_name));
  if (dims.size() != 4) {
    Raise(InvalidArgument(FormatMessage("%s must have 4 dimensions [layers, tokens, kv_heads, head_dim], not %zu",
                                        which.c_str(), dims.size())));
  }
  for (int64_t d : dims) {
    if (d <= 0 || d > static_cast<int64_t>(kMaxTokens))
      Raise(InvalidArgument(which + " needs every dimension in 1..2^22"));
  }
  const KvShape shape{.n_layers = static_cast<uint32_t>(dims[0]),
                      .n_kv_heads = static_cast<uint32_t>(dims[2]),
                      .head_dim = static_cast<uint32_t>(dims[3]),
                      .n_tokens = static_cast<uint32_t>(dims[1])};
  Check(ValidateShape(shape, dtype).WithContext(which));
}

// K and V as the codecs read them, straight from the arrays' memory (their layout is kvcodec's):
// no copy. The buffers stay requested (the arrays pinned) for as long as this lives.
struct ArraysKv {
  py::buffer_info k, v;
  KvView view;
};

ArraysKv ViewArrays(const py::buffer& k, const py::buffer& v, const std::string& dtype_name, int64_t pos_begin) {
  const DType dtype = Take(ParseDType(dtype_name));
  ArraysKv out{Tensor(k, "k", dtype), Tensor(v, "v", dtype), {}};
  if (out.k.shape != out.v.shape) Raise(InvalidArgument("k and v differ in shape"));
  for (ssize_t d : out.k.shape) {
    if (d <= 0 || d > static_cast<ssize_t>(kMaxTokens))
      Raise(InvalidArgument("k and v need every dimension in 1..2^22"));
  }
  if (pos_begin < 0 || pos_begin > INT32_MAX) Raise(InvalidArgument("positions must start in 0..2^31-1"));
  KvShape shape;
  shape.n_layers = static_cast<uint32_t>(out.k.shape[0]);
  shape.n_tokens = static_cast<uint32_t>(out.k.shape[1]);
  shape.n_kv_heads = static_cast<uint32_t>(out.k.shape[2]);
  shape.head_dim = static_cast<uint32_t>(out.k.shape[3]);
  const size_t bytes = static_cast<size_t>(out.k.size) * static_cast<size_t>(out.k.itemsize);
  out.view = Take(KvView::Over(shape, dtype, static_cast<int32_t>(pos_begin),
                               std::span(static_cast<const uint8_t*>(out.k.ptr), bytes),
                               std::span(static_cast<const uint8_t*>(out.v.ptr), bytes)));
  return out;
}

py::bytes Encode(const py::buffer& k, const py::buffer& v, const std::string& dtype, const std::string& codec_name,
                 const std::string& level, const std::map<std::string, std::string>& params, const py::object& model,
                 int64_t pos_begin) {
  const Codec& codec = CodecNamed(codec_name);
  const ArraysKv arrays = ViewArrays(k, v, dtype, pos_begin);
  const ModelFingerprint fp = FingerprintFrom(model);
  EncodeOptions options;
  options.level = level;
  options.params = params;
  std::vector<uint8_t> bytes;
  {
    py::gil_scoped_release unlocked;
    const CodecContext context{&Calibrations(), &fp, nullptr};
    Result<std::vector<uint8_t>> encoded = EncodeKvc(codec, arrays.view, options, fp, 0, context);
    py::gil_scoped_acquire locked;
    bytes = Take(std::move(encoded));
  }
  return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// K or V of a decoded file, exported through the buffer protocol: memoryview() reads it without
// numpy, and numpy.asarray (then torch.from_numpy) wraps it without a copy. Both halves share the
// decoded cache, which lives as long as either of them or any view of them does.
class DecodedHalf {
 public:
  DecodedHalf(std::shared_ptr<KvCache> cache, KvKind kind) : cache_(std::move(cache)), kind_(kind) {}

  py::buffer_info Buffer() const {
    const KvShape shape = cache_->shape();
    const DType dtype = cache_->dtype();
    const auto item = static_cast<ssize_t>(DTypeSize(dtype));
    const std::vector<ssize_t> dims = {shape.n_layers, shape.n_tokens, shape.n_kv_heads, shape.head_dim};
    const std::vector<ssize_t> strides = {dims[1] * dims[2] * dims[3] * item, dims[2] * dims[3] * item, dims[3] * item,
                                          item};
    // bf16 has no buffer format: its bits go out as int16 (torch views them as bfloat16 again).
    const char* format = dtype == DType::kF32 ? "f" : dtype == DType::kF16 ? "e" : "h";
    return py::buffer_info(cache_->Bytes(kind_).data(), item, format, 4, dims, strides, /*readonly=*/false);
  }

 private:
  std::shared_ptr<KvCache> cache_;
  KvKind kind_;
};

// K and V of a decoded file as two 4-D memoryviews sharing the decoded cache (no copy out), with
// the file's dtype name and first position; the Python layer makes numpy or torch of them.
py::tuple Decode(const py::buffer& data, const py::object& model) {
  const ByteBuffer input = RequestBytes(data);
  const std::span<const uint8_t> bytes = input.bytes();
  const bool check_model = !model.is_none();
  const ModelFingerprint fp = FingerprintFrom(model);
  auto cache = std::make_shared<KvCache>();
  {
    py::gil_scoped_release unlocked;
    const CodecContext context{&Calibrations(), check_model ? &fp : nullptr, nullptr};
    Result<KvCache> decoded = DecodeKvc(bytes, check_model ? &fp : nullptr, context);
    py::gil_scoped_acquire locked;
    *cache = Take(std::move(decoded));
  }
  const DType dtype = cache->dtype();
  const int32_t pos_begin = cache->pos_begin();
  auto view_of = [&](KvKind kind) { return py::memoryview(py::cast(DecodedHalf(cache, kind))); };
  return py::make_tuple(view_of(KvKind::kKey), view_of(KvKind::kValue), DTypeName(dtype), pos_begin);
}

// The codec alone on the same arrays, each call timed in C++ with no Python in the loop: the
// denominator of the package's own overhead (python/bench.py). Seconds per call, per round.
py::dict TimeCodec(const py::buffer& k, const py::buffer& v, const std::string& dtype, const std::string& codec_name,
                   const std::string& level, const py::object& model, uint32_t rounds) {
  const Codec& codec = CodecNamed(codec_name);
  if (rounds == 0) Raise(InvalidArgument("rounds must be at least 1"));
  const ArraysKv arrays = ViewArrays(k, v, dtype, 0);
  const ModelFingerprint fp = FingerprintFrom(model);
  EncodeOptions options;
  options.level = level;
  std::vector<double> encode_s, decode_s;
  std::vector<uint8_t> bytes;
  Status failed = Status::Ok();
  {
    py::gil_scoped_release unlocked;
    const CodecContext context{&Calibrations(), &fp, nullptr};
    for (uint32_t r = 0; r < rounds && failed.ok(); ++r) {
      const auto t0 = SteadyClock::now();
      Result<std::vector<uint8_t>> encoded = EncodeKvc(codec, arrays.view, options, fp, 0, context);
      encode_s.push_back(SecondsSince(t0));
      if (!encoded.ok()) {
        failed = encoded.status();
        break;
      }
      bytes = std::move(encoded).value();
      const auto t1 = SteadyClock::now();
      Result<KvCache> decoded = DecodeKvc(bytes, &fp, context);
      decode_s.push_back(SecondsSince(t1));
      if (!decoded.ok()) failed = decoded.status();
    }
  }
  Check(failed);
  py::dict d;
  d["encode_s"] = encode_s;
  d["decode_s"] = decode_s;
  d["bytes"] = bytes.size();
  return d;
}

// What the Python layer's Calibration shows of a loaded or fitted calibration.
py::dict CalibrationInfo(const LoadedCalibration& loaded) {
  const KvtcCalibration& c = loaded.calibration;
  py::dict d;
  // The path's bytes as os.fsdecode gives them (the Python layer passes os.fsencode's bytes in),
  // so a file name that is not UTF-8 round-trips instead of failing the conversion.
  py::object path = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeFSDefaultAndSize(loaded.path.data(), static_cast<Py_ssize_t>(loaded.path.size())));
  if (!path) throw py::error_already_set();
  d["path"] = path;
  d["hash"] = HexString(loaded.hash);
  d["model_fingerprint"] = HexString(c.model_fingerprint);
  d["n_layers"] = c.n_layers;
  d["n_kv_heads"] = c.n_kv_heads;
  d["head_dim"] = c.head_dim;
  d["keys_rope_undone"] = c.keys_rope_undone;
  d["quantizer"] = KvtcQuantizerName(c.quantizer);
  d["grouping"] = KvtcGroupingName(c.grouping);
  std::vector<double> ratios;
  for (const BitAllocation& a : c.allocations) ratios.push_back(a.target_ratio);
  d["target_ratios"] = ratios;
  return d;
}

py::dict LoadCalibration(const std::string& path) { return CalibrationInfo(*Take(Calibrations().Load(path))); }

// The calibration this process holds under `hash_hex` (loaded or fitted), written as a .kvcal.
void SaveCalibration(const std::string& hash_hex, const std::string& path) {
  Hash128 hash{};
  if (!ParseHexBytes(hash_hex, hash)) Raise(InvalidArgument("a calibration hash is 32 hex digits"));
  const std::shared_ptr<const LoadedCalibration> loaded = Calibrations().FindByHash(hash);
  if (loaded == nullptr) Raise(NotFound("no calibration with hash " + hash_hex + " in this process"));
  Status saved = Status::Ok();
  {
    py::gil_scoped_release unlocked;
    saved = SaveKvcal(loaded->calibration, path);
  }
  Check(saved);
}

// RoPE as the Python layer passes it: None (keys fitted as stored) or (style, n_rot, base, scale).
// Styles are llama.cpp's names (`kvcodec tokenize --json` reports them); those kvcodec does not
// undo ("none", "vision") fit keys as stored, and say so.
std::optional<RopeParams> RopeFrom(const py::object& rope) {
  if (rope.is_none()) return std::nullopt;
  const auto [style, n_rot, base, scale] = rope.cast<std::tuple<std::string, uint32_t, double, double>>();
  RopeParams r;
  const std::optional<RopeType> type = ParseRopeType(style);
  if (!type) {
    Raise(
        InvalidArgument("rope style must be \"neox\" (halves rotated together, as Hugging Face's rotate_half), "
                        "\"normal\" (adjacent pairs, as GPT-J and llama.cpp's LLaMA), \"none\" (no RoPE on keys) "
                        "or a sectioned RoPE (\"mrope\", \"imrope\": undone as neox; \"vision\": coded as stored)"));
  }
  r.type = *type;
  r.n_rot = n_rot;
  r.freq_base = static_cast<float>(base);
  r.freq_scale = static_cast<float>(scale);
  return r;
}

// Fits a kvtc calibration on windows of K and V: `windows` holds (k, v, dtype, pos_begin,
// held_back) per window, the geometry is the first window's. The calibration joins this process's
// registry (kvtc encodes with it at once); returns its info and the fit's report (JSON).
py::tuple Calibrate(const py::list& windows, const py::object& model, const py::object& rope,
                    const std::string& grouping, const std::string& quantizer, uint32_t group_size,
                    uint32_t chunk_tokens, const std::vector<float>& ratios, uint32_t sinks, int threads,
                    bool progress) {
  if (windows.empty()) Raise(InvalidArgument("no samples to calibrate on"));
  KvtcFitOptions options;
  if (!grouping.empty()) options.grouping = Take(ParseKvtcGrouping(grouping));
  if (!quantizer.empty()) options.quantizer = Take(ParseKvtcQuantizer(quantizer));
  options.group_size = group_size;
  options.chunk_tokens = chunk_tokens;
  if (!ratios.empty()) options.ratios = ratios;
  options.sinks = sinks;
  options.n_threads = threads;
  options.progress = progress;
  std::unique_ptr<KvtcFitter> fitter;
  for (size_t i = 0; i < windows.size(); ++i) {
    const auto window = windows[i].cast<py::tuple>();
    if (window.size() != 5) Raise(Internal("a calibration window is (k, v, dtype, pos_begin, held_back)"));
    const ArraysKv arrays = ViewArrays(window[0].cast<py::buffer>(), window[1].cast<py::buffer>(),
                                       window[2].cast<std::string>(), window[3].cast<int64_t>());
    if (fitter == nullptr) {
      const KvShape shape = arrays.view.shape();
      const KvtcFitModel fit_model{.fingerprint = FingerprintFrom(model),
                                   .n_layers = shape.n_layers,
                                   .n_kv_heads = shape.n_kv_heads,
                                   .head_dim = shape.head_dim,
                                   .rope = RopeFrom(rope)};
      fitter = Take(KvtcFitter::Create(fit_model, options));
    }
    const bool held_back = window[4].cast<bool>();
    Status added = Status::Ok();
    {
      py::gil_scoped_release unlocked;
      added = held_back ? fitter->AddHeldoutWindow(arrays.view) : fitter->AddFitWindow(arrays.view);
    }
    Check(added.WithContext(FormatMessage("sample %zu", i)));
  }
  KvtcCalibration calibration;
  Result<CalibrateReport> report = Status::Ok();
  {
    py::gil_scoped_release unlocked;
    report = fitter->Finish(&calibration);
  }
  const CalibrateReport fitted = Take(std::move(report));
  const std::shared_ptr<const LoadedCalibration> loaded = Take(Calibrations().Add(std::move(calibration)));
  return py::make_tuple(CalibrationInfo(*loaded), CalibrateReportJson(fitted));
}

// The keys of the whole chunks of `tokens`, as the C++ side computes them.
std::vector<ChunkKey> KeysOf(const py::object& model, const std::vector<int64_t>& tokens, uint32_t chunk_tokens) {
  if (chunk_tokens == 0) Raise(InvalidArgument("chunk_tokens must be at least 1"));
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (int64_t t : tokens) {
    if (t < INT32_MIN || t > INT32_MAX) Raise(InvalidArgument("a token id is outside the 32-bit range"));
    ids.push_back(static_cast<int32_t>(t));
  }
  return ChunkKeys(FingerprintFrom(model), ids, chunk_tokens);
}

// A store by URL; every call releases the GIL (Redis calls wait on the network).
class PyStore {
 public:
  PyStore(const std::string& url, const std::string& secret, uint64_t capacity_bytes, uint32_t timeout_ms) {
    StoreOptions options;
    options.secret = secret;
    options.capacity_bytes = capacity_bytes;
    options.timeout_ms = timeout_ms;
    Result<std::unique_ptr<Store>> opened = Status::Ok();
    {
      py::gil_scoped_release unlocked;
      opened = OpenStore(url.empty() ? DefaultStoreUrl() : url, options);
    }
    store_ = Take(std::move(opened));
  }
  std::string url() const { return store_->url(); }
  void Put(const std::string& name, const py::buffer& data) {
    const ByteBuffer input = RequestBytes(data);
    const std::span<const uint8_t> bytes = input.bytes();
    Status put = Status::Ok();
    {
      py::gil_scoped_release unlocked;
      put = store_->Put(name, bytes);
    }
    Check(put);
  }
  py::bytes Get(const std::string& name) {
    Result<std::vector<uint8_t>> got = Status::Ok();
    {
      py::gil_scoped_release unlocked;
      got = store_->Get(name);
    }
    const std::vector<uint8_t> bytes = Take(std::move(got));
    return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  bool Exists(const std::string& name) {
    Result<bool> exists = Status::Ok();
    {
      py::gil_scoped_release unlocked;
      exists = store_->Exists(name);
    }
    return Take(std::move(exists));
  }
  // The whole chunks of `tokens` (their KV: k and v, from position 0), chunk `first` on, at every
  // (codec, level) of `rungs`, each chunk's manifest after its objects: what `kvcodec run` and
  // `serve` look up and fetch.
  py::dict StoreChunksOf(const py::buffer& k, const py::buffer& v, const std::string& dtype,
                         const std::vector<int64_t>& tokens, const py::object& model, uint32_t chunk_tokens,
                         const std::vector<std::pair<std::string, std::string>>& rungs, uint32_t first) {
    const std::vector<ChunkKey> keys = KeysOf(model, tokens, chunk_tokens);
    const ArraysKv arrays = ViewArrays(k, v, dtype, 0);
    const uint64_t needed = uint64_t{chunk_tokens} * keys.size();
    if (arrays.view.n_tokens() < needed) {
      Raise(InvalidArgument(FormatMessage("%zu whole chunks of %u tokens need KV of %llu tokens; k and v hold %u",
                                          keys.size(), chunk_tokens, static_cast<unsigned long long>(needed),
                                          arrays.view.n_tokens())));
    }
    if (rungs.empty()) Raise(InvalidArgument("no rungs to store chunks at"));
    std::vector<StoredRung> stored_rungs;
    for (const auto& [codec, level] : rungs) stored_rungs.push_back({&CodecNamed(codec), level});
    const ModelFingerprint fp = FingerprintFrom(model);
    Result<StoredChunks> stored = Status::Ok();
    {
      py::gil_scoped_release unlocked;
      const CodecContext context{&Calibrations(), &fp, nullptr};
      stored = StoreChunks(*store_, arrays.view, keys, first, chunk_tokens, stored_rungs, fp, context);
    }
    const StoredChunks done = Take(std::move(stored));
    py::dict d;
    d["chunks"] = done.chunks;
    d["bytes"] = done.bytes;
    return d;
  }
  void Delete(const std::string& name) {
    Status deleted = Status::Ok();
    {
      py::gil_scoped_release unlocked;
      deleted = store_->Delete(name);
    }
    Check(deleted);
  }

 private:
  std::unique_ptr<Store> store_;
};

std::vector<py::bytes> ChunkKeysOf(const py::object& model, const std::vector<int64_t>& tokens, uint32_t chunk_tokens) {
  std::vector<py::bytes> out;
  for (const ChunkKey& key : KeysOf(model, tokens, chunk_tokens)) {
    out.emplace_back(reinterpret_cast<const char*>(key.data()), key.size());
  }
  return out;
}

std::string ObjectName(const py::bytes& key, const std::string& codec, const std::string& level) {
  const std::string k = key;
  ChunkKey ck{};
  if (k.size() != ck.size()) Raise(InvalidArgument("a chunk key is 16 bytes"));
  std::memcpy(ck.data(), k.data(), ck.size());
  std::string name = ChunkObjectName(ck, codec, level);
  Check(CheckObjectName(name));
  return name;
}

std::string Inspect(const py::buffer& data) { return Take(InspectKvcJson(RequestBytes(data).bytes())); }

}  // namespace
}  // namespace kvc

namespace kvc {

void DefineBindings(py::module_& m) {
  m.doc() = "kvcodec's native part; use the kvcodec package.";
  Errors& e = ErrorClasses();
  auto make = [&](const char* name, const py::object& parent) {
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewException((std::string("kvcodec.") + name).c_str(), parent.ptr(), nullptr));
    m.attr(name) = cls;
    return cls;
  };
  e.base = make("Error", py::reinterpret_borrow<py::object>(PyExc_Exception));
  e.invalid_argument = make("InvalidArgumentError", e.base);
  e.corrupt = make("CorruptError", e.base);
  e.unsupported = make("UnsupportedError", e.base);
  e.not_found = make("NotFoundError", e.base);
  e.io = make("StoreIOError", e.base);
  e.internal = make("InternalError", e.base);

  m.def("encode", &Encode, py::arg("k"), py::arg("v"), py::arg("dtype"), py::arg("codec"), py::arg("level"),
        py::arg("params"), py::arg("model"), py::arg("pos_begin"));
  m.def("decode", &Decode, py::arg("data"), py::arg("model"));
  m.def("inspect_json", &Inspect, py::arg("data"));
  m.def("codecs_json", &CodecListJson);
  m.def("check_shape", &CheckShape, py::arg("name"), py::arg("shape"), py::arg("dtype"));
  m.def("time_codec", &TimeCodec, py::arg("k"), py::arg("v"), py::arg("dtype"), py::arg("codec"), py::arg("level"),
        py::arg("model"), py::arg("rounds"));
  m.def("load_calibration", &LoadCalibration, py::arg("path"));
  m.def("save_calibration", &SaveCalibration, py::arg("hash"), py::arg("path"));
  m.def("calibrate", &Calibrate, py::arg("windows"), py::arg("model"), py::arg("rope"), py::arg("grouping"),
        py::arg("quantizer"), py::arg("group_size"), py::arg("chunk_tokens"), py::arg("ratios"), py::arg("sinks"),
        py::arg("threads"), py::arg("progress"));
  m.def("chunk_keys", &ChunkKeysOf, py::arg("model"), py::arg("tokens"), py::arg("chunk_tokens"));
  m.def("chunk_object_name", &ObjectName, py::arg("key"), py::arg("codec"), py::arg("level"));
  m.attr("default_chunk_tokens") = kDefaultChunkTokens;
  py::class_<DecodedHalf>(m, "_DecodedHalf", py::buffer_protocol()).def_buffer(&DecodedHalf::Buffer);
  py::class_<PyStore>(m, "Store")
      .def(py::init<const std::string&, const std::string&, uint64_t, uint32_t>(), py::arg("url"), py::arg("secret"),
           py::arg("capacity_bytes"), py::arg("timeout_ms"))
      .def_property_readonly("url", &PyStore::url)
      .def("put", &PyStore::Put, py::arg("name"), py::arg("data"))
      .def("get", &PyStore::Get, py::arg("name"))
      .def("exists", &PyStore::Exists, py::arg("name"))
      .def("delete", &PyStore::Delete, py::arg("name"))
      .def("store_chunks", &PyStore::StoreChunksOf, py::arg("k"), py::arg("v"), py::arg("dtype"), py::arg("tokens"),
           py::arg("model"), py::arg("chunk_tokens"), py::arg("rungs"), py::arg("first"));
}

}  // namespace kvc
