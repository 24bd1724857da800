#!/usr/bin/python3
"""The peer of bench/weight_kernel_bench.cc in PyTorch (Debian's python3-torch).

Times torch.quantize_per_channel (and quantize_per_tensor) on the same
rows x cols fp32 tensor, including what the whole path must do first: the
per-channel range (torch.aminmax) and the symmetric narrow-range int8 scales
quantd's weight default uses (max(|min|, |max|) / 127, zero point 0). torch
does not compute error statistics; quantd's kernel does, and is still compared
with this. torch (1.13) has no blockwise int4 quantizer, so the blocked cases
have no peer.

Prints one line per case, "case threads GB/s" (GB/s of float bytes read,
median of --repeats runs after one warm-up), which weight_kernel_bench reads
with --peer_file.
"""
import argparse
import statistics
import time

import torch


def symmetric_scales(lo, hi):
    scale = torch.maximum(lo.abs(), hi.abs()) / 127.0
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def per_channel(x, axis):
    def run():
        lo, hi = torch.aminmax(x, dim=1 - axis)
        scale = symmetric_scales(lo, hi).double()
        zero_point = torch.zeros(x.shape[axis], dtype=torch.int64)
        return torch.quantize_per_channel(x, scale, zero_point, axis,
                                          torch.qint8)

    return run


def per_tensor(x):
    def run():
        lo, hi = torch.aminmax(x)
        scale = float(symmetric_scales(lo, hi))
        return torch.quantize_per_tensor(x, scale, 0, torch.qint8)

    return run


def median_seconds(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    torch.manual_seed(13)
    x = torch.randn(args.rows, args.cols) * 0.02
    nbytes = x.numel() * 4
    cases = {
        "per_tensor_int8": per_tensor(x),
        "per_channel_int8_axis0": per_channel(x, 0),
        "per_channel_int8_axis1": per_channel(x, 1),
    }
    for threads in [int(t) for t in args.threads.split(",") if t]:
        torch.set_num_threads(threads)
        for name, fn in cases.items():
            seconds = median_seconds(fn, args.repeats)
            print(f"{name} {threads} {nbytes / seconds / 1e9:.3f}", flush=True)


if __name__ == "__main__":
    main()
