#include "core/graph/external_stream.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/graph/tensor_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace quantd::graph {
namespace {

using ::testing::HasSubstr;

onnx::TensorProto FloatTensor(const std::string& name, int64_t n, float seed) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(n);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = seed + 0.5f * static_cast<float>(i);
  t.set_raw_data(v.data(), v.size() * sizeof(float));
  return t;
}

// A tensor in every place ForEachTensor visits, in its order.
onnx::ModelProto ModelWithTensorsEverywhere() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  onnx::GraphProto* g = m.mutable_graph();
  *g->add_initializer() = FloatTensor("w", 700, 1.0f);
  *g->add_initializer() = FloatTensor("small", 3, 2.0f);
  onnx::SparseTensorProto* sparse = g->add_sparse_initializer();
  *sparse->mutable_values() = FloatTensor("s", 300, 3.0f);
  onnx::NodeProto* c = g->add_node();
  c->set_op_type("Constant");
  onnx::AttributeProto* value = c->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() = FloatTensor("k", 512, 4.0f);
  onnx::AttributeProto* branch = c->add_attribute();
  branch->set_name("then_branch");
  branch->set_type(onnx::AttributeProto::GRAPH);
  *branch->mutable_g()->add_initializer() = FloatTensor("t", 1000, 5.0f);
  onnx::NodeProto* fc = m.add_functions()->add_node();
  onnx::AttributeProto* fv = fc->add_attribute();
  fv->set_name("value");
  fv->set_type(onnx::AttributeProto::TENSOR);
  *fv->mutable_t() = FloatTensor("fk", 256, 6.0f);
  *m.add_training_info()->mutable_initialization()->add_initializer() =
      FloatTensor("ti", 400, 7.0f);
  return m;
}

// The stream as `pieces` pieces of about equal size, so tensors straddle
// piece boundaries.
ExternalDataStream Repieced(const ExternalDataStream& stream, size_t pieces) {
  std::string all;
  for (const std::string& p : stream.pieces()) all += p;
  ExternalDataStream out;
  const size_t step = (all.size() + pieces - 1) / pieces;
  for (size_t at = 0; at < all.size(); at += step) {
    out.Append(all.substr(at, step));
  }
  return out;
}

