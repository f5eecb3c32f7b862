#!/usr/bin/env python3
"""FP32 latency of npu-studio vs onnxruntime on the same model, input and thread count.

Usage: python3 bench/compare_ort.py [--runs N] [--rounds N] [--threads 1,2] [--optimize] [--binary target/release/npu-studio]

Runs, from data/models (scripts/fetch_models.py fetches and makes them), each on a real
input: the PP-OCR det (1x3x736x736), rec (1x3x48x320) and cls (1x3x48x192) models; two
YOLO-family detectors, ultralytics' YOLOv8n export (1x3x320x320) and a YOLOX export
(1x3x416x416); a ResNet-18 and a ViT-Tiny/16 encoder (1x3x224x224, real architectures with
random weights, scripts/make_bench_models.py); and the Basic Pitch audio model (1x43844x1
samples of a recording). Prints median latencies and
the ratio npu-studio / onnxruntime (lower is better; 1.0 = parity), and the same for the
fastest run of each. The engines take turns (--rounds), so that a slow spell of a shared
machine falls on both. onnxruntime runs with its default graph optimizations; with
--optimize, npu-studio runs its own graph-optimization passes first too (`bench --optimize`).
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
    ("yolov8", "yolov8n_nudenet.onnx", "yolov8_chelsea.npy"),
    ("yolox", "yolox_ddddocr.onnx", "yolox_chelsea.npy"),
    ("resnet", "resnet18_like.onnx", "imagenet_chelsea.npy"),
    ("vit", "vit_tiny_like.onnx", "imagenet_chelsea.npy"),
    ("pitch", "basic_pitch.onnx", "pitch_house0.npy"),
]


def ort_session(model, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return sess, sess.get_inputs()[0].name


def ort_times(sess, name, x, runs, warmup):
    for _ in range(warmup):
        sess.run(None, {name: x})
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def our_times(binary, model, name, xfile, threads, runs, warmup, optimize):
    cmd = [binary, "bench", model, "--input", f"{name}={xfile}", "--threads", str(threads),
           "--runs", str(runs), "--warmup", str(warmup), "--json"]
    if optimize:
        cmd.append("--optimize")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["times_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10, help="timed runs per round and engine")
    ap.add_argument("--rounds", type=int, default=3, help="rounds alternating the two engines")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    ap.add_argument("--models", default=",".join(c[0] for c in CASES))
    ap.add_argument("--optimize", action="store_true", help="npu-studio optimizes the graph first")
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, default graph optimizations; npu-studio "
          f"{'with' if args.optimize else 'without'} its graph optimizer")
    wanted = args.models.split(",")
    print(
        f"{'model':7} {'threads':>7} {'onnxruntime ms':>15} {'npu-studio ms':>14} {'ratio':>7}"
        f" {'min ort':>8} {'min ours':>9} {'ratio of mins':>13}"
    )
    for kind, mfile, xfile in CASES:
        if kind not in wanted:
            continue
        model = os.path.join(ROOT, "data", "models", mfile)
        xpath = os.path.join(ROOT, "data", "inputs", xfile)
        x = np.load(xpath)
        for t in [int(v) for v in args.threads.split(",")]:
            sess, name = ort_session(model, t)
            o, n = [], []
            # Alternate the engines so that a slow spell of the machine hits both alike.
            for _ in range(args.rounds):
                o += ort_times(sess, name, x, args.runs, args.warmup)
                n += our_times(args.binary, model, name, xpath, t, args.runs, args.warmup, args.optimize)
            o_med, n_med = float(np.median(o)), float(np.median(n))
            o_min, n_min = float(np.min(o)), float(np.min(n))
            print(
                f"{kind:7} {t:7d} {o_med:15.2f} {n_med:14.2f} {n_med / o_med:7.2f}x"
                f" {o_min:8.2f} {n_min:9.2f} {n_min / o_min:12.2f}x",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
