#include "serve/completion_request.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

Result<CompletionRequest> Parse(const char* body, bool chat, RequestLimits limits = {64, 100, 4}) {
  return ParseCompletionRequest(body, chat, limits);
}

TEST(CompletionRequest, ReadsPromptBudgetAndStream) {
  auto r = Parse(R"({"prompt": "In the beginning", "max_tokens": 7, "stream": true})", false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, "In the beginning");
  EXPECT_FALSE(r->prompt_is_tokens);
  EXPECT_EQ(r->max_tokens, 7u);
  EXPECT_TRUE(r->stream);
  EXPECT_FALSE(r->include_usage);
  auto defaults = Parse(R"({"prompt": "x"})", false);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->max_tokens, 64u);
  EXPECT_FALSE(defaults->stream);
  // Nothing about sampling sent: greedy, one choice, no stops, no log-probabilities.
  EXPECT_TRUE(defaults->sampling.greedy());
  EXPECT_FALSE(defaults->sampling.seed.has_value());
  EXPECT_EQ(defaults->n, 1u);
  EXPECT_TRUE(defaults->stop.empty());
  EXPECT_EQ(defaults->logprobs, -1);
  EXPECT_FALSE(defaults->echo);
  EXPECT_TRUE(Parse(R"({"prompt": "x", "max_tokens": 100})", false).ok());
}

// What OpenAI's clients send besides the basics: the newer budget name, nulls for defaults,
// prompt and content arrays, and do-nothing values of fields this server does not implement.
TEST(CompletionRequest, AcceptsTheShapesOpenAiClientsSend) {
  auto r = Parse(R"({"prompt": ["In the beginning"], "max_completion_tokens": 5, "max_tokens": null,
                     "stream": null, "n": 1, "stop": null, "logprobs": false, "echo": false, "best_of": 1,
                     "response_format": {"type": "text"}, "tools": [], "tool_choice": "none", "logit_bias": {},
                     "user": "u1", "temperature": null, "seed": null})",
                 false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, "In the beginning");
  EXPECT_EQ(r->max_tokens, 5u);
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->logprobs, -1);
  auto same = Parse(R"({"prompt": "x", "max_tokens": 6, "max_completion_tokens": 6})", false);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->max_tokens, 6u);
  auto chat = Parse(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Who "}, {"type": "text", "text": "art thou?"}]}]})",
      true);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  ASSERT_EQ(chat->messages.size(), 1u);
  EXPECT_EQ(chat->messages[0].role, "user");
  EXPECT_EQ(chat->messages[0].content, "Who art thou?");
}

TEST(CompletionRequest, PromptsMayBeTokenIds) {
  auto flat = Parse(R"({"prompt": [1, 450, 7]})", false);
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  EXPECT_TRUE(flat->prompt_is_tokens);
  EXPECT_EQ(flat->prompt_tokens, (std::vector<int32_t>{1, 450, 7}));
  EXPECT_TRUE(flat->prompt.empty());
  auto nested = Parse(R"({"prompt": [[5, 6]]})", false);
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  EXPECT_EQ(nested->prompt_tokens, (std::vector<int32_t>{5, 6}));
}

TEST(CompletionRequest, ReadsSamplingStopNLogprobsEchoAndUsage) {
  auto r = Parse(R"({"prompt": "x", "temperature": 0.8, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
                     "presence_penalty": 0.5, "frequency_penalty": -0.25, "seed": -3, "stop": ["\n\n", "END"],
                     "n": 3, "logprobs": 2, "stream": true, "stream_options": {"include_usage": true}})",
                 false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.8f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.frequency_penalty, -0.25f);
  ASSERT_TRUE(r->sampling.seed.has_value());
  EXPECT_EQ(*r->sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_FALSE(r->sampling.greedy());
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r->n, 3u);
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_TRUE(r->include_usage);
  auto one_stop = Parse(R"({"prompt": "x", "stop": "\n", "echo": true})", false);
  ASSERT_TRUE(one_stop.ok()) << one_stop.status().ToString();
  EXPECT_EQ(one_stop->stop, (std::vector<std::string>{"\n"}));
  EXPECT_TRUE(one_stop->echo);
  auto chat = Parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 3})", true);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->logprobs, 3);
  auto chat_no_top = Parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", true);
  ASSERT_TRUE(chat_no_top.ok());
  EXPECT_EQ(chat_no_top->logprobs, 0);
}

