#!/usr/bin/python3
"""Trains the corpus models that npm does not give us, on scikit-learn's bundled
digits set (no download), and exports them to ONNX under build/corpus/<name>/.

Each model directory gets:
  model.onnx    the trained model
  eval_x.npy    held-out inputs (the 360 test digits of the fixed split)
  eval_y.npy    held-out labels (classification) or masks (segmentation)
  calib_x.npy   64 training samples, for quantd's calibration
  train.json    what was trained, float held-out metric in torch, seconds

Models (each trains in seconds on one thread):
  digits_cnn_op9          Conv+BN+ReLU, Conv+ReLU, MaxPool, Gemm x2; opset 9
                          (torch's exporter folds the BatchNorm into the Conv)
  digits_cnn_op13         the same trained weights, opset 13
  digits_cnn_fp16w        the same weights stored as FLOAT16 initializers, each
                          behind a Cast to float (fp16 storage, fp32 compute;
                          the form fp16-weight exports take on CPU); opset 13
  digits_cnn_fp16         the same model computing in FLOAT16 (inputs, weights,
                          outputs), as a `model.half()` export; opset 13
  digits_transformer_op17 rows as 8 tokens, 2 nn.TransformerEncoderLayer
                          (d=32, 4 heads), mean pool, Linear; opset 17
                          (LayerNormalization op)
  digits_lstm             LSTM(8->64) over the 8 rows, last state -> Linear; opset 13
  digits_gru              GRU(8->48) over the 8 rows, last state -> Linear; opset 13
  digits_seg              conv encoder / decoder (ConvTranspose and nearest
                          Upsample -> Resize) predicting the digit's ink mask at
                          32x32 from the upscaled, noised digit; opset 13; metric
                          mask IoU
  text_char_gpt_op14      a character-level causal language model (2 pre-norm
                          TransformerEncoderLayers, d=64, 4 heads, GELU) trained
                          on the licence texts Debian ships in
                          /usr/share/common-licenses (MPL-2.0 held out for
                          evaluation); int64 tokens in, next-character logits
                          out, a -inf causal mask sliced to the sequence
                          length; opset 14 (LayerNorm as ReduceMean/Pow/Sqrt);
                          metric: next-character top-1
  text_char_gpt_fp16      the same trained model computing in FLOAT16 (as
                          digits_cnn_fp16 is made); the -inf mask in FLOAT16
  tv_*                    torchvision architectures (their own code, untouched),
                          trained for a few epochs on the digits upscaled to
                          32x32 RGB with ImageNet normalisation, exported at
                          the opset in the name (zoo_models()): MobileNetV3-small,
                          ShuffleNetV2, SqueezeNet 1.1, ResNet-18,
                          EfficientNet-B0, RegNetY-400MF, MNASNet 0.5, a small
                          DenseNet, GoogLeNet and a small ViT; one in FLOAT16

Run with Debian's Python: /usr/bin/python3 scripts/corpus/train_models.py [--out DIR] [--only NAME,...]
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

SEED = 20240917
N_TEST = 360
N_CALIB = 64
LM_STEPS = 600


def seed_everything():
    torch.set_num_threads(1)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)


def digits_split():
    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    perm = np.random.RandomState(SEED).permutation(len(x))
    te, tr = perm[:N_TEST], perm[N_TEST:]
    return x[tr], y[tr], np.ascontiguousarray(x[te]), np.ascontiguousarray(y[te])


def fit(model, x, y, epochs, lr=2e-3, batch=32, loss_fn=None):
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    g = torch.Generator().manual_seed(SEED)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(xt), generator=g)
        for i in range(0, len(xt), batch):
            idx = order[i:i + batch]
            opt.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    model.eval()


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def export(model, example, path, opset, fold=True):
    torch.onnx.export(model, example, path, opset_version=opset,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}},
                      do_constant_folding=fold)
    import onnx
    onnx.checker.check_model(onnx.load(path))


def save_dir(out, name, **arrays):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for k, v in arrays.items():
        np.save(os.path.join(d, k + ".npy"), np.ascontiguousarray(v))
    return d


def write_info(d, info):
    with open(os.path.join(d, "train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"{os.path.basename(d)}: {info}", flush=True)


# ---------------------------------------------------------------- models
class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.f1 = nn.Linear(32 * 4 * 4, 64)
        self.f2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.c1(x)))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f2(F.relu(self.f1(x)))


class DigitsTransformer(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.embed = nn.Linear(8, d)
        self.pos = nn.Parameter(torch.randn(1, 8, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, x):                 # x [N,1,8,8]: rows are tokens
        t = self.embed(x.reshape(-1, 8, 8)) + self.pos
        return self.head(self.enc(t).mean(dim=1))


class CharGPT(nn.Module):
    """GPT-shaped: token embedding (Gather) + learned positions, pre-norm
    encoder layers under a causal mask, final LayerNorm, vocabulary head.
    Positions and mask are sliced to the input's length, so the export keeps
    the Shape/Slice chain a variable-length language model has."""

    def __init__(self, vocab, d=64, layers=2, ctx=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, ctx, d) * 0.02)
        self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):                 # x [N, T] int64 character ids
        t = x.shape[1]
        h = self.enc(self.tok(x) + self.pos[:, :t], mask=self.mask[:t, :t])
        return self.head(self.ln(h))


LICENSES = "/usr/share/common-licenses"
LM_HELD_OUT = "MPL-2.0"
LM_CTX = 64


def train_char_gpt(out):
    """The licence texts as one character stream (symbolic links skipped:
    they repeat a text), MPL-2.0 held out. 96 evaluation windows spread evenly
    over the held-out text, 64 random training windows for calibration."""
    names = sorted(n for n in os.listdir(LICENSES)
                   if not os.path.islink(os.path.join(LICENSES, n)))
    texts = {n: open(os.path.join(LICENSES, n), encoding="latin-1").read() for n in names}
    chars = sorted(set("".join(texts.values())))
    stoi = {c: i for i, c in enumerate(chars)}
    enc = lambda s: np.array([stoi[c] for c in s], dtype=np.int64)  # noqa: E731
    train = enc("".join(t for n, t in texts.items() if n != LM_HELD_OUT))
    test = enc(texts[LM_HELD_OUT])
    rng = np.random.RandomState(SEED)

    def windows(src, starts):
        return (np.stack([src[i:i + LM_CTX] for i in starts]),
                np.stack([src[i + 1:i + LM_CTX + 1] for i in starts]))

    t0 = time.time()
    torch.manual_seed(SEED)
    m = CharGPT(len(chars), ctx=LM_CTX)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(LM_STEPS):
        x, y = windows(train, rng.randint(0, len(train) - LM_CTX - 1, 32))
        loss = F.cross_entropy(m(torch.from_numpy(x)).reshape(-1, len(chars)),
                               torch.from_numpy(y).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    secs = time.time() - t0
    step = (len(test) - LM_CTX - 1) // 96
    xe, ye = windows(test, np.arange(96) * step)
    xc, _ = windows(train, rng.randint(0, len(train) - LM_CTX - 1, N_CALIB))
    with torch.no_grad():
        acc = float((m(torch.from_numpy(xe)).argmax(-1).numpy() == ye).mean())
    d = save_dir(out, "text_char_gpt_op14", eval_x=xe, eval_y=ye, calib_x=xc)
    path = os.path.join(d, "model.onnx")
    torch.onnx.export(m, torch.from_numpy(xe[:2]), path, opset_version=14,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N", 1: "T"}, "output": {0: "N", 1: "T"}})
    import onnx
    onnx.checker.check_model(onnx.load(path))
    info = {"arch": f"CharGPT 2 layers d=64 h=4, vocabulary {len(chars)}", "opset": 14,
            "torch_next_char_top1": acc, "train_steps": LM_STEPS, "train_seconds": round(secs, 1)}
    write_info(d, info)
    d16 = save_dir(out, "text_char_gpt_fp16", eval_x=xe, eval_y=ye, calib_x=xc)
    half_model(path, os.path.join(d16, "model.onnx"))
    write_info(d16, dict(info, arch=info["arch"] + ", computing in FLOAT16"))


class DigitsRNN(nn.Module):
    def __init__(self, kind, hidden):
        super().__init__()
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(8, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):                 # x [N,1,8,8]: rows are timesteps
        out, _ = self.rnn(x.reshape(-1, 8, 8))
        return self.head(out[:, -1, :])


class DigitsSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.e1 = nn.Conv2d(1, 16, 3, stride=2, padding=1)     # 32 -> 16
        self.e2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)    # 16 -> 8
        self.d1 = nn.ConvTranspose2d(32, 16, 2, stride=2)      # 8 -> 16
        self.d2 = nn.Conv2d(16, 16, 3, padding=1)
        self.out = nn.Conv2d(16, 1, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.e1(x))
        x = F.relu(self.e2(x))
        x = F.relu(self.d1(x))
        x = F.interpolate(x, scale_factor=2.0, mode="nearest")  # 16 -> 32 (Resize)
        x = F.relu(self.d2(x))
        return torch.sigmoid(self.out(x))


def upscale32(x8):
    """[N,1,8,8] in [0,1] -> [N,1,32,32] bilinear."""
    with torch.no_grad():
        return F.interpolate(torch.from_numpy(x8), size=(32, 32), mode="bilinear",
                             align_corners=False).numpy()


def fp16_weights(src, dst):
    """Stores every float initializer of `src` as FLOAT16 behind a Cast to float."""
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    m = onnx.load(src)
    g = m.graph
    new_inits, casts = [], []
    for t in g.initializer:
        if t.data_type != TensorProto.FLOAT:
            new_inits.append(t)
            continue
        a = numpy_helper.to_array(t).astype(np.float16)
        h = numpy_helper.from_array(a, t.name + "_fp16")
        new_inits.append(h)
        casts.append(helper.make_node("Cast", [h.name], [t.name], to=TensorProto.FLOAT,
                                      name=t.name + "_cast"))
    del g.initializer[:]
    g.initializer.extend(new_inits)
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(m)
    onnx.save(m, dst)


def half_model(src, dst):
    """The model as a `model.half()` export computes: every float initializer,
    Constant value, Cast target and declared type (inputs and outputs too) in
    FLOAT16. (torch cannot trace half convolutions on the CPU, so the float
    export is converted instead.)"""
    import onnx
    from onnx import numpy_helper, TensorProto
    m = onnx.load(src)

    def half_tensor(t):
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))

    def walk(g):
        for t in g.initializer:
            half_tensor(t)
        for v in list(g.input) + list(g.output) + list(g.value_info):
            if v.type.tensor_type.elem_type == TensorProto.FLOAT:
                v.type.tensor_type.elem_type = TensorProto.FLOAT16
        for n in g.node:
            for a in n.attribute:
                if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.FLOAT16
                if a.HasField("t"):
                    half_tensor(a.t)
                if a.HasField("g"):
                    walk(a.g)
    walk(m.graph)
    onnx.checker.check_model(m)
    onnx.save(m, dst)


# ---------------------------------------------------------------- torchvision zoo
# Architectures as torchvision writes them, so the exported graphs carry the
# patterns real exports do (Hardswish/HardSigmoid squeeze-excite, channel
# shuffle, fire-module Concat, SiLU, grouped convs, dense Concat, inception
# branches, attention with GELU and LayerNorm), at 32x32 so each trains in
# seconds to a few minutes on one thread.
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def rgb32(x8):
    """[N,1,8,8] digits in [0,1] -> [N,3,32,32] ImageNet-normalised."""
    x = np.repeat(upscale32(x8), 3, axis=1)
    return ((x - IMAGENET_MEAN) / IMAGENET_STD).astype(np.float32)


def zoo_models():
    import torchvision.models as tvm
    from torchvision.models.densenet import DenseNet
    from torchvision.models.vision_transformer import VisionTransformer
    # name -> (constructor, opset, epochs, learning rate); a None constructor
    # exports the model of the same name prefix again (another opset, FLOAT16).
    return {
        "tv_mobilenet_v3_small_op13": (lambda: tvm.mobilenet_v3_small(num_classes=10), 13, 12, 2e-3),
        "tv_mobilenet_v3_small_op17": (None, 17, 0, 0),   # same weights, HardSwish op
        "tv_mobilenet_v3_small_fp16": (None, 13, 0, 0),   # same weights, FLOAT16 compute
        "tv_shufflenet_v2_op11": (lambda: tvm.shufflenet_v2_x0_5(num_classes=10), 11, 12, 3e-3),
        "tv_squeezenet1_1_op11": (lambda: tvm.squeezenet1_1(num_classes=10), 11, 20, 3e-4),
        "tv_resnet18_op13": (lambda: tvm.resnet18(num_classes=10), 13, 6, 1e-3),
        "tv_efficientnet_b0_op13": (lambda: tvm.efficientnet_b0(num_classes=10), 13, 10, 2e-3),
        "tv_regnet_y_400mf_op14": (lambda: tvm.regnet_y_400mf(num_classes=10), 14, 8, 2e-3),
        "tv_mnasnet0_5_op9": (lambda: tvm.mnasnet0_5(num_classes=10), 9, 12, 3e-3),
        "tv_densenet_small_op12": (lambda: DenseNet(growth_rate=12, block_config=(4, 4, 4),
                                                    num_init_features=24, num_classes=10), 12, 10, 2e-3),
        "tv_googlenet_op13": (lambda: tvm.googlenet(num_classes=10, aux_logits=False,
                                                    init_weights=True), 13, 6, 1e-3),
        "tv_vit_tiny_op17": (lambda: VisionTransformer(image_size=32, patch_size=4, num_layers=4,
                                                       num_heads=4, hidden_dim=64, mlp_dim=128,
                                                       num_classes=10), 17, 12, 1e-3),
    }


def recompute_bn_stats(model, x, batch=64):
    """Running BatchNorm statistics as the plain average over the training set.
    Some torchvision models keep ImageNet-length momenta (MNASNet: 3e-4), whose
    running estimates stay at their initial values after a few epochs here."""
    bns = [b for b in model.modules() if isinstance(b, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for b in bns:
        b.reset_running_stats()
        b.momentum = None          # cumulative average
    model.train()
    with torch.no_grad():
        for i in range(0, len(x), batch):
            model(torch.from_numpy(x[i:i + batch]))
    model.eval()


def train_zoo(out, want, xtr, ytr, xte, yte):
    zoo = zoo_models()
    if not any(want(n) for n in zoo):
        return
    x_tr, x_te = rgb32(xtr), rgb32(xte)
    calib = x_tr[:N_CALIB]
    ex = torch.from_numpy(x_te[:1])
    for name, (make, opset, epochs, lr) in zoo.items():
        if make is None:
            continue
        variants = [n for n in zoo if n == name or
                    (zoo[n][0] is None and n.rsplit("_", 1)[0] == name.rsplit("_", 1)[0])]
        if not any(want(n) for n in variants):
            continue
        t0 = time.time()
        torch.manual_seed(SEED)
        m = make()
        fit(m, x_tr, ytr, epochs=epochs, lr=lr)
        recompute_bn_stats(m, x_tr)
        secs = round(time.time() - t0, 1)
        acc = accuracy(m, x_te, yte)
        for v in variants:
            if not want(v) and v != name:
                continue
            d = save_dir(out, v, eval_x=x_te, eval_y=yte, calib_x=calib)
            path = os.path.join(d, "model.onnx")
            vopset = zoo[v][1]
            if v.endswith("_fp16"):
                tmp = path + ".fp32"
                export(m, ex, tmp, vopset)
                half_model(tmp, path)
                os.remove(tmp)
            else:
                export(m, ex, path, vopset)
            write_info(d, {"arch": type(m).__name__, "opset": vopset, "fp16": v.endswith("_fp16"),
                           "params": sum(p.numel() for p in m.parameters()),
                           "torch_top1": acc, "train_seconds": secs})


# ---------------------------------------------------------------- main
def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(repo, "build", "corpus"))
    ap.add_argument("--only", default="", help="comma-separated model names")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    want = lambda n: not only or n in only  # noqa: E731

    seed_everything()
    xtr, ytr, xte, yte = digits_split()
    calib = xtr[:N_CALIB]
    ex = torch.from_numpy(xte[:1])

    # Models converted from the opset-13 export: name -> (conversion, arch).
    from_op13 = {
        "digits_cnn_fp16w": (fp16_weights, "DigitsCNN, FLOAT16 initializers + Cast"),
        "digits_cnn_fp16": (half_model, "DigitsCNN computing in FLOAT16"),
    }
    need_op13 = any(want(n) for n in from_op13)
    if want("digits_cnn_op9") or want("digits_cnn_op13") or need_op13:
        t0 = time.time()
        torch.manual_seed(SEED)
        m = DigitsCNN()
        fit(m, xtr, ytr, epochs=15)
        secs = time.time() - t0
        acc = accuracy(m, xte, yte)
        for name, opset in (("digits_cnn_op9", 9), ("digits_cnn_op13", 13)):
            if not want(name) and not (name == "digits_cnn_op13" and need_op13):
                continue
            d = save_dir(args.out, name, eval_x=xte, eval_y=yte, calib_x=calib)
            export(m, ex, os.path.join(d, "model.onnx"), opset, fold=False)
            write_info(d, {"arch": "DigitsCNN (Conv+BN)", "opset": opset, "torch_top1": acc,
                           "train_seconds": round(secs, 1)})
        for name, (convert, arch) in from_op13.items():
            if not want(name):
                continue
            d = save_dir(args.out, name, eval_x=xte, eval_y=yte, calib_x=calib)
            convert(os.path.join(args.out, "digits_cnn_op13", "model.onnx"),
                    os.path.join(d, "model.onnx"))
            write_info(d, {"arch": arch, "opset": 13, "torch_top1_fp32": acc,
                           "train_seconds": round(secs, 1)})

    if want("digits_transformer_op17"):
        t0 = time.time()
        torch.manual_seed(SEED)
        m = DigitsTransformer()
        fit(m, xtr, ytr, epochs=25, lr=2e-3)
        d = save_dir(args.out, "digits_transformer_op17", eval_x=xte, eval_y=yte, calib_x=calib)
        export(m, ex, os.path.join(d, "model.onnx"), 17)
        write_info(d, {"arch": "2x TransformerEncoderLayer d=32 h=4", "opset": 17,
                       "torch_top1": accuracy(m, xte, yte), "train_seconds": round(time.time() - t0, 1)})

    for kind, hidden in (("lstm", 64), ("gru", 48)):
        name = "digits_" + kind
        if not want(name):
            continue
        t0 = time.time()
        torch.manual_seed(SEED)
        m = DigitsRNN(kind, hidden)
        fit(m, xtr, ytr, epochs=30, lr=5e-3)
        d = save_dir(args.out, name, eval_x=xte, eval_y=yte, calib_x=calib)
        export(m, ex, os.path.join(d, "model.onnx"), 13)
        write_info(d, {"arch": f"{kind.upper()}(8->{hidden}) over rows", "opset": 13,
                       "torch_top1": accuracy(m, xte, yte), "train_seconds": round(time.time() - t0, 1)})

    if want("digits_seg"):
        t0 = time.time()
        torch.manual_seed(SEED)
        rng = np.random.RandomState(SEED)

        def make(x8):
            clean = upscale32(x8)
            mask = (clean > 0.35).astype(np.float32)
            noisy = np.clip(clean + rng.normal(0, 0.15, clean.shape).astype(np.float32)
                            + rng.uniform(0, 0.3, (len(x8), 1, 1, 1)).astype(np.float32), 0, 1.3)
            return noisy.astype(np.float32), mask

        xs_tr, ms_tr = make(xtr)
        xs_te, ms_te = make(xte)
        m = DigitsSeg()
        fit(m, xs_tr, ms_tr, epochs=12, lr=3e-3, loss_fn=nn.BCELoss())
        with torch.no_grad():
            p = m(torch.from_numpy(xs_te)).numpy() > 0.5
        t = ms_te > 0.5
        iou = float((p & t).sum() / max(1, (p | t).sum()))
        d = save_dir(args.out, "digits_seg", eval_x=xs_te, eval_y=ms_te, calib_x=xs_tr[:N_CALIB])
        export(m, torch.from_numpy(xs_te[:1]), os.path.join(d, "model.onnx"), 13)
        write_info(d, {"arch": "conv enc/dec, ConvTranspose + nearest Resize", "opset": 13,
                       "torch_mask_iou": iou, "train_seconds": round(time.time() - t0, 1)})

    if want("text_char_gpt_op14") or want("text_char_gpt_fp16"):
        train_char_gpt(args.out)

    train_zoo(args.out, want, xtr, ytr, xte, yte)
    return 0


if __name__ == "__main__":
    sys.exit(main())
