#include "core/executor/window.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quantd::executor {

absl::Status ReadWindow(NodeInfo& info, bool dilations, bool ceil_mode,
                        ConvWindow* w) {
  w->kernel = info.Ints("kernel_shape");
  w->strides = info.Ints("strides");
  if (dilations) w->dilations = info.Ints("dilations");
  w->pads = info.Ints("pads");
  if (ceil_mode) {
    const int64_t c = info.Int("ceil_mode", 0);
    if (c != 0 && c != 1)
      return info.UnsupportedAttr("ceil_mode", absl::StrCat(c));
    w->ceil_mode = c == 1;
  }
  const std::string ap = info.String("auto_pad", "NOTSET");
  if (ap == "NOTSET" || ap.empty()) {
    w->auto_pad = ConvWindow::AutoPad::kNotSet;
  } else if (ap == "SAME_UPPER") {
    w->auto_pad = ConvWindow::AutoPad::kSameUpper;
  } else if (ap == "SAME_LOWER") {
    w->auto_pad = ConvWindow::AutoPad::kSameLower;
  } else if (ap == "VALID") {
    w->auto_pad = ConvWindow::AutoPad::kValid;
  } else {
    return info.UnsupportedAttr("auto_pad", ap);
  }
  for (int64_t v : w->strides) {
    if (v < 1) return info.Invalid("strides must be positive");
  }
  for (int64_t v : w->dilations) {
    if (v < 1) return info.Invalid("dilations must be positive");
  }
  for (int64_t v : w->pads) {
    if (v < 0)
      return info.UnsupportedAttr(
          "pads", absl::StrCat("[", absl::StrJoin(w->pads, ","), "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Conv2DShape> ResolveWindow(const ConvWindow& w,
                                          const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& k,
                                          DepthWindow* depth) {
  const size_t r = in.size();
  auto get = [](const std::vector<int64_t>& v, size_t i, int64_t dflt) {
    return v.empty() ? dflt : v[i];
  };
  if ((!w.strides.empty() && w.strides.size() != r) ||
      (!w.dilations.empty() && w.dilations.size() != r) ||
      (!w.pads.empty() && w.pads.size() != 2 * r) || k.size() != r) {
    return absl::InvalidArgumentError(
        "strides, dilations, pads or kernel_shape do not match the input "
        "rank");
  }
  std::vector<int64_t> out(r), pb(r), pe(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t s = get(w.strides, i, 1), d = get(w.dilations, i, 1);
    const int64_t extent = d * (k[i] - 1) + 1;
    switch (w.auto_pad) {
      case ConvWindow::AutoPad::kNotSet:
        pb[i] = get(w.pads, i, 0);
        pe[i] = get(w.pads, i + r, 0);
        break;
      case ConvWindow::AutoPad::kValid:
        pb[i] = pe[i] = 0;
        break;
      case ConvWindow::AutoPad::kSameUpper:
      case ConvWindow::AutoPad::kSameLower: {
        const int64_t o = (in[i] + s - 1) / s;
        const int64_t total =
            std::max<int64_t>(0, (o - 1) * s + extent - in[i]);
        const int64_t small = total / 2, big = total - small;
        const bool upper = w.auto_pad == ConvWindow::AutoPad::kSameUpper;
        pb[i] = upper ? small : big;
        pe[i] = upper ? big : small;
        break;
      }
    }
    const int64_t span = in[i] + pb[i] + pe[i] - extent;
    if (span < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the window (extent ", extent, ") is larger than the padded input (",
          in[i] + pb[i] + pe[i], ")"));
    }
    out[i] = (w.ceil_mode ? (span + s - 1) / s : span / s) + 1;
  }
  Conv2DShape s;
  // A 3-D window's depth axis (0) goes to `depth`; H and W follow it.
  const size_t first = r == 3 ? 1 : 0;
  if (r == 3) {
    if (depth == nullptr) {
      return absl::UnimplementedError(
          "3-D windows need a depth axis (internal: no DepthWindow given)");
    }
    depth->d = in[0];
    depth->kd = k[0];
    depth->sd = get(w.strides, 0, 1);
    depth->dd = get(w.dilations, 0, 1);
    depth->pd = pb[0];
    depth->pe = pe[0];
    depth->od = out[0];
  }
  const size_t o = r == 1 ? 0 : first + 1;  // Index of the W dim.
  if (r >= 2) {
    s.h = in[first];
    s.kh = k[first];
    s.sh = get(w.strides, first, 1);
    s.dh = get(w.dilations, first, 1);
    s.pt = pb[first];
    s.pb = pe[first];
    s.oh = out[first];
  }
  s.w = in[o];
  s.kw = k[o];
  s.sw = get(w.strides, o, 1);
  s.dw = get(w.dilations, o, 1);
  s.pl = pb[o];
  s.pr = pe[o];
  s.ow = out[o];
  return s;
}

}  // namespace quantd::executor
