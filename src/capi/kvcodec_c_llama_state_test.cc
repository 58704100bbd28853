// llama.cpp's own sequence-state bytes through the C API and back into llama.cpp, from contexts
// with flash attention (V stored as K is, v_trans 0) and without (V transposed, v_trans 1). The
// C++ LlamaSession stands for the caller's llama.cpp context: StateBlob is
// llama_state_seq_get_data's bytes as they are, RestoreStateBlob hands bytes to
// llama_state_seq_set_data as they are.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvcodec/kvcodec.hpp"
#include "llama/llama_model.h"
#include "llama/llama_session.h"

namespace {

constexpr const char* kText = "And God said, Let there be light: and there was light. And God saw the light";

class CApiLlamaState : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto model = kvc::LlamaModel::Load(KVCODEC_TEST_MODEL);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    auto tokens = model_->Tokenize(kText, true);
    ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
    tokens_ = *tokens;
    ASSERT_GE(tokens_.size(), 8u);
  }

  std::unique_ptr<kvc::LlamaSession> Session(bool flash_attn) {
    kvc::SessionOptions o;
    o.n_ctx = 128;
    o.flash_attn = flash_attn;
    auto s = kvc::LlamaSession::Create(*model_, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::vector<int32_t> Prompt() const { return {tokens_.begin(), tokens_.end() - 1}; }
  std::vector<int32_t> Last() const { return {tokens_.back()}; }

  // The original context's logits after the prompt's last token.
  std::vector<float> OriginalLogits(kvc::LlamaSession& original) {
    EXPECT_TRUE(original.Eval(Last(), false).ok());
    auto logits = original.LastLogits();
    EXPECT_TRUE(logits.ok());
    return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>();
  }

  // Restores `state` into a fresh context of the layout given, evaluates the last token and
  // returns its logits; empty when llama.cpp refuses the state.
  std::vector<float> RestoredLogits(const std::vector<uint8_t>& state, bool flash_attn) {
    auto restored = Session(flash_attn);
    if (!restored || !restored->RestoreStateBlob(state).ok()) return {};
    EXPECT_EQ(restored->next_position(), static_cast<int32_t>(tokens_.size() - 1));
    EXPECT_TRUE(restored->Eval(Last(), false).ok());
    auto logits = restored->LastLogits();
    return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>();
  }

  std::unique_ptr<kvc::LlamaModel> model_;
  std::vector<int32_t> tokens_;
};

TEST_P(CApiLlamaState, StateComesBackInTheLayoutItCameIn) {
  const bool flash_attn = GetParam();
  auto original = Session(flash_attn);
  ASSERT_TRUE(original);
  ASSERT_TRUE(original->Eval(Prompt(), false).ok());
  auto blob = original->StateBlob();
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();

  auto kv = kvcodec::KvFromLlamaState(*blob, model_->info().n_kv_heads);
  ASSERT_TRUE(kv.ok()) << kv.error().message;
  EXPECT_EQ(kvcodec::LlamaVTrans(kv.value()), !flash_attn);
  auto state = kvcodec::KvToLlamaState(kv.value());
  ASSERT_TRUE(state.ok()) << state.error().message;
  // Before the fix every state came back transposed, and a flash-attention context refused it.
  EXPECT_EQ(state.value(), *blob) << "not llama.cpp's own bytes";

  const std::vector<float> want = OriginalLogits(*original);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(RestoredLogits(state.value(), flash_attn), want);

  // Through a codec: a .kvc does not record the layout, so the decoded cache starts transposed
  // and takes the source's layout from the caller.
  const std::vector<uint8_t> fp(model_->fingerprint().begin(), model_->fingerprint().end());
  for (const char* codec : {"raw", "planes"}) {
    SCOPED_TRACE(codec);
    auto bytes = kvcodec::Encode(kv.value(), codec, "", "", fp);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    auto decoded = kvcodec::Decode(bytes.value(), &fp);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_TRUE(kvcodec::LlamaVTrans(decoded.value()));
    ASSERT_FALSE(kvcodec::SetLlamaVTrans(decoded.value(), kvcodec::LlamaVTrans(kv.value())).has_value());
    auto again = kvcodec::KvToLlamaState(decoded.value());
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again.value(), *blob);
    EXPECT_EQ(RestoredLogits(again.value(), flash_attn), want);
  }

  // The other layout is refused by llama.cpp: the layout is what makes the state usable at all.
  ASSERT_FALSE(kvcodec::SetLlamaVTrans(kv.value(), flash_attn).has_value());
  auto wrong = kvcodec::KvToLlamaState(kv.value());
  ASSERT_TRUE(wrong.ok()) << wrong.error().message;
  EXPECT_TRUE(RestoredLogits(wrong.value(), flash_attn).empty()) << "llama.cpp took V in the other layout";
  // ...and taken by a context of that other layout, continuing the same way.
  const std::vector<float> other = RestoredLogits(wrong.value(), !flash_attn);
  ASSERT_EQ(other.size(), want.size());
  // Flash attention sums in another order: the same next token, nearly the same logits.
  size_t best_want = 0, best_other = 0;
  for (size_t i = 1; i < want.size(); ++i) {
    if (want[i] > want[best_want]) best_want = i;
    if (other[i] > other[best_other]) best_other = i;
  }
  EXPECT_EQ(best_other, best_want);
}

// A cache taken out of a C API session carries that session's layout.
TEST_P(CApiLlamaState, ExtractedCachesCarryTheirSessionsLayout) {
  const bool flash_attn = GetParam();
  auto model = kvcodec::Model::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.error().message;
  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 128;
  params.flash_attn = flash_attn ? 1 : 0;
  auto session = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(session.ok()) << session.error().message;
  ASSERT_FALSE(session.value().Eval(Prompt()).has_value());
  auto kv = session.value().Extract();
  ASSERT_TRUE(kv.ok()) << kv.error().message;
  EXPECT_EQ(kvcodec::LlamaVTrans(kv.value()), !flash_attn);
  auto state = kvcodec::KvToLlamaState(kv.value());
  ASSERT_TRUE(state.ok()) << state.error().message;

  auto original = Session(flash_attn);
  ASSERT_TRUE(original);
  ASSERT_TRUE(original->Eval(Prompt(), false).ok());
  const std::vector<float> want = OriginalLogits(*original);
  EXPECT_EQ(RestoredLogits(state.value(), flash_attn), want);
}

INSTANTIATE_TEST_SUITE_P(FlashAttention, CApiLlamaState, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "On" : "Off"; });

}  // namespace
