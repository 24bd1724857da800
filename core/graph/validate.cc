#include "core/graph/validate.h"

#include <algorithm>
#include <exception>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/graph/model_io.h"
#include "core/graph/tensor_util.h"
#include "onnx/checker.h"
#include "onnx/defs/data_type_utils.h"
#include "onnx/defs/schema.h"

namespace quantd::graph {
namespace {

using onnx::AttributeProto;
using onnx::TensorProto;
using onnx::TypeProto;

// A name as messages quote it: a long one is cut so that the message stays
// readable (and within gRPC's limits).
std::string Quoted(absl::string_view name) {
  constexpr size_t kShown = 64;
  if (name.size() <= kShown) return absl::StrCat("'", name, "'");
  return absl::StrCat("'", name.substr(0, kShown), "...' (", name.size(),
                      " bytes)");
}

// Walks one model's graphs, functions, tensors, types and attributes once.
// `where` strings name the enclosing graph for messages.
class FieldChecker {
 public:
  explicit FieldChecker(int64_t ir_version) : ir_version_(ir_version) {}

  absl::Status Graph(const onnx::GraphProto& g, const std::string& where,
                     int depth) {
    if (depth > kMaxGraphDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is nested ", depth,
                       " graphs deep; quantd accepts ", kMaxGraphDepth));
    }
    QUANTD_RETURN_IF_ERROR(Name(g.name(), "graph name", where));
    for (const auto& v : g.input()) {
      QUANTD_RETURN_IF_ERROR(Value(v, "input", where));
    }
    for (const auto& v : g.output()) {
      QUANTD_RETURN_IF_ERROR(Value(v, "output", where));
    }
    for (const auto& v : g.value_info()) {
      QUANTD_RETURN_IF_ERROR(Value(v, "value_info", where));
    }
    for (const auto& t : g.initializer()) {
      QUANTD_RETURN_IF_ERROR(
          Tensor(t, absl::StrCat(where, ": initializer ", Quoted(t.name()))));
    }
    if (g.sparse_initializer_size() > 0) {
      return absl::UnimplementedError(absl::StrCat(
          where, ": sparse initializer ",
          Quoted(g.sparse_initializer(0).values().name()),
          ": quantd does not read sparse tensors; store it dense"));
    }
    for (int i = 0; i < g.node_size(); ++i) {
      QUANTD_RETURN_IF_ERROR(Node(g.node(i), i, where, depth));
    }
    return absl::OkStatus();
  }

  absl::Status Function(const onnx::FunctionProto& f) {
    const std::string where = absl::StrCat("function ", Quoted(f.name()));
    QUANTD_RETURN_IF_ERROR(Name(f.name(), "function name", "the model"));
    QUANTD_RETURN_IF_ERROR(Name(f.domain(), "function domain", where));
    for (const std::string& n : f.input()) {
      QUANTD_RETURN_IF_ERROR(Name(n, "input name", where));
    }
    for (const std::string& n : f.output()) {
      QUANTD_RETURN_IF_ERROR(Name(n, "output name", where));
    }
    for (int i = 0; i < f.node_size(); ++i) {
      QUANTD_RETURN_IF_ERROR(Node(f.node(i), i, where, 1));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Name(const std::string& name, const char* kind,
                    const std::string& where) {
    if (name.size() <= kMaxNameBytes) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a ", kind, " of ", name.size(), " bytes (", Quoted(name),
        "); quantd accepts names up to ", kMaxNameBytes, " bytes"));
  }

  absl::Status Node(const onnx::NodeProto& node, int index,
                    const std::string& where, int depth) {
    auto here = [&] {
      return absl::StrCat(where, ": node ", index, " ", Quoted(node.name()),
                          " (", node.op_type().substr(0, 64), ")");
    };
    if (node.op_type().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(here(), " has no op_type"));
    }
    QUANTD_RETURN_IF_ERROR(Name(node.name(), "node name", where));
    QUANTD_RETURN_IF_ERROR(Name(node.op_type(), "op_type", where));
    QUANTD_RETURN_IF_ERROR(Name(node.domain(), "domain", where));
    for (const std::string& n : node.input()) {
      QUANTD_RETURN_IF_ERROR(Name(n, "tensor name", here()));
    }
    for (const std::string& n : node.output()) {
      QUANTD_RETURN_IF_ERROR(Name(n, "tensor name", here()));
    }
    for (const AttributeProto& a : node.attribute()) {
      QUANTD_RETURN_IF_ERROR(
          Attribute(a, absl::StrCat(here(), " attribute ", Quoted(a.name())),
                    absl::StrCat("attribute ", Quoted(a.name()), " of node ",
                                 index, " ", Quoted(node.name()), " (",
                                 node.op_type().substr(0, 64), ")"),
                    depth));
    }
    return absl::OkStatus();
  }

