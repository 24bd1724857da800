"""Robustness probe, part 1: exports architectures the real-model corpus does
not hold (random weights: this checks that quantd serves them and that ONNX
Runtime runs the result as quantd predicts, not accuracy of a trained model),
each with a calibration and an evaluation .npy:
OUT/<name>_op<opset>/{model.onnx,calib.npy,eval.npy}.

    /usr/bin/python3 scripts/probe/export.py OUT [name,name...]
    scripts/probe/run.sh OUT

docs/accuracy.md ("Architectures not met before") has the last results."""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

warnings.filterwarnings("ignore")
torch.manual_seed(0)
OUT = sys.argv[1]
ONLY = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None


class UNetBlock(nn.Module):
    """Diffusion-UNet-shaped: GroupNorm, SiLU, nearest upsample, skip concat,
    PixelShuffle, InstanceNorm."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.g1 = nn.GroupNorm(8, 32)
        self.down = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.g2 = nn.GroupNorm(8, 64)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.c2 = nn.Conv2d(96, 64, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(64, affine=True)
        self.ps = nn.PixelShuffle(2)
        self.out = nn.Conv2d(16, 3, 3, padding=1)

    def forward(self, x):
        a = F.silu(self.g1(self.c1(x)))
        b = F.silu(self.g2(self.down(a)))
        c = torch.cat([self.up(b), a], 1)
        d = F.silu(self.inorm(self.c2(c)))
        return self.out(self.ps(d))


class Seq2Seq(nn.Module):
    """nn.Transformer encoder-decoder; the target is the source shifted."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(16, 64)
        self.t = nn.Transformer(64, 4, 2, 2, 128, dropout=0.0, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x):  # [N, T, 16]
        src = self.emb(x)
        tgt = torch.roll(src, 1, dims=1)
        n = x.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), 1)
        return self.head(self.t(src, tgt, tgt_mask=mask))


class PaddedAttention(nn.Module):
    """MultiheadAttention with a key padding mask computed from the input
    (rows of zeros are padding), as a BERT-style encoder gets it."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 64)
        self.mha = nn.MultiheadAttention(64, 4, batch_first=True)
        self.ln = nn.LayerNorm(64)
        self.head = nn.Linear(64, 5)

    def forward(self, x):  # [N, T, 16]
        pad = x.abs().sum(-1) == 0
        h = self.proj(x)
        a, _ = self.mha(h, h, h, key_padding_mask=pad, need_weights=False)
        return self.head(self.ln(h + a)).mean(1)


class Audio1d(nn.Module):
    """wav2vec-shaped front end: strided Conv1d stack with GELU, a
    channel LayerNorm through transposes, a bidirectional GRU."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 32, 10, 5), nn.Conv1d(32, 32, 3, 2),
                                    nn.Conv1d(32, 32, 3, 2)])
        self.ln = nn.LayerNorm(32)
        self.gru = nn.GRU(32, 24, batch_first=True, bidirectional=True)
        self.head = nn.Linear(48, 8)

    def forward(self, x):  # [N, 1, S]
        for c in self.convs:
            x = F.gelu(c(x))
        h = self.ln(x.transpose(1, 2))
        o, _ = self.gru(h)
        return self.head(o)


def tv(name, **kw):
    return getattr(torchvision.models, name)(weights=None, **kw)


def video(name):
    return getattr(torchvision.models.video, name)(weights=None)


MODELS = {
    # name: (constructor, input shape, opsets)
    "inception_v3": (lambda: tv("inception_v3", aux_logits=False, init_weights=True), (2, 3, 299, 299), [13]),
    "maxvit_t": (lambda: tv("maxvit_t"), (1, 3, 224, 224), [17]),
    "swin_v2_t": (lambda: tv("swin_v2_t"), (1, 3, 256, 256), [17]),
    "resnext50": (lambda: tv("resnext50_32x4d"), (2, 3, 96, 96), [13]),
    "mobilenet_v3_large": (lambda: tv("mobilenet_v3_large"), (2, 3, 96, 96), [13]),
    "mc3_18": (lambda: video("mc3_18"), (1, 3, 8, 64, 64), [13]),
    "r2plus1d_18": (lambda: video("r2plus1d_18"), (1, 3, 8, 64, 64), [13]),
    "unet_block": (UNetBlock, (2, 3, 32, 32), [13, 17]),
    "seq2seq": (Seq2Seq, (2, 12, 16), [14, 17]),
    "padded_attention": (PaddedAttention, (4, 10, 16), [14, 17]),
    "audio1d": (Audio1d, (2, 1, 1600), [13, 17]),
}


def data(shape, seed, name):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    if name == "padded_attention":
        x[:, 7:, :] = 0  # Padding rows.
        x[0, 4:, :] = 0
    return x


for name, (make, shape, opsets) in MODELS.items():
    if ONLY and name not in ONLY:
        continue
    m = make().eval()
    # The fast paths of eval-mode attention have no ONNX export; with every
    # dropout at 0, training mode computes the same.
    train = name in ("seq2seq", "padded_attention")
    if train:
        m.train()
    for opset in opsets:
        tag = f"{name}_op{opset}"
        d = os.path.join(OUT, tag)
        os.makedirs(d, exist_ok=True)
        x = torch.from_numpy(data(shape, 1, name))
        try:
            with torch.no_grad():
                torch.onnx.export(m, x, os.path.join(d, "model.onnx"), opset_version=opset,
                                  input_names=["x"], output_names=["y"],
                                  dynamic_axes={"x": {0: "n"}, "y": {0: "n"}},
                                  training=torch.onnx.TrainingMode.PRESERVE if train
                                  else torch.onnx.TrainingMode.EVAL)
        except Exception as e:  # noqa: BLE001
            print(f"{tag}: EXPORT FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            os.rmdir(d) if not os.listdir(d) else None
            continue
        np.save(os.path.join(d, "calib.npy"), np.concatenate([data(shape, s, name) for s in (2, 3)]))
        np.save(os.path.join(d, "eval.npy"), data(shape, 9, name))
        print(f"{tag}: exported", flush=True)
