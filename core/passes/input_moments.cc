#include "core/passes/input_moments.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "Eigen/Core"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/onnx_names.h"
#include "core/base/status_macros.h"
#include "core/executor/kernel.h"
#include "core/graph/graph_edit.h"

namespace quantd::passes {
namespace {

using MatF =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rows gathered before one rank update: about 4 MiB of im2col at a time.
constexpr int64_t kChunkFloats = int64_t{1} << 20;

// H += X^T X (upper triangle) and sum += the column sums of X, for the
// rows x k matrix at `x`.
void RankUpdate(const float* x, int64_t rows, int64_t k, float* h,
                double* sum) {
  Eigen::Map<MatF> hm(h, k, k);
  Eigen::Map<const MatF> xm(x, rows, k);
  hm.selfadjointView<Eigen::Upper>().rankUpdate(xm.transpose());
  Eigen::Map<Eigen::VectorXd>(sum, k) +=
      xm.colwise().sum().transpose().cast<double>();
}

// `graph` and every subgraph body in it (If / Loop / Scan attributes,
// recursively), outermost first.
void AllGraphs(const onnx::GraphProto& graph,
               std::vector<const onnx::GraphProto*>* out) {
  out->push_back(&graph);
  for (const onnx::NodeProto& n : graph.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g()) AllGraphs(a.g(), out);
      for (const onnx::GraphProto& g : a.graphs()) AllGraphs(g, out);
    }
  }
}

// Dims of every float initializer and float Constant output of `graphs`.
absl::flat_hash_map<std::string, std::vector<int64_t>> ConstantDims(
    const std::vector<const onnx::GraphProto*>& graphs) {
  absl::flat_hash_map<std::string, std::vector<int64_t>> dims;
  for (const onnx::GraphProto* graph : graphs) {
    for (const onnx::TensorProto& t : graph->initializer()) {
      if (t.data_type() != onnx::TensorProto::FLOAT) continue;
      dims[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
    }
    for (const onnx::NodeProto& n : graph->node()) {
      if (n.op_type() != "Constant" || !IsDefaultDomain(n) ||
          n.output_size() != 1) {
        continue;
      }
      for (const auto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t() &&
            a.t().data_type() == onnx::TensorProto::FLOAT) {
          dims[n.output(0)] =
              std::vector<int64_t>(a.t().dims().begin(), a.t().dims().end());
        }
      }
    }
  }
  return dims;
}

// Product of dims[from:] (executor::NumElements, saturating).
int64_t Product(absl::Span<const int64_t> dims, size_t from) {
  return executor::NumElements(dims.subspan(from));
}

}  // namespace

InputMoments::~InputMoments() {
  if (budget_ != nullptr) budget_->Release(bytes_);
}