  // `where` locates the attribute fully; `owner` names it and its node
  // only, for the graphs it holds.
  absl::Status Attribute(const AttributeProto& a, const std::string& where,
                         const std::string& owner, int depth) {
    QUANTD_RETURN_IF_ERROR(Name(a.name(), "attribute name", where));
    if (a.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no name"));
    }
    // In a function body, a reference to the caller's attribute has no
    // value of its own.
    if (!a.ref_attr_name().empty()) return absl::OkStatus();
    if (!AttributeProto::AttributeType_IsValid(a.type())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has type ", a.type(), ", which is no ONNX attribute type"));
    }
    // Every value field set must be the declared type's: the core reads
    // values by their type, so a FLOAT-typed attribute carrying ints must
    // not be read as either.
    int fields = 0;
    AttributeProto::AttributeType found = AttributeProto::UNDEFINED;
    auto field = [&](bool set, AttributeProto::AttributeType type) {
      if (!set) return;
      ++fields;
      found = type;
    };
    field(a.has_f(), AttributeProto::FLOAT);
    field(a.has_i(), AttributeProto::INT);
    field(a.has_s(), AttributeProto::STRING);
    field(a.has_t(), AttributeProto::TENSOR);
    field(a.has_g(), AttributeProto::GRAPH);
    field(a.has_sparse_tensor(), AttributeProto::SPARSE_TENSOR);
    field(a.has_tp(), AttributeProto::TYPE_PROTO);
    field(a.floats_size() > 0, AttributeProto::FLOATS);
    field(a.ints_size() > 0, AttributeProto::INTS);
    field(a.strings_size() > 0, AttributeProto::STRINGS);
    field(a.tensors_size() > 0, AttributeProto::TENSORS);
    field(a.graphs_size() > 0, AttributeProto::GRAPHS);
    field(a.sparse_tensors_size() > 0, AttributeProto::SPARSE_TENSORS);
    field(a.type_protos_size() > 0, AttributeProto::TYPE_PROTOS);
    if (fields > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " sets ", fields,
                       " value fields; an attribute holds one value"));
    }
    if (fields == 1 && a.type() != found &&
        (a.type() != AttributeProto::UNDEFINED || ir_version_ >= 2)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is declared ", AttributeProto::AttributeType_Name(a.type()),
          " but holds a ", AttributeProto::AttributeType_Name(found),
          " value"));
    }
    if (a.has_sparse_tensor() || a.sparse_tensors_size() > 0) {
      return absl::UnimplementedError(absl::StrCat(
          where, ": quantd does not read sparse tensors; store it dense"));
    }
    if (a.has_t()) QUANTD_RETURN_IF_ERROR(Tensor(a.t(), where));
    for (const TensorProto& t : a.tensors()) {
      QUANTD_RETURN_IF_ERROR(Tensor(t, where));
    }
    if (a.has_tp()) QUANTD_RETURN_IF_ERROR(Type(a.tp(), where, 0));
    for (const TypeProto& tp : a.type_protos()) {
      QUANTD_RETURN_IF_ERROR(Type(tp, where, 0));
    }
    // A subgraph is named by itself and its depth, not by the chain of
    // graphs around it: messages stay short however deep the nesting.
    auto subgraph = [&](const onnx::GraphProto& g) {
      return Graph(g,
                   absl::StrCat("graph ", Quoted(g.name()), " (depth ",
                                depth + 1, ", ", owner, ")"),
                   depth + 1);
    };
    if (a.has_g()) QUANTD_RETURN_IF_ERROR(subgraph(a.g()));
    for (const onnx::GraphProto& g : a.graphs()) {
      QUANTD_RETURN_IF_ERROR(subgraph(g));
    }
    return absl::OkStatus();
  }

  absl::Status Tensor(const TensorProto& t, const std::string& where) {
    QUANTD_RETURN_IF_ERROR(Name(t.name(), "tensor name", where));
    if (!IsOnnxDataType(t.data_type())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has element type ", t.data_type(),
          ", which is no ONNX data type (1 to ", kNewestOnnxDataType, ")"));
    }
    if (HasExternalData(t) || t.external_data_size() > 0) {
      std::string file;
      for (const auto& entry : t.external_data()) {
        if (entry.key() == "location") file = entry.value();
      }
      return absl::InvalidArgumentError(absl::StrCat(
          where, " keeps its values in an external file ", Quoted(file),
          ", which quantd never opens: send its bytes in the request's "
          "external_data stream (quantctl and the C++ SDK do: "
          "OpenModelForStreaming), or the model with its weights inside, up "
          "to 2 GiB (onnx.save_model(model, path, "
          "save_as_external_data=False))"));
    }
    if (t.has_segment()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is segmented; ONNX no longer defines tensor segments"));
    }
    for (int64_t d : t.dims()) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " has a negative dim (", d, ")"));
      }
    }
    absl::Status size = CheckTensorSize(t);
    if (!size.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", size.message()));
    }
    return absl::OkStatus();
  }

  absl::Status Value(const onnx::ValueInfoProto& v, const char* kind,
                     const std::string& where) {
    const std::string here =
        absl::StrCat(where, ": graph ", kind, " ", Quoted(v.name()));
    QUANTD_RETURN_IF_ERROR(Name(v.name(), "tensor name", where));
    if (v.has_type()) QUANTD_RETURN_IF_ERROR(Type(v.type(), here, 0));
    return absl::OkStatus();
  }

  absl::Status Type(const TypeProto& type, const std::string& where,
                    int depth) {
    // Sequences of sequences nest; protobuf bounds the depth, this keeps
    // the recursion short of it.
    if (depth > kMaxGraphDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": its type nests deeper than ", kMaxGraphDepth));
    }
    auto elem = [&](int32_t t) -> absl::Status {
      if (t == TensorProto::UNDEFINED || IsOnnxDataType(t)) {
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has element type ", t, ", which is no ONNX data type (1 to ",
          kNewestOnnxDataType, ")"));
    };
    auto shape = [&](const onnx::TensorShapeProto& s) -> absl::Status {
      for (const auto& d : s.dim()) {
        if (d.has_dim_value() && d.dim_value() < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, " has a negative dim (", d.dim_value(), ")"));
        }
        QUANTD_RETURN_IF_ERROR(Name(d.dim_param(), "dim_param", where));
      }
      return absl::OkStatus();
    };
    switch (type.value_case()) {
      case TypeProto::kTensorType:
        QUANTD_RETURN_IF_ERROR(elem(type.tensor_type().elem_type()));
        return shape(type.tensor_type().shape());
      case TypeProto::kSparseTensorType:
        QUANTD_RETURN_IF_ERROR(elem(type.sparse_tensor_type().elem_type()));
        return shape(type.sparse_tensor_type().shape());
      case TypeProto::kSequenceType:
        return Type(type.sequence_type().elem_type(), where, depth + 1);
      case TypeProto::kOptionalType:
        return Type(type.optional_type().elem_type(), where, depth + 1);
      case TypeProto::kMapType:
        QUANTD_RETURN_IF_ERROR(elem(type.map_type().key_type()));
        return Type(type.map_type().value_type(), where, depth + 1);
      default:
        return absl::OkStatus();
    }
  }

  int64_t ir_version_;
};

