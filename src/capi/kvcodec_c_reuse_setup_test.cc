// The C API's ways into reuse (kvc_run_json, kvc_server_create, kvc_reuse_restore,
// kvc_reuse_store, kvc_quality_floor_json) share one reuse set-up: a bad option is refused by
// each of them with the same status and message.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kvcodec/kvcodec.h"

namespace {

const char* const kPrompt = "In the beginning God created the heaven and the earth.";

// What a call returned and said.
struct Outcome {
  kvc_status status = KVC_OK;
  std::string message;
  bool operator==(const Outcome&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Outcome& o) { return os << o.status << " " << o.message; }

Outcome Said(kvc_status status) { return {status, status == KVC_OK ? "" : kvc_last_error()}; }

class CApiReuseSetup : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(kvc_model_load(KVCODEC_TEST_MODEL, &model_), KVC_OK) << kvc_last_error();
    kvc_session_params sp;
    kvc_session_default_params(&sp);
    sp.n_ctx = 128;
    sp.n_threads = 1;
    ASSERT_EQ(kvc_session_create(model_, &sp, &session_), KVC_OK) << kvc_last_error();
    kvc_store_params store_params;
    kvc_store_default_params(&store_params);
    ASSERT_EQ(kvc_store_open("mem://", &store_params, &store_), KVC_OK) << kvc_last_error();
    ASSERT_EQ(kvc_model_tokenize(model_, kPrompt, std::strlen(kPrompt), 1, &tokens_, &n_tokens_), KVC_OK)
        << kvc_last_error();
  }
  void TearDown() override {
    kvc_free(tokens_);
    kvc_store_free(store_);
    kvc_session_free(session_);
    kvc_model_free(model_);
  }

  Outcome Run(const std::function<void(kvc_run_params&)>& edit) {
    kvc_run_params p;
    kvc_run_default_params(&p);
    p.model_path = KVCODEC_TEST_MODEL;
    p.prompt = kPrompt;
    p.store_url = "mem://";
    p.n_generate = 1;
    p.n_threads = 1;
    edit(p);
    char* json = nullptr;
    const Outcome o = Said(kvc_run_json(&p, &json));
    kvc_free(json);
    return o;
  }
  Outcome Serve(const std::function<void(kvc_serve_params&)>& edit) {
    kvc_serve_params p;
    kvc_serve_default_params(&p);
    p.model_path = KVCODEC_TEST_MODEL;
    p.store_url = "mem://";
    p.port = 0;
    p.n_threads = 1;
    edit(p);
    kvc_server* server = nullptr;
    const Outcome o = Said(kvc_server_create(&p, &server));
    kvc_server_free(server);
    return o;
  }
  kvc_reuse_params Reuse(const std::function<void(kvc_reuse_params&)>& edit) {
    kvc_reuse_params p;
    kvc_reuse_default_params(&p);
    edit(p);
    return p;
  }
  Outcome Restore(const std::function<void(kvc_reuse_params&)>& edit) {
    const kvc_reuse_params p = Reuse(edit);
    kvc_reuse_result result{};
    return Said(kvc_reuse_restore(session_, store_, tokens_, n_tokens_, &p, &result));
  }
  Outcome Store(const std::function<void(kvc_reuse_params&)>& edit) {
    const kvc_reuse_params p = Reuse(edit);
    uint32_t stored = 0;
    return Said(kvc_reuse_store(session_, store_, tokens_, n_tokens_, 0, &p, &stored));
  }

  kvc_model* model_ = nullptr;
  kvc_session* session_ = nullptr;
  kvc_store* store_ = nullptr;
  int32_t* tokens_ = nullptr;
  size_t n_tokens_ = 0;
};

TEST_F(CApiReuseSetup, AQualityLimitOutOfRangeIsRefusedInOneWording) {
  const Outcome run = Run([](auto& p) { p.min_top1 = 2; });
  EXPECT_EQ(run.status, KVC_INVALID_ARGUMENT);
  EXPECT_NE(run.message.find("--min-top1 in [0, 1]"), std::string::npos) << run;
  EXPECT_EQ(Serve([](auto& p) { p.min_top1 = 2; }), run);
  EXPECT_EQ(Restore([](auto& p) { p.min_top1 = 2; }), run);
  EXPECT_EQ(Store([](auto& p) { p.min_top1 = 2; }), run);
  char* json = nullptr;
  EXPECT_EQ(Said(kvc_quality_floor_json(KVCODEC_TEST_MODEL, nullptr, nullptr, 0, 2, &json)), run);
  kvc_free(json);
}

TEST_F(CApiReuseSetup, ALinkRateThatIsNotANumberIsRefusedInOneWording) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Outcome run = Run([nan](auto& p) { p.link_gbps = nan; });
  EXPECT_EQ(run.status, KVC_INVALID_ARGUMENT);
  EXPECT_NE(run.message.find("link rate"), std::string::npos) << run;
  EXPECT_EQ(Serve([nan](auto& p) { p.link_gbps = nan; }), run);
  EXPECT_EQ(Restore([nan](auto& p) { p.link_gbps = nan; }), run);
  EXPECT_EQ(Store([nan](auto& p) { p.link_gbps = nan; }), run);
}

TEST_F(CApiReuseSetup, AnUnknownCodecIsRefusedInOneWording) {
  const Outcome run = Run([](auto& p) { p.codec = "nope"; });
  EXPECT_EQ(run, (Outcome{KVC_INVALID_ARGUMENT, "invalid argument: unknown codec 'nope'"}));
  EXPECT_EQ(Serve([](auto& p) { p.codec = "nope"; }), run);
  EXPECT_EQ(Store([](auto& p) { p.codec = "nope"; }), run);
}

TEST_F(CApiReuseSetup, FetchThreadsOutOfRangeAreRefusedInOneWording) {
  const Outcome run = Run([](auto& p) { p.n_fetch_threads = 65; });
  EXPECT_EQ(run.status, KVC_INVALID_ARGUMENT);
  EXPECT_NE(run.message.find("fetch threads must be in 0..64"), std::string::npos) << run;
  EXPECT_EQ(Restore([](auto& p) { p.fetch_threads = 65; }), run);
  EXPECT_EQ(Store([](auto& p) { p.fetch_threads = -1; }), run);
  // A server's fetch threads are its own (0 there is the default, 1).
  const Outcome serve = Serve([](auto& p) { p.n_fetch_threads = 65; });
  EXPECT_EQ(serve.status, KVC_INVALID_ARGUMENT);
  EXPECT_NE(serve.message.find("fetch threads must be in 1..64"), std::string::npos) << serve;
  EXPECT_EQ(Serve([](auto& p) { p.n_fetch_threads = -1; }), serve);
}

// Good options go through every one of them.
TEST_F(CApiReuseSetup, GoodOptionsAreTakenByEach) {
  EXPECT_EQ(Restore([](auto&) {}), Outcome{});
  EXPECT_EQ(Store([](auto& p) { p.codec = "quant"; }), Outcome{});
}

}  // namespace
