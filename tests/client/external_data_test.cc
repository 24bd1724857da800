#include "client/external_data.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/file_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace quantd::client {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

onnx::TensorProto FloatTensor(const std::string& name,
                              std::vector<int64_t> dims, float seed) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = seed + 0.25f * static_cast<float>(i);
  t.set_raw_data(v.data(), v.size() * sizeof(float));
  return t;
}

// Tensors everywhere one can sit: graph initializers (big and small), a
// Constant's value, a sparse initializer, an If branch's initializer and a
// function body's Constant.
onnx::ModelProto ModelWithTensorsEverywhere() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("everywhere");
  *g->add_initializer() = FloatTensor("w", {64, 32}, 1.0f);  // 8 KiB.
  *g->add_initializer() = FloatTensor("b", {3}, 2.0f);       // 12 bytes.
  onnx::NodeProto* c = g->add_node();
  c->set_op_type("Constant");
  c->add_output("k");
  onnx::AttributeProto* value = c->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() = FloatTensor("k", {512}, 3.0f);  // 2 KiB.
  onnx::SparseTensorProto* sparse = g->add_sparse_initializer();
  *sparse->mutable_values() = FloatTensor("s", {300}, 4.0f);
  onnx::TensorProto* indices = sparse->mutable_indices();
  indices->set_data_type(onnx::TensorProto::INT64);
  indices->add_dims(300);
  std::vector<int64_t> idx(300);
  for (int i = 0; i < 300; ++i) idx[i] = 2 * i;
  indices->set_raw_data(idx.data(), idx.size() * sizeof(int64_t));
  sparse->add_dims(600);
  onnx::NodeProto* iff = g->add_node();
  iff->set_op_type("If");
  onnx::AttributeProto* branch = iff->add_attribute();
  branch->set_name("then_branch");
  branch->set_type(onnx::AttributeProto::GRAPH);
  *branch->mutable_g()->add_initializer() = FloatTensor("t", {1024}, 5.0f);
  onnx::FunctionProto* f = m.add_functions();
  f->set_name("fn");
  onnx::NodeProto* fc = f->add_node();
  fc->set_op_type("Constant");
  onnx::AttributeProto* fv = fc->add_attribute();
  fv->set_name("value");
  fv->set_type(onnx::AttributeProto::TENSOR);
  *fv->mutable_t() = FloatTensor("fk", {256}, 6.0f);
  return m;
}

class ExternalDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(::testing::TempDir()) /
        ("external_data_" +
         std::string(
             ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }

  static std::string Read(const std::string& path) {
    absl::StatusOr<std::string> bytes = ReadFile(path);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : "";
  }

  // A one-initializer model whose tensor "w" ([n] floats) is external with
  // the given entries, and a data file "w.bin" of `file_bytes` bytes.
  std::string ExternalModel(
      int64_t n, std::vector<std::pair<std::string, std::string>> entries,
      int64_t file_bytes) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    onnx::TensorProto* t = m.mutable_graph()->add_initializer();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(n);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [k, v] : entries) {
      onnx::StringStringEntryProto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    std::ofstream(Path("w.bin"), std::ios::binary)
        << std::string(static_cast<size_t>(file_bytes), '\x01');
    return m.SerializeAsString();
  }

  // A Quantize result as the server sends one for ModelWithTensorsEverywhere
  // sent with its data streamed: the model (tensors located in the stream)
  // and the stream's bytes in `*stream`.
  StreamedModel ServerResult(std::string* stream) {
    EXPECT_TRUE(WriteModelWithExternalData(
                    ModelWithTensorsEverywhere().SerializeAsString(),
                    Path("in.onnx"), 1024)
                    .ok());
    absl::StatusOr<StreamedModel> result =
        OpenModelForStreaming(Read(Path("in.onnx")), dir_.string());
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return StreamedModel();
    stream->assign(result->external.size, '\0');
    EXPECT_TRUE(result->external.read(0, stream->size(), stream->data()).ok());
    return *std::move(result);
  }

  // Whether the model written at `name` (with its data files beside it)
  // reads back as ModelWithTensorsEverywhere.
  void ExpectReadsBackAsTheOriginal(const std::string& name) {
    absl::StatusOr<std::string> inlined =
        InlineExternalData(Read(Path(name)), dir_.string());
    ASSERT_TRUE(inlined.ok()) << inlined.status();
    onnx::ModelProto back;
    ASSERT_TRUE(back.ParseFromString(*inlined));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        back, ModelWithTensorsEverywhere()));
  }

  int FileCount() const {
    int files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) {
      ++files;
    }
    return files;
  }

  fs::path dir_;
};