absl::Status CheckOpsetImports(const onnx::ModelProto& model) {
  absl::flat_hash_set<std::string> domains;
  for (const auto& opset : model.opset_import()) {
    const std::string domain =
        IsDefaultDomain(opset.domain()) ? "" : opset.domain();
    if (!domains.insert(domain).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model imports domain ", Quoted(opset.domain()),
                       " twice; each domain has one opset version"));
    }
    if (opset.version() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the model imports domain ", Quoted(opset.domain()), " at version ",
          opset.version(), "; versions start at 1"));
    }
    if (domain.empty() && opset.version() > kNewestOpset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the model imports opset ", opset.version(),
          "; the newest ONNX Runtime 1.30 and quantd know is ", kNewestOpset));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTyped(const onnx::ValueInfoProto& value, const char* kind) {
  if (!value.has_type() ||
      value.type().value_case() == onnx::TypeProto::VALUE_NOT_SET) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph ", kind, " '", value.name(), "' has no type"));
  }
  if (value.type().has_tensor_type() &&
      value.type().tensor_type().elem_type() == onnx::TensorProto::UNDEFINED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph ", kind, " '", value.name(), "' has no element type"));
  }
  return absl::OkStatus();
}

// Adds a name that must not be defined twice.
absl::Status Define(const std::string& name, const std::string& by,
                    absl::flat_hash_set<std::string>* defined) {
  if (name.empty()) return absl::OkStatus();  // Omitted optional output.
  if (!defined->insert(name).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is defined twice (again by ", by,
                     "); ONNX graphs are in SSA form"));
  }
  return absl::OkStatus();
}

