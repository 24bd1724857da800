#!/usr/bin/python3
"""PyTorch goldens for the executor's recurrent and image kernels.

  /usr/bin/python3 scripts/make_rnn_image_golden.py [--out tests/data/executor/rnn_image]
  /usr/bin/python3 scripts/make_rnn_image_golden.py --export DIR

Default mode writes small .npy files (float32, already in ONNX's layouts) that
tests/core/executor/ops_rnn_test.cc and ops_image_test.cc feed to single ONNX
nodes: CASE_NAME.npy for each tensor of each case. The conversion from
PyTorch's layouts (gate order, bias split, output shapes) is done here, so the
C++ side only states the ONNX node.

--export writes torch.onnx.export models with one input for the ONNX Runtime
parity tests (run at test time, not committed): DIR/rnn.onnx + DIR/rnn_x.npy
(bidirectional LSTM into a GRU) and DIR/image.onnx + DIR/image_x.npy
(ConvTranspose2d, bilinear and nearest interpolate).
"""
import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F


def save(out, case, **tensors):
    for name, t in tensors.items():
        a = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        np.save(os.path.join(out, f"{case}_{name}.npy"), np.ascontiguousarray(a))


# PyTorch gate order -> ONNX gate order (block indices).
LSTM_ORDER = [0, 3, 1, 2]  # torch i f g o -> ONNX i o f c
GRU_ORDER = [1, 0, 2]      # torch r z n -> ONNX z r h


def gates(t, order):
    blocks = torch.chunk(t, len(order), dim=0)
    return torch.cat([blocks[i] for i in order], dim=0)


def onnx_weights(mod, order):
    """W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] from a torch RNN module."""
    suffixes = [""] + (["_reverse"] if mod.bidirectional else [])
    w, r, b = [], [], []
    for s in suffixes:
        w.append(gates(getattr(mod, "weight_ih_l0" + s), order))
        r.append(gates(getattr(mod, "weight_hh_l0" + s), order))
        b.append(torch.cat([gates(getattr(mod, "bias_ih_l0" + s), order),
                            gates(getattr(mod, "bias_hh_l0" + s), order)]))
    return torch.stack(w), torch.stack(r), torch.stack(b)


def onnx_y(y, dirs, hidden, batch_first):
    """torch output [seq, batch, D*H] (or batch-first) -> ONNX Y."""
    if batch_first:  # layout 1: [batch, seq, D, H]
        return y.reshape(y.shape[0], y.shape[1], dirs, hidden)
    s, b = y.shape[0], y.shape[1]  # layout 0: [seq, D, batch, H]
    return y.reshape(s, b, dirs, hidden).permute(0, 2, 1, 3)


def rnn_cases(out):
    # Bidirectional LSTM with initial states, layout 0.
    seq, batch, inp, hid = 6, 3, 5, 4
    lstm = torch.nn.LSTM(inp, hid, bidirectional=True)
    x = torch.randn(seq, batch, inp)
    h0, c0 = torch.randn(2, batch, hid), torch.randn(2, batch, hid)
    with torch.no_grad():
        y, (hn, cn) = lstm(x, (h0, c0))
    w, r, b = onnx_weights(lstm, LSTM_ORDER)
    save(out, "lstm_bidir", x=x, w=w, r=r, b=b, h0=h0, c0=c0,
         y=onnx_y(y, 2, hid, False), yh=hn, yc=cn)

    # Bidirectional GRU (PyTorch's GRU is ONNX's linear_before_reset = 1),
    # batch-first (layout 1), with initial state and padded sequences.
    gru = torch.nn.GRU(inp, hid, bidirectional=True, batch_first=True)
    x = torch.randn(batch, seq, inp)
    h0 = torch.randn(2, batch, hid)
    lens = torch.tensor([6, 2, 4])
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        x, lens, batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        yp, hn = gru(packed, h0)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(
        yp, batch_first=True, total_length=seq)
    w, r, b = onnx_weights(gru, GRU_ORDER)
    save(out, "gru_bidir", x=x, w=w, r=r, b=b, h0=h0.permute(1, 0, 2),
         lens=lens.to(torch.int32).numpy(), y=onnx_y(y, 2, hid, True),
         yh=hn.permute(1, 0, 2))