absl::StatusOr<std::unique_ptr<InputMoments>> InputMoments::Create(
    const onnx::GraphProto& graph, int64_t min_elements,
    calibration::MemoryBudget* budget, bool folds) {
  std::unique_ptr<InputMoments> out(new InputMoments(nullptr));
  out->folds_ = folds;
  std::vector<const onnx::GraphProto*> graphs;
  AllGraphs(graph, &graphs);
  const auto constants = ConstantDims(graphs);
  absl::flat_hash_map<std::string, int> by_key;
  std::vector<const onnx::NodeProto*> nodes;
  for (const onnx::GraphProto* g : graphs) {
    for (const onnx::NodeProto& node : g->node()) nodes.push_back(&node);
  }
  for (const onnx::NodeProto* node_ptr : nodes) {
    const onnx::NodeProto& node = *node_ptr;
    if (!IsDefaultDomain(node) || node.input_size() < 2 ||
        node.output_size() < 1 || node.input(0).empty()) {
      continue;
    }
    const std::string& op = node.op_type();
    if (op != "Conv" && op != "Gemm" && op != "MatMul") continue;
    auto w = constants.find(node.input(1));
    if (w == constants.end()) continue;
    const std::vector<int64_t>& dims = w->second;
    if (Product(dims, 0) < std::max<int64_t>(min_elements, 1)) continue;
    Layer layer;
    layer.input = node.input(0);
    layer.label = absl::StrCat(op, " '", node.name(), "'");
    std::string key;
    int64_t k = 0, groups = 1;
    if (op == "MatMul") {
      if (dims.size() != 2) continue;
      k = dims[0];
      key = absl::StrCat("rows|", k);
    } else if (op == "Gemm") {
      if (dims.size() != 2) continue;
      k = graph::IntAttribute(node, "transB", 0) != 0 ? dims[1] : dims[0];
      const bool trans_a = graph::IntAttribute(node, "transA", 0) != 0;
      layer.kind = trans_a ? Layer::Kind::kRowsTransposed : Layer::Kind::kRows;
      key = absl::StrCat(trans_a ? "cols|" : "rows|", k);
    } else {
      if (dims.size() != 3 && dims.size() != 4) continue;
      executor::NodeInfo info(node, 0, {}, {});
      if (!executor::ReadWindow(info, /*dilations=*/true,
                                /*ceil_mode=*/false, &layer.window)
               .ok()) {
        continue;  // The executor refuses it too; calibration says why.
      }
      layer.kind = Layer::Kind::kConv;
      layer.weight_dims = dims;
      layer.group = graph::IntAttribute(node, "group", 1);
      if (layer.group < 1 || dims[0] % layer.group != 0) continue;
      groups = layer.group;
      k = Product(dims, 1);
      // Layers with the same window over the same input share their H.
      onnx::NodeProto attrs;
      for (const auto& a : node.attribute()) *attrs.add_attribute() = a;
      key = absl::StrCat("conv|",
                         absl::StrJoin(dims.begin() + 1, dims.end(), ","), "|",
                         attrs.SerializeAsString());
    }
    if (k < 1) continue;
    key = absl::StrCat(layer.input, "|", key);
    auto [it, added] = by_key.try_emplace(key, 0);
    if (added) {
      layer.moments = std::make_shared<LayerMoments>();
      layer.moments->k = k;
      layer.moments->groups = groups;
      it->second = static_cast<int>(out->layers_.size());
      out->layers_.push_back(std::move(layer));
    }
    out->by_output_[node.output(0)] = out->layers_[it->second].moments;
  }
  // The budget takes the smallest matrices first: a layer too large for it
  // is rounded to nearest (its report says why) rather than failing the
  // call or starving the many small layers.
  std::vector<int> order(out->layers_.size());
  std::iota(order.begin(), order.end(), 0);
  auto bytes_of = [&](int i) {
    const LayerMoments& m = *out->layers_[i].moments;
    return (folds ? 2 : 1) * m.groups * m.k * m.k *
           static_cast<int64_t>(sizeof(float));
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return bytes_of(a) < bytes_of(b); });
  out->budget_ = budget;
  std::vector<bool> admitted(out->layers_.size(), false);
  for (int i : order) {
    const int64_t bytes = bytes_of(i);
    if (budget != nullptr) {
      const absl::Status charged = budget->Charge(
          bytes,
          absl::StrCat("GPTQ's input statistics of ", out->layers_[i].label));
      if (!charged.ok()) {
        out->layers_[i].moments->skipped = absl::StrCat(
            "its input statistics (", calibration::ByteText(bytes),
            ") did not fit the call's budget (", charged.message(), ")");
        continue;
      }
    }
    out->bytes_ += bytes;
    admitted[i] = true;
  }
  for (size_t i = 0; i < out->layers_.size(); ++i) {
    if (!admitted[i]) continue;
    out->by_input_[out->layers_[i].input].push_back(static_cast<int>(i));
    ++out->tracked_;
  }
  for (Layer& layer : out->layers_) {
    LayerMoments& m = *layer.moments;
    if (m.skipped.empty()) {
      m.h.assign(m.groups * m.k * m.k, 0.0f);
      if (folds) m.h_fold.assign(m.h.size(), 0.0f);
      m.sum.assign(m.groups * m.k, 0.0);
    }
  }
  return out;
}

absl::Status InputMoments::Observe(const std::string& name,
                                   const executor::Tensor& t) {
  finished_ = false;
  auto it = by_input_.find(name);
  if (it == by_input_.end()) return absl::OkStatus();
  for (int i : it->second) {
    QUANTD_RETURN_IF_ERROR(Accumulate(layers_[i], t));
  }
  return absl::OkStatus();
}