std::string DescribeNode(const onnx::NodeProto& node, int index) {
  return absl::StrCat("node ", index, " '", node.name(), "' (", node.op_type(),
                      ")");
}

absl::Status CheckNodes(const onnx::GraphProto& graph,
                        absl::flat_hash_set<std::string>* defined) {
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    for (const std::string& input : node.input()) {
      if (!input.empty() && !defined->contains(input)) {
        return absl::InvalidArgumentError(absl::StrCat(
            DescribeNode(node, i), " reads '", input,
            "', which no earlier node, initializer or graph input produces "
            "(the graph must be topologically sorted)"));
      }
    }
    for (const std::string& output : node.output()) {
      QUANTD_RETURN_IF_ERROR(Define(output, DescribeNode(node, i), defined));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModelFields(const onnx::ModelProto& model) {
  if (model.ir_version() < 0 || model.ir_version() > kNewestIrVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model declares IR version ", model.ir_version(),
                     "; the newest ONNX Runtime 1.30 and quantd load is ",
                     kNewestIrVersion));
  }
  QUANTD_RETURN_IF_ERROR(CheckOpsetImports(model));
  FieldChecker checker(model.ir_version());
  QUANTD_RETURN_IF_ERROR(checker.Graph(model.graph(), "main graph", 0));
  for (const auto& f : model.functions()) {
    QUANTD_RETURN_IF_ERROR(checker.Function(f));
  }
  return absl::OkStatus();
}

