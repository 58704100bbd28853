// The C++ layer (kvcodec.hpp) from an installed kvcodec: evaluate a prompt, move its KV cache
// through a codec into a fresh session, and check both continue with the same greedy tokens.
//   consumer MODEL CODEC LEVEL
#include <cstdio>
#include <kvcodec/kvcodec.hpp>
#include <string>
#include <vector>

namespace {
int Fail(const kvcodec::Error& e, const char* what) {
  std::fprintf(stderr, "%s failed: %s\n", what, e.message.c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  auto model = kvcodec::Model::Load(argv[1]);
  if (!model.ok()) return Fail(model.error(), "Load");
  auto tokens = model.value().Tokenize("Call me Ishmael. Some years ago, never mind how long precisely", true);
  if (!tokens.ok()) return Fail(tokens.error(), "Tokenize");
  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 256;
  params.n_threads = 1;
  auto original = kvcodec::Session::Create(model.value(), params);
  auto restored = kvcodec::Session::Create(model.value(), params);
  if (!original.ok() || !restored.ok()) return Fail(original.ok() ? restored.error() : original.error(), "Create");
  if (auto e = original.value().Eval(tokens.value())) return Fail(*e, "Eval");
  auto kv = original.value().Extract();
  if (!kv.ok()) return Fail(kv.error(), "Extract");
  const std::string level = argv[3] == std::string("-") ? "" : argv[3];
  auto bytes = kvcodec::Encode(kv.value(), argv[2], level, "", model.value().Fingerprint());
  if (!bytes.ok()) return Fail(bytes.error(), "Encode");
  const std::vector<uint8_t> fingerprint = model.value().Fingerprint();
  auto decoded = kvcodec::Decode(bytes.value(), &fingerprint);
  if (!decoded.ok()) return Fail(decoded.error(), "Decode");
  if (auto e = restored.value().Restore(decoded.value())) return Fail(*e, "Restore");

  // Generate a few tokens greedily in both sessions; the restored one must follow the original.
  auto original_sampler = kvcodec::Sampler::Create(model.value(), kvcodec::Sampler::Greedy());
  auto restored_sampler = kvcodec::Sampler::Create(model.value(), kvcodec::Sampler::Greedy());
  if (!original_sampler.ok() || !restored_sampler.ok()) return 1;
  std::vector<int32_t> generated;
  auto next = original_sampler.value().Next(original.value());
  if (!next.ok()) return Fail(next.error(), "Next");
  int32_t token = next.value();
  // The restored session has no logits until it evaluates: feed it the original's first token.
  for (int step = 0; step < 8; ++step) {
    generated.push_back(token);
    if (auto e = original.value().Eval({token})) return Fail(*e, "Eval");
    if (auto e = restored.value().Eval({token})) return Fail(*e, "Eval");
    auto a = original_sampler.value().Next(original.value());
    auto b = restored_sampler.value().Next(restored.value());
    if (!a.ok() || !b.ok()) return 1;
    if (a.value() != b.value()) {
      std::fprintf(stderr, "step %d: restored session picked %d, original %d\n", step, b.value(), a.value());
      return 1;
    }
    token = a.value();
  }
  auto text = model.value().Detokenize(generated);
  if (!text.ok()) return Fail(text.error(), "Detokenize");
  std::printf("%s: %zu bytes, 8 greedy tokens agree: \"%s\"\n", argv[2], bytes.value().size(), text.value().c_str());
  return 0;
}
