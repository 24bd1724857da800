// Fuzz target for the float executor (core/executor/): small graphs of 1-8
// nodes, drawn from a table of the ops the executor registers, with fuzzed
// attributes (sensible values most of the time, wild ones and wrong types
// some of the time), fuzzed small shapes (rank <= 4, dims <= 8, so at most
// 4096 elements per tensor), initializers and graph inputs whose values come
// from the input (NaN, infinities, denormals, extremes of each type), each
// node's inputs wired to earlier values or to fresh tensors. If, Loop and
// Scan get small bodies (one or two nodes over their own inputs and outer
// values, sometimes with wrong types or counts).
//
// The model goes through what a Calibrate job does before it runs the
// executor (core/engine/calibrate_job.cc): serialized and read back with
// graph::ParseModel, CheckJobLimits, SortTopologically, ValidateModel
// (CheckModelFields, ONNX's checker up to opset 17, CheckStructure),
// InlineLocalFunctions, PrepareGraph with passes::FullPrepareOptions (opset
// upgrade, constant folding through the executor), then Executor::Create and
// Run with the graph inputs as feeds, as CalibrationSession does.
//
// Input (fuzz_reader.h, front to back; make_executor_seeds.py writes seeds):
//   u8 opset choice, u8 flags, u8 node count (1 + n % 8), then per node an op
//   (index into kOps), its attributes and its inputs, each decoded by the
//   spec of the op; fresh tensors take a type, a shape and up to 8 values
//   that repeat over the tensor.
//
// Checked (a violation aborts):
//  - every refusal, at any step, is an error status whose code is neither
//    INTERNAL nor UNKNOWN, with a non-empty message (std::bad_alloc is
//    allowed: the jobs turn it into RESOURCE_EXHAUSTED);
//  - a successful run returns one tensor per graph output, each holding
//    exactly the number of elements its shape says;
//  - each run is cancelled after 2 s, as a call's deadline would cancel it
//    (a Loop may run 2^63 trips): CANCELLED is then an answer, and the two
//    runs are not compared;
//  - the same executor run on a 1-thread and on a 2-thread pool gives the
//    same status and bit-identical outputs. The executor splits work into
//    thread-count chunks (core/base/parallel.h) but every output element is
//    computed by the same code in the same order whatever the chunking:
//    elementwise ops, convolutions and GEMMs split over output rows or
//    columns, reductions are not split. No op is known to differ, so no
//    tolerance is used; NaN payloads are compared as bits too.
//
// Built two ways (fuzz/CMakeLists.txt): as a libFuzzer binary (clang, the
// executor and graph sources compiled in, without the AVX GEMM blocks), and
// linked with fuzz/structured_corpus_main.cc as the ctest
// executor_fuzz_corpus.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/base/cancellation.h"
#include "core/base/checked_count.h"
#include "core/base/thread_pool.h"
#include "core/engine/limits.h"
#include "core/executor/executor.h"
#include "core/executor/tensor.h"
#include "core/graph/function_inline.h"
#include "core/graph/model_io.h"
#include "core/graph/prepare.h"
#include "core/graph/validate.h"
#include "core/numerics/float16.h"
#include "core/passes/fold_constants.h"
#include "fuzz/fuzz_reader.h"
#include "fuzz/quiet_protobuf.h"
#include "onnx/onnx_pb.h"

namespace {

using quantd::executor::Executor;
using quantd::executor::Tensor;
using quantd::fuzz::ByteReader;
using TP = onnx::TensorProto;
using AP = onnx::AttributeProto;

// Inputs are a few hundred bytes; longer ones only add values.
constexpr size_t kMaxInputBytes = 8 << 10;
constexpr int kMaxNodes = 8;
constexpr int kMaxDim = 8;

std::string Hex(const std::string& input) {
  std::string out;
  char buf[3];
  for (size_t i = 0; i < input.size() && i < 4096; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<uint8_t>(input[i]));
    out += buf;
  }
  return out;
}

[[noreturn]] void Fail(const std::string& what, const std::string& input) {
  std::fprintf(stderr, "executor_fuzzer: %s\ninput (%zu bytes): %s\n",
               what.c_str(), input.size(), Hex(input).c_str());
  std::abort();
}

// EXECUTOR_FUZZER_TRACE=1: one line per refusal and per run, for seeing
// how far inputs get (make_executor_seeds.py, by hand).
bool Trace() {
  static const bool trace = std::getenv("EXECUTOR_FUZZER_TRACE") != nullptr;
  return trace;
}

void CheckRefusal(const absl::Status& status, const char* step,
                  const std::string& input) {
  if (status.ok()) return;
  if (Trace()) {
    std::fprintf(stderr, "refused: %s: %s\n", step,
                 status.ToString().substr(0, 300).c_str());
  }
  if (status.code() == absl::StatusCode::kInternal ||
      status.code() == absl::StatusCode::kUnknown) {
    Fail(
        absl::StrCat(step, " refused with ", status.ToString().substr(0, 2000)),
        input);
  }
  if (status.message().empty()) {
    Fail(absl::StrCat(step, " refused without a message"), input);
  }
}

// ---------------------------------------------------------------------------
// The op table.

// How an input slot is filled.
enum class In {
  kData,     // an earlier value, or a fresh tensor (mostly float)
  kWeight,   // a fresh float initializer shaped for the op (WeightShape)
  kInts,     // a 1-D int64 initializer of small values (shapes, pads, ...)
  kAxes,     // a 1-D int64 initializer of axes of input 0
  kScalarI,  // an int64 scalar (or 1-element) initializer, small value
  kScalarF,  // a float scalar initializer
  kBool,     // a bool tensor shaped like input 0 (or a scalar)
  kZeroPt,   // a uint8 / int8 scalar (zero points)
  kIndices,  // an int64 tensor of small indices, rank of input 0
  kAny,      // an earlier value, or a fresh tensor of any type
};

struct InSpec {
  In kind;
  bool optional = false;
};

// How an attribute's sensible values are drawn.
enum class Gen {
  kBool,      // INT 0 / 1
  kAxis,      // INT in [-rank, rank)
  kSmall,     // INT in [1, 4]
  kSpatial,   // INTS, one per spatial dim, in [1, 3]
  kPads,      // INTS, two per spatial dim, in [0, 2]
  kPerm,      // INTS, a permutation of input 0's dims
  kAxesList,  // INTS, distinct axes of input 0
  kFloat,     // FLOAT from the interesting table
  kUnit,      // FLOAT in (0, 1]
  kStr,       // STRING, one of `choices`
  kType,      // INT, an ONNX element type the executor holds
  kStrs,      // STRINGS, activations of a recurrent op
  kTensor,    // TENSOR, a 1-element float or int64 (ConstantOfShape)
};

struct AttrSpec {
  const char* name;
  Gen gen;
  std::vector<const char*> choices = {};
};

struct OpSpec {
  const char* op;
  std::vector<InSpec> inputs;
  std::vector<AttrSpec> attrs;
  int outputs = 1;
  // Inputs past the listed ones may repeat the last (Concat, Sum, ...).
  bool variadic = false;
  // Output 0 has input 0's shape (for the shapes later nodes are given).
  bool same_shape = false;
};

const std::vector<const char*> kAutoPad = {"NOTSET", "SAME_UPPER", "SAME_LOWER",
                                           "VALID"};
const std::vector<const char*> kActs = {
    "Sigmoid",         "Tanh",      "Relu",     "HardSigmoid",
    "Affine",          "LeakyRelu", "Elu",      "ScaledTanh",
    "ThresholdedRelu", "Softsign",  "Softplus", "Bogus"};
const std::vector<const char*> kDirections = {"forward", "reverse",
                                              "bidirectional", "sideways"};

const InSpec D{In::kData};
const InSpec W{In::kWeight};
const InSpec OW{In::kWeight, true};
const InSpec I{In::kInts};
const InSpec OI{In::kInts, true};
const InSpec A{In::kAxes};
const InSpec OA{In::kAxes, true};
const InSpec K{In::kScalarI};
const InSpec OK_{In::kScalarI, true};
const InSpec F{In::kScalarF};
const InSpec OF{In::kScalarF, true};
const InSpec B{In::kBool};
const InSpec OB{In::kBool, true};
const InSpec Z{In::kZeroPt};
const InSpec OZ{In::kZeroPt, true};
const InSpec X{In::kAny};
const InSpec IDX{In::kIndices};