TEST_F(ExternalDataTest, WrittenOutAndReadBackIsTheSameModel) {
  const onnx::ModelProto original = ModelWithTensorsEverywhere();
  EXPECT_FALSE(UsesExternalData(original.SerializeAsString()));
  ExternalDataInfo wrote;
  ASSERT_TRUE(WriteModelWithExternalData(original.SerializeAsString(),
                                         Path("m.onnx"), 1024, &wrote)
                  .ok());
  // w (8 KiB), k (2 KiB), s's values (1200 B) and indices (2400 B), the
  // branch's t (4 KiB) and the function's fk (1 KiB); b (12 B) stays.
  EXPECT_EQ(wrote.tensors, 6);
  EXPECT_EQ(wrote.bytes, 8192 + 2048 + 1200 + 2400 + 4096 + 1024);
  EXPECT_EQ(wrote.files, 1);

  const std::string saved = Read(Path("m.onnx"));
  EXPECT_TRUE(UsesExternalData(saved));
  onnx::ModelProto on_disk;
  ASSERT_TRUE(on_disk.ParseFromString(saved));
  const onnx::TensorProto& w = on_disk.graph().initializer(0);
  EXPECT_EQ(w.data_location(), onnx::TensorProto::EXTERNAL);
  EXPECT_FALSE(w.has_raw_data());
  ASSERT_EQ(w.external_data_size(), 3);
  EXPECT_EQ(w.external_data(0).value(), "m.onnx.data");
  EXPECT_FALSE(on_disk.graph().initializer(1).has_data_location());
  // Every offset 64-byte aligned.
  for (const auto& t : {on_disk.graph().node(0).attribute(0).t(),
                        on_disk.graph().sparse_initializer(0).indices(),
                        on_disk.functions(0).node(0).attribute(0).t()}) {
    EXPECT_EQ(std::stoll(t.external_data(1).value()) % 64, 0) << t.name();
  }

  ExternalDataInfo read;
  absl::StatusOr<std::string> inlined =
      InlineExternalData(saved, dir_.string(), &read);
  ASSERT_TRUE(inlined.ok()) << inlined.status();
  EXPECT_EQ(read.tensors, 6);
  EXPECT_EQ(read.bytes, wrote.bytes);
  EXPECT_EQ(read.files, 1);
  EXPECT_FALSE(UsesExternalData(*inlined));
  onnx::ModelProto back;
  ASSERT_TRUE(back.ParseFromString(*inlined));
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(back, original))
      << back.DebugString().substr(0, 2000);
}

TEST_F(ExternalDataTest, UsesExternalDataFindsATensorWhereverItSits) {
  const onnx::ModelProto base = ModelWithTensorsEverywhere();
  auto mark = [](onnx::TensorProto* t) {
    t->set_data_location(onnx::TensorProto::EXTERNAL);
  };
  std::vector<std::function<void(onnx::ModelProto*)>> edits = {
      [&](onnx::ModelProto* m) {
        mark(m->mutable_graph()->mutable_initializer(1));
      },
      [&](onnx::ModelProto* m) {
        mark(m->mutable_graph()
                 ->mutable_node(0)
                 ->mutable_attribute(0)
                 ->mutable_t());
      },
      [&](onnx::ModelProto* m) {
        mark(m->mutable_graph()
                 ->mutable_sparse_initializer(0)
                 ->mutable_indices());
      },
      [&](onnx::ModelProto* m) {
        mark(m->mutable_graph()
                 ->mutable_node(1)
                 ->mutable_attribute(0)
                 ->mutable_g()
                 ->mutable_initializer(0));
      },
      [&](onnx::ModelProto* m) {
        mark(m->mutable_functions(0)
                 ->mutable_node(0)
                 ->mutable_attribute(0)
                 ->mutable_t());
      },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    onnx::ModelProto m = base;
    edits[i](&m);
    EXPECT_TRUE(UsesExternalData(m.SerializeAsString())) << "edit " << i;
  }
  // DEFAULT written out explicitly is not external.
  onnx::ModelProto m = base;
  m.mutable_graph()->mutable_initializer(0)->set_data_location(
      onnx::TensorProto::DEFAULT);
  EXPECT_FALSE(UsesExternalData(m.SerializeAsString()));
  EXPECT_FALSE(UsesExternalData("not a model at all \xff\xff\xff"));
  EXPECT_FALSE(UsesExternalData(""));
  // Cut in the middle of a tensor: malformed, not external.
  onnx::ModelProto cut = base;
  mark(cut.mutable_graph()->mutable_initializer(1));
  std::string bytes = cut.SerializeAsString();
  EXPECT_FALSE(UsesExternalData(bytes.substr(0, 100)));
}

