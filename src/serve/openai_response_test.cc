#include "serve/openai_response.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvc {
namespace {

using Json = nlohmann::json;

TEST(OpenAiResponse, ErrorObjectAlwaysHasParamAndCodeNullWhenUnknown) {
  EXPECT_EQ(ErrorJson({"bad \"field\""}),
            R"({"error":{"code":null,"message":"bad \"field\"","param":null,"type":"invalid_request_error"}})");
  const Json e = ErrorObject({"too long", "invalid_request_error", "messages", "context_length_exceeded"});
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(e["error"]["param"], "messages");
  EXPECT_EQ(e["error"]["message"], "too long");
  EXPECT_EQ(ErrorObject({"x", "server_error"})["error"]["type"], "server_error");
  EXPECT_STREQ(ErrorType(400), "invalid_request_error");
  EXPECT_STREQ(ErrorType(499), "invalid_request_error");
  EXPECT_STREQ(ErrorType(500), "server_error");
}

TEST(OpenAiResponse, DumpReplacesInvalidUtf8InsteadOfThrowing) {
  EXPECT_EQ(DumpJson(Json("a\xff")), "\"a\xEF\xBF\xBD\"");
}

TEST(OpenAiResponse, UsageCountsPromptAndCompletionAndCachedTokens) {
  Generation g;
  g.prompt_tokens = 7;
  g.completion_tokens = 5;
  g.cached_tokens = 4;
  EXPECT_EQ(DumpJson(UsageObject(g)),
            R"({"completion_tokens":5,"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":4},)"
            R"("total_tokens":12})");
}

TEST(OpenAiResponse, CompletionLogprobsOffsetsCountFromTheEchoedPrompt) {
  TokenLogprob t;
  t.bytes = "\xC3";  // half of "é": the token string is made valid, the offset stays exact
  t.logprob = -std::numeric_limits<float>::infinity();
  t.top = {{"b", -0.5f}};
  t.text_offset = 2;
  const Json j = CompletionLogprobs({t}, 10);
  EXPECT_EQ(j["tokens"][0], "\xEF\xBF\xBD");
  EXPECT_EQ(j["token_logprobs"][0], -9999.0);  // JSON has no -inf
  EXPECT_EQ(j["top_logprobs"][0]["b"], -0.5);
  EXPECT_EQ(j["text_offset"][0], 12);
  EXPECT_EQ(LogprobsObject(false, {t}, 10), j);
}

TEST(OpenAiResponse, ChatLogprobsCarryEachTokensBytes) {
  TokenLogprob t;
  t.bytes = "\xC3";
  t.logprob = -1.0f;
  t.top = {{"\xC3", -1.0f}};
  const Json j = ChatLogprobs({t});
  EXPECT_TRUE(j["refusal"].is_null());
  EXPECT_EQ(j["content"][0]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(j["content"][0]["top_logprobs"][0]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(LogprobsObject(true, {t}, 10), j);
}

TEST(OpenAiResponse, OnlyAChatChoicesFirstDeltaNamesTheRole) {
  const Json first = ChunkChoice(true, 0, "", true, nullptr, std::nullopt);
  EXPECT_EQ(first["delta"], (Json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_FALSE(first.contains("logprobs"));
  const Json last = ChunkChoice(true, 1, "", false, "stop", Json(nullptr));
  EXPECT_EQ(last["delta"], Json::object());
  EXPECT_EQ(last["finish_reason"], "stop");
  EXPECT_EQ(last["index"], 1);
  EXPECT_TRUE(last["logprobs"].is_null());
  const Json text = ChunkChoice(false, 0, "hi", true, nullptr, std::nullopt);
  EXPECT_EQ(text["text"], "hi");
  EXPECT_FALSE(text.contains("delta"));
}

TEST(OpenAiResponse, ObjectsAreNamedByEndpointAndStreaming) {
  ResponseHead head{true, "chatcmpl-1", 1700000000, "kvtiny", "fp_0123456789"};
  const Json chat =
      CompletionObject(head, Json::array({CompletionChoice(true, 0, "hi", "length", nullptr)}), Json::object());
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["system_fingerprint"], "fp_0123456789");
  EXPECT_EQ(chat["choices"][0]["message"], (Json{{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_TRUE(chat["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(ChunkObject(head, Json::array())["object"], "chat.completion.chunk");
  head.chat = false;
  EXPECT_EQ(CompletionObject(head, Json::array(), Json::object())["object"], "text_completion");
  EXPECT_EQ(DumpJson(ChunkObject(head, Json::array())),
            R"({"choices":[],"created":1700000000,"id":"chatcmpl-1","model":"kvtiny","object":"text_completion",)"
            R"("system_fingerprint":"fp_0123456789"})");
}

}  // namespace
}  // namespace kvc
