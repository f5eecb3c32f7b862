#!/usr/bin/env python3
"""W8A8 output SQNR: npu-studio's `w8a8` preset vs onnxruntime's quantize_static, side by side.

Usage: python3 bench/compare_quant_ort.py [--models det,rec,cls] [--binary target/release/npu-studio]
       [--a16w8]

For each PP-OCR model (data/models, see scripts/fetch_models.py) both quantizers calibrate
on the same real photos (data/inputs/<model>_*.npy: scikit-image's astronaut, chelsea, coffee,
page, rocket and text, preprocessed as PaddleOCR does) and are evaluated on the same photos.
onnxruntime runs its six QDQ configurations (per-tensor / per-channel weights x MinMax /
Percentile / Entropy calibration; uint8 activations, int8 weights, after its recommended
quant_pre_process); a configuration that fails to quantize or to run is reported as such.
Output SQNR = 10 log10(sum ref^2 / sum (ref - q)^2) over all evaluation images, against the
FP32 model in onnxruntime. Prints one table; --a16w8 adds onnxruntime's 16-bit-activation
configurations.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_static)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


class Reader(CalibrationDataReader):
    def __init__(self, name, arrays):
        self.it = iter([{name: a} for a in arrays])

    def get_next(self):
        return next(self.it, None)


def sqnr(refs, outs):
    num = sum(float(np.sum(r.astype(np.float64) ** 2)) for r in refs)
    den = sum(float(np.sum((r.astype(np.float64) - o.astype(np.float64)) ** 2)) for r, o in zip(refs, outs))
    return float("inf") if den == 0 else 10 * np.log10(num / den)


def ort_config(model, name, arrays, refs, per_channel, method, a16, tmp):
    pre = os.path.join(tmp, "pre.onnx")
    if not os.path.exists(pre):
        try:
            from onnxruntime.quantization.shape_inference import quant_pre_process
            quant_pre_process(model, pre, skip_symbolic_shape=True)
        except Exception as e:  # noqa: BLE001 - report and fall back to the raw model
            print(f"  quant_pre_process failed ({type(e).__name__}); quantizing the original", file=sys.stderr)
            pre = model
    out = os.path.join(tmp, f"q_{per_channel}_{method.name}_{a16}.onnx")
    extra = {"ActivationSymmetric": False, "WeightSymmetric": True}
    try:
        quantize_static(pre, out, Reader(name, arrays), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt16 if a16 else QuantType.QUInt8,
                        weight_type=QuantType.QInt8, calibrate_method=method, extra_options=extra)
    except Exception as e:  # noqa: BLE001
        return None, f"quantize failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
    try:
        s = session(out)
        outs = [s.run(None, {name: a})[0] for a in arrays]
    except Exception as e:  # noqa: BLE001
        return None, f"invalid model: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return sqnr(refs, outs), ""


def ours(binary, model, folder, preset):
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "r.json")
        t0 = time.perf_counter()
        subprocess.run([binary, "quantize", model, "--calib", folder, "--eval", folder, "--preset", preset,
                        "--out", os.path.join(tmp, "p.ron"), "--report", rep], check=True, capture_output=True)
        dt = time.perf_counter() - t0
        r = json.load(open(rep))
    return r["outputs"][0]["sqnr_db"], dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="det,rec,cls")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    ap.add_argument("--a16w8", action="store_true")
    args = ap.parse_args()
    rows = []
    for m in args.models.split(","):
        model = os.path.join(ROOT, "data", "models", f"ppocr_{m}.onnx")
        files = sorted(glob.glob(os.path.join(ROOT, "data", "inputs", f"{m}_*.npy")))
        arrays = [np.load(f).astype(np.float32) for f in files]
        fp = session(model)
        name = fp.get_inputs()[0].name
        refs = [fp.run(None, {name: a})[0] for a in arrays]
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "set")
            os.makedirs(folder)
            for f in files:
                os.symlink(os.path.abspath(f), os.path.join(folder, os.path.basename(f)))
            ours_db, ours_s = ours(args.binary, model, folder, "w8a8")
            results = []
            for a16 in ([False, True] if args.a16w8 else [False]):
                for pc in (False, True):
                    for meth in (CalibrationMethod.MinMax, CalibrationMethod.Percentile, CalibrationMethod.Entropy):
                        t0 = time.perf_counter()
                        db, err = ort_config(model, name, arrays, refs, pc, meth, a16, tmp)
                        label = f"{'A16W8' if a16 else 'W8A8'} {'per-channel' if pc else 'per-tensor'} {meth.name}"
                        results.append((label, db, err, time.perf_counter() - t0))
                        shown = f"{db:6.2f} dB" if db is not None else err
                        print(f"{m}: onnxruntime {label}: {shown} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
            if args.a16w8:
                w16 = ours(args.binary, model, folder, "w8a16")[0]
                results.append(("npu-studio w8a16", w16, "", 0.0))
        best = max((r[1] for r in results if r[1] is not None and r[0].startswith("W8A8")), default=None)
        rows.append((m, len(files), ours_db, ours_s, best, results))
    print(f"\nW8A8 output SQNR vs FP32 (dB), same {rows[0][1] if rows else 0} photos for calibration and evaluation")
    print(f"{'model':6} {'npu-studio w8a8':>16} {'best onnxruntime':>17} {'margin':>8}")
    for m, n, o, s, best, results in rows:
        margin = f"{o - best:+.2f}" if best is not None else "ORT failed"
        print(f"{m:6} {o:16.2f} {best if best is not None else float('nan'):17.2f} {margin:>8}")
    print("\nevery onnxruntime configuration:")
    for m, n, o, s, best, results in rows:
        for label, db, err, t in results:
            print(f"  {m:4} {label:36} {f'{db:7.2f}' if db is not None else err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
