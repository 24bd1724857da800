#!/usr/bin/python3
"""Exports a randomly initialised ResNet-18 (or MobileNetV2, or ViT-B/16) to ONNX for benchmarks.

  /usr/bin/python3 scripts/make_resnet18.py OUT.onnx [--mobilenet | --vit] [--seed N] [--size S]

torchvision's model with weights=None (no download), a fixed seed, eval mode,
opset 13, input "input" [N,3,S,S] float32 (dynamic batch, S = 224 unless
--size), output "logits" [N,1000]. The input size is fixed in the model
because ONNX Runtime refuses feeds that differ from the declared dims. ResNet-18 is ~45 MB, MobileNetV2 ~14 MB.
--vit: torchvision's ViT-B/16 built for S x S images (S a multiple of 16:
(S/16)^2 + 1 tokens of 768, 12 encoder layers, BERT-base's shapes), opset 17
(LayerNormalization), ~346 MB. The weights are random, so
only the shapes and the arithmetic matter: use it for speed, not accuracy.
The output is not committed; regenerate it when needed.
"""
import argparse
import contextlib
import os
import sys
import time

import numpy as np
import torch
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output .onnx path")
    ap.add_argument("--mobilenet", action="store_true", help="export MobileNetV2 instead of ResNet-18")
    ap.add_argument("--vit", action="store_true", help="export ViT-B/16 instead of ResNet-18")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    t0 = time.time()
    opset = 13
    if args.vit:
        name = "vit_b_16"
        model = torchvision.models.vision_transformer.VisionTransformer(
            image_size=args.size, patch_size=16, num_layers=12, num_heads=12,
            hidden_dim=768, mlp_dim=3072)
        opset = 17
    elif args.mobilenet:
        name = "mobilenet_v2"
        model = torchvision.models.mobilenet_v2(weights=None)
    else:
        name = "resnet18"
        model = torchvision.models.resnet18(weights=None)
    model.eval()

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    dummy = torch.randn(1, 3, args.size, args.size)
    # Under no_grad torch's MultiheadAttention takes its fused fast path,
    # which has no ONNX export; the export itself does not train anything.
    with contextlib.nullcontext() if args.vit else torch.no_grad():
        torch.onnx.export(
            model, dummy, args.out,
            opset_version=opset,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
            do_constant_folding=True,
        )

    import onnx
    onnx.checker.check_model(args.out)  # path form: fine for models > 2 GB too
    dt = time.time() - t0
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {name}, {size} bytes ({size / 1e6:.1f} MB) in {dt:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
