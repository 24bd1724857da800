// Recurrent kernels: LSTM, GRU and RNN (ONNX default domain, opsets 7..21;
// FLOAT and DOUBLE). The input projection X·Wᵀ runs as one GEMM over every
// time step; each step then costs one (GRU: two) H·Rᵀ GEMM over the batch.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/parallel.h"
#include "core/base/status_macros.h"
#include "core/executor/gemm.h"
#include "core/executor/kernel.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

template <typename T>
using ArrMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CArrMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// ------------------------------------------------------------- activations

// One of the activation functions the RNN ops name in `activations`, with
// the alpha / beta it consumed from activation_alpha / activation_beta.
struct Activation {
  enum class Kind {
    kRelu,
    kTanh,
    kSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus,
  };
  Kind kind = Kind::kTanh;
  float alpha = 0, beta = 0;

  // x[0, n) = f(x[0, n)) in place.
  template <typename T>
  void Apply(T* x, int64_t n) const {
    ArrMap<T> v(x, n);
    const T a = alpha, b = beta, zero = 0, one = 1;
    switch (kind) {
      case Kind::kRelu:
        v = v.max(zero);
        break;
      case Kind::kTanh:
        v = v.tanh();
        break;
      case Kind::kSigmoid:
        v = (one + (-v).exp()).inverse();
        break;
      case Kind::kAffine:
        v = a * v + b;
        break;
      case Kind::kLeakyRelu:
        v = (v >= zero).select(v, a * v);
        break;
      case Kind::kThresholdedRelu:
        v = (v > a).select(v, zero);
        break;
      case Kind::kScaledTanh:
        v = a * (b * v).tanh();
        break;
      case Kind::kHardSigmoid:
        v = (a * v + b).max(zero).min(one);
        break;
      case Kind::kElu:
        v = (v >= zero).select(v, a * (v.exp() - one));
        break;
      case Kind::kSoftsign:
        v = v / (one + v.abs());
        break;
      case Kind::kSoftplus:
        // log(1 + e^x) without overflowing for large x.
        v = v.max(zero) + (one + (-v.abs()).exp()).log();
        break;
    }
  }
};

// Which of alpha / beta an activation consumes, and their defaults (the
// attributes of the standalone ops of the same name; ONNX Runtime's choice
// for Affine and ScaledTanh, which have none).
struct ActivationSpec {
  const char* name;  // Lower case.
  Activation::Kind kind;
  bool uses_alpha, uses_beta;
  float alpha, beta;
};