def conv_transpose_cases(out):
    # 2-D: groups, strides, padding, output_padding, dilation.
    ct = torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0),
                                  output_padding=(1, 2), groups=2,
                                  dilation=(2, 1))
    x = torch.randn(2, 4, 5, 4)
    with torch.no_grad():
        y = ct(x)
    save(out, "convt2d", x=x, w=ct.weight, b=ct.bias, y=y)
    # 1-D.
    ct = torch.nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1)
    x = torch.randn(1, 3, 7)
    with torch.no_grad():
        y = ct(x)
    save(out, "convt1d", x=x, w=ct.weight, b=ct.bias, y=y)


def resize_cases(out):
    x = torch.randn(1, 2, 5, 7)
    save(out, "resize", x=x)
    # Up in H, down in W: both directions of every mode at once.
    size = (9, 4)
    with torch.no_grad():
        cases = {
            "bilinear_align": F.interpolate(x, size=size, mode="bilinear",
                                            align_corners=True),
            "bilinear_half": F.interpolate(x, size=size, mode="bilinear",
                                           align_corners=False),
            "bicubic_half": F.interpolate(x, size=size, mode="bicubic",
                                          align_corners=False),
            "bicubic_align": F.interpolate(x, size=size, mode="bicubic",
                                           align_corners=True),
            "nearest": F.interpolate(x, size=size, mode="nearest"),
            "nearest_exact": F.interpolate(x, size=size, mode="nearest-exact"),
        }
        x2 = torch.randn(1, 1, 11, 13)
        cases["bilinear_antialias"] = F.interpolate(
            x2, size=(5, 4), mode="bilinear", align_corners=False,
            antialias=True)
        cases["bicubic_antialias"] = F.interpolate(
            x2, size=(5, 4), mode="bicubic", align_corners=False,
            antialias=True)
    save(out, "resize", x_small=x2)
    for name, y in cases.items():
        save(out, "resize", **{name: y})


def norm_pool_cases(out):
    x = torch.randn(2, 6, 3, 4)
    w, b = torch.randn(6), torch.randn(6)
    wg, bg = torch.randn(3), torch.randn(3)
    with torch.no_grad():
        save(out, "norm", x=x, w=w, b=b, wg=wg, bg=bg,
             group21=F.group_norm(x, 3, w, b, eps=1e-5),
             # Opset 18: one scale / bias per group.
             group18=F.group_norm(x, 3, wg.repeat_interleave(2),
                                  bg.repeat_interleave(2), eps=1e-5),
             instance=F.instance_norm(x, weight=w, bias=b, eps=1e-5),
             lp1_axis1=F.normalize(x, p=1, dim=1),
             lp2_last=F.normalize(x, p=2, dim=-1),
             lppool=F.lp_pool2d(x.abs(), 2, (2, 3), stride=(1, 2)),
             globallp3=(x.abs() ** 3).sum(dim=(2, 3), keepdim=True) ** (1 / 3),
             globalmax=x.amax(dim=(2, 3), keepdim=True))


class RnnNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 12, bidirectional=True)
        self.gru = torch.nn.GRU(24, 6)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        return y


class ImageNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(3, 8, 4, stride=2, padding=1,
                                           groups=1)
        self.conv = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        y = self.up(x)
        y = F.interpolate(y, scale_factor=1.5, mode="bilinear",
                          align_corners=False)
        y = self.conv(y)
        return F.interpolate(y, size=(17, 23), mode="nearest")


def export(out):
    os.makedirs(out, exist_ok=True)
    for name, net, x in [("rnn", RnnNet(), torch.randn(7, 2, 8)),
                         ("image", ImageNet(), torch.randn(2, 3, 10, 12))]:
        net.eval()
        torch.onnx.export(net, x, os.path.join(out, f"{name}.onnx"),
                          opset_version=14, input_names=["x"],
                          output_names=["y"])
        np.save(os.path.join(out, f"{name}_x.npy"), x.numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
        "executor", "rnn_image"))
    ap.add_argument("--export", help="write the ORT parity models here")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if args.export:
        export(args.export)
        return
    os.makedirs(args.out, exist_ok=True)
    rnn_cases(args.out)
    conv_transpose_cases(args.out)
    resize_cases(args.out)
    norm_pool_cases(args.out)


if __name__ == "__main__":
    main()
