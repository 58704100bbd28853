#include "engine/completion_request.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(CompletionRequest, ReadsPromptBudgetAndStream) {
  auto r = ParseCompletionRequest(R"({"prompt": "In the beginning", "max_tokens": 7, "stream": true})", false, 64, 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, "In the beginning");
  EXPECT_EQ(r->max_tokens, 7u);
  EXPECT_TRUE(r->stream);
  auto defaults = ParseCompletionRequest(R"({"prompt": "x", "temperature": 0.7})", false, 64, 100);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->max_tokens, 64u);
  EXPECT_FALSE(defaults->stream);
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt": "x", "max_tokens": 100})", false, 64, 100).ok());
}

// What OpenAI's clients send besides the basics: the newer budget name, nulls for defaults,
// prompt and content arrays, and do-nothing values of fields this server does not implement.
TEST(CompletionRequest, AcceptsTheShapesOpenAiClientsSend) {
  auto r = ParseCompletionRequest(R"({"prompt": ["In the beginning"], "max_completion_tokens": 5, "max_tokens": null,
                                     "stream": null, "n": 1, "stop": null, "logprobs": false, "echo": false,
                                     "response_format": {"type": "text"}, "tools": []})",
                                  false, 64, 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, "In the beginning");
  EXPECT_EQ(r->max_tokens, 5u);
  EXPECT_FALSE(r->stream);
  auto same = ParseCompletionRequest(R"({"prompt": "x", "max_tokens": 6, "max_completion_tokens": 6})", false, 64, 100);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->max_tokens, 6u);
  auto chat = ParseCompletionRequest(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Who "}, {"type": "text", "text": "art thou?"}]}]})",
      true, 8, 100);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->prompt, "user: Who art thou?\nassistant:");
}

TEST(CompletionRequest, ChatMessagesBecomeRoleLinesThenAssistant) {
  auto r = ParseCompletionRequest(
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who?"}]})", true, 8, 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, "system: Be brief.\nuser: Who?\nassistant:");
  // A chat body is read as chat only: its `prompt` means nothing there.
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt": "x"})", true, 8, 100).ok());
}

TEST(CompletionRequest, MalformedBodiesAreInvalidArgumentsThatSayWhy) {
  struct Case {
    const char* body;
    bool chat;
    const char* says;
  };
  const Case cases[] = {
      {"{not json", false, "not valid JSON"},
      {"", false, "not valid JSON"},
      {"[1, 2]", false, "JSON object"},
      {R"({"max_tokens": 3})", false, "'prompt' must be a string"},
      {R"({"prompt": ["a", "b"]})", false, "'prompt' must be a string"},
      {R"({"prompt": [1, 2]})", false, "'prompt' must be a string"},
      {R"({"prompt": "x", "max_completion_tokens": 0})", false, "'max_completion_tokens' must be an integer in 1..100"},
      {R"({"prompt": "x", "max_tokens": 4, "max_completion_tokens": 5})", false, "disagree"},
      {R"({"prompt": "x", "stop": "\n"})", false, "'stop' is not supported"},
      {R"({"prompt": "x", "logprobs": 2})", false, "'logprobs' is not supported"},
      {R"({"prompt": "x", "echo": true})", false, "'echo' is not supported"},
      {R"({"prompt": "x", "n": 2})", false, "'n' other than 1"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", true, "'tools' is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})", true,
       "'response_format'"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", true,
       "'image_url' are not supported"},
      {R"({"messages": [{"role": "user", "content": [{"text": "x"}]}]})", true, "string 'type'"},
      {R"({"messages": [{"role": "user", "content": 5}]})", true, "'role' and 'content'"},
      {R"({"prompt": 7})", false, "'prompt' must be a string"},
      {R"({"prompt": "x", "max_tokens": 0})", false, "1..100"},
      {R"({"prompt": "x", "max_tokens": 101})", false, "1..100"},
      {R"({"prompt": "x", "max_tokens": -3})", false, "1..100"},
      {R"({"prompt": "x", "max_tokens": 2.5})", false, "1..100"},
      {R"({"prompt": "x", "max_tokens": "4"})", false, "1..100"},
      {R"({"prompt": "x", "max_tokens": 18446744073709551615})", false, "1..100"},
      {R"({"prompt": "x", "stream": "yes"})", false, "'stream' must be a boolean"},
      {R"({"messages": []})", true, "non-empty array"},
      {R"({"messages": {"role": "user"}})", true, "non-empty array"},
      {R"({"messages": [{"role": "user"}]})", true, "'role' and 'content'"},
      {R"({"messages": [{"role": 1, "content": "x"}]})", true, "'role' and 'content'"},
      {R"({"messages": ["hi"]})", true, "'role' and 'content'"},
  };
  for (const Case& c : cases) {
    auto r = ParseCompletionRequest(c.body, c.chat, 8, 100);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.body << ": " << r.status().message();
  }
}

// The bound before tokenizing: a prompt is rejected only when even one token per
// max_token_bytes bytes could not fit, so nothing that fits is ever refused.
TEST(CompletionRequest, PromptLengthBoundRejectsOnlyWhatCannotFit) {
  // 16 bytes a token at most, a 100-token context, 10 tokens to generate: room for 90 tokens.
  EXPECT_TRUE(CheckPromptCanFit(90 * 16, 10, 100, 16).ok());
  EXPECT_TRUE(CheckPromptCanFit(0, 10, 100, 16).ok());
  const Status too_long = CheckPromptCanFit(90 * 16 + 1, 10, 100, 16);  // 91 tokens at least
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("at least 91 tokens"), std::string::npos) << too_long.message();
  // No bound known (a tokenizer that may drop text): never rejected here.
  EXPECT_TRUE(CheckPromptCanFit(size_t{1} << 40, 10, 100, 0).ok());
  EXPECT_FALSE(CheckPromptCanFit(size_t{1} << 40, 10, 100, 1).ok());
}

}  // namespace
}  // namespace kvc