absl::Status CheckStructure(const onnx::GraphProto& graph) {
  absl::flat_hash_set<std::string> defined;
  for (const auto& input : graph.input()) {
    QUANTD_RETURN_IF_ERROR(CheckTyped(input, "input"));
    QUANTD_RETURN_IF_ERROR(Define(input.name(), "a graph input", &defined));
  }
  absl::flat_hash_set<std::string> initializers;
  for (const auto& init : graph.initializer()) {
    if (!initializers.insert(init.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer '", init.name(), "' is defined twice"));
    }
    QUANTD_RETURN_IF_ERROR(CheckTensorSize(init));
    defined.insert(init.name());  // May also be a graph input (a default).
  }
  QUANTD_RETURN_IF_ERROR(CheckNodes(graph, &defined));
  for (const auto& output : graph.output()) {
    QUANTD_RETURN_IF_ERROR(CheckTyped(output, "output"));
    if (!defined.contains(output.name())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph output '", output.name(), "' is not produced by any node"));
    }
  }
  return absl::OkStatus();
}

bool OpSchemaAllowsInput(const std::string& op, int64_t opset, int i,
                         int32_t elem_type) {
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(op, static_cast<int>(opset), "");
  if (schema == nullptr || schema->inputs().empty() || i < 0) return true;
  const auto& formal = schema->inputs();
  const size_t k = std::min(static_cast<size_t>(i), formal.size() - 1);
  if (static_cast<size_t>(i) > k &&
      formal[k].GetOption() != onnx::OpSchema::Variadic) {
    return true;
  }
  // libonnx names only the types its enum knows, and throws on others.
  if (elem_type == TensorProto::UNDEFINED ||
      !TensorProto::DataType_IsValid(elem_type)) {
    return true;
  }
  try {
    TypeProto tensor;
    tensor.mutable_tensor_type()->set_elem_type(elem_type);
    return formal[k].GetTypes().count(
               onnx::Utils::DataTypeUtils::ToType(tensor)) > 0;
  } catch (const std::exception&) {
    return true;
  }
}

namespace {

// The element type of every value of `g` whose type is known without
// inference: initializers, declared inputs / value_info / outputs (tensors
// only), Constant values and Cast results.
absl::flat_hash_map<std::string, int32_t> KnownElementTypes(
    const onnx::GraphProto& g) {
  absl::flat_hash_map<std::string, int32_t> known;
  auto declared = [&](const onnx::ValueInfoProto& v) {
    if (v.type().has_tensor_type() && v.type().tensor_type().elem_type() != 0) {
      known.emplace(v.name(), v.type().tensor_type().elem_type());
    }
  };
  for (const auto& v : g.input()) declared(v);
  for (const auto& v : g.value_info()) declared(v);
  for (const auto& v : g.output()) declared(v);
  for (const auto& t : g.initializer()) known[t.name()] = t.data_type();
  for (const auto& n : g.node()) {
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    if (n.output_size() < 1 || n.output(0).empty()) continue;
    for (const auto& a : n.attribute()) {
      if (n.op_type() == "Cast" && a.name() == "to") {
        known[n.output(0)] = static_cast<int32_t>(a.i());
      } else if (n.op_type() == "Constant" && a.name() == "value") {
        known[n.output(0)] = a.t().data_type();
      }
    }
  }
  return known;
}

// Every default-domain node of the main graph against its schema at
// `opset`, for the inputs whose element type is known without inference
// (KnownElementTypes): a type the schema excludes is INVALID_ARGUMENT. ONNX
// Runtime refuses such a model at load; libonnx 1.12's checker does not look.
absl::Status CheckKnownInputTypes(const onnx::GraphProto& g, int64_t opset) {
  const absl::flat_hash_map<std::string, int32_t> known = KnownElementTypes(g);
  for (const auto& n : g.node()) {
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    for (int i = 0; i < n.input_size(); ++i) {
      auto it = known.find(n.input(i));
      if (it == known.end() || it->second == 0) continue;
      if (!OpSchemaAllowsInput(n.op_type(), opset, i, it->second)) {
        return absl::InvalidArgumentError(
            absl::StrCat("node ", Quoted(n.name()), " (", n.op_type(),
                         "): input ", i, " ", Quoted(n.input(i)), " is ",
                         TensorProto::DataType_Name(
                             static_cast<TensorProto::DataType>(it->second)),
                         ", which ONNX's ", n.op_type(), " at opset ", opset,
                         " does not allow"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModel(const onnx::ModelProto& model,
                           const std::string& what,
                           std::vector<std::string>* validations) {
  absl::Status fields = CheckModelFields(model);
  if (!fields.ok()) {
    return absl::Status(fields.code(),
                        absl::StrCat(what, ": ", fields.message()));
  }
  const int64_t opset = DefaultOpset(model);
  const bool checker_knows =
      opset <= kMaxCheckedOpset && model.ir_version() <= onnx::IR_VERSION;
  if (checker_knows) {
    try {
      onnx::checker::check_model(model);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " refused by onnx.checker: ", e.what()));
    }
    absl::Status types = CheckKnownInputTypes(model.graph(), opset);
    if (!types.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", types.message()));
    }
    if (validations != nullptr) {
      validations->push_back(absl::StrCat(
          what, ": onnx.checker (ONNX 1.12, opsets <= ", kMaxCheckedOpset,
          "), with the known input types against each op's schema"));
    }
  }
  absl::Status s = CheckStructure(model.graph());
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  if (validations != nullptr) {
    validations->push_back(
        checker_knows ? absl::StrCat(what, ": structural checks")
                      : absl::StrCat(what, ": structural checks (opset ", opset,
                                     ", IR version ", model.ir_version(),
                                     " is newer than the checker knows)"));
  }
  return absl::OkStatus();
}

}  // namespace quantd::graph
