// The contract between the executor and its op kernels: a kernel is built
// once per node at Create (parsing and checking every attribute), then
// computes many times, concurrently, from const methods.
#ifndef QUANTD_CORE_EXECUTOR_KERNEL_H_
#define QUANTD_CORE_EXECUTOR_KERNEL_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/executor/tensor.h"
#include "onnx/onnx_pb.h"

namespace quantd {
class ThreadPool;
}

namespace quantd::executor {

struct ExecutorRunOptions;

// A value of the enclosing graphs that a node's subgraph bodies (If, Loop,
// Scan) read by name: the free names of the bodies, recursively through
// nested bodies, in order of first use. Entries without a constant are
// appended to the node's inputs at run time, in this order, after the
// node's own inputs (so the executor keeps them alive until the node runs).
struct ScopeValue {
  std::string name;
  int32_t type = 0;  // UNDEFINED when unknown.
  int rank = -1;     // -1 when unknown.
  // Set when fixed at Create (initializers, Constants); valid during Create
  // only (bodies copy it).
  const Tensor* constant = nullptr;
};

// What a kernel sees of its node at Create. Attribute getters remember what
// they read: CheckAllRead() then refuses any attribute the kernel ignored, so
// an unimplemented feature can never be silently dropped.
class NodeInfo {
 public:
  NodeInfo(const onnx::NodeProto& node, int64_t opset,
           std::vector<int32_t> input_types,
           std::vector<const Tensor*> constant_inputs);

  const onnx::NodeProto& node() const { return node_; }
  // How messages name the node: its name, or "#index" when it has none.
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& op() const { return node_.op_type(); }
  int64_t opset() const { return opset_; }
  int num_inputs() const { return node_.input_size(); }
  int num_outputs() const { return node_.output_size(); }
  // False for an omitted optional input (empty name) or one past the end.
  bool has_input(int i) const {
    return i < node_.input_size() && !node_.input(i).empty();
  }
  bool has_output(int i) const {
    return i < node_.output_size() && !node_.output(i).empty();
  }
  // UNDEFINED when not known before running.
  int32_t input_type(int i) const {
    return i < static_cast<int>(input_types_.size()) ? input_types_[i] : 0;
  }
  // The value of an input that is an initializer (or Constant output), else
  // nullptr: lets kernels check or pre-pack weights at Create.
  const Tensor* constant_input(int i) const {
    return i < static_cast<int>(constant_inputs_.size()) ? constant_inputs_[i]
                                                         : nullptr;
  }
  // Input i's rank when known before running (graph inputs with a declared
  // shape, initializers, Constants), else -1: lets kernels refuse what they
  // do not implement (e.g. 3-D convolution) at Create.
  int input_rank(int i) const {
    return i < static_cast<int>(input_ranks_.size()) ? input_ranks_[i] : -1;
  }
  void set_input_ranks(std::vector<int> ranks) {
    input_ranks_ = std::move(ranks);
  }
  // Defaults to the type of input 0.
  void set_output_type(int i, int32_t type);
  const std::vector<int32_t>& output_types() const { return output_types_; }
  // Empty unless the node has subgraph attributes; see ScopeValue.
  const std::vector<ScopeValue>& scope() const { return scope_; }
  void set_scope(std::vector<ScopeValue> scope) { scope_ = std::move(scope); }

  bool HasAttr(const std::string& name) const;
  int64_t Int(const std::string& name, int64_t dflt);
  float Float(const std::string& name, float dflt);
  std::string String(const std::string& name, const std::string& dflt);
  std::vector<int64_t> Ints(const std::string& name,
                            std::vector<int64_t> dflt = {});
  std::vector<float> Floats(const std::string& name);
  std::vector<std::string> Strings(const std::string& name);
  // nullptr when absent.
  const onnx::TensorProto* TensorAttr(const std::string& name);
  // A subgraph attribute (If branches, Loop / Scan body); nullptr when absent.
  const onnx::GraphProto* GraphAttr(const std::string& name);

  // UNIMPLEMENTED naming the attribute, its value, the node and the op.
  absl::Status UnsupportedAttr(const std::string& attr,
                               const std::string& value) const;
  // INVALID_ARGUMENT naming the node and the op.
  absl::Status Invalid(const std::string& message) const;
  // When input i's type is known and not one of `types`: INVALID_ARGUMENT
  // if ONNX's schema for the op does not allow it either (the model is
  // invalid), else UNIMPLEMENTED.
  absl::Status RequireType(int i, std::initializer_list<int32_t> types) const;
  // The first attribute type error of a getter, else any attribute that was
  // never read (UNIMPLEMENTED), else OK.
  absl::Status Finish() const;

