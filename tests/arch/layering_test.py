#!/usr/bin/env python3
"""Checks that every #include between quantd's layers points down.

The layers and their allowed dependencies are the ones core/CMakeLists.txt
links (ARCHITECTURE.md draws them). The linker catches a call into a higher
layer (the layer_check_* executables); this test also catches an include of
a header-only piece of a higher layer, and keeps server/ and client/ honest:
core never includes server or client, the client sees only tensor I/O.

Usage: layering_test.py [SOURCE_ROOT]; prints each violation, exits 1 on any.
"""
import os
import re
import sys

# Files that live in a folder but build into another layer's library.
FILE_LAYER = {
    "core/executor/tensor.h": "tensor_io",
    "core/executor/tensor.cc": "tensor_io",
    "core/executor/npy.h": "tensor_io",
    "core/executor/npy.cc": "tensor_io",
    "core/graph/tensor_util.h": "tensor_io",
    "core/graph/tensor_util.cc": "tensor_io",
    "core/graph/external_stream.h": "tensor_io",
    "core/graph/external_stream.cc": "tensor_io",
}

# Each layer and the layers it may include (itself always allowed).
ALLOWED = {
    "base": set(),
    "numerics": {"base"},
    "tensor_io": {"base", "numerics"},
    "graph": {"base", "numerics", "tensor_io"},
    "executor": {"base", "numerics", "tensor_io", "graph"},
    "calibration": {"base", "numerics"},
    "passes": {"base", "numerics", "tensor_io", "graph", "executor",
               "calibration"},
    "engine": {"base", "numerics", "tensor_io", "graph", "executor",
               "calibration", "passes"},
    "server": {"base", "numerics", "tensor_io", "graph", "executor",
               "calibration", "passes", "engine"},
    "client": {"base", "numerics", "tensor_io"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:core|server|client)/[^"]+)"')


def layer_of(path):
    """The layer a repository-relative path belongs to, or None."""
    if path in FILE_LAYER:
        return FILE_LAYER[path]
    parts = path.split("/")
    if parts[0] == "core" and len(parts) > 2:
        return parts[1]
    if parts[0] in ("server", "client"):
        return parts[0]
    return None


def violations(root):
    found = []
    for top in ("core", "server", "client"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".h", ".cc", ".inc")):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                src = layer_of(rel)
                if src is None:
                    continue
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        dst = layer_of(m.group(1))
                        if dst is None or dst == src:
                            continue
                        if dst not in ALLOWED.get(src, set()):
                            found.append(f"{rel}:{lineno}: {src} includes "
                                         f"{m.group(1)} ({dst})")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    unknown = [d for d in os.listdir(os.path.join(root, "core"))
               if os.path.isdir(os.path.join(root, "core", d))
               and d not in ALLOWED]
    bad = violations(root)
    for d in unknown:
        bad.append(f"core/{d}: a folder no layer rule covers "
                   "(add it to ALLOWED and core/CMakeLists.txt)")
    for v in bad:
        print(v)
    print(f"layering: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