absl::Status InputMoments::Accumulate(const Layer& layer,
                                      const executor::Tensor& t) {
  if (t.dtype() != onnx::TensorProto::FLOAT) {
    return absl::InvalidArgumentError(
        absl::StrCat("the input '", layer.input, "' of ", layer.label,
                     " is not FLOAT: GPTQ cannot take its statistics"));
  }
  if (t.size() == 0) return absl::OkStatus();
  if (layer.kind == Layer::Kind::kConv) return AccumulateConv(layer, t);
  LayerMoments& m = *layer.moments;
  const int64_t k = m.k;
  const bool rows = layer.kind == Layer::Kind::kRows;
  const bool fits = rows ? (t.rank() >= 1 && t.dim(t.rank() - 1) == k)
                         : (t.rank() == 2 && t.dim(0) == k);
  if (!fits) {
    return absl::InvalidArgumentError(
        absl::StrCat("the input '", layer.input, "' of ", layer.label,
                     " has shape ", executor::ShapeString(t.shape()),
                     ", which does not multiply a weight "
                     "with K = ",
                     k));
  }
  const int64_t n = t.size() / k;
  const float* x = t.data<float>();
  if (m.merged) Unmerge(&m);
  if (!rows) {
    // A^T's rows are A's columns: H += A A^T, all one sample.
    const bool even = folds_ && m.samples % 2 == 0;
    Eigen::Map<MatF> hm(even ? m.h_fold.data() : m.h.data(), k, k);
    Eigen::Map<const MatF> am(x, k, n);
    hm.selfadjointView<Eigen::Upper>().rankUpdate(am);
    Eigen::Map<Eigen::VectorXd>(m.sum.data(), k) +=
        am.rowwise().sum().cast<double>();
    if (even) m.fold_rows += n;
    ++m.samples;
  } else if (!folds_) {
    RankUpdate(x, n, k, m.h.data(), m.sum.data());
    m.samples += t.rank() >= 2 ? t.dim(0) : 1;
  } else {
    // Each fold's rows gathered, a chunk at a time, for one rank update.
    const int64_t samples = t.rank() >= 2 ? t.dim(0) : 1;
    const int64_t per_sample = n / samples;
    const int64_t chunk = std::max<int64_t>(per_sample, kChunkFloats / k);
    std::vector<float> gathered;
    for (int fold = 0; fold < 2; ++fold) {
      float* h = fold == 0 ? m.h_fold.data() : m.h.data();
      gathered.clear();
      for (int64_t j = 0; j < samples; ++j) {
        if ((m.samples + j) % 2 != fold) continue;
        gathered.insert(gathered.end(), x + j * per_sample * k,
                        x + (j + 1) * per_sample * k);
        if (fold == 0) m.fold_rows += per_sample;
        if (static_cast<int64_t>(gathered.size()) >= chunk * k) {
          RankUpdate(gathered.data(), gathered.size() / k, k, h, m.sum.data());
          gathered.clear();
        }
      }
      if (!gathered.empty()) {
        RankUpdate(gathered.data(), gathered.size() / k, k, h, m.sum.data());
      }
    }
    m.samples += samples;
  }
  m.rows += n;
  return absl::OkStatus();
}

void InputMoments::Unmerge(LayerMoments* m) {
  for (size_t i = 0; i < m->h.size(); ++i) m->h[i] -= m->h_fold[i];
  m->merged = false;
}

absl::Status InputMoments::AccumulateConv(const Layer& layer,
                                          const executor::Tensor& t) {
  LayerMoments& m = *layer.moments;
  const std::vector<int64_t>& wd = layer.weight_dims;
  const int spatial = static_cast<int>(wd.size()) - 2;
  const int64_t group = layer.group;
  const int64_t cg = wd[1];  // Input channels per group.
  if (t.rank() != spatial + 2 || t.dim(1) != cg * group) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the input '", layer.input, "' of ", layer.label, " has shape ",
        executor::ShapeString(t.shape()), "; its weight wants ", cg * group,
        " channels and ", spatial, " spatial dims"));
  }
  std::vector<int64_t> in(t.shape().begin() + 2, t.shape().end());
  std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  absl::StatusOr<executor::Conv2DShape> shape =
      executor::ResolveWindow(layer.window, in, kernel);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        layer.label, " on input shape ", executor::ShapeString(t.shape()), ": ",
        shape.status().message()));
  }
  const executor::Conv2DShape& s = *shape;
  const int64_t k = m.k;  // cg * kh * kw.
  const int64_t positions = s.oh * s.ow;
  const int64_t chunk = std::max<int64_t>(1, kChunkFloats / k);
  std::vector<float> x(std::min(chunk, positions) * k);
  const float* data = t.data<float>();
  const int64_t plane = s.h * s.w;
  if (m.merged) Unmerge(&m);
  for (int64_t n = 0; n < t.dim(0); ++n) {
    const bool even = folds_ && (m.samples + n) % 2 == 0;
    if (even) m.fold_rows += positions;
    for (int64_t g = 0; g < group; ++g) {
      float* h = (even ? m.h_fold.data() : m.h.data()) + g * k * k;
      const float* image = data + (n * cg * group + g * cg) * plane;
      for (int64_t p0 = 0; p0 < positions; p0 += chunk) {
        const int64_t rows = std::min(chunk, positions - p0);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t oy = (p0 + r) / s.ow, ox = (p0 + r) % s.ow;
          float* row = x.data() + r * k;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t i = 0; i < s.kh; ++i) {
              const int64_t y = oy * s.sh - s.pt + i * s.dh;
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t xx = ox * s.sw - s.pl + j * s.dw;
                *row++ = (y < 0 || y >= s.h || xx < 0 || xx >= s.w)
                             ? 0.0f
                             : image[c * plane + y * s.w + xx];
              }
            }
          }
        }
        RankUpdate(x.data(), rows, k, h, m.sum.data() + g * k);
      }
    }
  }
  m.rows += t.dim(0) * positions;
  m.samples += t.dim(0);
  return absl::OkStatus();
}

