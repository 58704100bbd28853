#include "base/status.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return InvalidArgument("not positive");
  return v;
}

Result<int> Doubled(int v) {
  ASSIGN_OR_RETURN(int x, ParsePositive(v));
  return 2 * x;
}

Status CheckSmall(int v) {
  KVC_CHECK_CORRUPT(v < 10, "value %d is not below %d", v, 10);
  return Status::Ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Corrupt("bad byte");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.ToString(), "corrupt: bad byte");
  EXPECT_EQ(s.WithContext("file x").ToString(), "corrupt: file x: bad byte");
}

TEST(Status, ResultPropagates) {
  EXPECT_EQ(Doubled(4).value(), 8);
  Result<int> r = Doubled(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(Status, ResultFromOkStatusIsAnError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Status, CheckMacroFormats) {
  EXPECT_TRUE(CheckSmall(3).ok());
  Status s = CheckSmall(12);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "value 12 is not below 10");
}

}  // namespace
}  // namespace kvc