std::vector<OpSpec> MakeOps() {
  std::vector<OpSpec> ops;
  // Elementwise, binary and variadic.
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Greater",
                         "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or",
                         "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
    ops.push_back({op, {D, D}, {}, 1, false, true});
  }
  ops.push_back({"Mod", {D, D}, {{"fmod", Gen::kBool}}, 1, false, true});
  ops.push_back({"BitShift",
                 {D, D},
                 {{"direction", Gen::kStr, {"LEFT", "RIGHT", "UP"}}},
                 1,
                 false,
                 true});
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
    ops.push_back({op, {D}, {}, 1, true, true});
  }
  ops.push_back({"Where", {B, D, D}, {}, 1, false, false});
  // Unary and activations.
  for (const char* op :
       {"Relu",    "Neg",      "Abs",      "Exp",  "Log",       "Sqrt",
        "Sigmoid", "Tanh",     "Floor",    "Ceil", "Round",     "Reciprocal",
        "Sign",    "Erf",      "Sin",      "Cos",  "Atan",      "IsNaN",
        "Not",     "Softsign", "Softplus", "Mish", "HardSwish", "Identity"}) {
    ops.push_back({op, {D}, {}, 1, false, true});
  }
  ops.push_back(
      {"IsInf",
       {D},
       {{"detect_negative", Gen::kBool}, {"detect_positive", Gen::kBool}},
       1,
       false,
       true});
  for (const char* op : {"LeakyRelu", "Elu", "Celu", "ThresholdedRelu"}) {
    ops.push_back({op, {D}, {{"alpha", Gen::kFloat}}, 1, false, true});
  }
  ops.push_back({"Selu",
                 {D},
                 {{"alpha", Gen::kFloat}, {"gamma", Gen::kFloat}},
                 1,
                 false,
                 true});
  ops.push_back({"HardSigmoid",
                 {D},
                 {{"alpha", Gen::kFloat}, {"beta", Gen::kFloat}},
                 1,
                 false,
                 true});
  ops.push_back({"Gelu",
                 {D},
                 {{"approximate", Gen::kStr, {"none", "tanh", "erf"}}},
                 1,
                 false,
                 true});
  ops.push_back({"Shrink",
                 {D},
                 {{"bias", Gen::kFloat}, {"lambd", Gen::kFloat}},
                 1,
                 false,
                 true});
  ops.push_back({"Clip", {D, OF, OF}, {}, 1, false, true});
  ops.push_back({"PRelu", {D, W}, {}, 1, false, true});
  ops.push_back(
      {"Dropout", {D, OF, OB}, {{"seed", Gen::kSmall}}, 2, false, true});
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    ops.push_back({op, {D}, {{"axis", Gen::kAxis}}, 1, false, true});
  }
  // Convolution and pooling.
  const std::vector<AttrSpec> conv_attrs = {{"auto_pad", Gen::kStr, kAutoPad},
                                            {"dilations", Gen::kSpatial},
                                            {"group", Gen::kSmall},
                                            {"kernel_shape", Gen::kSpatial},
                                            {"pads", Gen::kPads},
                                            {"strides", Gen::kSpatial}};
  ops.push_back({"Conv", {D, W, OW}, conv_attrs});
  std::vector<AttrSpec> convt_attrs = conv_attrs;
  convt_attrs.push_back({"output_padding", Gen::kSpatial});
  convt_attrs.push_back({"output_shape", Gen::kSpatial});
  ops.push_back({"ConvTranspose", {D, W, OW}, convt_attrs});
  ops.push_back({"ConvInteger", {D, W, OZ, OZ}, conv_attrs});
  const std::vector<AttrSpec> pool_attrs = {{"auto_pad", Gen::kStr, kAutoPad},
                                            {"ceil_mode", Gen::kBool},
                                            {"dilations", Gen::kSpatial},
                                            {"kernel_shape", Gen::kSpatial},
                                            {"pads", Gen::kPads},
                                            {"strides", Gen::kSpatial},
                                            {"storage_order", Gen::kBool}};
  ops.push_back({"MaxPool", {D}, pool_attrs, 2});
  std::vector<AttrSpec> avg_attrs = pool_attrs;
  avg_attrs.back() = {"count_include_pad", Gen::kBool};
  ops.push_back({"AveragePool", {D}, avg_attrs});
  std::vector<AttrSpec> lp_attrs = pool_attrs;
  lp_attrs.back() = {"p", Gen::kSmall};
  ops.push_back({"LpPool", {D}, lp_attrs});
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    ops.push_back({op, {D}, {}});
  }
  ops.push_back({"GlobalLpPool", {D}, {{"p", Gen::kSmall}}});
  // GEMM.
  ops.push_back({"MatMul", {D, W}, {}});
  ops.push_back({"MatMulInteger", {D, W, OZ, OZ}, {}});
  ops.push_back({"Gemm",
                 {D, W, OW},
                 {{"alpha", Gen::kFloat},
                  {"beta", Gen::kFloat},
                  {"transA", Gen::kBool},
                  {"transB", Gen::kBool}}});
  // Normalization.
  ops.push_back({"BatchNormalization",
                 {D, W, W, W, W},
                 {{"epsilon", Gen::kUnit}, {"momentum", Gen::kUnit}},
                 1,
                 false,
                 true});
  ops.push_back({"InstanceNormalization",
                 {D, W, W},
                 {{"epsilon", Gen::kUnit}},
                 1,
                 false,
                 true});
  ops.push_back({"LayerNormalization",
                 {D, W, OW},
                 {{"axis", Gen::kAxis},
                  {"epsilon", Gen::kUnit},
                  {"stash_type", Gen::kBool}},
                 3,
                 false,
                 true});
  ops.push_back({"GroupNormalization",
                 {D, W, W},
                 {{"num_groups", Gen::kSmall}, {"epsilon", Gen::kUnit}},
                 1,
                 false,
                 true});
  ops.push_back({"LpNormalization",
                 {D},
                 {{"axis", Gen::kAxis}, {"p", Gen::kSmall}},
                 1,
                 false,
                 true});
  ops.push_back({"MeanVarianceNormalization",
                 {D},
                 {{"axes", Gen::kAxesList}},
                 1,
                 false,
                 true});
  ops.push_back({"LRN",
                 {D},
                 {{"size", Gen::kSmall},
                  {"alpha", Gen::kFloat},
                  {"beta", Gen::kUnit},
                  {"bias", Gen::kUnit}},
                 1,
                 false,
                 true});
  // Shape and layout.
  ops.push_back({"Reshape", {D, I}, {{"allowzero", Gen::kBool}}});
  ops.push_back({"Flatten", {D}, {{"axis", Gen::kAxis}}});
  ops.push_back({"Transpose", {D}, {{"perm", Gen::kPerm}}});
  ops.push_back({"Concat", {D, D}, {{"axis", Gen::kAxis}}, 1, true});
  ops.push_back({"Split",
                 {D, OI},
                 {{"axis", Gen::kAxis},
                  {"num_outputs", Gen::kSmall},
                  {"split", Gen::kSpatial}},
                 2});
  ops.push_back({"Slice", {D, I, I, OA, OI}, {}});
  ops.push_back({"Gather", {D, IDX}, {{"axis", Gen::kAxis}}});
  ops.push_back({"GatherElements", {D, IDX}, {{"axis", Gen::kAxis}}});
  ops.push_back({"GatherND", {D, IDX}, {{"batch_dims", Gen::kBool}}});
  ops.push_back({"ScatterElements",
                 {D, IDX, D},
                 {{"axis", Gen::kAxis},
                  {"reduction",
                   Gen::kStr,
                   {"none", "add", "mul", "max", "min", "avg"}}}});
  ops.push_back({"ScatterND", {D, IDX, D}, {}});
  ops.push_back({"Squeeze", {D, OA}, {{"axes", Gen::kAxesList}}});
  ops.push_back({"Unsqueeze", {D, OA}, {{"axes", Gen::kAxesList}}});
  ops.push_back({"Shape", {X}, {{"start", Gen::kAxis}, {"end", Gen::kAxis}}});
  ops.push_back({"Size", {X}, {}});
  ops.push_back({"Tile", {D, I}, {}});
  ops.push_back({"Expand", {D, I}, {}});
  ops.push_back({"Pad",
                 {D, I, OF, OA},
                 {{"mode",
                   Gen::kStr,
                   {"constant", "reflect", "edge", "wrap", "mirror"}}}});
  ops.push_back({"DepthToSpace",
                 {D},
                 {{"blocksize", Gen::kSmall},
                  {"mode", Gen::kStr, {"DCR", "CRD", "XYZ"}}}});
  ops.push_back({"SpaceToDepth", {D}, {{"blocksize", Gen::kSmall}}});
  ops.push_back({"CumSum",
                 {D, K},
                 {{"exclusive", Gen::kBool}, {"reverse", Gen::kBool}},
                 1,
                 false,
                 true});
  ops.push_back(
      {"TopK",
       {D, K},
       {{"axis", Gen::kAxis}, {"largest", Gen::kBool}, {"sorted", Gen::kBool}},
       2});
  ops.push_back({"Trilu", {D, OK_}, {{"upper", Gen::kBool}}, 1, false, true});
  ops.push_back({"ReverseSequence",
                 {D, IDX},
                 {{"batch_axis", Gen::kBool}, {"time_axis", Gen::kBool}}});
  ops.push_back({"Compress", {D, B}, {{"axis", Gen::kAxis}}});
  ops.push_back({"NonZero", {D}, {}});
  ops.push_back({"OneHot", {IDX, K, W}, {{"axis", Gen::kAxis}}});
  ops.push_back({"EyeLike", {D}, {{"k", Gen::kAxis}, {"dtype", Gen::kType}}});
  ops.push_back({"ConstantOfShape", {I}, {{"value", Gen::kTensor}}});
  ops.push_back({"Range", {K, K, K}, {}});
  ops.push_back(
      {"Unique", {D}, {{"axis", Gen::kAxis}, {"sorted", Gen::kBool}}, 4});
  ops.push_back({"Det", {D}, {}});
  // Reductions.
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
        "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare",
        "ReduceLogSum"}) {
    ops.push_back({op,
                   {D, OA},
                   {{"axes", Gen::kAxesList},
                    {"keepdims", Gen::kBool},
                    {"noop_with_empty_axes", Gen::kBool}}});
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    ops.push_back({op,
                   {D},
                   {{"axis", Gen::kAxis},
                    {"keepdims", Gen::kBool},
                    {"select_last_index", Gen::kBool}}});
  }
  // Image.
  ops.push_back(
      {"Resize",
       {D, OF, OW, OI},
       {{"mode", Gen::kStr, {"nearest", "linear", "cubic", "area"}},
        {"coordinate_transformation_mode",
         Gen::kStr,
         {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
          "tf_crop_and_resize", "half_pixel_symmetric"}},
        {"nearest_mode",
         Gen::kStr,
         {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}},
        {"cubic_coeff_a", Gen::kFloat},
        {"exclude_outside", Gen::kBool},
        {"antialias", Gen::kBool},
        {"keep_aspect_ratio_policy",
         Gen::kStr,
         {"stretch", "not_larger", "not_smaller"}}}});
  // Recurrent: X, W, R, B, sequence_lens, initial_h (initial_c, P).
  const std::vector<AttrSpec> rnn_attrs = {
      {"hidden_size", Gen::kSmall},
      {"direction", Gen::kStr, kDirections},
      {"layout", Gen::kBool},
      {"clip", Gen::kUnit},
      {"activations", Gen::kStrs}};
  std::vector<AttrSpec> lstm_attrs = rnn_attrs;
  lstm_attrs.push_back({"input_forget", Gen::kBool});
  ops.push_back({"LSTM", {D, W, W, OW, OW, OW, OW, OW}, lstm_attrs, 3});
  std::vector<AttrSpec> gru_attrs = rnn_attrs;
  gru_attrs.push_back({"linear_before_reset", Gen::kBool});
  ops.push_back({"GRU", {D, W, W, OW, OW, OW}, gru_attrs, 2});
  ops.push_back({"RNN", {D, W, W, OW, OW, OW}, rnn_attrs, 2});
  // Quantization.
  ops.push_back({"QuantizeLinear",
                 {D, F, OZ},
                 {{"axis", Gen::kAxis}, {"saturate", Gen::kBool}},
                 1,
                 false,
                 true});
  ops.push_back(
      {"DequantizeLinear", {D, F, OZ}, {{"axis", Gen::kAxis}}, 1, false, true});
  ops.push_back({"DynamicQuantizeLinear", {D}, {}, 3, false, true});
  ops.push_back({"QLinearMatMul", {D, F, Z, W, F, Z, F, Z}, {}});
  // Casts.
  ops.push_back({"Cast",
                 {X},
                 {{"to", Gen::kType}, {"saturate", Gen::kBool}},
                 1,
                 false,
                 true});
  ops.push_back({"CastLike", {X, X}, {}, 1, false, true});
  // Control flow: the branches are built by the decoder (AddIf).
  ops.push_back({"If", {B}, {}});
  // Appended after If: a seed's op index (a u16 modulo the table's size)
  // keeps naming the same op for every index below the old size.
  ops.push_back({"Einsum",
                 {D},
                 {{"equation",
                   Gen::kStr,
                   {"ij,jk->ik", "ij->ji", "ii->i", "i,i->", "...ij->...ji",
                    "bij,bjk->bik", "...,...->...", "ij,ij->ij", "i,j->ij",
                    "ij", "ij,jk", "abc->", "a...a->a", "ij->jj", "->",
                    "ij,jk->ik,", "i j->j i", "\xff->", "a,b,c->abc"}}},
                 1,
                 true});
  ops.push_back(
      {"GridSample",
       {D, W},
       {{"mode",
         Gen::kStr,
         {"bilinear", "nearest", "bicubic", "linear", "cubic", "area"}},
        {"padding_mode", Gen::kStr, {"zeros", "border", "reflection", "wrap"}},
        {"align_corners", Gen::kBool}}});
  ops.push_back({"RoiAlign",
                 {D, W, W},
                 {{"mode", Gen::kStr, {"avg", "max", "min"}},
                  {"output_height", Gen::kSmall},
                  {"output_width", Gen::kSmall},
                  {"sampling_ratio", Gen::kAxis},
                  {"spatial_scale", Gen::kFloat},
                  {"coordinate_transformation_mode",
                   Gen::kStr,
                   {"half_pixel", "output_half_pixel", "align_corners"}}}});
  ops.push_back({"NonMaxSuppression",
                 {W, W, OK_, OF, OF},
                 {{"center_point_box", Gen::kBool}}});
  // Bodies built by the decoder (AddLoop, AddScan).
  ops.push_back({"Loop", {OK_, OB, D}, {}, 2});
  ops.push_back({"Scan", {D, D}, {}, 2});
  return ops;
}