void InputMoments::Finish() {
  for (Layer& layer : layers_) {
    LayerMoments& m = *layer.moments;
    if (!m.skipped.empty() || m.merged) continue;
    for (std::vector<float>* matrices : {&m.h, &m.h_fold}) {
      if (matrices->empty()) continue;
      for (int64_t g = 0; g < m.groups; ++g) {
        float* h = matrices->data() + g * m.k * m.k;
        for (int64_t i = 0; i < m.k; ++i) {
          for (int64_t j = 0; j < i; ++j) h[i * m.k + j] = h[j * m.k + i];
        }
      }
    }
    if (!m.h_fold.empty()) {
      for (size_t i = 0; i < m.h.size(); ++i) m.h[i] += m.h_fold[i];
      m.merged = true;
    }
  }
  finished_ = true;
}

void InputMoments::ScaleInputChannels(
    const std::vector<std::string>& node_outputs,
    const std::vector<double>& s) {
  absl::flat_hash_set<const LayerMoments*> done;
  const int64_t channels = static_cast<int64_t>(s.size());
  for (const std::string& name : node_outputs) {
    auto it = by_output_.find(name);
    if (it == by_output_.end() || it->second->skipped.size() > 0) continue;
    LayerMoments& m = *it->second;
    if (!done.insert(&m).second || m.k == 0 || channels % m.groups != 0) {
      continue;
    }
    const int64_t per_group = channels / m.groups;
    if (per_group == 0 || m.k % per_group != 0) continue;
    // Conv: column j of a group's im2col rows is channel j / inner.
    const int64_t inner = m.k / per_group;
    std::vector<double> f(m.k);
    for (int64_t g = 0; g < m.groups; ++g) {
      for (int64_t j = 0; j < m.k; ++j) {
        f[j] = 1.0 / s[g * per_group + j / inner];
      }
      for (std::vector<float>* matrices : {&m.h, &m.h_fold}) {
        if (matrices->empty()) continue;
        float* h = matrices->data() + g * m.k * m.k;
        for (int64_t a = 0; a < m.k; ++a) {
          for (int64_t b = 0; b < m.k; ++b) {
            h[a * m.k + b] = static_cast<float>(h[a * m.k + b] * f[a] * f[b]);
          }
        }
      }
      for (int64_t a = 0; a < m.k; ++a) m.sum[g * m.k + a] *= f[a];
    }
  }
}

const LayerMoments* InputMoments::Find(const std::string& node_output) const {
  if (!finished_) return nullptr;
  auto it = by_output_.find(node_output);
  if (it == by_output_.end() || it->second->rows == 0 ||
      !it->second->skipped.empty()) {
    return nullptr;
  }
  return it->second.get();
}

std::string InputMoments::WhyNone(const std::string& node_output) const {
  auto it = by_output_.find(node_output);
  if (it == by_output_.end()) {
    return "its layout is not one GPTQ takes (MatMul weights of rank 2, "
           "Conv kernels of 1 or 2 dims, float constants)";
  }
  if (!it->second->skipped.empty()) return it->second->skipped;
  return "its input was never produced by a calibration batch (e.g. an If "
         "branch that did not run)";
}

}  // namespace quantd::passes
