#!/usr/bin/python3
"""NumPy / PyTorch goldens for the executor's index and data-movement kernels.

  /usr/bin/python3 scripts/make_index_golden.py [--out tests/data/executor/index]

Writes small .npy files CASE_NAME.npy that tests/core/executor/ops_index_test.cc
feeds to single ONNX nodes (Einsum, TopK, GatherElements, GatherND,
ScatterElements, ScatterND, CumSum). Values come from numpy.einsum, a stable
numpy argsort (TopK: ties keep the lower index), torch.gather /
torch.scatter_reduce and numpy loops that follow the ONNX definitions, not
from the executor. EINSUM_CASES below must match kEinsumCases in the test.
"""
import argparse
import os

import numpy as np
import torch

# (case name, equation, input shapes); the test states the same table.
EINSUM_CASES = [
    ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
    ("batch_matmul", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("attention", "bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("implicit_matmul", "ij,jk", [(3, 4), (4, 2)]),
    ("implicit_transpose", "ba", [(3, 4)]),
    ("trace", "ii", [(4, 4)]),
    ("diagonal", "ii->i", [(4, 4)]),
    ("batch_diagonal", "...ii->...i", [(2, 3, 3)]),
    ("sum_all", "ij->", [(3, 4)]),
    ("inner", "i,i", [(5,), (5,)]),
    ("outer", "i,j->ij", [(3,), (4,)]),
    ("three_operands", "abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ellipsis_broadcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
    ("repeated_in_two", "iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("permute_sum", "ijk->kj", [(2, 3, 4)]),
    ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("upper_labels", "Ab,bC->CA", [(3, 2), (2, 4)]),
]


def save(out, case, **tensors):
    for name, a in tensors.items():
        a = np.array(a, order="C")  # (ascontiguousarray would make 0-d 1-d)
        np.save(os.path.join(out, f"{case}_{name}.npy"), a)


def einsum_cases(out, rng):
    for name, eq, shapes in EINSUM_CASES:
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        y = np.einsum(eq, *[x.astype(np.float64) for x in xs])
        tensors = {f"x{i}": x for i, x in enumerate(xs)}
        tensors["y"] = np.asarray(y, dtype=np.float32)
        save(out, f"einsum_{name}", **tensors)


def topk_cases(out, rng):
    # Small integers so ties are common; ties must keep the lower index.
    x = rng.integers(-3, 4, size=(3, 7, 2)).astype(np.float32)
    for largest in (1, 0):
        for axis in (1, -1, 0):
            k = 3 if x.shape[axis] >= 3 else 1
            key = -x if largest else x
            order = np.argsort(key, axis=axis, kind="stable")
            idx = np.take(order, np.arange(k), axis=axis)
            vals = np.take_along_axis(x, idx, axis=axis)
            case = f"topk_{'largest' if largest else 'smallest'}_axis{axis}"
            save(out, case, x=x, values=vals, indices=idx.astype(np.int64),
                 k=np.array([k], dtype=np.int64))


def gather_scatter_cases(out, rng):
    data = rng.standard_normal((3, 4, 5)).astype(np.float32)
    # GatherElements == torch.gather (indices made non-negative for torch,
    # then some shifted negative for the ONNX input).
    for axis in (0, 1, 2):
        shape = [3, 4, 5]
        shape[axis] = 6
        shape[(axis + 1) % 3] -= 1
        idx = rng.integers(0, data.shape[axis], size=shape)
        y = torch.gather(torch.from_numpy(data), axis, torch.from_numpy(idx))
        neg = np.where(rng.random(idx.shape) < 0.3, idx - data.shape[axis], idx)
        save(out, f"gather_elements_axis{axis}", data=data,
             indices=neg.astype(np.int64), y=y.numpy())

    # GatherND with batch_dims 0 and 1, by the ONNX definition.
    idx0 = rng.integers(-3, 3, size=(2, 2, 2))  # tuples into dims 0, 1
    idx0[..., 1] = rng.integers(-4, 4, size=(2, 2))
    y0 = np.stack([data[tuple(t)] for t in idx0.reshape(-1, 2)]).reshape(
        2, 2, 5)
    save(out, "gathernd_b0", data=data, indices=idx0.astype(np.int64), y=y0)
    idx1 = rng.integers(-4, 4, size=(3, 2, 1))  # per batch: tuples into dim 1
    y1 = np.stack([np.stack([data[b][tuple(t)] for t in idx1[b]])
                   for b in range(3)])
    save(out, "gathernd_b1", data=data, indices=idx1.astype(np.int64), y=y1)

    # ScatterElements with every reduction == torch.scatter_reduce
    # (include_self keeps data in the fold, as ONNX does). Integer-valued
    # floats so the order of duplicate updates cannot change a sum.
    base = rng.integers(-5, 6, size=(3, 4)).astype(np.float32)
    idx = rng.integers(0, 3, size=(4, 4))  # duplicates along axis 0
    upd = rng.integers(-5, 6, size=(4, 4)).astype(np.float32)
    for red, torch_red in (("add", "sum"), ("mul", "prod"), ("max", "amax"),
                           ("min", "amin")):
        y = torch.from_numpy(base.copy()).scatter_reduce(
            0, torch.from_numpy(idx), torch.from_numpy(upd), torch_red,
            include_self=True)
        save(out, f"scatter_elements_{red}", data=base,
             indices=(idx - 3).astype(np.int64), updates=upd, y=y.numpy())
    # No reduction: unique indices along axis 1.
    idx_u = np.stack([rng.permutation(4)[:3] for _ in range(3)])
    upd_u = rng.standard_normal((3, 3)).astype(np.float32)
    y = torch.from_numpy(base.copy()).scatter(1, torch.from_numpy(idx_u),
                                              torch.from_numpy(upd_u))
    save(out, "scatter_elements_none", data=base,
         indices=idx_u.astype(np.int64), updates=upd_u, y=y.numpy())

    # ScatterND by the ONNX definition (slices of rows, a duplicate for add).
    nd_idx = np.array([[0, 1], [2, -1], [0, 1]], dtype=np.int64)
    nd_upd = rng.integers(-5, 6, size=(3, 5)).astype(np.float32)
    for red in ("add", "mul", "max", "min"):
        y = data.copy()
        for t, u in zip(nd_idx, nd_upd):
            at = tuple(t)
            y[at] = {"add": np.add, "mul": np.multiply, "max": np.maximum,
                     "min": np.minimum}[red](y[at], u)
        save(out, f"scatternd_{red}", data=data, indices=nd_idx, updates=nd_upd,
             y=y)


def cumsum_cases(out, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for axis in (0, 1, -1):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                v = np.flip(x, axis) if reverse else x
                c = np.cumsum(v.astype(np.float64), axis=axis)
                if exclusive:
                    c = c - v
                y = np.flip(c, axis) if reverse else c
                save(out, f"cumsum_axis{axis}_e{exclusive}_r{reverse}", x=x,
                     y=y.astype(np.float32))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "executor", "index"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(20240611)
    einsum_cases(args.out, rng)
    topk_cases(args.out, rng)
    gather_scatter_cases(args.out, rng)
    cumsum_cases(args.out, rng)


if __name__ == "__main__":
    main()
