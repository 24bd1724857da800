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


class BertLike(nn.Module):
    """HuggingFace-BERT-shaped encoder over int64 token ids: word + position
    embeddings, a padding mask from the ids turned additive (-10000 on padded
    keys, as BERT does), attention written out (MatMul, Div, Add, Softmax),
    GELU as Erf, an MLM head tied to the word embeddings (one initializer
    read by Gather and by the output MatMul). Exported without constant
    folding, with symbolic batch and sequence: the Shape/Gather/Concat
    chains of older exports stay in the graph."""

    def __init__(self, vocab=96, d=64, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.word = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(64, d)
        self.ln0 = nn.LayerNorm(d)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict({
                "qkv": nn.Linear(d, 3 * d), "o": nn.Linear(d, d), "ln1": nn.LayerNorm(d),
                "f1": nn.Linear(d, 4 * d), "f2": nn.Linear(4 * d, d), "ln2": nn.LayerNorm(d)}))
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids):  # [N, T] int64, 0 = padding
        n, t = ids.shape
        pos = torch.arange(t, device=ids.device).unsqueeze(0)
        h = self.ln0(self.word(ids) + self.pos(pos))
        mask = (1.0 - (ids > 0).float())[:, None, None, :] * -10000.0
        hd = h.shape[-1] // self.heads
        for b in self.blocks:
            q, k, v = b["qkv"](h).split(h.shape[-1], dim=-1)
            q, k, v = (z.view(n, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
            a = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + mask, dim=-1)
            h = b["ln1"](h + b["o"]((a @ v).transpose(1, 2).reshape(n, t, -1)))
            h = b["ln2"](h + b["f2"](F.gelu(b["f1"](h))))
        return h @ self.word.weight.t() + self.out_bias


class Raft(nn.Module):
    """torchvision's RAFT-small optical flow (correlation pyramid, GridSample
    lookups, a ConvGRU refining the flow 4 times) on two frames stacked on
    the channels."""

    def __init__(self):
        super().__init__()
        self.m = torchvision.models.optical_flow.raft_small(weights=None)

    def forward(self, x):  # [N, 6, H, W]
        return self.m(x[:, :3], x[:, 3:], num_flow_updates=4)[-1]


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
    "bert_like": (BertLike, (2, 24), [11, 14]),
    "raft_small": (Raft, (1, 6, 128, 128), [16]),
}
# Exported without constant folding, with a symbolic sequence axis too.
RAW_EXPORT = {"bert_like"}


def fix_int_sqrt(path):
    """torch 1.13 exports RAFT's sqrt of an integer as Cast(to=INT64) ->
    Sqrt, which ONNX does not allow (ONNX Runtime refuses to load it, quantd
    refuses it INVALID_ARGUMENT); the Cast is made to FLOAT, as torch
    computes it."""
    import onnx
    m = onnx.load(path)
    producer = {o: n for n in m.graph.node for o in n.output}
    for n in m.graph.node:
        p = producer.get(n.input[0]) if n.op_type == "Sqrt" else None
        if p is not None and p.op_type == "Cast":
            for a in p.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.INT64:
                    a.i = onnx.TensorProto.FLOAT
    onnx.save(m, path)


def data(shape, seed, name):
    rng = np.random.RandomState(seed)
    if name == "bert_like":  # Token ids, the tail of some rows padding.
        ids = rng.randint(1, 96, size=shape).astype(np.int64)
        ids[0, 17:] = 0
        return ids
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
                raw = name in RAW_EXPORT
                axes = {0: "n", 1: "t"} if raw else {0: "n"}
                torch.onnx.export(m, x, os.path.join(d, "model.onnx"), opset_version=opset,
                                  input_names=["x"], output_names=["y"],
                                  dynamic_axes={"x": axes, "y": axes},
                                  do_constant_folding=not raw,
                                  training=torch.onnx.TrainingMode.PRESERVE if train
                                  else torch.onnx.TrainingMode.EVAL)
        except Exception as e:  # noqa: BLE001
            print(f"{tag}: EXPORT FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            os.rmdir(d) if not os.listdir(d) else None
            continue
        if name == "raft_small":
            fix_int_sqrt(os.path.join(d, "model.onnx"))
        np.save(os.path.join(d, "calib.npy"), np.concatenate([data(shape, s, name) for s in (2, 3)]))
        np.save(os.path.join(d, "eval.npy"), data(shape, 9, name))
        print(f"{tag}: exported", flush=True)