TEST_F(ExternalDataTest, ReadsAtTheOffsetAndChecksTheLength) {
  // 16 floats at offset 8 of a 100-byte file; no length entry.
  std::string model =
      ExternalModel(16, {{"location", "w.bin"}, {"offset", "8"}}, 100);
  {
    std::fstream f(Path("w.bin"),
                   std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8);
    const float v[2] = {1.5f, -2.0f};
    f.write(reinterpret_cast<const char*>(v), sizeof(v));
  }
  absl::StatusOr<std::string> inlined =
      InlineExternalData(model, dir_.string());
  ASSERT_TRUE(inlined.ok()) << inlined.status();
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(*inlined));
  const onnx::TensorProto& w = m.graph().initializer(0);
  ASSERT_EQ(w.raw_data().size(), 64u);
  float v[2];
  std::memcpy(v, w.raw_data().data(), sizeof(v));
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(w.external_data_size(), 0);
  EXPECT_FALSE(w.has_data_location());
}

TEST_F(ExternalDataTest, BadReferencesAreRefusedNamingTheTensor) {
  fs::create_directories(dir_ / "model");
  fs::create_directories(dir_ / "outside");
  std::ofstream(Path("outside/secret.bin")) << std::string(64, 'x');
  fs::create_symlink(dir_ / "outside" / "secret.bin",
                     dir_ / "model" / "link.bin");
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> entries;
    int64_t n;
    const char* fragment;
  };
  const std::vector<Case> cases = {
      {"no location", {{"offset", "0"}}, 4, "names no location"},
      {"absolute", {{"location", "/etc/passwd"}}, 4, "no absolute path"},
      {"climbing", {{"location", "../outside/secret.bin"}}, 4, "no '..'"},
      {"hidden climb",
       {{"location", "sub/../../outside/secret.bin"}},
       4,
       "no '..'"},
      {"symlink out", {{"location", "link.bin"}}, 4, "outside the model's"},
      {"missing", {{"location", "nope.bin"}}, 4, "cannot resolve"},
      {"directory", {{"location", "."}}, 4, "outside the model's"},
      {"past the end",
       {{"location", "w.bin"}, {"offset", "90"}},
       4,
       "at offset 90"},
      {"too long for the file", {{"location", "w.bin"}}, 100, "which has 100"},
      {"wrong length",
       {{"location", "w.bin"}, {"length", "12"}},
       4,
       "has length 12 but its dims and type need 16"},
      {"offset not a number",
       {{"location", "w.bin"}, {"offset", "x1"}},
       4,
       "offset 'x1'"},
      {"negative length",
       {{"location", "w.bin"}, {"length", "-16"}},
       4,
       "length '-16'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string model = ExternalModel(c.n, c.entries, 100);
    fs::copy_file(Path("w.bin"), dir_ / "model" / "w.bin",
                  fs::copy_options::overwrite_existing);
    absl::StatusOr<std::string> r =
        InlineExternalData(model, (dir_ / "model").string());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.fragment));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("'w'"));
  }

  // A string tensor has no fixed size to read.
  onnx::ModelProto m;
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name("words");
  t->set_data_type(onnx::TensorProto::STRING);
  t->add_dims(2);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  onnx::StringStringEntryProto* e = t->add_external_data();
  e->set_key("location");
  e->set_value("w.bin");
  absl::StatusOr<std::string> r =
      InlineExternalData(m.SerializeAsString(), dir_.string());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'words'"));
}

TEST_F(ExternalDataTest, AModelOverTwoGigabytesIsRefusedBeforeItIsRead) {
  // 600 M floats (2.4 GB) in a sparse file: refused before any is read.
  const int64_t n = 600'000'000;
  const std::string model = ExternalModel(n, {{"location", "w.bin"}}, 0);
  ASSERT_EQ(truncate(Path("w.bin").c_str(), n * 4), 0);
  absl::StatusOr<std::string> r = InlineExternalData(model, dir_.string());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
      << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("2 GB"));
}

