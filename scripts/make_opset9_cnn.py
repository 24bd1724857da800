#!/usr/bin/python3
"""Writes tests/data/prepare/opset9_cnn.onnx and opset9_x.npy: a small CNN
exported by torch.onnx.export at opset 9, the way older real models arrive.

  x [4, 1, 8, 8] -> Conv(4) -> BatchNorm -> Relu -> MaxPool -> Conv(8) -> Relu
  -> x.view(x.size(0), -1) (Shape -> Gather -> Unsqueeze -> Concat -> Reshape
  at opset 9) -> Linear(10) -> Softmax(dim=1)

Weights and inputs are seeded random, so the files are reproducible; both
are a few KB. Usage: make_opset9_cnn.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import torch
from torch import nn


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = nn.functional.max_pool2d(x, 2)
        x = torch.relu(self.conv2(x))
        x = x.view(x.size(0), -1)
        return torch.softmax(self.fc(x), dim=1)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
        "prepare")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = SmallCnn()
    with torch.no_grad():
        # Non-trivial statistics, as a trained model has.
        model.bn1.running_mean.uniform_(-0.5, 0.5)
        model.bn1.running_var.uniform_(0.5, 2.0)
        model.bn1.weight.uniform_(0.5, 1.5)
        model.bn1.bias.uniform_(-0.2, 0.2)
    model.eval()
    x = torch.from_numpy(
        np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(
            np.float32))
    path = os.path.join(out_dir, "opset9_cnn.onnx")
    torch.onnx.export(model, (x,), path, opset_version=9,
                      input_names=["x"], output_names=["probs"],
                      do_constant_folding=False)
    np.save(os.path.join(out_dir, "opset9_x.npy"), x.numpy())
    print(path)


if __name__ == "__main__":
    main()
