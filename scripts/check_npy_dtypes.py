#!/usr/bin/env python3
"""Every numpy dtype `npu-studio run` reads and writes as `.npy`, checked with numpy.

For each dtype a one-node ONNX model (Identity, built with `onnx.helper`) is run on an
array numpy saved: little-endian, big-endian and Fortran-ordered. The output `.npy` must
load in numpy with the same dtype, shape and values. Dtypes no ONNX tensor has (complex,
datetime) must be refused with a message naming the dtype and the file.

Usage: check_npy_dtypes.py [--bin PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

DTYPES = {
    "float16": TensorProto.FLOAT16,
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "int8": TensorProto.INT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL,
    "str": TensorProto.STRING,
}


def sample(name, rng):
    if name == "bool":
        return rng.random((3, 4)) > 0.5
    if name == "str":
        return np.array([["a", "bé", ""], ["日本", "x" * 9, "z"]])
    dt = np.dtype(name)
    if dt.kind == "f":
        return (rng.standard_normal((3, 4)) * 100).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=(3, 4), dtype=dt, endpoint=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/npu-studio"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    failures, checked = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, proto in DTYPES.items():
            x = sample(name, rng)
            graph = helper.make_graph(
                [helper.make_node("Identity", ["x"], ["y"])], "identity",
                [helper.make_tensor_value_info("x", proto, list(x.shape))],
                [helper.make_tensor_value_info("y", proto, list(x.shape))])
            model = os.path.join(tmp, f"{name}.onnx")
            onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
            variants = {"little-endian": x, "Fortran order": np.asfortranarray(x)}
            if x.dtype.itemsize > 1 and x.dtype.kind in "fiuU":
                variants["big-endian"] = x.astype(x.dtype.newbyteorder(">"))
            for label, arr in variants.items():
                path = os.path.join(tmp, f"{name}_{label.replace(' ', '_')}.npy")
                np.save(path, arr)
                out = os.path.join(tmp, f"out_{name}_{label.replace(' ', '_')}")
                r = subprocess.run([args.bin, "run", model, "--input", f"x={path}", "--output-dir", out],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    failures.append(f"{name} {label}: run failed: {r.stderr.strip()[-300:]}")
                    continue
                y = np.load(os.path.join(out, "y.npy"))
                want = x.astype(x.dtype.newbyteorder("="))
                if y.dtype != want.dtype or y.shape != want.shape or not np.array_equal(y, want):
                    failures.append(f"{name} {label}: wrote {y.dtype} {y.shape}, expected {want.dtype} {want.shape}")
                checked += 1
        for arr, word in [(np.ones(3, dtype=np.complex64), "complex64"),
                          (np.array(["2026-12-02"], dtype="datetime64[D]"), "datetime64")]:
            path = os.path.join(tmp, f"{word}.npy")
            np.save(path, arr)
            r = subprocess.run([args.bin, "run", os.path.join(tmp, "float32.onnx"), "--input", f"x={path}"],
                               capture_output=True, text=True)
            if r.returncode == 0 or word not in r.stderr or "datetime64.npy" not in r.stderr and word == "datetime64":
                failures.append(f"{word}: expected a refusal naming the dtype and file, got rc {r.returncode}: {r.stderr.strip()}")
            checked += 1
    print(f"{checked} .npy round trips and refusals checked through `npu-studio run`")
    if failures:
        print("\n".join("FAIL " + f for f in failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