const std::vector<OpSpec>& Ops() {
  static const std::vector<OpSpec>* const ops =
      new std::vector<OpSpec>(MakeOps());
  return *ops;
}

// ---------------------------------------------------------------------------
// Values.

// Floats the kernels branch on, by byte.
constexpr float kFloats[] = {0.0f,
                             -0.0f,
                             1.0f,
                             -1.0f,
                             0.5f,
                             2.0f,
                             -2.5f,
                             3.0f,
                             100.0f,
                             1e-3f,
                             std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             1e-40f,  // denormal
                             std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::min(),
                             -7.0f,
                             0.25f,
                             6.0f,
                             -0.75f};
constexpr int64_t kInts[] = {0,
                             1,
                             2,
                             -1,
                             3,
                             4,
                             -2,
                             5,
                             7,
                             8,
                             -3,
                             127,
                             -128,
                             255,
                             65535,
                             std::numeric_limits<int32_t>::max(),
                             std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int64_t>::min()};
// Small values for shapes, pads, repeats, indices: sizes stay small.
constexpr int64_t kSmallInts[] = {1, 2, 0, -1, 3, 4, 1, 2, -2, 5, 8, 6};

float PickFloat(ByteReader* r) {
  const uint8_t b = r->U8();
  if (b >= 0xf0) {
    const uint32_t bits = r->U32();
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  return kFloats[b % (sizeof(kFloats) / sizeof(kFloats[0]))];
}

int64_t PickSmallInt(ByteReader* r) {
  const uint8_t b = r->U8();
  // Rarely the ends of int64: sizes and offsets that overflow must be
  // refused, never computed with.
  if (b == 0xff) return std::numeric_limits<int64_t>::max();
  if (b == 0xfe) return std::numeric_limits<int64_t>::min();
  return kSmallInts[b % (sizeof(kSmallInts) / sizeof(kSmallInts[0]))];
}

// Element types a fresh data tensor may have.
constexpr int32_t kDataTypes[] = {
    TP::FLOAT, TP::FLOAT,   TP::FLOAT,  TP::FLOAT,   TP::FLOAT,
    TP::FLOAT, TP::FLOAT16, TP::DOUBLE, TP::INT64,   TP::INT32,
    TP::INT8,  TP::UINT8,   TP::BOOL,   TP::BFLOAT16};
// Types for Cast's `to`, EyeLike's dtype and kAny tensors.
constexpr int32_t kAnyTypes[] = {
    TP::FLOAT,  TP::FLOAT16, TP::DOUBLE,     TP::INT64, TP::INT32,  TP::INT8,
    TP::UINT8,  TP::BOOL,    TP::BFLOAT16,   TP::INT16, TP::UINT16, TP::UINT32,
    TP::UINT64, TP::STRING,  21 /* UINT4 */, 17 /* FLOAT8E4M3FN */};

// Saturating: decoded dims may multiply past int64 (the harness's own
// overflow, UBSan, run 11); such a shape is refused downstream anyway.
int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = quantd::SaturatingMul(n, d);
  return n;
}

