#!/usr/bin/env python3
"""Runs `npu-studio run` on the real PP-OCR models and the models of bench/compare_ort.py
with real inputs, as a user would, and checks every output against onnxruntime: max|err| / max|ref| <= 1e-4 (outputs that are all
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
# The models of bench/compare_ort.py (PP-OCR det/rec/cls, YOLOv8n, YOLOX, ResNet-18,
# ViT-Tiny, Basic Pitch), each on every input of its family in data/inputs (the prefix of
# the benchmark's input: `det_`, `imagenet_`, ...).
sys.path.insert(0, os.path.join(ROOT, "bench"))
from compare_ort import CASES as BENCH_CASES  # noqa: E402

CASES = [(kind, mfile, bench_input.split("_")[0] + "_") for kind, mfile, bench_input in BENCH_CASES]
for kind, mfile, prefix in CASES:
    model = os.path.join(ROOT, "data", "models", mfile)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    iname = sess.get_inputs()[0].name
    inputs = sorted(f for f in os.listdir(os.path.join(ROOT, "data", "inputs")) if f.startswith(prefix))
    if not inputs:
        print(f"{kind}: no inputs {prefix}* in data/inputs (run scripts/fetch_models.py) FAIL")
        failures += 1
    for f in inputs:
        xpath = os.path.join(ROOT, "data", "inputs", f)
        refs = sess.run(None, {iname: np.load(xpath)})
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([BIN, "run", model, "--input", f"{iname}={xpath}", "--output-dir", out], check=True, capture_output=True)
            for o, ref in zip(sess.get_outputs(), refs):
                safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in o.name)
                got = np.load(os.path.join(out, safe + ".npy"))
                err = float(np.abs(got.astype(np.float64) - ref).max())
                top = float(np.abs(ref).max())
                if top < 1e-3:
                    ok = err <= 1e-6
                    print(f"{kind} {f} {o.name}: outputs ~0, max|err| = {err:.2e} {'ok' if ok else 'FAIL'}")
                else:
                    ok = err / top <= 1e-4
                    print(f"{kind} {f} {o.name}: max|err|/max|ref| = {err / top:.2e} {'ok' if ok else 'FAIL'}")
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
# Optimized models: `npu-studio optimize` on the PP-OCR models, as a user would run it, and
# the real exports that tests/tests/optimize_real.rs optimizes into data/optimized/. Both the
# optimized file and the original run in onnxruntime with its own graph optimizations off,
# so the difference measured is ours. It must be within 1e-5 of max|ref|, or within four times
# what onnxruntime's own optimizer (ORT_ENABLE_ALL against ORT_DISABLE_ALL) moves the same
# output on the same input: folding BatchNorm and scales into weights rounds differently,
# and PP-OCR det and rec amplify rounding beyond 1e-5. Where a rewrite computes more
# accurately than the graph as written (Magika's LayerNorms are written as E[x^2] - E[x]^2,
# which cancels in float32; the recognized LayerNormalization subtracts the mean first), the
# difference from the float32 original is the original's error: such a case passes only if
# the optimized model is no further than the float32 original from a float64 run of the
# original graph.
import json

from onnx import helper as onnx_helper


def float64_session(path):
    """onnxruntime on the original graph in float64: float initializers, constants, casts
    and graph inputs/outputs become double; op types without a double kernel in onnxruntime
    (Conv, pooling) run in float32 between casts. None when the graph cannot be converted."""
    m = onnx.load(path)
    g = m.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in g.node for a in n.attribute):
        return None
    F, D = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE
    for i, init in enumerate(g.initializer):
        if init.data_type == F:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name))
    for n in g.node:
        for a in n.attribute:
            if a.name == "to" and a.i == F:
                a.i = D
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == F:
            v.type.tensor_type.elem_type = D
    del g.value_info[:]
    in_float = set()
    for _ in range(8):
        nodes = []
        for n in g.node:
            if n.op_type not in in_float:
                nodes.append(n)
                continue
            ins = []
            for k, x in enumerate(n.input):
                if x:
                    nodes.append(onnx_helper.make_node("Cast", [x], [f"{n.output[0]}__f32_in{k}"], to=F))
                ins.append(f"{n.output[0]}__f32_in{k}" if x else "")
            inner = onnx_helper.make_node(n.op_type, ins, [o + "__f32" for o in n.output], name=n.name, domain=n.domain)
            inner.attribute.extend(n.attribute)
            nodes.append(inner)
            nodes += [onnx_helper.make_node("Cast", [o + "__f32"], [o], to=D) for o in n.output]
        trial = onnx.ModelProto()
        trial.CopyFrom(m)
        del trial.graph.node[:]
        trial.graph.node.extend(nodes)
        try:
            return ort.InferenceSession(trial.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception as e:  # NOT_IMPLEMENTED for an op type without a double kernel
            missing = [n.op_type for n in g.node if f"for {n.op_type}(" in str(e)]
            if not missing:
                return None
            in_float.add(missing[0])
    return None


def as_float64(feeds):
    return {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in feeds.items()}


def session(path, optimize):
    so = ort.SessionOptions()
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    so.intra_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def rel(want, got):
    """max|err| / max|ref|; outputs that are all ~0 (no text in the photo) give max|err|."""
    err = max(float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max()) for a, b in zip(want, got))
    top = max(float(np.abs(np.asarray(a, np.float64)).max()) for a in want)
    return err / top if top >= 1e-3 else err


def check_optimized(label, orig_path, opt_path, feed_list):
    global failures
    plain, tuned, ours = session(orig_path, False), session(orig_path, True), session(opt_path, False)
    exact = None
    for tag, feeds in feed_list:
        want = plain.run(None, feeds)
        got = ours.run(None, feeds)
        floor = rel(want, tuned.run(None, feeds))
        err = rel(want, got)
        tol = max(1e-5, 4 * floor)
        ok = err <= tol
        print(
            f"optimized {label} {tag}: max|err|/max|ref| = {err:.2e} "
            f"(onnxruntime's own optimizer: {floor:.2e}, limit {tol:.1e}) {'ok' if ok else 'over the limit'}"
        )
        if not ok:
            exact = exact or float64_session(orig_path)
            if exact is None:
                print(f"  {label}: no float64 run of the original graph to judge by FAIL")
            else:
                ref = exact.run(None, as_float64(feeds))
                ours_err, orig_err = rel(ref, got), rel(ref, want)
                ok = ours_err <= orig_err
                print(
                    f"  against the original graph in float64: optimized {ours_err:.2e}, "
                    f"float32 original {orig_err:.2e} {'ok (the optimized graph is the more accurate)' if ok else 'FAIL'}"
                )
        failures += 0 if ok else 1


with tempfile.TemporaryDirectory() as tmp:
    for kind in ("det", "cls", "rec"):
        model = os.path.join(ROOT, "data", "models", f"ppocr_{kind}.onnx")
        out = os.path.join(tmp, f"ppocr_{kind}.opt.onnx")
        log = os.path.join(tmp, f"ppocr_{kind}.log.json")
        subprocess.run([BIN, "optimize", model, "--out", out, "--log", log], check=True, capture_output=True)
        with open(log) as f:
            summary = json.load(f)
        if not summary["converged"] or summary["steps"] != len(summary["log"]) or summary["nodes_after"] >= summary["nodes_before"]:
            print(f"optimized ppocr_{kind}: unexpected log summary {summary['nodes_before']} -> {summary['nodes_after']}")
            failures += 1
        iname = session(model, False).get_inputs()[0].name
        inputs = sorted(f for f in os.listdir(os.path.join(ROOT, "data", "inputs")) if f.startswith(kind + "_"))
        feeds = [(f, {iname: np.load(os.path.join(ROOT, "data", "inputs", f))}) for f in inputs]
        check_optimized(f"ppocr_{kind}", model, out, feeds)
optimized = sorted(glob.glob(os.path.join(ROOT, "data", "optimized", "*.onnx")))
real_optimized = [p for p in optimized if not os.path.basename(p).startswith("ppocr_")]
if len(real_optimized) < 5:
    print(f"expected 5 optimized real exports in data/optimized (cargo test writes them), found {len(real_optimized)}")
    failures += 1
for path in real_optimized:
    name = os.path.basename(path)[: -len(".onnx")]
    orig_path = os.path.join(ROOT, "data", "real", name, "model.onnx")
    names = [i.name for i in session(orig_path, False).get_inputs()]
    feed_list = []
    for case in sorted(glob.glob(os.path.join(ROOT, "data", "real", name, "test_data_set_*"))):
        feeds = {}
        for i, pb in enumerate(sorted(glob.glob(os.path.join(case, "input_*.pb")))):
            t = onnx.TensorProto()
            with open(pb, "rb") as f:
                t.ParseFromString(f.read())
            feeds[names[i]] = numpy_helper.to_array(t)
        feed_list.append((os.path.basename(case), feeds))
    check_optimized(name, orig_path, path, feed_list)
print(f"cli-vs-onnxruntime: {'all match' if failures == 0 else f'{failures} mismatches'}")
sys.exit(1 if failures else 0)
