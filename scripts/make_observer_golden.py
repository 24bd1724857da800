#!/usr/bin/python3
"""Writes the golden files read by tests/core/calibration/observers_test.cc.

Run with Debian's interpreter (python3-torch 1.13 lives there):

    /usr/bin/python3 scripts/make_observer_golden.py

Output: tests/data/calibration/*.txt. '#' lines are comments; every other
line is whitespace-separated tokens, the first naming the record. Floats are
float32 printed with 9 significant digits (round-trips exactly).

Batches are not stored: both sides generate them from a splitmix64 stream
with integer and float32 operations only (no libm), so the C++ test rebuilds
the same float32 values bit for bit (see `make_batches` and GenerateBatches
in the test).

References, per golden file:
  torch_minmax.txt  torch.ao.quantization MinMaxObserver /
                    PerChannelMinMaxObserver (running min/max) and
                    MovingAverageMinMaxObserver /
                    MovingAveragePerChannelMinMaxObserver (the non-debiased
                    EMA, quantd's zero_debias=false); quantd then applies
                    tf.contrib's AdjustRange, re-implemented here in float32.
  tf_ema.txt        tf.contrib MovingAvgQuantize / LastValueQuantize,
                    re-implemented here in numpy float32 op for op (TF is not
                    installed): AdjustRange, then assign_moving_average with
                    zero_debias=True as TF 1.15 computes it.
  histogram.txt     percentile / mse / entropy: no library implements
                    quantd's fixed-bin streaming histogram (torch's
                    HistogramObserver upsamples and interpolates, ORT's
                    collectors grow the bin count), so this is a second,
                    independent numpy implementation of the definitions in
                    docs/numerics.md. The script also checks that the
                    streamed histogram equals a direct np.floor binning of
                    all data with the final edges (re-binning is exact).
                    Entropy leaves exact zeros out of its search (counted
                    apart, as in the C++); no golden batch holds exact
                    zeros, so the ranges did not change with that rule,
                    which the C++ test covers with ReLU data instead.
                    Entropy's guard (keep the observed range where the KL
                    threshold's expected squared error is larger) is
                    re-implemented too; the 8-bit cases take it, the 4-bit
                    one keeps the KL threshold; entropy_unguarded is the
                    KL threshold alone.
"""

import math
import os

import numpy as np
import torch
from torch.ao.quantization import (MinMaxObserver,
                                   MovingAverageMinMaxObserver,
                                   MovingAveragePerChannelMinMaxObserver,
                                   PerChannelMinMaxObserver)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                       "tests", "data", "calibration")
F32 = np.float32
U64 = np.uint64
GAMMA = U64(0x9E3779B97F4A7C15)


def fmt(x):
    return "%.9g" % float(F32(x))


def fmt_all(xs):
    return " ".join(fmt(x) for x in np.asarray(xs, dtype=np.float32).ravel())


# ---------------------------------------------------------------------------
# Data: splitmix64 -> 24-bit uniforms -> Irwin-Hall(4) "normal" in float32.