constexpr ActivationSpec kActivations[] = {
    {"relu", Activation::Kind::kRelu, false, false, 0, 0},
    {"tanh", Activation::Kind::kTanh, false, false, 0, 0},
    {"sigmoid", Activation::Kind::kSigmoid, false, false, 0, 0},
    {"affine", Activation::Kind::kAffine, true, true, 1, 0},
    {"leakyrelu", Activation::Kind::kLeakyRelu, true, false, 0.01f, 0},
    {"thresholdedrelu", Activation::Kind::kThresholdedRelu, true, false, 1, 0},
    {"scaledtanh", Activation::Kind::kScaledTanh, true, true, 1, 1},
    {"hardsigmoid", Activation::Kind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", Activation::Kind::kElu, true, false, 1, 0},
    {"softsign", Activation::Kind::kSoftsign, false, false, 0, 0},
    {"softplus", Activation::Kind::kSoftplus, false, false, 0, 0},
};

// --------------------------------------------------------------- the kernel

enum class Cell { kRnn, kGru, kLstm };

class RecurrentKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(NodeInfo& info) {
    auto k = std::unique_ptr<RecurrentKernel>(new RecurrentKernel);
    QUANTD_RETURN_IF_ERROR(k->Init(info));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Compute(const KernelContext& ctx) const override {
    return Dispatch<float, double>(
        ctx.in(0).dtype(), [&](auto tag) { return Run<decltype(tag)>(ctx); });
  }

 private:
  absl::Status Init(NodeInfo& info);
  template <typename T>
  absl::Status Run(const KernelContext& ctx) const;

  // Inputs (ONNX order): X, W, R, B, sequence_lens, initial_h, initial_c, P.
  static constexpr int kB = 3, kSeqLens = 4, kInitH = 5, kInitC = 6, kP = 7;

  Cell cell_ = Cell::kRnn;
  int gates_ = 1;        // 1 (RNN), 3 (GRU: z r h), 4 (LSTM: i o f c).
  int per_dir_ = 1;      // Activations per direction.
  int64_t hidden_ = -1;  // -1: taken from R.
  int dirs_ = 1;
  bool reverse_ = false;          // Single reverse direction.
  std::vector<Activation> acts_;  // [dirs_ * per_dir_].
  float clip_ = -1;               // < 0: no clipping.
  bool input_forget_ = false;
  bool linear_before_reset_ = false;
  bool batch_major_ = false;              // layout = 1.
  bool want_[3] = {false, false, false};  // Y, Y_h, Y_c.
};

absl::Status RecurrentKernel::Init(NodeInfo& info) {
  const std::string& op = info.op();
  cell_ = op == "LSTM" ? Cell::kLstm : op == "GRU" ? Cell::kGru : Cell::kRnn;
  gates_ = cell_ == Cell::kLstm ? 4 : cell_ == Cell::kGru ? 3 : 1;
  per_dir_ = cell_ == Cell::kLstm ? 3 : cell_ == Cell::kGru ? 2 : 1;

  if (info.HasAttr("hidden_size")) {
    hidden_ = info.Int("hidden_size", -1);
    if (hidden_ < 1) return info.Invalid("hidden_size must be positive");
  }
  const std::string dir = info.String("direction", "forward");
  if (dir == "forward") {
    dirs_ = 1;
  } else if (dir == "reverse") {
    dirs_ = 1;
    reverse_ = true;
  } else if (dir == "bidirectional") {
    dirs_ = 2;
  } else {
    return info.UnsupportedAttr("direction", dir);
  }
  if (info.HasAttr("clip")) {
    clip_ = info.Float("clip", -1);
    if (!(clip_ >= 0)) return info.Invalid("clip must be non-negative");
  }
  if (cell_ == Cell::kLstm) {
    const int64_t f = info.Int("input_forget", 0);
    if (f != 0 && f != 1) {
      return info.UnsupportedAttr("input_forget", absl::StrCat(f));
    }
    input_forget_ = f == 1;
  }
  if (cell_ == Cell::kGru) {
    // ONNX: any non-zero value selects linear-before-reset.
    linear_before_reset_ = info.Int("linear_before_reset", 0) != 0;
  }
  if (info.opset() >= 14) {
    const int64_t layout = info.Int("layout", 0);
    if (layout != 0 && layout != 1) {
      return info.UnsupportedAttr("layout", absl::StrCat(layout));
    }
    batch_major_ = layout == 1;
  }

  // activations, with alpha / beta consumed in order by those that take
  // them. A bidirectional node may list one direction's set (ORT repeats it).
  std::vector<std::string> names = info.Strings("activations");
  if (names.empty()) {
    names = cell_ == Cell::kLstm
                ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
            : cell_ == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                  : std::vector<std::string>{"Tanh"};
  }
  if (dirs_ == 2 && static_cast<int>(names.size()) == per_dir_) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  if (static_cast<int>(names.size()) != dirs_ * per_dir_) {
    return info.Invalid(absl::StrCat("activations lists ", names.size(),
                                     " functions, expected ",
                                     dirs_ * per_dir_));
  }
  const std::vector<float> alphas = info.Floats("activation_alpha");
  const std::vector<float> betas = info.Floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (const std::string& name : names) {
    const std::string lower = absl::AsciiStrToLower(name);
    const ActivationSpec* spec = nullptr;
    for (const ActivationSpec& s : kActivations) {
      if (lower == s.name) spec = &s;
    }
    if (spec == nullptr) return info.UnsupportedAttr("activations", name);
    Activation a{spec->kind, spec->alpha, spec->beta};
    if (spec->uses_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (spec->uses_beta && bi < betas.size()) a.beta = betas[bi++];
    acts_.push_back(a);
  }
  if (ai < alphas.size() || bi < betas.size()) {
    return info.Invalid(
        "activation_alpha / activation_beta have more values than the "
        "activations use");
  }

  const int max_in = cell_ == Cell::kLstm ? 8 : 6;
  if (info.num_inputs() < 3) return info.Invalid("needs X, W and R");
  if (info.num_inputs() > max_in) return info.Invalid("too many inputs");
  absl::Status s;
  for (int i = 0; i < info.num_inputs() && s.ok(); ++i) {
    s = i == kSeqLens ? info.RequireType(i, {TP::INT32, TP::INT64})
                      : info.RequireType(i, {TP::FLOAT, TP::DOUBLE});
  }
  if (!s.ok()) return s;
  const int max_out = cell_ == Cell::kLstm ? 3 : 2;
  if (info.num_outputs() > max_out) return info.Invalid("too many outputs");
  for (int o = 0; o < max_out; ++o) want_[o] = info.has_output(o);
  return absl::OkStatus();
}

template <typename T>
absl::Status RecurrentKernel::Run(const KernelContext& ctx) const {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const Tensor& r = ctx.in(2);
  constexpr auto kType = TypeOf<T>::value;
  if (x.rank() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("X must have rank 3, not ", ShapeString(x.shape())));
  }
  const int64_t seq = batch_major_ ? x.dim(1) : x.dim(0);
  const int64_t batch = batch_major_ ? x.dim(0) : x.dim(1);
  const int64_t input = x.dim(2);
  if (r.rank() != 3) {
    return absl::InvalidArgumentError("R must be [num_directions, G*H, H]");
  }
  const int64_t hid = hidden_ > 0 ? hidden_ : r.dim(2);
  const int64_t gh = gates_ * hid;
  const int64_t dirs = dirs_;
  auto check = [&](int i, std::vector<int64_t> shape,
                   const char* what) -> absl::Status {
    const Tensor& t = ctx.in(i);
    if (t.dtype() != kType || t.shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is ", DataTypeName(t.dtype()), " ", ShapeString(t.shape()),
          ", expected ", DataTypeName(kType), " ", ShapeString(shape)));
    }
    return absl::OkStatus();
  };
  absl::Status st = check(1, {dirs, gh, input}, "W");
  if (st.ok()) st = check(2, {dirs, gh, hid}, "R");
  if (st.ok() && ctx.has(kB)) st = check(kB, {dirs, 2 * gh}, "B");
  const std::vector<int64_t> state_shape =
      batch_major_ ? std::vector<int64_t>{batch, dirs, hid}
                   : std::vector<int64_t>{dirs, batch, hid};
  if (st.ok() && ctx.has(kInitH)) st = check(kInitH, state_shape, "initial_h");
  if (cell_ == Cell::kLstm) {
    if (st.ok() && ctx.has(kInitC)) {
      st = check(kInitC, state_shape, "initial_c");
    }
    if (st.ok() && ctx.has(kP)) st = check(kP, {dirs, 3 * hid}, "P");
  }
  if (!st.ok()) return st;

  std::vector<int64_t> lens(batch, seq);
  if (ctx.has(kSeqLens)) {
    const Tensor& sl = ctx.in(kSeqLens);
    if (sl.size() != batch || sl.rank() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence_lens is ", ShapeString(sl.shape()),
                       ", expected [", batch, "]"));
    }
    for (int64_t b = 0; b < batch; ++b) {
      lens[b] = sl.IntAt(b);
      if (lens[b] < 0 || lens[b] > seq) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence_lens[", b, "] = ", lens[b],
                         " is outside [0, ", seq, "]"));
      }
    }
  }
  const int64_t max_len =
      batch == 0 ? 0 : *std::max_element(lens.begin(), lens.end());

  // Outputs. Y is zero where a sequence has ended.
  Tensor y, yh, yc;
  if (want_[0]) {
    y = batch_major_ ? Tensor(kType, {batch, seq, dirs, hid})
                     : Tensor(kType, {seq, dirs, batch, hid});
    std::fill_n(y.mutable_data<T>(), y.size(), T(0));
  }
  yh = Tensor(kType, state_shape);
  if (cell_ == Cell::kLstm) yc = Tensor(kType, state_shape);
  auto y_off = [&](int64_t t, int64_t d, int64_t b) {
    return batch_major_ ? ((b * seq + t) * dirs + d) * hid
                        : ((t * dirs + d) * batch + b) * hid;
  };
  auto state_off = [&](int64_t d, int64_t b) {
    return batch_major_ ? (b * dirs + d) * hid : (d * batch + b) * hid;
  };
  // X row of (t, b) in the projection.
  auto x_row = [&](int64_t t, int64_t b) {
    return batch_major_ ? b * seq + t : t * batch + b;
  };

  // X·Wᵀ for every step at once, per direction.
  std::vector<T> xw(static_cast<size_t>(dirs * seq * batch * gh));
  for (int64_t d = 0; d < dirs; ++d) {
    Gemm(false, true, seq * batch, gh, input, T(1), x.data<T>(), input,
         w.data<T>() + d * gh * input, input, T(0),
         xw.data() + d * seq * batch * gh, gh, ctx.pool);
  }

  const T clip = static_cast<T>(clip_);
  auto clip_gate = [&](T* g, int64_t n) {
    if (clip_ >= 0) {
      ArrMap<T> v(g, n);
      v = v.max(-clip).min(clip);
    }
  };

  // One direction's recurrence: `pool` serves its per-step GEMMs.
  auto run_direction = [&](int64_t d, ThreadPool* pool) {
    const bool rev = dirs == 2 ? d == 1 : reverse_;
    const Activation* act = acts_.data() + d * per_dir_;
    const T* rw = r.data<T>() + d * gh * hid;
    const T* xwd = xw.data() + d * seq * batch * gh;
    // Bias added to each gate's pre-activation; for GRU with
    // linear_before_reset, Rbh is kept apart (it sits inside r ⊙ (...)).
    std::vector<T> bias(gh, T(0)), rbh(hid, T(0));
    if (ctx.has(kB)) {
      const T* bw = ctx.in(kB).data<T>() + d * 2 * gh;
      const T* br = bw + gh;
      for (int64_t j = 0; j < gh; ++j) bias[j] = bw[j] + br[j];
      if (cell_ == Cell::kGru && linear_before_reset_) {
        for (int64_t j = 0; j < hid; ++j) {
          bias[2 * hid + j] = bw[2 * hid + j];
          rbh[j] = br[2 * hid + j];
        }
      }
    }
    const T* peep = cell_ == Cell::kLstm && ctx.has(kP)
                        ? ctx.in(kP).data<T>() + d * 3 * hid
                        : nullptr;
    std::vector<T> h(batch * hid, T(0)), c, gates(batch * gh), tmp;
    if (cell_ == Cell::kLstm) c.assign(batch * hid, T(0));
    if (cell_ == Cell::kGru) tmp.assign(batch * hid, T(0));
    for (int64_t b = 0; b < batch; ++b) {
      if (ctx.has(kInitH)) {
        std::copy_n(ctx.in(kInitH).data<T>() + state_off(d, b), hid,
                    h.data() + b * hid);
      }
      if (cell_ == Cell::kLstm && ctx.has(kInitC)) {
        std::copy_n(ctx.in(kInitC).data<T>() + state_off(d, b), hid,
                    c.data() + b * hid);
      }
    }
    // The time index batch row b reads at step s (reverse runs each
    // sequence from its own last element).
    auto time_of = [&](int64_t s, int64_t b) {
      return rev ? lens[b] - 1 - s : s;
    };
    for (int64_t s = 0; s < max_len; ++s) {
      // Recurrent term for every row (rows that have ended are ignored).
      // GRU without linear_before_reset multiplies r into H first, so its
      // h gate gets a second GEMM below.
      const int64_t first_cols =
          cell_ == Cell::kGru && !linear_before_reset_ ? 2 * hid : gh;
      Gemm(false, true, batch, first_cols, hid, T(1), h.data(), hid, rw, hid,
           T(0), gates.data(), gh, pool);
      for (int64_t b = 0; b < batch; ++b) {
        if (s >= lens[b]) continue;
        T* g = gates.data() + b * gh;
        const T* xr = xwd + x_row(time_of(s, b), b) * gh;
        const int64_t pre = cell_ == Cell::kGru ? 2 * hid : gh;
        ArrMap<T>(g, pre) += CArrMap<T>(xr, pre) + CArrMap<T>(bias.data(), pre);
        T* hb = h.data() + b * hid;
        switch (cell_) {
          case Cell::kRnn:
            clip_gate(g, hid);
            act[0].Apply(g, hid);
            std::copy_n(g, hid, hb);
            break;
          case Cell::kGru: {
            // z, r = f(...); then r ⊙ H for the h gate's GEMM (or r ⊙
            // (H·Rhᵀ + Rbh) with linear_before_reset, whose GEMM is done).
            clip_gate(g, 2 * hid);
            act[0].Apply(g, 2 * hid);
            ArrMap<T> rg(g + hid, hid);
            if (linear_before_reset_) {
              ArrMap<T> hg(g + 2 * hid, hid);
              hg = rg * (hg + CArrMap<T>(rbh.data(), hid)) +
                   CArrMap<T>(xr + 2 * hid, hid) +
                   CArrMap<T>(bias.data() + 2 * hid, hid);
            } else {
              ArrMap<T>(tmp.data() + b * hid, hid) = rg * CArrMap<T>(hb, hid);
            }
            break;
          }
          case Cell::kLstm: {
            T* gi = g;
            T* go = g + hid;
            T* gf = g + 2 * hid;
            T* gc = g + 3 * hid;
            ArrMap<T> cb(c.data() + b * hid, hid);
            if (peep != nullptr) {
              ArrMap<T>(gi, hid) += CArrMap<T>(peep, hid) * cb;
              ArrMap<T>(gf, hid) += CArrMap<T>(peep + 2 * hid, hid) * cb;
            }
            clip_gate(gi, hid);
            act[0].Apply(gi, hid);
            if (input_forget_) {
              ArrMap<T>(gf, hid) = T(1) - ArrMap<T>(gi, hid);
            } else {
              clip_gate(gf, hid);
              act[0].Apply(gf, hid);
            }
            clip_gate(gc, hid);
            act[1].Apply(gc, hid);
            cb = ArrMap<T>(gf, hid) * cb +
                 ArrMap<T>(gi, hid) * ArrMap<T>(gc, hid);
            if (peep != nullptr) {
              ArrMap<T>(go, hid) += CArrMap<T>(peep + hid, hid) * cb;
            }
            clip_gate(go, hid);
            act[0].Apply(go, hid);
            // gc is free now: h(C) goes there.
            ArrMap<T>(gc, hid) = cb;
            act[2].Apply(gc, hid);
            ArrMap<T>(hb, hid) = ArrMap<T>(go, hid) * ArrMap<T>(gc, hid);
            break;
          }
        }
      }
      if (cell_ == Cell::kGru) {
        if (!linear_before_reset_) {
          Gemm(false, true, batch, hid, hid, T(1), tmp.data(), hid,
               rw + 2 * hid * hid, hid, T(0), gates.data() + 2 * hid, gh, pool);
        }
        for (int64_t b = 0; b < batch; ++b) {
          if (s >= lens[b]) continue;
          T* g = gates.data() + b * gh;
          ArrMap<T> hg(g + 2 * hid, hid);
          if (!linear_before_reset_) {
            const T* xr = xwd + x_row(time_of(s, b), b) * gh;
            hg += CArrMap<T>(xr + 2 * hid, hid) +
                  CArrMap<T>(bias.data() + 2 * hid, hid);
          }
          clip_gate(g + 2 * hid, hid);
          act[1].Apply(g + 2 * hid, hid);
          ArrMap<T> z(g, hid), hb(h.data() + b * hid, hid);
          hb = (T(1) - z) * hg + z * hb;
        }
      }
      if (want_[0]) {
        for (int64_t b = 0; b < batch; ++b) {
          if (s >= lens[b]) continue;
          std::copy_n(h.data() + b * hid, hid,
                      y.mutable_data<T>() + y_off(time_of(s, b), d, b));
        }
      }
    }
    // Final states; ONNX Runtime's zeros for empty sequences.
    for (int64_t b = 0; b < batch; ++b) {
      const bool empty = lens[b] == 0;
      T* dst = yh.mutable_data<T>() + state_off(d, b);
      if (empty) {
        std::fill_n(dst, hid, T(0));
      } else {
        std::copy_n(h.data() + b * hid, hid, dst);
      }
      if (cell_ == Cell::kLstm) {
        T* cdst = yc.mutable_data<T>() + state_off(d, b);
        if (empty) {
          std::fill_n(cdst, hid, T(0));
        } else {
          std::copy_n(c.data() + b * hid, hid, cdst);
        }
      }
    }
  };
  if (dirs == 2 && ctx.pool != nullptr) {
    ParallelRange(ctx.pool, 2, 1, [&](int64_t d0, int64_t d1) {
      for (int64_t d = d0; d < d1; ++d) run_direction(d, nullptr);
    });
  } else {
    for (int64_t d = 0; d < dirs; ++d) run_direction(d, ctx.pool);
  }

  if (want_[0]) (*ctx.outputs)[0] = std::move(y);
  if (want_[1]) (*ctx.outputs)[1] = std::move(yh);
  if (want_[2]) (*ctx.outputs)[2] = std::move(yc);
  return absl::OkStatus();
}

}  // namespace

void RegisterRnnOps(OpRegistry* r) {
  r->Register("LSTM", &RecurrentKernel::Create);
  r->Register("GRU", &RecurrentKernel::Create);
  r->Register("RNN", &RecurrentKernel::Create);
}

}  // namespace quantd::executor