// Raw little-endian bytes of `n` values of `type`, cycling through a pool of
// up to 8 values from the input.
std::string MakeRaw(int32_t type, int64_t n, ByteReader* r) {
  const size_t k = 1 + r->Pick(8);
  std::vector<float> fpool(k);
  std::vector<int64_t> ipool(k);
  for (size_t i = 0; i < k; ++i) {
    if (type == TP::FLOAT || type == TP::FLOAT16 || type == TP::DOUBLE ||
        type == TP::BFLOAT16) {
      fpool[i] = PickFloat(r);
    } else if (type == TP::INT64 || type == TP::INT32) {
      ipool[i] = r->Bool() ? PickSmallInt(r)
                           : kInts[r->Pick(sizeof(kInts) / sizeof(kInts[0]))];
    } else {
      ipool[i] = r->U8();
    }
  }
  std::string raw;
  auto put = [&raw](const void* p, size_t size) {
    raw.append(static_cast<const char*>(p), size);
  };
  for (int64_t i = 0; i < n; ++i) {
    const float f = fpool[i % k];
    const int64_t v = ipool[i % k];
    switch (type) {
      case TP::FLOAT:
        put(&f, 4);
        break;
      case TP::DOUBLE: {
        const double d = f;
        put(&d, 8);
        break;
      }
      case TP::FLOAT16: {
        const uint16_t h = quantd::numerics::FloatToHalf(f);
        put(&h, 2);
        break;
      }
      case TP::BFLOAT16: {
        const uint16_t h = quantd::numerics::FloatToBFloat16(f);
        put(&h, 2);
        break;
      }
      case TP::INT64:
      case TP::UINT64:
        put(&v, 8);
        break;
      case TP::INT32:
      case TP::UINT32: {
        const int32_t x = static_cast<int32_t>(v);
        put(&x, 4);
        break;
      }
      case TP::INT16:
      case TP::UINT16: {
        const int16_t x = static_cast<int16_t>(v);
        put(&x, 2);
        break;
      }
      case TP::BOOL: {
        const uint8_t x = v & 1;
        put(&x, 1);
        break;
      }
      default: {  // 8-bit types
        const uint8_t x = static_cast<uint8_t>(v);
        put(&x, 1);
        break;
      }
    }
  }
  return raw;
}

struct Value {
  std::string name;
  int32_t type = TP::FLOAT;
  std::vector<int64_t> shape;
  bool known = false;  // shape known to the decoder
};

class GraphDecoder {
 public:
  GraphDecoder(ByteReader* r, const std::string& input)
      : r_(*r), input_(input) {}

  // Fills `model` and the feeds of its graph inputs.
  void Decode(onnx::ModelProto* model,
              absl::flat_hash_map<std::string, Tensor>* feeds);

 private:
  std::vector<int64_t> RandomShape(int max_rank) {
    const int rank = static_cast<int>(r_.Pick(max_rank + 1));
    std::vector<int64_t> shape;
    for (int i = 0; i < rank; ++i) {
      const uint8_t b = r_.U8();
      shape.push_back(b == 0xff ? 0 : 1 + b % kMaxDim);
    }
    return shape;
  }
  // A fresh tensor: an initializer, or (when `may_feed`) a graph input fed
  // at run time. Returns its value index.
  int Fresh(int32_t type, std::vector<int64_t> shape, bool may_feed,
            std::string raw_override = std::string(),
            bool use_override = false);
  int FreshData(const std::vector<int64_t>* hint, bool any_type);
  int Ints(const std::vector<int64_t>& values) {
    std::string raw(reinterpret_cast<const char*>(values.data()),
                    values.size() * sizeof(int64_t));
    return Fresh(TP::INT64, {static_cast<int64_t>(values.size())}, false, raw,
                 true);
  }
  std::vector<int64_t> WeightShape(const OpSpec& op, int slot,
                                   const Value* in0);
  void AddAttr(const AttrSpec& spec, const Value* in0, onnx::NodeProto* node);
  void AddIf(onnx::NodeProto* node);
  void AddLoop(onnx::NodeProto* node);
  void AddScan(onnx::NodeProto* node);
  void AddBodies(const std::string& op, onnx::NodeProto* node) {
    if (op == "If") AddIf(node);
    if (op == "Loop") AddLoop(node);
    if (op == "Scan") AddScan(node);
  }
  std::string NewName(const char* prefix) {
    return absl::StrCat(prefix, next_name_++);
  }

  ByteReader& r_;
  const std::string& input_;
  onnx::GraphProto* g_ = nullptr;
  absl::flat_hash_map<std::string, Tensor>* feeds_ = nullptr;
  std::vector<Value> values_;
  absl::flat_hash_map<std::string, int64_t> ints_;  // int attrs of the node
  int next_name_ = 0;
};

int GraphDecoder::Fresh(int32_t type, std::vector<int64_t> shape, bool may_feed,
                        std::string raw_override, bool use_override) {
  const int64_t n = Elements(shape);
  TP t;
  t.set_name(NewName(may_feed ? "in" : "w"));
  t.set_data_type(type);
  for (int64_t d : shape) t.add_dims(d);
  if (type == TP::STRING) {
    for (int64_t i = 0; i < n; ++i) t.add_string_data(r_.Bool() ? "a" : "");
  } else if (type == 21 /* UINT4 */) {
    t.set_raw_data(std::string((n + 1) / 2, static_cast<char>(r_.U8())));
  } else {
    t.set_raw_data(use_override ? std::move(raw_override)
                                : MakeRaw(type, n, &r_));
  }
  // A graph input only for a data tensor, and only when the input asks:
  // fed values reach the run unfolded.
  if (may_feed && r_.Bool()) {
    onnx::ValueInfoProto* vi = g_->add_input();
    vi->set_name(t.name());
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* s = tt->mutable_shape();
    const bool symbolic = r_.Pick(4) == 0;
    for (int64_t d : shape) {
      if (symbolic) {
        s->add_dim()->set_dim_param("n");
      } else {
        s->add_dim()->set_dim_value(d);
      }
    }
    absl::StatusOr<Tensor> fed = Tensor::FromProto(t);
    if (fed.ok()) (*feeds_)[t.name()] = std::move(*fed);
  } else {
    *g_->add_initializer() = t;
  }
  values_.push_back({t.name(), type, std::move(shape), true});
  return static_cast<int>(values_.size()) - 1;
}

