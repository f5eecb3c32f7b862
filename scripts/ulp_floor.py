#!/usr/bin/env python3
"""How far a model's outputs move when its weights move by one float32 ulp.

Usage: python3 scripts/ulp_floor.py [--trials N] [MODEL INPUT.npy ...]

Any rewrite that changes weights (BatchNorm folding, bias folding, scale folding) rounds
each new weight once, by at most half an ulp. This script measures what rounding of that
size does to a model's output, with no rewrite at all: every float weight (initializers
and Constant nodes with more than 16 elements) is moved up or down by one ulp at random
(or kept), the model runs in onnxruntime with its graph optimizations off, and the output
is compared with the unchanged model's by max|err|/max|ref| and ‖err‖/‖ref‖. It is the
floor under which no weight-folding optimizer can bring that model's error in float32.

Without arguments it measures the PP-OCR det, rec and cls models on the astronaut photo.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT = [
    ("data/models/ppocr_det.onnx", "data/inputs/det_astronaut.npy"),
    ("data/models/ppocr_rec.onnx", "data/inputs/rec_astronaut.npy"),
    ("data/models/ppocr_cls.onnx", "data/inputs/cls_astronaut.npy"),
]


def run(model, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float64)


def weights(model):
    consts = [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    return list(model.graph.initializer) + consts


def nudge(model, rng):
    for t in weights(model):
        a = numpy_helper.to_array(t)
        if a.dtype != np.float32 or a.size <= 16:
            continue
        step = rng.integers(-1, 2, a.shape)
        up = np.nextafter(a, np.float32(np.inf))
        down = np.nextafter(a, np.float32(-np.inf))
        b = np.where(step > 0, up, np.where(step < 0, down, a)).astype(np.float32)
        t.CopyFrom(numpy_helper.from_array(b, t.name))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("pairs", nargs="*", help="MODEL INPUT.npy pairs")
    args = ap.parse_args()
    if len(args.pairs) % 2:
        sys.exit("ulp_floor: give MODEL INPUT.npy pairs")
    pairs = list(zip(args.pairs[::2], args.pairs[1::2])) or [
        (os.path.join(ROOT, m), os.path.join(ROOT, i)) for m, i in DEFAULT
    ]
    rng = np.random.default_rng(0)
    print(f"{'model':<28} {'input':<22} {'max|err|/max|ref|':>18} {'‖err‖/‖ref‖':>12}")
    for path, inp in pairs:
        x = np.load(inp)
        ref = run(onnx.load(path), x)
        worst = (0.0, 0.0)
        for _ in range(args.trials):
            m = onnx.load(path)
            nudge(m, rng)
            y = run(m, x)
            rel = float(np.abs(y - ref).max() / np.abs(ref).max())
            l2 = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
            worst = (max(worst[0], rel), max(worst[1], l2))
        print(f"{os.path.basename(path):<28} {os.path.basename(inp):<22} {worst[0]:>18.2e} {worst[1]:>12.2e}")


if __name__ == "__main__":
    main()