def splitmix(seed, count):
    """The first `count` outputs of splitmix64 seeded with `seed`."""
    with np.errstate(over="ignore"):
        z = U64(seed) + (np.arange(1, count + 1, dtype=U64) * GAMMA)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def make_batches(spec):
    """Float32 batches of spec: value = ((u0 + u1) + u2) + u3 - 2 (u in
    [0, 1) with 24 bits), times the batch scale and the channel gain (axis 1),
    plus the batch offset; from batch `outlier_from` on, every
    `outlier_every`-th element (flat index) is replaced by +-outlier
    (alternating)."""
    shape = spec["shape"]
    n = int(np.prod(shape))
    channels = shape[1]
    inner = int(np.prod(shape[2:]))
    chan = (np.arange(n) // inner) % channels
    gain = np.asarray(spec["gain"], dtype=F32)[chan]
    out = []
    for b in range(spec["batches"]):
        r = splitmix(spec["seed"] + 7919 * b, 4 * n)
        u = ((r >> U64(40)).astype(F32) * F32(2.0 ** -24)).reshape(n, 4)
        v = ((u[:, 0] + u[:, 1]) + u[:, 2]) + u[:, 3] - F32(2)
        v = (v * F32(spec["scale"][b])) * gain + F32(spec["offset"][b])
        k = spec["outlier_every"]
        if k and b >= spec["outlier_from"]:
            idx = np.arange(0, n, k)
            sign = np.where((idx // k) % 2 == 0, F32(1), F32(-1))
            v[idx] = sign * F32(spec["outlier"])
        out.append(v.astype(F32).reshape(shape))
    return out


def spec_line(spec):
    return ("data seed %d shape %s batches %d scale %s offset %s gain %s "
            "outlier_every %d outlier %s outlier_from %d" % (
                spec["seed"], " ".join(str(d) for d in spec["shape"]),
                spec["batches"], ",".join(fmt(s) for s in spec["scale"]),
                ",".join(fmt(s) for s in spec["offset"]),
                ",".join(fmt(g) for g in spec["gain"]),
                spec["outlier_every"], fmt(spec["outlier"]),
                spec["outlier_from"]))


def make_spec(seed, shape, scales, offsets, gain=None, outlier_every=0,
              outlier=0.0, outlier_from=0):
    return {"seed": seed, "shape": shape, "batches": len(scales),
            "scale": scales, "offset": offsets,
            "gain": gain or [1.0] * shape[1], "outlier_every": outlier_every,
            "outlier": outlier, "outlier_from": outlier_from}


DEFAULTS = {"bits": 8, "symmetric": 0, "narrow": 0, "ema_decay": 0.999,
            "zero_debias": 1, "init_min": 0.0, "init_max": 6.0,
            "quant_delay": 0, "percentile": 99.999, "num_bins": 2048,
            "nq": 128, "per_channel": 0, "axis": 1}


def config_line(method, cfg):
    items = ["method", method]
    for key in DEFAULTS:
        items += [key, repr(cfg[key]) if isinstance(cfg[key], float)
                  else str(cfg[key])]
    return "config " + " ".join(items)


# ---------------------------------------------------------------------------
# tf.contrib formulas in float32.

def adjust(mn, mx, bits, symmetric, narrow):
    """numerics::AdjustRange (tf.contrib quant_ops.py)."""
    mn, mx = F32(mn), F32(mx)
    if not symmetric:
        return min(mn, F32(0)), max(mx, F32(0))
    steps = F32(1 << bits)
    ratio = F32(-1) if narrow else -(steps - F32(2)) / steps
    return min(mn, mx / ratio), max(mx, mn * ratio)


def slot_extremes(batch, per_channel):
    """[(min, max)] for the tensor, then each channel along axis 1."""
    out = [(F32(batch.min()), F32(batch.max()))]
    if per_channel:
        moved = np.moveaxis(batch, 1, 0).reshape(batch.shape[1], -1)
        out += [(F32(r.min()), F32(r.max())) for r in moved]
    return out


def tf_moving_average(batches, cfg):
    d = F32(1.0 - cfg["ema_decay"])  # Python double, then TF's cast.
    step = F32(0)
    state = None
    for batch in batches:
        ranges = [adjust(a, b, cfg["bits"], cfg["symmetric"], cfg["narrow"])
                  for a, b in slot_extremes(batch, cfg["per_channel"])]
        if state is None:
            state = [[F32(0), F32(0), None, None] for _ in ranges]
        step = F32(step + F32(1))
        bias = F32(1) - np.power(F32(1) - d, step)
        for s, (rmin, rmax) in zip(state, ranges):
            s[0] = F32(s[0] - (s[0] - rmin) * d)
            s[1] = F32(s[1] - (s[1] - rmax) * d)
            s[2] = F32(s[0] / bias)
            s[3] = F32(s[1] / bias)
    return [(s[2], s[3]) for s in state]


def last_value(batches, cfg):
    return [adjust(a, b, cfg["bits"], cfg["symmetric"], cfg["narrow"])
            for a, b in slot_extremes(batches[-1], cfg["per_channel"])]


# ---------------------------------------------------------------------------
# torch references.

def torch_running(batches, cfg, moving):
    t = [torch.from_numpy(b.copy()) for b in batches]
    if moving:
        c = 1.0 - cfg["ema_decay"]
        per_t = MovingAverageMinMaxObserver(averaging_constant=c)
        per_c = MovingAveragePerChannelMinMaxObserver(averaging_constant=c,
                                                      ch_axis=1)
    else:
        per_t = MinMaxObserver()
        per_c = PerChannelMinMaxObserver(ch_axis=1)
    for x in t:
        per_t(x)
        per_c(x)
    raw = [(F32(per_t.min_val.item()), F32(per_t.max_val.item()))]
    if cfg["per_channel"]:
        raw += [(F32(a), F32(b)) for a, b in
                zip(per_c.min_val.numpy(), per_c.max_val.numpy())]
    if not moving:  # Sanity: torch's running extremes are numpy's.
        allv = np.stack(batches)
        assert raw[0] == (F32(allv.min()), F32(allv.max()))
    else:  # AdjustRange must be the identity for torch to be comparable.
        for batch in batches:
            for a, b in slot_extremes(batch, cfg["per_channel"]):
                assert a < 0 < b, "torch EMA case needs ranges around zero"
    return [adjust(a, b, cfg["bits"], cfg["symmetric"], cfg["narrow"])
            for a, b in raw]


# ---------------------------------------------------------------------------
# Streaming histogram and range searches (second implementation of
# core/calibration/histogram.cc; doubles everywhere, same operations).

class Hist:
    def __init__(self, n):
        self.n = n
        self.c = np.zeros(n, dtype=np.int64)
        self.lo = 0.0
        self.w = 0.0
        self.has = False
        self.total = 0
        self.zeros = 0  # Values exactly 0 (also counted in their bin).

    def edge(self, i):
        return self.lo + float(i) * self.w

    def bin_of(self, v):
        if self.w == 0.0:
            return 0
        t = (v - self.lo) / self.w
        if not t > 0.0:
            return 0
        if t >= self.n - 1:
            return self.n - 1
        return int(t)

    def extend(self, mn, mx):
        mn, mx, n = float(mn), float(mx), self.n
        if not self.has:
            self.lo, self.w, self.has = mn, (mx - mn) / n, True
            return
        if self.w == 0.0:
            if mn >= self.lo and mx <= self.lo:
                return
            point, count = self.lo, self.c[0]
            self.c[0] = 0
            self.lo = min(point, mn)
            self.w = (max(point, mx) - self.lo) / n
            self.c[self.bin_of(point)] += count
            return
        if mn >= self.lo and mx <= self.edge(n):
            return
        k = 0
        while True:
            k += 1
            nw = math.ldexp(self.w, k)
            old_top = 0 if k >= 62 else (n - 1) >> k
            j = math.ceil((self.lo - mn) / nw) if mn < self.lo else 0.0
            if j > n:
                continue
            new_lo = self.lo - j * nw
            if new_lo > mn:
                j += 1.0
                new_lo = self.lo - j * nw
            shift = int(j)
            if shift + old_top > n - 1:
                continue
            if new_lo + float(n) * nw < mx:
                continue
            new = np.zeros(n, dtype=np.int64)
            idx = shift + (np.arange(n) >> k if k < 62 else 0)
            np.add.at(new, idx, self.c)
            self.c, self.lo, self.w = new, new_lo, nw
            return

    def add(self, values):
        values = np.asarray(values, dtype=np.float32).ravel()
        self.total += values.size
        self.zeros += int((values == 0).sum())
        if self.w == 0.0:
            self.c[0] += values.size
            return
        t = (values.astype(np.float64) - self.lo) / self.w
        b = np.clip(t.astype(np.int64), 0, self.n - 1)
        self.c += np.bincount(b, minlength=self.n)


def quantile(h, q):
    if h.total == 0 or h.w == 0.0:
        return h.lo
    target = q * float(h.total)
    before = 0.0
    for b in range(h.n):
        c = float(h.c[b])
        if c > 0.0 and before + c >= target:
            return h.edge(b) + (target - before) / c * h.w
        before += c
    return h.edge(h.n)


def clip_costs(counts):
    n = len(counts)
    left, right, below = [0.0] * (n + 1), [0.0] * (n + 1), [0.0] * (n + 1)
    d = 0.0
    for a in range(n):
        c = float(counts[a])
        left[a + 1] = left[a] + 2.0 * d + below[a] + 0.25 * c
        d = d + below[a] + 0.5 * c
        below[a + 1] = below[a] + c
    e = above = 0.0
    for b in range(n, 0, -1):
        c = float(counts[b - 1])
        right[b - 1] = right[b] + 2.0 * e + above + 0.25 * c
        e = e + above + 0.5 * c
        above += c
    return np.array(left), np.array(right), np.array(below)


def mse_range(h, steps):
    if h.total == 0 or h.w == 0.0:
        return h.lo, h.lo
    n = h.n
    left, right, below = clip_costs(h.c)
    zero = -h.lo / h.w
    best, best_ab = math.inf, (0, n)
    for a in range(n):
        low = min(float(a), zero)
        b = np.arange(a + 1, n + 1)
        span = np.maximum(b.astype(np.float64), zero) - low
        r = span / float(steps)
        inside = below[b] - below[a]
        cost = left[a] + right[b] + inside * r * r / 12.0
        i = int(np.argmin(cost))
        if cost[i] < best:
            best, best_ab = cost[i], (a, int(b[i]))
    return h.edge(best_ab[0]), h.edge(best_ab[1])


def mse_threshold(h, half_steps):
    if h.total == 0 or h.w == 0.0:
        return h.lo
    left, right, below = clip_costs(h.c)
    b = np.arange(1, h.n + 1)
    r = b.astype(np.float64) / float(half_steps)
    cost = right[b] + below[b] * r * r / 12.0
    return h.edge(int(b[int(np.argmin(cost))]))


def smooth(v, eps=1e-4):
    zeros = int((v == 0).sum())
    nonzeros = v.size - zeros
    if nonzeros == 0:
        return None
    eps1 = eps * float(zeros) / float(nonzeros)
    out = np.where(v == 0, eps, v - eps1)
    if (out <= 0).any():
        return None
    return out


def entropy_threshold(h, nq):
    """Returns (threshold, best KL, second-best KL)."""
    if h.total == 0 or h.w == 0.0:
        return h.lo, 0.0, 0.0
    n, c = h.n, h.c.astype(np.float64)
    if h.zeros > 0:  # Exact zeros are left out of the search.
        if h.zeros == h.total:
            return h.lo, 0.0, 0.0
        z = h.bin_of(0.0)
        c[z] -= min(c[z], float(h.zeros))
    above = np.concatenate([np.cumsum(c[::-1])[::-1], [0.0]])
    kls = []
    for i in range(nq, n + 1):
        p = c[:i].copy()
        p[i - 1] += above[i]
        m = i // nq
        sizes = np.full(nq, m)
        sizes[-1] = i - m * (nq - 1)
        starts = np.arange(nq) * m
        sums = np.add.reduceat(c[:i], starts)
        nonzero = np.add.reduceat((p != 0).astype(np.int64), starts)
        share = np.where(nonzero > 0, sums / np.maximum(nonzero, 1), 0.0)
        q = np.where(p != 0, np.repeat(share, sizes), 0.0)
        ps, qs = smooth(p), smooth(q)
        if ps is None or qs is None:
            kls.append(math.inf)
            continue
        pn = ps / np.cumsum(ps)[-1]
        qn = qs / np.cumsum(qs)[-1]
        kls.append(float(np.cumsum(pn * np.log(pn / qn))[-1]))
    kls = np.array(kls)
    best = int(np.argmin(kls))
    rest = kls.copy()
    rest[best] = math.inf
    second = int(np.argmin(rest))
    return h.edge(nq + best), kls[best], (nq + second, kls[second])


def threshold_error(h, t, step):
    """Expected squared error of threshold t and rounding step `step` on a
    magnitude histogram: clipped bins by their centre, the rest step^2/12."""
    clipped, inside = 0.0, 0.0
    for b in range(h.n):
        c = float(h.c[b])
        if c == 0.0:
            continue
        centre = h.edge(b) + 0.5 * h.w
        if centre > t:
            clipped += c * (centre - t) * (centre - t)
        else:
            inside += c
    return clipped + inside * step * step / 12.0


def guarded_entropy(h, mn, mx, cfg, notes):
    """TensorRT's KL threshold unless, by threshold_error, clipping there
    costs more than the full magnitude range; then the full range."""
    t, kl, kl2 = entropy_threshold(h, cfg["nq"])
    full = h.edge(h.n)
    notes.append("entropy: threshold %.9g (bin %d), KL %.9g; "
                 "next best bin %d, KL %.9g" % (
                     t, round(t / h.w), kl, kl2[0], kl2[1]))
    if not t < full:
        return t, False
    steps = float((1 << cfg["bits"]) - 1 - (1 if cfg["narrow"] else 0))

    def step(x):
        lo, hi = adjust(F32(max(-x, mn)), F32(min(x, mx)), cfg["bits"],
                        cfg["symmetric"], cfg["narrow"])
        return (float(hi) - float(lo)) / steps

    e_kl, e_full = threshold_error(h, t, step(t)), threshold_error(
        h, full, step(full))
    notes.append("guard: expected squared error %.9g at the threshold, "
                 "%.9g unclipped -> %s" % (e_kl, e_full,
                                           "threshold" if e_kl <= e_full
                                           else "observed range kept"))
    return (t, False) if e_kl <= e_full else (full, True)


def histogram_method(batches, method, cfg):
    """Per slot: the range the C++ HistogramObserver reports."""
    magnitude = method.startswith("entropy") or cfg["symmetric"]
    slots = None
    notes = []
    for batch in batches:
        ext = slot_extremes(batch, cfg["per_channel"])
        views = [batch]
        if cfg["per_channel"]:
            views += list(np.moveaxis(batch, 1, 0))
        if slots is None:
            slots = [[Hist(cfg["num_bins"]), F32(np.inf), F32(-np.inf)]
                     for _ in ext]
        for s, (mn, mx), v in zip(slots, ext, views):
            s[1], s[2] = min(s[1], mn), max(s[2], mx)
            if magnitude:
                s[0].extend(0.0, max(abs(mn), abs(mx)))
                s[0].add(np.abs(v))
            else:
                s[0].extend(mn, mx)
                s[0].add(v)
    # Re-binning is exact: the streamed counts equal a direct binning of all
    # the data with the final edges (up to values on an edge).
    allv = np.concatenate([b.ravel() for b in batches])
    h0 = slots[0][0]
    direct = Hist(h0.n)
    direct.lo, direct.w, direct.has = h0.lo, h0.w, True
    direct.add(np.abs(allv) if magnitude else allv)
    moved = int(np.abs(direct.c - h0.c).sum()) // 2
    assert moved <= max(1, allv.size // 10000), moved
    notes.append("histogram: %d bins, width %.9g, lo %.9g; %d of %d values "
                 "in another bin than direct binning" % (
                     h0.n, h0.w, h0.lo, moved, allv.size))
    out = []
    kept_any = False
    for h, mn, mx in slots:
        mn_d, mx_d = float(mn), float(mx)
        if magnitude:
            if method == "percentile":
                t = quantile(h, cfg["percentile"] / 100.0)
            elif method == "mse":
                t = mse_threshold(h, (1 << (cfg["bits"] - 1)) - 1)
            elif method == "entropy_unguarded":
                t = entropy_threshold(h, cfg["nq"])[0]
            else:
                t, kept = guarded_entropy(h, mn_d, mx_d, cfg, notes)
                kept_any = kept_any or kept
            lo, hi = max(-t, mn_d), min(t, mx_d)
        elif method == "percentile":
            lo = max(quantile(h, (100.0 - cfg["percentile"]) / 100.0), mn_d)
            hi = min(quantile(h, cfg["percentile"] / 100.0), mx_d)
        else:
            steps = (1 << cfg["bits"]) - 1 - (1 if cfg["narrow"] else 0)
            a, b = mse_range(h, steps)
            lo, hi = max(a, mn_d), min(b, mx_d)
        out.append(adjust(F32(lo), F32(hi), cfg["bits"], cfg["symmetric"],
                          cfg["narrow"]))
    return out, notes, kept_any


# ---------------------------------------------------------------------------

def write_case(f, name, method, cfg, spec, ranges, ref, notes=(),
               kept=None):
    f.write("# %s: %s\n" % (name, ref))
    for note in notes:
        f.write("#   %s\n" % note)
    f.write("case %s\n%s\n%s\n" % (name, config_line(method, cfg),
                                   spec_line(spec)))
    f.write("result %s %s\n" % (fmt(ranges[0][0]), fmt(ranges[0][1])))
    if cfg["per_channel"]:
        f.write("channel_min %s\n" % fmt_all([r[0] for r in ranges[1:]]))
        f.write("channel_max %s\n" % fmt_all([r[1] for r in ranges[1:]]))
    if kept is not None:
        f.write("kept_observed_range %d\n" % (1 if kept else 0))
    f.write("end\n")


def header(f, what):
    f.write("# Generated by scripts/make_observer_golden.py (torch %s, numpy "
            "%s). Do not edit.\n# %s\n# Records: case <name>; config (method "
            "and ObserverConfig fields); data (generator spec, see the "
            "script); result <min> <max>; channel_min/channel_max (axis 1); "
            "kept_observed_range 0/1 (entropy's guard); end.\n" % (torch.__version__, np.__version__, what))


def cfg_of(**kw):
    cfg = dict(DEFAULTS)
    cfg.update(kw)
    return cfg


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    nchw = [4, 3, 8, 8]
    grow = make_spec(11, nchw, [0.5, 1.0, 0.75, 2.0, 1.5, 3.0],
                     [0.25, -0.5, 0.0, 1.0, -1.0, 0.5], gain=[1.0, 0.5, 2.0])
    around = make_spec(23, nchw, [1.0, 1.25, 0.5, 2.0, 1.5],
                       [0.0, 0.125, -0.25, 0.5, -0.125], gain=[1.0, 1.5, 0.75])
    relu = make_spec(37, nchw, [1.0, 2.0, 1.5, 0.5], [2.0, 4.0, 3.0, 1.0])

    with open(os.path.join(OUT_DIR, "torch_minmax.txt"), "w") as f:
        header(f, "min_max against torch's running MinMax observers; "
               "moving_average with zero_debias 0 against torch's "
               "MovingAverage observers (averaging_constant = 1 - "
               "ema_decay). Ranges then go through AdjustRange.")
        for name, spec, cfg in [
                ("min_max_tensor", grow, cfg_of()),
                ("min_max_channel", grow, cfg_of(per_channel=1)),
                ("min_max_relu", relu, cfg_of()),
                ("min_max_symmetric_narrow", grow,
                 cfg_of(symmetric=1, narrow=1, per_channel=1)),
                ("min_max_symmetric_4bit", grow, cfg_of(symmetric=1, bits=4))]:
            write_case(f, name, "min_max", cfg, spec,
                       torch_running(make_batches(spec), cfg, moving=False),
                       "torch MinMaxObserver / PerChannelMinMaxObserver")
        for name, spec, cfg in [
                ("ema_torch_tensor", around, cfg_of(zero_debias=0,
                                                    ema_decay=0.99)),
                ("ema_torch_channel", around,
                 cfg_of(zero_debias=0, ema_decay=0.9, per_channel=1))]:
            write_case(f, name, "moving_average", cfg, spec,
                       torch_running(make_batches(spec), cfg, moving=True),
                       "torch MovingAverage(PerChannel)MinMaxObserver")

    with open(os.path.join(OUT_DIR, "tf_ema.txt"), "w") as f:
        header(f, "tf.contrib MovingAvgQuantize (zero-debiased EMA of "
               "AdjustRange'd batch ranges) and LastValueQuantize, computed "
               "here in numpy float32 as TF 1.15 does.")
        for name, spec, cfg in [
                ("ema_default", grow, cfg_of(per_channel=1)),
                ("ema_decay_0_9", grow, cfg_of(ema_decay=0.9, per_channel=1)),
                ("ema_symmetric", grow, cfg_of(symmetric=1, ema_decay=0.99)),
                ("ema_symmetric_narrow_4bit", around,
                 cfg_of(symmetric=1, narrow=1, bits=4, ema_decay=0.5)),
                ("ema_relu", relu, cfg_of(ema_decay=0.95))]:
            write_case(f, name, "moving_average", cfg, spec,
                       tf_moving_average(make_batches(spec), cfg),
                       "numpy float32 TF formula")
        for name, spec, cfg in [
                ("last_value_channel", grow, cfg_of(per_channel=1)),
                ("last_value_symmetric", grow, cfg_of(symmetric=1))]:
            write_case(f, name, "last_value", cfg, spec,
                       last_value(make_batches(spec), cfg),
                       "numpy float32 TF formula")

    big = make_spec(101, [8, 4, 16, 16], [0.5, 1.0, 2.0, 1.5, 4.0],
                    [0.0, 0.25, -0.5, 0.0, 1.0], gain=[1.0, 2.0, 0.5, 1.5],
                    outlier_every=997, outlier=40.0, outlier_from=2)
    plain = make_spec(202, [8, 4, 16, 16], [1.0, 1.0, 2.0, 1.0],
                      [0.5, 0.5, 0.0, 0.5], gain=[1.0, 1.0, 1.0, 1.0])
    relu_big = make_spec(303, [8, 4, 16, 16], [1.0, 2.0, 1.5],
                         [2.0, 4.0, 3.0], outlier_every=1499, outlier=60.0, outlier_from=1)
    with open(os.path.join(OUT_DIR, "histogram.txt"), "w") as f:
        header(f, "percentile / mse / entropy from quantd's streaming "
               "histogram, second implementation in numpy (no library "
               "shares the histogram strategy; see the script).")
        for name, method, spec, cfg in [
                ("percentile_default", "percentile", big, cfg_of()),
                ("percentile_99_channel", "percentile", big,
                 cfg_of(percentile=99.0, per_channel=1)),
                ("percentile_symmetric", "percentile", big,
                 cfg_of(symmetric=1, percentile=99.9, num_bins=512)),
                ("mse_asymmetric", "mse", big, cfg_of(num_bins=512)),
                ("mse_asymmetric_4bit", "mse", plain,
                 cfg_of(bits=4, num_bins=256, per_channel=1)),
                ("mse_symmetric", "mse", big,
                 cfg_of(symmetric=1, narrow=1, bits=4)),
                ("entropy_outliers", "entropy", big, cfg_of()),
                ("entropy_outliers_4bit", "entropy", big, cfg_of(bits=4)),
                ("entropy_unguarded_outliers", "entropy_unguarded", big,
                 cfg_of()),
                ("entropy_relu", "entropy", relu_big,
                 cfg_of(num_bins=1024)),
                ("entropy_channel", "entropy", plain,
                 cfg_of(num_bins=512, per_channel=1))]:
            ranges, notes, kept = histogram_method(make_batches(spec),
                                                   method, cfg)
            write_case(f, name, method, cfg, spec, ranges,
                       "numpy re-implementation", notes,
                       kept if method.startswith("entropy") else None)
    for name in ("torch_minmax.txt", "tf_ema.txt", "histogram.txt"):
        path = os.path.join(OUT_DIR, name)
        print("%s: %d bytes" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