int GraphDecoder::FreshData(const std::vector<int64_t>* hint, bool any_type) {
  const int32_t type =
      any_type
          ? kAnyTypes[r_.Pick(sizeof(kAnyTypes) / sizeof(kAnyTypes[0]))]
          : kDataTypes[r_.Pick(sizeof(kDataTypes) / sizeof(kDataTypes[0]))];
  std::vector<int64_t> shape =
      hint != nullptr && r_.Pick(4) != 0 ? *hint : RandomShape(4);
  return Fresh(type, std::move(shape), true);
}

// The shape a weight of `op` at input `slot` needs, from input 0's shape and
// the node's attributes; random when input 0's shape is not known.
std::vector<int64_t> GraphDecoder::WeightShape(const OpSpec& op, int slot,
                                               const Value* in0) {
  // NonMaxSuppression's boxes [batch, boxes, 4] come first.
  if (std::string(op.op) == "NonMaxSuppression" && slot == 0 &&
      r_.Pick(8) != 0) {
    return {static_cast<int64_t>(1 + r_.Pick(2)),
            static_cast<int64_t>(1 + r_.Pick(6)), 4};
  }
  if (in0 == nullptr || !in0->known || r_.Pick(8) == 0) return RandomShape(4);
  const std::vector<int64_t>& s = in0->shape;
  const int rank = static_cast<int>(s.size());
  const std::string name = op.op;
  auto at = [&](int i) -> int64_t { return i < rank ? s[i] : 1; };
  auto attr = [&](const char* a, int64_t d) {
    auto it = ints_.find(a);
    return it == ints_.end() ? d : it->second;
  };
  // A wild group (up to INT64_MAX) shapes the weight as a small one would:
  // the kernel must refuse it, and m * group must not overflow here.
  const int64_t group = std::clamp<int64_t>(attr("group", 1), 1, kMaxDim);
  if (name == "Conv" || name == "ConvInteger" || name == "ConvTranspose") {
    const int64_t m = 1 + r_.Pick(4);
    if (slot == 2) return {name == "ConvTranspose" ? m * group : m};
    std::vector<int64_t> w =
        name == "ConvTranspose"
            ? std::vector<int64_t>{at(1), m}
            : std::vector<int64_t>{m * group,
                                   std::max<int64_t>(1, at(1) / group)};
    for (int i = 2; i < rank; ++i) w.push_back(1 + r_.Pick(3));
    return w;
  }
  if (name == "MatMul" || name == "MatMulInteger" || name == "QLinearMatMul") {
    return {rank > 0 ? s[rank - 1] : 1, static_cast<int64_t>(1 + r_.Pick(4))};
  }
  if (name == "Gemm") {
    const int64_t k = attr("transA", 0) ? at(0) : at(1);
    const int64_t n = 1 + r_.Pick(4);
    if (slot == 2)
      return r_.Bool() ? std::vector<int64_t>{n} : std::vector<int64_t>{};
    return attr("transB", 0) ? std::vector<int64_t>{n, k}
                             : std::vector<int64_t>{k, n};
  }
  if (name == "BatchNormalization" || name == "InstanceNormalization" ||
      name == "GroupNormalization" || name == "PRelu") {
    if (name == "PRelu" && r_.Bool()) return s;
    return {at(1)};
  }
  if (name == "LayerNormalization") {
    int64_t axis = attr("axis", -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) return RandomShape(2);
    return std::vector<int64_t>(s.begin() + axis, s.end());
  }
  if (name == "LSTM" || name == "GRU" || name == "RNN") {
    const int64_t gates = name == "LSTM" ? 4 : name == "GRU" ? 3 : 1;
    // Clamped for the shapes chosen here only (a wild hidden_size overflowed
    // gates * h); the node keeps its attribute.
    const int64_t h = std::clamp<int64_t>(attr("hidden_size", 1), 1, 1 << 16);
    const int64_t dirs = attr("bidirectional", 0) ? 2 : 1;
    const bool batch_first = attr("layout", 0) != 0;
    const int64_t batch = batch_first ? at(0) : at(1);
    switch (slot) {
      case 1:
        return {dirs, gates * h, at(2)};
      case 2:
        return {dirs, gates * h, h};
      case 3:
        return {dirs, 2 * gates * h};
      case 4:
        return {batch};
      case 5:
      case 6:
        return batch_first ? std::vector<int64_t>{batch, dirs, h}
                           : std::vector<int64_t>{dirs, batch, h};
      default:
        return {dirs, 3 * h};
    }
  }
  if (name == "Resize") return {2 * static_cast<int64_t>(rank)};  // roi
  if (name == "GridSample") {  // grid [N, out spatial..., spatial rank]
    std::vector<int64_t> grid = {at(0)};
    for (int i = 2; i < rank; ++i) grid.push_back(1 + r_.Pick(3));
    grid.push_back(std::max(0, rank - 2));
    return grid;
  }
  if (name == "RoiAlign") {  // rois [R, 4], batch_indices [R]
    const int64_t rois = 1 + r_.Pick(3);
    return slot == 1 ? std::vector<int64_t>{rois, 4}
                     : std::vector<int64_t>{rois};
  }
  if (name == "NonMaxSuppression") {  // scores [batch, classes, boxes]
    return {at(0), static_cast<int64_t>(1 + r_.Pick(3)), at(1)};
  }
  if (name == "OneHot") return {2};
  return RandomShape(2);
}

void GraphDecoder::AddAttr(const AttrSpec& spec, const Value* in0,
                           onnx::NodeProto* node) {
  const uint8_t mode = r_.U8();
  if (mode % 4 == 0) return;  // absent: the default
  const bool wild = mode >= 0xe0;
  const int rank =
      in0 != nullptr && in0->known ? static_cast<int>(in0->shape.size()) : 2;
  const int spatial = std::max(0, rank - 2);
  AP* a = node->add_attribute();
  a->set_name(spec.name);
  auto set_int = [&](int64_t v) {
    a->set_type(AP::INT);
    a->set_i(v);
    ints_[spec.name] = v;
  };
  auto set_ints = [&](size_t n, int64_t lo, int64_t span) {
    a->set_type(AP::INTS);
    for (size_t i = 0; i < n; ++i) {
      a->add_ints(wild ? PickSmallInt(&r_)
                       : lo + static_cast<int64_t>(r_.Pick(span)));
    }
  };
  if (wild && mode >= 0xfc) {
    // The wrong attribute type: a FLOAT where anything else is expected
    // (or an INT for a FLOAT).
    if (spec.gen == Gen::kFloat || spec.gen == Gen::kUnit) {
      a->set_type(AP::INT);
      a->set_i(1);
    } else {
      a->set_type(AP::FLOAT);
      a->set_f(1.5f);
    }
    return;
  }
  switch (spec.gen) {
    case Gen::kBool:
      set_int(wild ? PickSmallInt(&r_) : r_.U8() & 1);
      break;
    case Gen::kAxis:
      set_int(wild ? PickSmallInt(&r_)
                   : static_cast<int64_t>(r_.Pick(2 * std::max(rank, 1))) -
                         rank);
      break;
    case Gen::kSmall:
      set_int(wild ? PickSmallInt(&r_) : 1 + static_cast<int64_t>(r_.Pick(4)));
      break;
    case Gen::kSpatial:
      set_ints(wild ? r_.Pick(5) : spatial, 1, 3);
      break;
    case Gen::kPads:
      set_ints(wild ? r_.Pick(7) : 2 * spatial, 0, 3);
      break;
    case Gen::kPerm: {
      a->set_type(AP::INTS);
      std::vector<int64_t> perm(rank);
      for (int i = 0; i < rank; ++i) perm[i] = i;
      for (int i = rank - 1; i > 0; --i)
        std::swap(perm[i], perm[r_.Pick(i + 1)]);
      if (wild && rank > 0) perm[r_.Pick(rank)] = PickSmallInt(&r_);
      for (int64_t p : perm) a->add_ints(p);
      break;
    }
    case Gen::kAxesList: {
      a->set_type(AP::INTS);
      for (int i = 0; i < rank; ++i) {
        if (r_.Bool())
          a->add_ints(wild ? PickSmallInt(&r_) : i - (r_.Bool() ? rank : 0));
      }
      break;
    }
    case Gen::kFloat:
      a->set_type(AP::FLOAT);
      a->set_f(PickFloat(&r_));
      break;
    case Gen::kUnit:
      a->set_type(AP::FLOAT);
      a->set_f(wild ? PickFloat(&r_) : (1 + r_.Pick(100)) / 100.0f);
      break;
    case Gen::kStr:
      a->set_type(AP::STRING);
      a->set_s(wild ? "?" : spec.choices[r_.Pick(spec.choices.size())]);
      if (std::string(spec.name) == "direction") {
        ints_["bidirectional"] = a->s() == "bidirectional";
      }
      break;
    case Gen::kType:
      set_int(
          wild ? PickSmallInt(&r_)
               : kAnyTypes[r_.Pick(sizeof(kAnyTypes) / sizeof(kAnyTypes[0]))]);
      break;
    case Gen::kStrs: {
      a->set_type(AP::STRINGS);
      const size_t n = r_.Pick(7);
      for (size_t i = 0; i < n; ++i) {
        a->add_strings(kActs[r_.Pick(kActs.size())]);
      }
      break;
    }
    case Gen::kTensor: {
      a->set_type(AP::TENSOR);
      TP* t = a->mutable_t();
      const bool f = r_.Bool();
      t->set_data_type(f ? TP::FLOAT : TP::INT64);
      t->add_dims(1);
      t->set_raw_data(MakeRaw(t->data_type(), 1, &r_));
      break;
    }
  }
}