TEST_F(ExternalDataTest, NothingBigEnoughWritesNoDataFile) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  *m.mutable_graph()->add_initializer() = FloatTensor("b", {3}, 1.0f);
  ExternalDataInfo wrote;
  ASSERT_TRUE(WriteModelWithExternalData(m.SerializeAsString(), Path("s.onnx"),
                                         1024, &wrote)
                  .ok());
  EXPECT_EQ(wrote.tensors, 0);
  EXPECT_TRUE(fs::exists(Path("s.onnx")));
  EXPECT_FALSE(fs::exists(Path("s.onnx.data")));
  EXPECT_EQ(WriteModelWithExternalData("\xff garbage", Path("g.onnx")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(Path("g.onnx")));
}

TEST_F(ExternalDataTest, StreamedModelReadsEveryTensorFromItsFile) {
  const onnx::ModelProto original = ModelWithTensorsEverywhere();
  ASSERT_TRUE(WriteModelWithExternalData(original.SerializeAsString(),
                                         Path("m.onnx"), 1024)
                  .ok());
  absl::StatusOr<StreamedModel> streamed =
      OpenModelForStreaming(Read(Path("m.onnx")), dir_.string());
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(streamed->info.tensors, 6);
  EXPECT_EQ(streamed->info.files, 1);
  // Packed: the stream is exactly the tensors' bytes.
  EXPECT_EQ(streamed->external.size,
            static_cast<uint64_t>(streamed->info.bytes));
  onnx::ModelProto sent;
  ASSERT_TRUE(sent.ParseFromString(streamed->model));
  EXPECT_EQ(sent.graph().initializer(0).external_data(0).value(),
            "quantd:external_data");

  // Read in odd-sized pieces, as the SDK's chunks would, and put back in.
  std::string stream(streamed->external.size, '\0');
  for (uint64_t at = 0; at < stream.size(); at += 1000) {
    const size_t n = std::min<size_t>(1000, stream.size() - at);
    ASSERT_TRUE(streamed->external.read(at, n, stream.data() + at).ok());
  }
  char past[8];
  EXPECT_FALSE(streamed->external.read(stream.size() - 4, 8, past).ok());
  absl::StatusOr<std::string> inlined =
      InlineStreamedData(streamed->model, stream);
  ASSERT_TRUE(inlined.ok()) << inlined.status();
  onnx::ModelProto back;
  ASSERT_TRUE(back.ParseFromString(*inlined));
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(back, original));
}