 private:
  const onnx::AttributeProto* Find(const std::string& name,
                                   onnx::AttributeProto::AttributeType type);

  const onnx::NodeProto& node_;
  std::string label_;
  int64_t opset_;
  std::vector<int32_t> input_types_;
  std::vector<const Tensor*> constant_inputs_;
  std::vector<int> input_ranks_;
  std::vector<int32_t> output_types_;
  std::vector<ScopeValue> scope_;
  absl::flat_hash_set<std::string> read_;
  absl::Status status_;
};

struct KernelContext {
  // One per node input; an omitted optional input is an empty Tensor.
  absl::Span<const Tensor* const> inputs;
  // Sized to the node's outputs; the kernel fills them.
  std::vector<Tensor>* outputs;
  // May be null: run single-threaded.
  ThreadPool* pool = nullptr;
  // The run's options (cancellation, on_tensor, pool), for kernels that run
  // subgraph bodies; null outside a run (e.g. Constant folding at Create).
  const ExecutorRunOptions* run_options = nullptr;

  const Tensor& in(int i) const { return *inputs[i]; }
  bool has(int i) const {
    return i < static_cast<int>(inputs.size()) && !inputs[i]->empty();
  }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Errors are INVALID_ARGUMENT (shapes/types that do not fit) or
  // UNIMPLEMENTED (a run-time value the kernel does not handle); the
  // executor adds the node name.
  virtual absl::Status Compute(const KernelContext& ctx) const = 0;
};

using KernelFactory = absl::StatusOr<std::unique_ptr<Kernel>> (*)(NodeInfo&);

class OpRegistry {
 public:
  void Register(const std::string& op_type, KernelFactory factory) {
    factories_[op_type] = factory;
  }
  // nullptr when the op is not supported.
  KernelFactory Find(const std::string& op_type) const {
    auto it = factories_.find(op_type);
    return it == factories_.end() ? nullptr : it->second;
  }
  std::vector<std::string> Ops() const;

 private:
  absl::flat_hash_map<std::string, KernelFactory> factories_;
};

// Each ops_*.cc file registers its kernels through one of these; the
// executor calls them all from one place (static self-registration would be
// dropped by the linker from the static library).
void RegisterElementwiseOps(OpRegistry* r);
void RegisterNnOps(OpRegistry* r);
void RegisterReduceOps(OpRegistry* r);
void RegisterShapeOps(OpRegistry* r);
void RegisterQuantOps(OpRegistry* r);
void RegisterControlOps(OpRegistry* r);
void RegisterRnnOps(OpRegistry* r);
void RegisterActivationOps(OpRegistry* r);
void RegisterImageOps(OpRegistry* r);
void RegisterIndexOps(OpRegistry* r);
void RegisterLossOps(OpRegistry* r);
void RegisterDetectionOps(OpRegistry* r);

// The registry of every supported op, built once.
const OpRegistry& GlobalOpRegistry();

// Convenience for factories of kernels with a default constructor.
template <typename K>
absl::StatusOr<std::unique_ptr<Kernel>> MakeKernel(std::unique_ptr<K> k) {
  return std::unique_ptr<Kernel>(std::move(k));
}

// Calls f(T{}) with T the C++ type of `dtype`, for the listed types only;
// UNIMPLEMENTED for the rest.
template <typename... Ts>
struct TypeList {};

template <typename F>
absl::Status DispatchImpl(int32_t dtype, F&& f, TypeList<>) {
  return absl::UnimplementedError("element type " + DataTypeName(dtype) +
                                  " is not supported by this op");
}
template <typename F, typename T, typename... Rest>
absl::Status DispatchImpl(int32_t dtype, F&& f, TypeList<T, Rest...>) {
  if (dtype == TypeOf<T>::value) return f(T{});
  return DispatchImpl(dtype, std::forward<F>(f), TypeList<Rest...>{});
}
template <typename... Ts, typename F>
absl::Status Dispatch(int32_t dtype, F&& f) {
  return DispatchImpl(dtype, std::forward<F>(f), TypeList<Ts...>{});
}

// Normalizes a possibly negative axis into [0, rank); INVALID_ARGUMENT when
// out of range.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank);

}  // namespace quantd::executor

#endif  // QUANTD_CORE_EXECUTOR_KERNEL_H_