TEST(CompletionRequest, PlainChatPromptIsRoleLinesThenAssistant) {
  auto r =
      Parse(R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who?"}]})", true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(PlainChatPrompt(r->messages), "system: Be brief.\nuser: Who?\nassistant:");
  // A chat body is read as chat only: its `prompt` means nothing there.
  EXPECT_FALSE(Parse(R"({"prompt": "x"})", true).ok());
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
      {R"({"prompt": [1, -2]})", false, "array of token ids"},
      {R"({"prompt": [1, 2.5]})", false, "array of token ids"},
      {R"({"prompt": [1, 4294967296]})", false, "array of token ids"},
      {R"({"prompt": []})", false, "array of token ids"},
      {R"({"prompt": [[1], [2]]})", false, "array of token ids"},
      {R"({"prompt": "x", "max_completion_tokens": 0})", false, "'max_completion_tokens' must be an integer in 1..100"},
      {R"({"prompt": "x", "max_tokens": 4, "max_completion_tokens": 5})", false, "disagree"},
      {R"({"prompt": "x", "stop": ""})", false, "must not be empty"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", false, "up to 4 strings"},
      {R"({"prompt": "x", "stop": [1]})", false, "up to 4 strings"},
      {R"({"prompt": "x", "logprobs": 21})", false, "'logprobs' must be an integer in 0..20"},
      {R"({"prompt": "x", "logprobs": true})", false, "number of alternatives"},
      {R"({"prompt": "x", "echo": true, "logprobs": 1})", false, "'echo' with 'logprobs'"},
      {R"({"prompt": "x", "echo": "yes"})", false, "'echo' must be a boolean"},
      {R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", true, "completions field"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", true, "'logprobs' must be a boolean"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", true, "needs 'logprobs': true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", true, "0..20"},
      {R"({"prompt": "x", "n": 5})", false, "'n' must be an integer in 1..4"},
      {R"({"prompt": "x", "n": 0})", false, "'n' must be an integer in 1..4"},
      {R"({"prompt": "x", "temperature": 2.5})", false, "'temperature' must be in 0..2"},
      {R"({"prompt": "x", "temperature": -1})", false, "'temperature' must be in 0..2"},
      {R"({"prompt": "x", "temperature": "hot"})", false, "'temperature' must be a number"},
      {R"({"prompt": "x", "top_p": 0})", false, "'top_p' must be in (0, 1]"},
      {R"({"prompt": "x", "top_k": -1})", false, "'top_k' must be an integer"},
      {R"({"prompt": "x", "min_p": 1.5})", false, "'min_p'"},
      {R"({"prompt": "x", "presence_penalty": 3})", false, "'presence_penalty'"},
      {R"({"prompt": "x", "frequency_penalty": -1e300})", false, "'frequency_penalty'"},
      {R"({"prompt": "x", "seed": 1.5})", false, "'seed' must be an integer"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", false, "include_usage"},
      {R"({"prompt": "x", "stream_options": 3})", false, "'stream_options' must be an object"},
      {R"({"prompt": "x", "suffix": "end"})", false, "'suffix' is not supported"},
      {R"({"prompt": "x", "best_of": 2})", false, "'best_of'"},
      {R"({"prompt": "x", "logit_bias": {"5": 1}})", false, "'logit_bias' is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", true,
       "'tools' is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", true,
       "'tool_choice' is not supported"},
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
    auto r = ParseCompletionRequest(c.body, c.chat, {8, 100, 4});
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

namespace kvc {
namespace {

TEST(CompletionRequest, RefusesWhatOpenAiDoesNotDefineNamingTheField) {
  RequestFault fault;
  auto r =
      ParseCompletionRequest(R"({"prompt": "x", "max_tokens": 2, "tempurature": 0.5})", false, {64, 100, 4}, &fault);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'tempurature'"), std::string::npos);
  EXPECT_EQ(fault.param, "tempurature");
  EXPECT_EQ(fault.code, "unknown_parameter");
  fault = {};
  auto wizard =
      ParseCompletionRequest(R"({"messages": [{"role": "wizard", "content": "x"}]})", true, {64, 100, 4}, &fault);
  ASSERT_FALSE(wizard.ok());
  EXPECT_EQ(fault.param, "messages");
  EXPECT_FALSE(Parse(R"({"messages": [{"role": "tool", "content": "x"}]})", true).ok());
  EXPECT_FALSE(Parse(R"({"messages": [{"role": "user", "content": "x", "audio": {}}]})", true).ok());
  EXPECT_TRUE(Parse(R"({"messages": [{"role": "developer", "content": "x", "name": "a"}], "user": "u",
                        "store": false, "metadata": {"k": "v"}, "service_tier": "auto", "cache_prompt": true})",
                    true)
                  .ok());
  fault = {};
  auto range = ParseCompletionRequest(R"({"prompt": "x", "max_tokens": 0})", false, {64, 100, 4}, &fault);
  ASSERT_FALSE(range.ok());
  EXPECT_EQ(fault.param, "max_tokens");
  auto model = Parse(R"({"prompt": "x", "model": "kvtiny"})", false);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->model, "kvtiny");
}

TEST(CompletionRequest, LlamaServerCompletionTakesItsOwnFieldsAndDefaults) {
  auto r = ParseCompletionRequest(R"({"prompt": "x", "n_predict": 5, "n_probs": 2, "cache_prompt": true,
                                      "id_slot": -1, "return_tokens": true})",
                                  RequestDialect::kLlamaCompletion, {64, 100, 4});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->max_tokens, 5u);
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_TRUE(r->return_tokens);
  // llama-server samples by default (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05).
  EXPECT_FALSE(r->sampling.greedy());
  EXPECT_EQ(r->sampling.top_k, 40);
  auto forever = ParseCompletionRequest(R"({"prompt": "x", "n_predict": -1, "temperature": 0})",
                                        RequestDialect::kLlamaCompletion, {64, 100, 4});
  ASSERT_TRUE(forever.ok());
  EXPECT_EQ(forever->max_tokens, kToContextEnd);
  EXPECT_TRUE(forever->sampling.greedy());
  // OpenAI's fields that llama-server's /completion does not take are refused there.
  EXPECT_FALSE(
      ParseCompletionRequest(R"({"prompt": "x", "echo": true})", RequestDialect::kLlamaCompletion, {64, 100, 4}).ok());
}

}  // namespace
}  // namespace kvc