// If with two one-node branches over outer values (or constants of their
// own), each with one output.
void GraphDecoder::AddIf(onnx::NodeProto* node) {
  const int outer = static_cast<int>(r_.Pick(values_.size()));
  for (const char* branch : {"then_branch", "else_branch"}) {
    AP* a = node->add_attribute();
    a->set_name(branch);
    a->set_type(AP::GRAPH);
    onnx::GraphProto* body = a->mutable_g();
    body->set_name(NewName(branch));
    onnx::NodeProto* n = body->add_node();
    static const char* const kBodyOps[] = {"Identity", "Neg", "Relu", "Add",
                                           "Sigmoid"};
    const char* op = kBodyOps[r_.Pick(5)];
    n->set_op_type(op);
    const std::string& in =
        values_[r_.Bool() ? outer : r_.Pick(values_.size())].name;
    n->add_input(in);
    if (std::string(op) == "Add") n->add_input(in);
    const std::string out = NewName("b");
    n->add_output(out);
    onnx::ValueInfoProto* vi = body->add_output();
    vi->set_name(out);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(
        r_.Pick(8) == 0 ? TP::INT64 : values_[outer].type);
  }
}

namespace {

onnx::ValueInfoProto* AddTyped(
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
    const std::string& name, int32_t type, bool scalar) {
  onnx::ValueInfoProto* vi = list->Add();
  vi->set_name(name);
  auto* t = vi->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  if (scalar) t->mutable_shape();
  return vi;
}

onnx::NodeProto* AddBodyNode(onnx::GraphProto* body, const char* op,
                             std::vector<std::string> inputs,
                             const std::string& output) {
  onnx::NodeProto* n = body->add_node();
  n->set_op_type(op);
  for (std::string& in : inputs) n->add_input(std::move(in));
  n->add_output(output);
  return n;
}

// Body ops on float values: unary, or binary over (value, value).
constexpr const char* kLoopBodyOps[] = {"Identity", "Neg",  "Relu", "Add",
                                        "Sigmoid",  "Mul",  "Max",  "Abs",
                                        "Sqrt",     "Tanh", "Sub",  "Exp"};

bool IsBinaryBodyOp(const std::string& op) {
  return op == "Add" || op == "Mul" || op == "Max" || op == "Sub";
}

}  // namespace

