#!/usr/bin/env python3
"""Runs `npu-studio run` on the real PP-OCR models and real images, as a user would, and
checks every output against onnxruntime: max|err| / max|ref| <= 1e-4 (outputs that are all
~0, i.e. no text in the photo, are held to 1e-6 absolute). Exits non-zero on a mismatch."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ.get("NPU_STUDIO", os.path.join(ROOT, "target", "release", "npu-studio"))
failures = 0
for kind in ("det", "cls", "rec"):
    model = os.path.join(ROOT, "data", "models", f"ppocr_{kind}.onnx")
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    iname = sess.get_inputs()[0].name
    oname = sess.get_outputs()[0].name
    inputs = sorted(f for f in os.listdir(os.path.join(ROOT, "data", "inputs")) if f.startswith(kind + "_"))
    for f in inputs:
        xpath = os.path.join(ROOT, "data", "inputs", f)
        ref = sess.run(None, {iname: np.load(xpath)})[0]
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([BIN, "run", model, "--input", f"{iname}={xpath}", "--output-dir", out], check=True, capture_output=True)
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in oname)
            got = np.load(os.path.join(out, safe + ".npy"))
        err = float(np.abs(got.astype(np.float64) - ref).max())
        top = float(np.abs(ref).max())
        if top < 1e-3:
            ok = err <= 1e-6
            print(f"{kind} {f}: outputs ~0, max|err| = {err:.2e} {'ok' if ok else 'FAIL'}")
        else:
            ok = err / top <= 1e-4
            print(f"{kind} {f}: max|err|/max|ref| = {err / top:.2e} {'ok' if ok else 'FAIL'}")
        failures += 0 if ok else 1
# Models written back by our ONNX writer (tests/tests/export_round_trip.rs writes them to
# data/exported/) must load in onnxruntime and give the original's outputs.
import glob

import onnx
from onnx import numpy_helper

exported = sorted(glob.glob(os.path.join(ROOT, "data", "exported", "*.onnx")))
if len(exported) < 8:
    print(f"expected 8 models in data/exported (cargo test writes them), found {len(exported)}")
    failures += 1
for path in exported:
    name = os.path.basename(path)[: -len(".onnx")]
    ours = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    if name.startswith("ppocr_"):
        orig_path = os.path.join(ROOT, "data", "models", name + ".onnx")
        feeds = {ours.get_inputs()[0].name: np.load(os.path.join(ROOT, "data", "inputs", name[6:] + "_chelsea.npy"))}
    else:
        orig_path = os.path.join(ROOT, "data", "real", name, "model.onnx")
        feeds = {}
        pbs = sorted(glob.glob(os.path.join(ROOT, "data", "real", name, "test_data_set_0", "input_*.pb")))
        for i, pb in enumerate(pbs):
            t = onnx.TensorProto()
            with open(pb, "rb") as f:
                t.ParseFromString(f.read())
            feeds[ours.get_inputs()[i].name] = numpy_helper.to_array(t)
    orig = ort.InferenceSession(orig_path, providers=["CPUExecutionProvider"])
    want = orig.run(None, feeds)
    got = ours.run(None, feeds)
    err = max(float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max()) for a, b in zip(want, got))
    ok = err == 0.0
    print(f"exported {name}: onnxruntime on our file vs the original: max|err| = {err:.2e} {'ok' if ok else 'FAIL'}")
    failures += 0 if ok else 1
print(f"cli-vs-onnxruntime: {'all match' if failures == 0 else f'{failures} mismatches'}")
sys.exit(1 if failures else 0)
