#!/usr/bin/env python3
"""Runs real TFLite models through `npu-studio run`, as a user would, and compares every
output with LiteRT's reference kernels (ai-edge-litert, BUILTIN_REF resolver) on the same
real inputs: MediaPipe's face detectors and landmark models (float16 and float32 weights)
on the six photos, Basic Pitch's nmp.tflite on real audio. Fails above 1e-4 relative error
(max |ours - LiteRT| / max |LiteRT|, per output).

Basic Pitch exists as both nmp.onnx and nmp.tflite: both files also run through our two
importers on the same audio, and their outputs must agree to 1e-4 too.

Usage: check_tflite_import.py [--models face_short,basic_pitch] [--tol 1e-4]
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "data")
BIN = os.environ.get("NPU_STUDIO", os.path.join(ROOT, "target", "release", "npu-studio"))

# model: the prefix of its inputs in data/inputs
MODELS = {
    "face_short": "face_short_",
    "face_back": "face_back_",
    "face_full": "face_full_",
    # The same detector with sparse weights (DENSIFY, fp16 values in CSR).
    "face_full_sparse": "face_full_",
    "face_landmark": "face_landmark_",
    "iris_landmark": "iris_landmark_",
    "basic_pitch": "pitch_",
}


def sanitize(name):
    s = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if len(s) <= 120:
        return s
    h = 0xCBF29CE484222325
    for b in name.encode():
        h ^= b
        h = (h * 0x100000001B3) % (1 << 64)
    return f"{s[:100]}_{h:016x}"


def litert(path):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=path, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    return it


def run_ours(model, feeds, out):
    args = [BIN, "run", model, "--output-dir", out]
    for name, path in feeds.items():
        args += ["--input", f"{name}={path}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"npu-studio run {model} failed:\n{r.stderr}")


def rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    scale = max(np.abs(b).max(), 1e-30)
    return float(np.abs(a - b).max() / scale)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    worst = 0.0
    failed = []
    for name in args.models.split(","):
        path = os.path.join(DATA, "models", f"{name}.tflite")
        it = litert(path)
        inp = it.get_input_details()[0]
        files = sorted(glob.glob(os.path.join(DATA, "inputs", MODELS[name] + "*.npy")))
        if not files:
            raise SystemExit(f"no inputs for {name}: run scripts/fetch_models.py")
        for f in files:
            x = np.load(f)
            it.set_tensor(inp["index"], x)
            it.invoke()
            with tempfile.TemporaryDirectory() as out:
                run_ours(path, {inp["name"]: f}, out)
                errs = []
                for od in it.get_output_details():
                    ref = it.get_tensor(od["index"])
                    ours = np.load(os.path.join(out, sanitize(od["name"]) + ".npy"))
                    e = rel(ours, ref)
                    errs.append(e)
                    worst = max(worst, e)
                    if not e <= args.tol:
                        failed.append(f"{name} {os.path.basename(f)} {od['name']}: {e:.3g}")
            print(f"{name:14s} {os.path.basename(f):28s} max rel err {max(errs):.2e} over {len(errs)} outputs")
        if name == "basic_pitch":
            onnx_model = os.path.join(DATA, "models", "basic_pitch.onnx")
            import onnx

            oname = onnx.load(onnx_model).graph.input[0].name
            for f in files:
                with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                    run_ours(path, {inp["name"]: f}, a)
                    run_ours(onnx_model, {oname: f}, b)
                    # tf2onnx kept the TFLite converter's output names: match by name.
                    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(a, "*.npy")))
                    other = sorted(os.path.basename(p) for p in glob.glob(os.path.join(b, "*.npy")))
                    if names != other:
                        raise SystemExit(f"output names differ: {names} vs {other}")
                    pairs = [rel(np.load(os.path.join(a, n)), np.load(os.path.join(b, n))) for n in names]
                    e = max(pairs)
                    worst = max(worst, e)
                    if not e <= args.tol:
                        failed.append(f"basic_pitch onnx vs tflite {os.path.basename(f)}: {e:.3g}")
                    print(f"{'  .onnx vs .tflite':14s} {os.path.basename(f):28s} max rel diff {e:.2e}")
    print(f"worst relative error {worst:.2e} (tolerance {args.tol:g})")
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