TEST_F(ExternalDataTest, AStreamOverTwoGigabytesIsNotRead) {
  // Any size can be streamed: opening reads no tensor bytes.
  const int64_t n = 600'000'000;
  const std::string model = ExternalModel(n, {{"location", "w.bin"}}, 0);
  ASSERT_EQ(truncate(Path("w.bin").c_str(), n * 4), 0);
  absl::StatusOr<StreamedModel> streamed =
      OpenModelForStreaming(model, dir_.string());
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(streamed->external.size, static_cast<uint64_t>(n) * 4);
  char tail[8];
  ASSERT_TRUE(streamed->external.read(n * 4 - 8, 8, tail).ok());
  // Its references are checked like InlineExternalData's.
  EXPECT_EQ(OpenModelForStreaming(
                ExternalModel(4, {{"location", "../w.bin"}}, 16), dir_.string())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ExternalDataTest, AQuantizeResultIsSavedEitherWay) {
  std::string stream;
  const StreamedModel result = ServerResult(&stream);
  ExternalDataInfo wrote;
  ASSERT_TRUE(SaveQuantizedModel(result.model, stream, Path("out.onnx"),
                                 /*as_external=*/true, &wrote)
                  .ok());
  EXPECT_EQ(wrote.tensors, 6);
  EXPECT_EQ(Read(Path("out.onnx.data")), stream);  // Written as it came.
  ExpectReadsBackAsTheOriginal("out.onnx");

  ASSERT_TRUE(SaveQuantizedModel(result.model, stream, Path("one.onnx"),
                                 /*as_external=*/false)
                  .ok());
  EXPECT_FALSE(fs::exists(Path("one.onnx.data")));
  EXPECT_EQ(Read(Path("one.onnx")),
            *InlineExternalData(Read(Path("out.onnx")), dir_.string()));

  // A tensor outside what the server sent: refused, nothing written.
  EXPECT_FALSE(SaveQuantizedModel(result.model, stream.substr(0, 100),
                                  Path("bad.onnx"), true)
                   .ok());
  EXPECT_FALSE(fs::exists(Path("bad.onnx")));
}

TEST_F(ExternalDataTest, AStreamedResultIsWrittenAsItArrives) {
  std::string stream;
  const StreamedModel result = ServerResult(&stream);
  absl::StatusOr<std::unique_ptr<StreamedModelWriter>> writer =
      StreamedModelWriter::Create(Path("out.onnx"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::function<absl::Status(absl::string_view)> sink = (*writer)->Sink();
  for (size_t at = 0; at < stream.size(); at += 1000) {
    ASSERT_TRUE(sink(absl::string_view(stream).substr(at, 1000)).ok());
  }
  // Nothing appears before Finish.
  EXPECT_FALSE(fs::exists(Path("out.onnx")));
  EXPECT_FALSE(fs::exists(Path("out.onnx.data")));
  ExternalDataInfo wrote;
  ASSERT_TRUE((*writer)->Finish(result.model, &wrote).ok());
  EXPECT_EQ(wrote.tensors, 6);
  EXPECT_EQ(Read(Path("out.onnx.data")), stream);
  ExpectReadsBackAsTheOriginal("out.onnx");
  EXPECT_EQ((*writer)->Finish(result.model).code(),
            absl::StatusCode::kFailedPrecondition);
  writer->reset();
  // in.onnx, in.onnx.data, out.onnx, out.onnx.data: no temporary file left.
  EXPECT_EQ(FileCount(), 4);
}

TEST_F(ExternalDataTest, AnUnfinishedStreamedResultLeavesNothingBehind) {
  // An earlier result at the same path stays as it was.
  ASSERT_TRUE(WriteFileAtomically(Path("out.onnx"), "old model").ok());
  ASSERT_TRUE(WriteFileAtomically(Path("out.onnx.data"), "old data").ok());
  {
    absl::StatusOr<std::unique_ptr<StreamedModelWriter>> writer =
        StreamedModelWriter::Create(Path("out.onnx"));
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Sink()("part of a stream").ok());
  }  // The call failed: the writer goes without Finish.
  EXPECT_EQ(Read(Path("out.onnx")), "old model");
  EXPECT_EQ(Read(Path("out.onnx.data")), "old data");
  EXPECT_EQ(FileCount(), 2);

  // A model naming bytes past those received: INTERNAL, neither written.
  std::string stream;
  const StreamedModel result = ServerResult(&stream);
  absl::StatusOr<std::unique_ptr<StreamedModelWriter>> writer =
      StreamedModelWriter::Create(Path("out.onnx"));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Sink()(stream.substr(0, 100)).ok());
  EXPECT_EQ((*writer)->Finish(result.model).code(),
            absl::StatusCode::kInternal);
  writer->reset();
  EXPECT_EQ(Read(Path("out.onnx")), "old model");
  EXPECT_EQ(Read(Path("out.onnx.data")), "old data");

  // A missing directory is refused when the writer is made.
  EXPECT_EQ(
      StreamedModelWriter::Create(Path("no/such/out.onnx")).status().code(),
      absl::StatusCode::kNotFound);
}

TEST_F(ExternalDataTest, AStreamedWriterGivenNoStreamMovesBigTensorsOut) {
  // The input was sent inline, so nothing came back beside the model: the
  // writer moves the big tensors out itself, as --save_as_external_data=true.
  absl::StatusOr<std::unique_ptr<StreamedModelWriter>> writer =
      StreamedModelWriter::Create(Path("out.onnx"));
  ASSERT_TRUE(writer.ok());
  ExternalDataInfo wrote;
  ASSERT_TRUE(
      (*writer)
          ->Finish(ModelWithTensorsEverywhere().SerializeAsString(), &wrote)
          .ok());
  EXPECT_EQ(wrote.tensors, 6);
  EXPECT_TRUE(fs::exists(Path("out.onnx.data")));
  ExpectReadsBackAsTheOriginal("out.onnx");
}

}  // namespace
}  // namespace quantd::client