// Loop (M, cond, v) with a body: v' = op(v [, v or an outer value]), the
// condition passed on (or negated when there is no trip count, so that the
// loop ends), sometimes a scan output of v' and sometimes wrong types.
void GraphDecoder::AddLoop(onnx::NodeProto* node) {
  AP* a = node->add_attribute();
  a->set_name("body");
  a->set_type(AP::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  body->set_name(NewName("loop"));
  const std::string iter = NewName("i"), cond_in = NewName("c"),
                    v_in = NewName("v"), cond_out = NewName("co"),
                    v_out = NewName("vo"), scan = NewName("so");
  const bool wild = r_.Pick(16) == 0;
  AddTyped(body->mutable_input(), iter, wild ? TP::FLOAT : TP::INT64, true);
  AddTyped(body->mutable_input(), cond_in, TP::BOOL, true);
  AddTyped(body->mutable_input(), v_in, TP::FLOAT, false);
  const std::string op = kLoopBodyOps[r_.Pick(std::size(kLoopBodyOps))];
  std::vector<std::string> args = {v_in};
  if (IsBinaryBodyOp(op)) {
    args.push_back(r_.Bool() || values_.empty()
                       ? v_in
                       : values_[r_.Pick(values_.size())].name);
  }
  AddBodyNode(body, op.c_str(), args, v_out);
  // The trip count is the first input (optional): without it only the
  // condition ends the loop.
  const bool has_trip = node->input_size() > 0 && !node->input(0).empty();
  AddBodyNode(body, has_trip && r_.Bool() ? "Identity" : "Not", {cond_in},
              cond_out);
  AddTyped(body->mutable_output(), cond_out, TP::BOOL, true);
  AddTyped(body->mutable_output(), v_out, TP::FLOAT, false);
  if (r_.Bool()) {
    AddBodyNode(body, r_.Bool() ? "Identity" : "Neg", {v_out}, scan);
    AddTyped(body->mutable_output(), scan, TP::FLOAT, false);
  }
}

// Scan (state, x) over axis 0 of x (or a fuzzed axis): state' = op(state,
// x_t), and a scan output of state' or of x_t.
void GraphDecoder::AddScan(onnx::NodeProto* node) {
  AP* m = node->add_attribute();
  m->set_name("num_scan_inputs");
  m->set_type(AP::INT);
  m->set_i(r_.Pick(16) == 0 ? PickSmallInt(&r_) : 1);
  if (r_.Pick(4) == 0) {
    for (const char* name : {"scan_input_axes", "scan_output_axes"}) {
      AP* axes = node->add_attribute();
      axes->set_name(name);
      axes->set_type(AP::INTS);
      axes->add_ints(r_.Pick(4) == 0 ? PickSmallInt(&r_)
                                     : static_cast<int64_t>(r_.Pick(2)));
    }
  }
  if (r_.Pick(8) == 0) {
    AP* dirs = node->add_attribute();
    dirs->set_name("scan_input_directions");
    dirs->set_type(AP::INTS);
    dirs->add_ints(r_.Pick(2));
  }
  AP* a = node->add_attribute();
  a->set_name("body");
  a->set_type(AP::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  body->set_name(NewName("scan"));
  const std::string s_in = NewName("s"), x_t = NewName("x"),
                    s_out = NewName("so"), y = NewName("y");
  AddTyped(body->mutable_input(), s_in, TP::FLOAT, false);
  AddTyped(body->mutable_input(), x_t, TP::FLOAT, false);
  const std::string op = kLoopBodyOps[r_.Pick(std::size(kLoopBodyOps))];
  std::vector<std::string> args = {s_in};
  if (IsBinaryBodyOp(op)) args.push_back(x_t);
  AddBodyNode(body, op.c_str(), args, s_out);
  AddBodyNode(body, r_.Bool() ? "Identity" : "Neg", {r_.Bool() ? s_out : x_t},
              y);
  AddTyped(body->mutable_output(), s_out, TP::FLOAT, false);
  AddTyped(body->mutable_output(), y, TP::FLOAT, false);
}

void GraphDecoder::Decode(onnx::ModelProto* model,
                          absl::flat_hash_map<std::string, Tensor>* feeds) {
  static constexpr int64_t kOpsets[] = {13, 17, 18, 21, 11, 19, 7, 15};
  const int64_t opset = kOpsets[r_.Pick(8)];
  const uint8_t flags = r_.U8();
  const int nodes = 1 + static_cast<int>(r_.Pick(kMaxNodes));
  model->set_ir_version(opset >= 21 ? 10 : opset >= 18 ? 8 : 7);
  model->set_producer_name("executor_fuzzer");
  onnx::OperatorSetIdProto* import = model->add_opset_import();
  import->set_domain("");
  import->set_version(opset);
  g_ = model->mutable_graph();
  g_->set_name("g");
  feeds_ = feeds;

  const std::vector<OpSpec>& ops = Ops();
  std::vector<std::string> last_outputs;
  for (int k = 0; k < nodes; ++k) {
    const OpSpec& spec = ops[r_.U16() % ops.size()];
    onnx::NodeProto* node = g_->add_node();
    node->set_op_type(spec.op);
    node->set_name(NewName("n"));
    ints_.clear();
    // Input 0 first (attributes are drawn against its shape), then the
    // attributes, then the other inputs (weights shaped by the attributes).
    Value first;
    const Value* in0 = nullptr;
    const size_t extra =
        spec.variadic ? r_.Pick(3) : 0;  // repeats of the last input
    const size_t n_in = spec.inputs.size() + extra;
    std::vector<std::string> inputs;
    for (size_t i = 0; i < n_in; ++i) {
      if (i == 1) {
        for (const AttrSpec& a : spec.attrs) AddAttr(a, in0, node);
        AddBodies(spec.op, node);
      }
      const InSpec& in = spec.inputs[std::min(i, spec.inputs.size() - 1)];
      const uint8_t src = r_.U8();
      if (in.optional && src % 3 == 0) {
        inputs.push_back("");
        continue;
      }
      const std::vector<int64_t>* hint =
          in0 != nullptr && in0->known ? &in0->shape : nullptr;
      const int rank = hint ? static_cast<int>(hint->size()) : 2;
      int v = -1;
      switch (in.kind) {
        case In::kData:
        case In::kAny:
          if (!values_.empty() && src % 4 != 0) {
            v = static_cast<int>((src / 4) % values_.size());
          } else {
            v = FreshData(hint, in.kind == In::kAny);
          }
          break;
        case In::kWeight: {
          std::vector<int64_t> shape =
              WeightShape(spec, static_cast<int>(i), in0);
          if (Elements(shape) > 4096) shape = {1};
          const std::string name = spec.op;
          // sequence_lens of the recurrent ops is int32.
          const bool lens =
              i == 4 && (name == "LSTM" || name == "GRU" || name == "RNN");
          if (i == 2 && name == "RoiAlign") {
            std::vector<int64_t> idx(Elements(shape));
            for (int64_t& x : idx) x = r_.Pick(8) == 0 ? PickSmallInt(&r_) : 0;
            v = Fresh(TP::INT64, std::move(shape), false,
                      std::string(reinterpret_cast<const char*>(idx.data()),
                                  idx.size() * sizeof(int64_t)),
                      true);
            break;
          }
          const bool integer_w = name == "MatMulInteger" ||
                                 name == "ConvInteger" ||
                                 name == "QLinearMatMul";
          v = Fresh(lens        ? TP::INT32
                    : integer_w ? TP::UINT8
                                : TP::FLOAT,
                    std::move(shape), false);
          break;
        }
        case In::kInts: {
          const size_t len = r_.Bool() ? static_cast<size_t>(rank) : r_.Pick(5);
          std::vector<int64_t> values;
          for (size_t j = 0; j < len; ++j) values.push_back(PickSmallInt(&r_));
          v = Ints(values);
          break;
        }
        case In::kAxes: {
          std::vector<int64_t> axes;
          for (int j = 0; j < rank; ++j) {
            if (r_.Bool())
              axes.push_back(r_.Pick(8) == 0 ? PickSmallInt(&r_) : j);
          }
          v = Ints(axes);
          break;
        }
        case In::kScalarI: {
          const int64_t x = PickSmallInt(&r_);
          v = Fresh(
              TP::INT64,
              r_.Bool() ? std::vector<int64_t>{} : std::vector<int64_t>{1},
              false, std::string(reinterpret_cast<const char*>(&x), sizeof(x)),
              true);
          break;
        }
        case In::kScalarF: {
          const float x = PickFloat(&r_);
          v = Fresh(TP::FLOAT, {}, r_.Pick(4) == 0,
                    std::string(reinterpret_cast<const char*>(&x), sizeof(x)),
                    true);
          break;
        }
        case In::kBool:
          v = Fresh(TP::BOOL,
                    hint && r_.Bool() ? *hint : std::vector<int64_t>{}, true);
          break;
        case In::kZeroPt:
          v = Fresh(r_.Bool() ? TP::UINT8 : TP::INT8, {}, false);
          break;
        case In::kIndices: {
          std::vector<int64_t> shape =
              hint && r_.Bool() ? *hint : RandomShape(rank > 0 ? rank : 1);
          const int64_t n = Elements(shape);
          std::vector<int64_t> idx(n);
          for (int64_t j = 0; j < n; ++j) {
            idx[j] = j < 16 ? PickSmallInt(&r_) : idx[j % 16];
          }
          v = Fresh(TP::INT64, std::move(shape), false,
                    std::string(reinterpret_cast<const char*>(idx.data()),
                                idx.size() * sizeof(int64_t)),
                    true);
          break;
        }
      }
      inputs.push_back(values_[v].name);
      if (i == 0) {
        // values_ grows below: the hints read a copy.
        first = values_[v];
        in0 = &first;
      }
    }
    if (n_in == 1) {
      for (const AttrSpec& a : spec.attrs) AddAttr(a, in0, node);
      AddBodies(spec.op, node);
    }
    // Scan's state mostly gets the shape of one slice of the scanned input,
    // so that the body's Add runs.
    if (std::string(spec.op) == "Scan" && inputs.size() == 2 &&
        r_.Pick(4) != 0) {
      for (const Value& x : values_) {
        if (x.name != inputs[1] || !x.known || x.shape.empty()) continue;
        inputs[0] = values_[Fresh(TP::FLOAT,
                                  std::vector<int64_t>(x.shape.begin() + 1,
                                                       x.shape.end()),
                                  true)]
                        .name;
        break;
      }
    }
    for (const std::string& in : inputs) node->add_input(in);
    // Optional trailing inputs left out stay as "" only before a present
    // one, as ONNX writes them.
    while (node->input_size() > 0 &&
           node->input(node->input_size() - 1).empty()) {
      node->mutable_input()->RemoveLast();
    }
    last_outputs.clear();
    for (int o = 0; o < spec.outputs; ++o) {
      // Outputs past the first may be left out.
      if (o > 0 && r_.Pick(3) == 0) {
        node->add_output("");
        continue;
      }
      const std::string out = NewName("t");
      node->add_output(out);
      last_outputs.push_back(out);
      Value v{out, in0 ? in0->type : TP::FLOAT, {}, false};
      if (o == 0 && spec.same_shape && in0 != nullptr && in0->known) {
        v.shape = in0->shape;
        v.known = true;
      }
      values_.push_back(std::move(v));
      if (o == 0 && k + 1 < nodes && (flags & 1) && r_.Pick(4) == 0) {
        g_->add_output()->set_name(out);
      }
    }
    while (node->output_size() > 0 &&
           node->output(node->output_size() - 1).empty()) {
      node->mutable_output()->RemoveLast();
    }
  }
  // The last node's outputs are the graph's.
  for (const std::string& out : last_outputs) {
    onnx::ValueInfoProto* vi = g_->add_output();
    vi->set_name(out);
  }
  // Graph outputs need a type and a shape for ONNX's checker: float of no
  // dims (the executor takes the types and shapes it computes, and does not
  // check outputs against their declaration). Not ONNX shape inference:
  // that runs in preparation when the model needs it, as for a request.
  for (onnx::ValueInfoProto& vi : *g_->mutable_output()) {
    vi.mutable_type()->mutable_tensor_type()->set_elem_type(TP::FLOAT);
    vi.mutable_type()->mutable_tensor_type()->mutable_shape();
  }
  // flags bit 1: one feed of the wrong shape (Run must refuse it, or take
  // it when the declared dims are symbolic); bit 2: one feed missing.
  if ((flags & 2) && !feeds->empty()) {
    Tensor& t = feeds->begin()->second;
    t = Tensor(t.dtype(), {static_cast<int64_t>(1 + r_.Pick(3))});
    // Zeros: a Tensor's buffer starts uninitialised, and a BOOL byte read
    // from it is undefined behaviour in the harness, not in quantd.
    if (t.bytes() > 0) std::memset(t.raw(), 0, t.bytes());
  }
  if ((flags & 4) && !feeds->empty()) feeds->erase(feeds->begin());
}

// ---------------------------------------------------------------------------
// Running.

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.size() == b.size() &&
         (a.bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

// What a Calibrate job does to the model before CalibrationSession builds
// its executor (calibrate_job.cc).
absl::StatusOr<onnx::ModelProto> Prepare(const onnx::ModelProto& built,
                                         const std::string& input) {
  const std::string bytes = built.SerializeAsString();
  absl::StatusOr<onnx::ModelProto> model = quantd::graph::ParseModel(bytes);
  CheckRefusal(model.status(), "ParseModel", input);
  if (!model.ok()) return model.status();
  quantd::JobLimits limits;
  limits.max_tensor_elements = 1 << 16;
  limits.max_graph_nodes = 64;
  absl::Status s = quantd::CheckJobLimits(*model, limits);
  CheckRefusal(s, "CheckJobLimits", input);
  if (!s.ok()) return s;
  s = quantd::graph::SortTopologically(model->mutable_graph(), nullptr);
  CheckRefusal(s, "SortTopologically", input);
  if (!s.ok()) return s;
  s = quantd::graph::ValidateModel(*model, "input model", nullptr);
  CheckRefusal(s, "ValidateModel", input);
  if (!s.ok()) return s;
  s = quantd::graph::InlineLocalFunctions(&*model).status();
  CheckRefusal(s, "InlineLocalFunctions", input);
  if (!s.ok()) return s;
  s = quantd::graph::PrepareGraph(&*model, quantd::passes::FullPrepareOptions())
          .status();
  CheckRefusal(s, "PrepareGraph", input);
  if (!s.ok()) return s;
  return model;
}

void CheckOutputs(const Executor& ex, const std::vector<Tensor>& outputs,
                  const std::string& input) {
  if (outputs.size() != ex.output_names().size()) {
    Fail(absl::StrCat("Run returned ", outputs.size(), " tensors for ",
                      ex.output_names().size(), " outputs"),
         input);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    const int64_t n = quantd::executor::NumElements(t.shape());
    if (t.size() != n) {
      Fail(absl::StrCat("output '", ex.output_names()[i], "' of shape ",
                        quantd::executor::ShapeString(t.shape()), " holds ",
                        t.size(), " elements"),
           input);
    }
    if (t.bytes() > 0 && t.raw() == nullptr) {
      Fail(absl::StrCat("output '", ex.output_names()[i], "' has no buffer"),
           input);
    }
  }
}

// Runs `ex` as a job would, cancelled after kRunDeadline as a call's
// deadline would cancel it: a Loop may legitimately run for 2^63 trips.
constexpr absl::Duration kRunDeadline = absl::Seconds(2);

absl::StatusOr<std::vector<Tensor>> RunWithDeadline(
    const Executor& ex, const absl::flat_hash_map<std::string, Tensor>& feeds,
    quantd::ThreadPool* pool) {
  // Stops the watchdog however Run ends (std::bad_alloc included).
  struct Watchdog {
    quantd::CancellationToken token;
    absl::Notification done;
    std::thread thread{[this] {
      if (!done.WaitForNotificationWithTimeout(kRunDeadline)) token.Cancel();
    }};
    ~Watchdog() {
      done.Notify();
      thread.join();
    }
  } watchdog;
  Executor::RunOptions options;
  options.pool = pool;
  options.cancel = &watchdog.token;
  // As calibration bounds every tensor (by --max_tensor_elements; smaller
  // here, within -rss_limit_mb): a huge allocation past it is a tensor some
  // kernel makes outside the bound.
  options.max_tensor_elements = int64_t{1} << 24;
  return ex.Run(feeds, options);
}

void Fuzz(const std::string& input) {
  if (Trace()) std::fprintf(stderr, "input: %s\n", Hex(input).c_str());
  ByteReader r(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  onnx::ModelProto built;
  absl::flat_hash_map<std::string, Tensor> feeds;
  GraphDecoder(&r, input).Decode(&built, &feeds);
  // EXECUTOR_FUZZER_DUMP=FILE: the decoded model, for reading a finding in
  // ONNX's tools.
  if (const char* dump = std::getenv("EXECUTOR_FUZZER_DUMP")) {
    if (FILE* f = std::fopen(dump, "wb")) {
      const std::string bytes = built.SerializeAsString();
      std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
  }

  absl::StatusOr<onnx::ModelProto> model = Prepare(built, input);
  if (!model.ok()) return;
  absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(*model);
  CheckRefusal(ex.status(), "Executor::Create", input);
  if (!ex.ok()) return;
  // Preparation may drop graph inputs (folded away): feed what is left.
  // A half-precision model computes in float32 once prepared
  // (WidenHalfCompute): its half inputs are then fed widened.
  absl::flat_hash_map<std::string, Tensor> run_feeds;
  for (size_t i = 0; i < (*ex)->input_names().size(); ++i) {
    const std::string& name = (*ex)->input_names()[i];
    auto it = feeds.find(name);
    if (it == feeds.end()) continue;
    const bool widen = quantd::executor::IsHalfFloat(it->second.dtype()) &&
                       (*ex)->input_types()[i] == TP::FLOAT;
    run_feeds[name] = widen ? it->second.WidenedToFloat() : it->second;
  }

  static quantd::ThreadPool* const pool1 = new quantd::ThreadPool(1);
  static quantd::ThreadPool* const pool2 = new quantd::ThreadPool(2);
  absl::StatusOr<std::vector<Tensor>> a =
      RunWithDeadline(**ex, run_feeds, pool1);
  CheckRefusal(a.status(), "Run", input);
  absl::StatusOr<std::vector<Tensor>> b =
      RunWithDeadline(**ex, run_feeds, pool2);
  CheckRefusal(b.status(), "Run", input);
  // A run stopped by its deadline (a Loop with a huge trip count) proves
  // only that cancellation reaches it; the other run may have finished.
  if (absl::IsCancelled(a.status()) || absl::IsCancelled(b.status())) return;
  if (a.status() != b.status()) {
    Fail(absl::StrCat("1 thread: ", a.status().ToString(),
                      "; 2 threads: ", b.status().ToString()),
         input);
  }
  if (!a.ok()) return;
  if (Trace()) {
    std::fprintf(stderr, "ran: %d nodes, %zu outputs\n",
                 built.graph().node_size(), a->size());
  }
  CheckOutputs(**ex, *a, input);
  CheckOutputs(**ex, *b, input);
  for (size_t i = 0; i < a->size(); ++i) {
    if (!SameTensor((*a)[i], (*b)[i])) {
      Fail(absl::StrCat("output '", (*ex)->output_names()[i],
                        "' differs between 1 and 2 threads"),
           input);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // ONNX's checker and the version converter log through protobuf now and
  // then; a violated check aborts instead.
  quantd::fuzz::SilenceProtobufLogs();
  if (size > kMaxInputBytes) return 0;
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    Fuzz(input);
  } catch (const std::bad_alloc&) {
    // The jobs turn this into RESOURCE_EXHAUSTED (calibrate_job.cc).
  }
  return 0;
}