TEST(ExternalDataTest, ForEachTensorVisitsEveryPlaceInOrder) {
  onnx::ModelProto m = ModelWithTensorsEverywhere();
  std::vector<std::string> names;
  ASSERT_TRUE(ForEachTensor(&m, [&](onnx::TensorProto* t) {
                names.push_back(t->name());
                return absl::OkStatus();
              }).ok());
  EXPECT_THAT(names,
              ::testing::ElementsAre("w", "small", "s", "k", "t", "ti", "fk"));
  // A visitor's error stops the walk.
  int visited = 0;
  EXPECT_EQ(ForEachTensor(&m,
                          [&](onnx::TensorProto*) {
                            ++visited;
                            return absl::InternalError("stop");
                          })
                .code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(visited, 1);
}

TEST(ExternalDataTest, DetachedAndAttachedAgainIsTheSameModel) {
  const onnx::ModelProto original = ModelWithTensorsEverywhere();
  onnx::ModelProto m = original;
  ExternalDataStream stream = DetachExternalData(1024, &m);
  // Everything but "small" (12 bytes) and "fk" (1024 bytes stays: >= min
  // goes) left; offsets aligned.
  int external = 0;
  ASSERT_TRUE(ForEachTensor(&m, [&](onnx::TensorProto* t) -> absl::Status {
                if (!HasExternalData(*t)) return absl::OkStatus();
                ++external;
                EXPECT_FALSE(t->has_raw_data());
                absl::StatusOr<ExternalRef> ref = ReadExternalRef(*t);
                EXPECT_TRUE(ref.ok()) << ref.status();
                EXPECT_EQ(ref->location, kExternalStreamLocation);
                EXPECT_EQ(ref->offset % kExternalDataAlignment, 0) << t->name();
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(external, 6);
  EXPECT_GT(stream.size(), (700 + 300 + 512 + 1000 + 256 + 400) * 4u);
  EXPECT_LT(stream.size(), (700 + 300 + 512 + 1000 + 256 + 400) * 4u + 6 * 64);

  for (size_t pieces : {size_t{1}, size_t{7}, size_t{1000}}) {
    onnx::ModelProto back = m;
    ExternalDataStream s = Repieced(stream, pieces);
    absl::StatusOr<AttachedExternalData> attached =
        AttachExternalData(&s, /*keep_stream=*/false, &back);
    ASSERT_TRUE(attached.ok()) << attached.status();
    EXPECT_EQ(attached->tensors, 6);
    EXPECT_TRUE(s.empty());  // Taken apart.
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(back, original))
        << pieces << " pieces";
  }
  // keep_stream leaves the stream as it was.
  onnx::ModelProto back = m;
  ExternalDataStream kept = Repieced(stream, 3);
  ASSERT_TRUE(AttachExternalData(&kept, /*keep_stream=*/true, &back).ok());
  EXPECT_EQ(kept.size(), stream.size());
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(back, original));
}

// One FLOAT tensor "w" of `n` values located at `offset` with `length`.
onnx::ModelProto OneExternal(int64_t n, const std::string& location,
                             const std::string& offset,
                             const std::string& length) {
  onnx::ModelProto m;
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(n);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto entry = [t](const std::string& k, const std::string& v) {
    if (v.empty()) return;
    onnx::StringStringEntryProto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  entry("location", location);
  entry("offset", offset);
  entry("length", length);
  return m;
}

absl::Status Attach(onnx::ModelProto m, uint64_t stream_bytes) {
  ExternalDataStream s;
  s.Append(std::string(stream_bytes, '\x02'));
  return AttachExternalData(&s, false, &m).status();
}

TEST(ExternalDataTest, BadReferencesAreRefusedNamingTheTensor) {
  const std::string loc(kExternalStreamLocation);
  struct Case {
    const char* what;
    onnx::ModelProto model;
    uint64_t stream;
    const char* message;
  } cases[] = {
      {"a file", OneExternal(4, "w.bin", "0", "16"), 16, "never opens"},
      {"no location", OneExternal(4, "", "0", "16"), 16, "names no location"},
      {"negative offset", OneExternal(4, loc, "-1", "16"), 16,
       "not a non-negative integer"},
      {"wrong length", OneExternal(4, loc, "0", "12"), 16, "need 16 bytes"},
      {"past the end", OneExternal(4, loc, "8", "16"), 16, "which has 16"},
      {"offset overflow", OneExternal(4, loc, "18446744073709551615", "16"), 16,
       "not a non-negative integer"},
      {"unused bytes", OneExternal(4, loc, "0", "16"), 16 + 64,
       "no tensor is located in"},
      {"no length is its size", OneExternal(4, loc, "0", ""), 16, ""},
  };
  for (const Case& c : cases) {
    absl::Status s = Attach(c.model, c.stream);
    if (*c.message == '\0') {
      EXPECT_TRUE(s.ok()) << c.what << ": " << s;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.what;
    if (std::string(c.what) != "unused bytes") {
      EXPECT_THAT(std::string(s.message()), HasSubstr("'w'")) << c.what;
    }
  }

  // Two tensors in the same bytes.
  onnx::ModelProto two = OneExternal(4, loc, "0", "16");
  *two.mutable_graph()->add_initializer() = two.graph().initializer(0);
  two.mutable_graph()->mutable_initializer(1)->set_name("v");
  two.mutable_graph()
      ->mutable_initializer(1)
      ->mutable_external_data(1)
      ->set_value("8");
  absl::Status s = Attach(two, 24);
  EXPECT_THAT(std::string(s.message()), HasSubstr("overlaps"));

  // A key twice.
  onnx::ModelProto twice = OneExternal(4, loc, "0", "16");
  *twice.mutable_graph()->mutable_initializer(0)->add_external_data() =
      twice.graph().initializer(0).external_data(1);
  EXPECT_THAT(std::string(Attach(twice, 16).message()), HasSubstr("twice"));

  // A stream no tensor refers to.
  onnx::ModelProto none;
  *none.mutable_graph()->add_initializer() = FloatTensor("b", 4, 1.0f);
  s = Attach(none, 16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no tensor of the model"));
  EXPECT_TRUE(Attach(none, 0).ok());

  // A string tensor has no fixed size.
  onnx::ModelProto strings = OneExternal(4, loc, "0", "16");
  strings.mutable_graph()->mutable_initializer(0)->set_data_type(
      onnx::TensorProto::STRING);
  EXPECT_EQ(Attach(strings, 16).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExternalDataTest, AlignmentPaddingIsAllowed) {
  const std::string loc(kExternalStreamLocation);
  onnx::ModelProto m = OneExternal(4, loc, "48", "16");
  ExternalDataStream s;
  s.Append(std::string(48, '\0'));
  s.Append(std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8));
  s.Append(std::string("\x00\x00\x40\x40\x00\x00\x80\x40", 8));
  ASSERT_TRUE(AttachExternalData(&s, false, &m).ok());
  const onnx::TensorProto& w = m.graph().initializer(0);
  EXPECT_FALSE(HasExternalData(w));
  EXPECT_EQ(w.external_data_size(), 0);
  ASSERT_EQ(w.raw_data().size(), 16u);
  float v[4];
  std::memcpy(v, w.raw_data().data(), sizeof v);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[3], 4.0f);
}

}  // namespace
}  // namespace quantd::graph
