#!/usr/bin/env python3
"""FP32 latency of npu-studio vs onnxruntime on the same model, input and thread count.

Usage: python3 bench/compare_ort.py [--runs N] [--threads 1,2] [--binary target/release/npu-studio]

Runs the PP-OCR det (1x3x736x736), rec (1x3x48x320) and cls (1x3x48x192) models from
data/models (see scripts/fetch_models.py) on a real image, prints median latencies and
the ratio npu-studio / onnxruntime (lower is better; 1.0 = parity).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CASES = [
    ("det", "ppocr_det.onnx", "det_page.npy"),
    ("rec", "ppocr_rec.onnx", "rec_text.npy"),
    ("cls", "ppocr_cls.onnx", "cls_text.npy"),
]


def ort_median(model, x, threads, runs, warmup):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for _ in range(warmup):
        sess.run(None, {name: x})
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), float(np.min(times)), name


def ours(binary, model, name, xfile, threads, runs, warmup):
    out = subprocess.run(
        [binary, "bench", model, "--input", f"{name}={xfile}", "--threads", str(threads),
         "--runs", str(runs), "--warmup", str(warmup), "--json"],
        check=True, capture_output=True, text=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["median_ms"], r["min_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    ap.add_argument("--models", default="det,rec,cls")
    args = ap.parse_args()
    wanted = args.models.split(",")
    print(f"{'model':6} {'threads':>7} {'onnxruntime ms':>15} {'npu-studio ms':>14} {'ratio':>7}")
    for kind, mfile, xfile in CASES:
        if kind not in wanted:
            continue
        model = os.path.join(ROOT, "data", "models", mfile)
        xpath = os.path.join(ROOT, "data", "inputs", xfile)
        x = np.load(xpath)
        for t in [int(v) for v in args.threads.split(",")]:
            o_med, _, name = ort_median(model, x, t, args.runs, args.warmup)
            n_med, _ = ours(args.binary, model, name, xpath, t, args.runs, args.warmup)
            print(f"{kind:6} {t:7d} {o_med:15.2f} {n_med:14.2f} {n_med / o_med:7.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
