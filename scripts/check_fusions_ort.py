#!/usr/bin/env python3
"""Every rewrite `npu-studio optimize` makes, on a small model built here with onnx.helper,
checked in onnxruntime: the optimized file must load, contain the fused op we expect, and
give the original's outputs (max|err| / max|ref| <= 1e-5, onnxruntime's own graph
optimizations off on both). Exits non-zero on a mismatch."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ.get("NPU_STUDIO", os.path.join(ROOT, "target", "release", "npu-studio"))
rng = np.random.default_rng(3)


def const(name, shape, low=-1.0, high=1.0):
    return numpy_helper.from_array(rng.uniform(low, high, shape).astype(np.float32), name)


def scalar(name, v):
    return numpy_helper.from_array(np.array([v], np.float32), name)


def model(nodes, inits, x_shape, opset, ms=False):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    ops = [helper.make_opsetid("", opset)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def conv(out="c", x="x"):
    return helper.make_node("Conv", [x, "w", "b"], [out], pads=[1, 1, 1, 1])


CONV_INITS = lambda: [const("w", [4, 3, 3, 3]), const("b", [4])]  # noqa: E731
GEMM_INITS = lambda: [const("gw", [6, 5]), const("gb", [5])]  # noqa: E731
BN_INITS = lambda: [  # noqa: E731
    const("s", [4]),
    const("bb", [4]),
    const("mean", [4]),
    const("var", [4], 0.5, 2.0),
]


def cases():
    img = [1, 3, 8, 8]
    acts = {
        "Relu": ([helper.make_node("Relu", ["c"], ["y"])], []),
        "Clip": ([helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], [scalar("lo", 0.0), scalar("hi", 6.0)]),
        "LeakyRelu": ([helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2)], []),
        "Sigmoid": ([helper.make_node("Sigmoid", ["c"], ["y"])], []),
        "Tanh": ([helper.make_node("Tanh", ["c"], ["y"])], []),
        "HardSigmoid": ([helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.3, beta=0.4)], []),
        "HardSwish": ([helper.make_node("HardSwish", ["c"], ["y"])], []),
    }
    for act, (nodes, inits) in acts.items():
        # Scalar Clip bounds need rank 0 (ONNX says "scalar").
        inits = [numpy_helper.from_array(np.array(numpy_helper.to_array(i)[0], np.float32), i.name) for i in inits]
        yield f"conv+{act}", model([conv()] + nodes, CONV_INITS() + inits, img, 14), "FusedConv"
    silu = [conv(), helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    yield "conv+SiLU (Conv + QuickGelu in the file)", model(silu, CONV_INITS(), img, 14), "QuickGelu"
    hs = [
        conv(),
        helper.make_node("Add", ["c", "three"], ["a"]),
        helper.make_node("Clip", ["a", "zero", "six"], ["cl"]),
        helper.make_node("Mul", ["c", "cl"], ["m"]),
        helper.make_node("Div", ["m", "six"], ["y"]),
    ]
    hs_inits = CONV_INITS() + [
        scalar("three", 3.0),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(6.0, np.float32), "six"),
    ]
    yield "decomposed HardSwish at opset 11 into FusedConv", model(hs, hs_inits, img, 11), "FusedConv"
    bn = [conv(), helper.make_node("BatchNormalization", ["c", "s", "bb", "mean", "var"], ["y"])]
    yield "conv+BatchNorm", model(bn, CONV_INITS() + BN_INITS(), img, 14), "Conv"
    for act, kw in [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})]:
        nodes = [helper.make_node("Gemm", ["x", "gw", "gb"], ["c"]), helper.make_node(act, ["c"], ["y"], **kw)]
        yield f"gemm+{act}", model(nodes, GEMM_INITS(), [3, 6], 14), "FusedGemm"
    mm = [helper.make_node("MatMul", ["x", "gw"], ["c"]), helper.make_node("Add", ["c", "gb"], ["y"])]
    yield "matmul+bias", model(mm, GEMM_INITS(), [3, 6], 14), "Gemm"
    axes = [-1]
    ln = [
        helper.make_node("ReduceMean", ["x"], ["mu"], axes=axes),
        helper.make_node("Sub", ["x", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=axes),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    ln_inits = [scalar("two", 2.0), scalar("eps", 1e-5), const("gamma", [8]), const("beta", [8])]
    yield "LayerNorm", model(ln, ln_inits, [2, 3, 8], 13), "LayerNormalization"
    rms = [
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=axes),
        helper.make_node("Add", ["ms", "eps"], ["me"]),
        helper.make_node("Sqrt", ["me"], ["r"]),
        helper.make_node("Div", ["x", "r"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["y"]),
    ]
    yield "RMSNorm", model(rms, [scalar("two", 2.0), scalar("eps", 1e-5), const("gamma", [8])], [2, 3, 8], 13), "SimplifiedLayerNormalization"
    gelu = [
        helper.make_node("Div", ["x", "sqrt2"], ["q"]),
        helper.make_node("Erf", ["q"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["x", "e1"], ["xe"]),
        helper.make_node("Mul", ["xe", "half"], ["y"]),
    ]
    gelu_inits = [scalar("sqrt2", float(np.sqrt(2.0))), scalar("one", 1.0), scalar("half", 0.5)]
    yield "GELU at opset 13 (com.microsoft Gelu)", model(gelu, gelu_inits, [2, 3, 8], 13), "Gelu"
    yield "GELU at opset 20 (ONNX Gelu)", model(gelu, gelu_inits, [2, 3, 8], 20), "Gelu"
    pool = [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)]
    yield "AveragePool", model(pool, [], img, 14), "Conv"
    gap = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3])]
    yield "ReduceMean over H,W", model(gap, [], img, 14), "GlobalAveragePool"


def session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


failures = 0
with tempfile.TemporaryDirectory() as tmp:
    for k, (label, m, want_op) in enumerate(cases()):
        src, dst = os.path.join(tmp, f"{k}.onnx"), os.path.join(tmp, f"{k}.opt.onnx")
        onnx.save(m, src)
        r = subprocess.run([BIN, "optimize", src, "--out", dst], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{label}: optimize failed: {r.stderr.strip()} FAIL")
            failures += 1
            continue
        ops = [n.op_type for n in onnx.load(dst).graph.node]
        x = rng.uniform(-4, 4, [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
        try:
            want = session(src).run(None, {"x": x})[0].astype(np.float64)
            got = session(dst).run(None, {"x": x})[0].astype(np.float64)
        except Exception as e:  # noqa: BLE001 - any load or run error is a failure
            print(f"{label}: onnxruntime cannot run the optimized file: {e} FAIL")
            failures += 1
            continue
        rel = float(np.abs(want - got).max() / max(np.abs(want).max(), 1e-12))
        ok = want_op in ops and len(ops) <= len(m.graph.node) and rel <= 1e-5
        print(f"{label}: {len(m.graph.node)} nodes -> {ops}, max|err|/max|ref| = {rel:.1e} {'ok' if ok else 'FAIL'}")
        failures += 0 if ok else 1
print(f"fusions-vs-onnxruntime: {'all match' if failures == 0 else f'{failures} mismatches'}")
sys.exit(1 if failures else 0)
