// BroadcastWalk and ExpandTo, zero-size shapes in particular (the walk used
// to divide by a zero dim), and an Add of zero-size inputs through the
// executor.
#include "core/executor/broadcast.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/executor/executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/graph/test_models.h"

namespace quantd::executor {
namespace {

using ::quantd::testing::ModelBuilder;

TEST(BroadcastWalkTest, WalksEveryRunOfAnOrdinaryBroadcast) {
  const std::vector<int64_t> shapes[2] = {{2, 3}, {1, 3}};
  BroadcastWalk walk({2, 3}, shapes);
  EXPECT_EQ(walk.runs() * walk.inner(), 6);
  int64_t visited = 0;
  walk.ForEachRun(0, walk.runs(),
                  [&](int64_t, const int64_t*) { visited += walk.inner(); });
  EXPECT_EQ(visited, 6);
}

TEST(BroadcastWalkTest, ZeroSizeShapesHaveNothingToWalk) {
  const std::vector<std::vector<int64_t>> outs = {
      {0}, {0, 3}, {2, 0, 3}, {2, 3, 0}, {0, 1, 4}};
  for (const auto& out : outs) {
    const std::vector<int64_t> shapes[2] = {out, {1}};
    BroadcastWalk walk(out, shapes);
    EXPECT_EQ(walk.runs(), 0);
    EXPECT_EQ(walk.runs() * walk.inner(), 0);
    int calls = 0;
    walk.ForEachRun(0, walk.runs(), [&](int64_t, const int64_t*) { ++calls; });
    EXPECT_EQ(calls, 0);
  }
}

TEST(BroadcastWalkTest, ExpandToAZeroSizeShape) {
  Tensor t = Tensor::FromVector<float>({1, 3}, {1, 2, 3});
  Tensor e = ExpandTo(t, {0, 3});
  EXPECT_EQ(e.size(), 0);
  EXPECT_EQ(e.shape(), (std::vector<int64_t>{0, 3}));
  Tensor f = ExpandTo(t, {2, 3});
  EXPECT_EQ(f.size(), 6);
  EXPECT_EQ(f.data<float>()[5], 3.0f);
}

TEST(BroadcastWalkTest, ExecutorAddsZeroSizeInputs) {
  ModelBuilder b;
  b.Input("a", {0, 3}).Input("c", {1, 3}).Node("Add", {"a", "c"}, {"y"});
  b.Output("y", {0, 3});
  auto ex = Executor::Create(b.Build());
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::flat_hash_map<std::string, Tensor> feeds;
  feeds["a"] = Tensor(onnx::TensorProto::FLOAT, {0, 3});
  feeds["c"] = Tensor::FromVector<float>({1, 3}, {1, 2, 3});
  auto out = (*ex)->Run(feeds);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].size(), 0);
  EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{0, 3}));
}

TEST(TensorCountTest, NumElementsSaturatesInsteadOfWrapping) {
  const int64_t big = int64_t{1} << 31;
  EXPECT_EQ(NumElements({big, big, 4}), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(NumElements({2, 3}), 6);
  EXPECT_EQ(NumElements({}), 1);
}

}  // namespace
}  // namespace quantd::executor
