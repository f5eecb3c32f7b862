#!/usr/bin/env python3
"""Quantized TFLite files read as integer programs (`npu-studio run FILE.tflite`, no plan),
and compiled and emulated (`compile FILE.tflite`, `emulate`), against LiteRT's reference
kernels on hand-built files: standalone RELU, RELU6 and RELU_N1_TO_1 between grids of
different scales (TFLite's ReluX: the float32 quotient's multiplier; one file has scales
where the float64 quotient would give other codes), a convolution with
a fused ReLU6 followed by a standalone RELU and a RESHAPE, an ADD of a convolution and its
input, and max and average pooling with SAME padding. Inputs are random int8 codes over the
whole range. Every output must be equal, code for code.

Usage: check_tflite_program.py [--bin PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import Interpreter, OpResolverType

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
B = S.BuiltinOperator


class Builder:
    def __init__(self):
        self.buffers = [S.BufferT()]
        self.tensors, self.ops, self.codes = [], [], []

    def tensor(self, shape, dtype, scale, zp, data=None, axis=0, name=None):
        t = S.TensorT()
        t.shape = list(shape)
        t.type = {np.int8: S.TensorType.INT8, np.int16: S.TensorType.INT16, np.int32: S.TensorType.INT32,
                  np.int64: S.TensorType.INT64}[dtype]
        t.name = name or f"t{len(self.tensors)}"
        t.buffer = 0
        if data is not None:
            b = S.BufferT()
            b.data = list(np.ascontiguousarray(np.asarray(data, dtype=dtype).reshape(shape)).tobytes())
            self.buffers.append(b)
            t.buffer = len(self.buffers) - 1
        q = S.QuantizationParametersT()
        q.scale = [float(s) for s in np.atleast_1d(scale)]
        q.zeroPoint = [int(z) for z in np.atleast_1d(zp)]
        q.quantizedDimension = axis
        t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, code, ins, outs, opt_type=None, opt=None, version=1):
        if (code, version) not in self.codes:
            self.codes.append((code, version))
        o = S.OperatorT()
        o.opcodeIndex = self.codes.index((code, version))
        o.inputs, o.outputs = list(ins), list(outs)
        if opt_type is not None:
            o.builtinOptionsType, o.builtinOptions = opt_type, opt
        self.ops.append(o)

    def build(self, ins, outs):
        sg = S.SubGraphT()
        sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = self.tensors, ins, outs, self.ops, "main"
        m = S.ModelT()
        m.version, m.description, m.subgraphs, m.buffers = 3, "check_tflite_program", [sg], self.buffers
        m.operatorCodes = []
        for code, ver in self.codes:
            oc = S.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), ver
            m.operatorCodes.append(oc)
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def conv_opts(act, stride=1):
    o = S.Conv2DOptionsT()
    o.padding, o.strideH, o.strideW, o.dilationHFactor, o.dilationWFactor = S.Padding.SAME, stride, stride, 1, 1
    o.fusedActivationFunction = act
    return S.BuiltinOptions.Conv2DOptions, o


def relus(rng):
    b = Builder()
    x = b.tensor([1, 9, 7, 5], np.int8, 0.05, 3, name="x")
    outs = []
    for code, (s, zp) in [(B.RELU, (0.031, -128)), (B.RELU6, (0.0247, -128)), (B.RELU_N1_TO_1, (0.0079, 0))]:
        y = b.tensor([1, 9, 7, 5], np.int8, s, zp, name=f"relu{code}")
        b.op(code, [x], [y], version=1 if code == B.RELU_N1_TO_1 else 2)
        outs.append(y)
    return b.build([x], outs)


def relu_tie(rng):
    """Scales where the multiplier of the float32 quotient (ReluX's) and of the float64 one
    (QUANTIZE's) give different codes: x - zp = 51 becomes 38 under ReluX, 39 otherwise."""
    b = Builder()
    x = b.tensor([1, 16, 16, 4], np.int8, 0.09060338139533997, -10, name="x")
    y = b.tensor([1, 16, 16, 4], np.int8, 0.1200200617313385, -128, name="relu")
    b.op(B.RELU, [x], [y], version=2)
    return b.build([x], [y])


def conv_chain(rng):
    b = Builder()
    x = b.tensor([1, 12, 10, 6], np.int8, 0.04, -5, name="x")
    ws = rng.uniform(0.002, 0.02, 8)
    w = b.tensor([8, 3, 3, 6], np.int8, ws, [0] * 8, data=rng.integers(-127, 128, (8, 3, 3, 6)), name="w")
    bias = b.tensor([8], np.int32, ws * 0.04, [0] * 8, data=rng.integers(-3000, 3000, 8), name="b")
    c = b.tensor([1, 6, 5, 8], np.int8, 0.03, -128, name="conv")
    b.op(B.CONV_2D, [x, w, bias], [c], *conv_opts(S.ActivationFunctionType.RELU6, 2), version=3)
    r = b.tensor([1, 6, 5, 8], np.int8, 0.021, -128, name="relu")
    b.op(B.RELU, [c], [r], version=2)
    shape = b.tensor([2], np.int32, 1.0, 0, data=[1, 240], name="shape")
    y = b.tensor([1, 240], np.int8, 0.021, -128, name="flat")
    opt = S.ReshapeOptionsT()
    opt.newShape = [1, 240]
    b.op(B.RESHAPE, [r, shape], [y], S.BuiltinOptions.ReshapeOptions, opt)
    return b.build([x], [y])


def residual_pools(rng):
    b = Builder()
    x = b.tensor([1, 8, 8, 4], np.int8, 0.05, 10, name="x")
    ws = rng.uniform(0.003, 0.01, 4)
    w = b.tensor([4, 3, 3, 4], np.int8, ws, [0] * 4, data=rng.integers(-127, 128, (4, 3, 3, 4)), name="w")
    bias = b.tensor([4], np.int32, ws * 0.05, [0] * 4, data=rng.integers(-500, 500, 4), name="b")
    c = b.tensor([1, 8, 8, 4], np.int8, 0.06, -20, name="conv")
    b.op(B.CONV_2D, [x, w, bias], [c], *conv_opts(S.ActivationFunctionType.NONE), version=3)
    a = b.tensor([1, 8, 8, 4], np.int8, 0.08, 5, name="add")
    opt = S.AddOptionsT()
    opt.fusedActivationFunction = S.ActivationFunctionType.RELU
    b.op(B.ADD, [c, x], [a], S.BuiltinOptions.AddOptions, opt, version=2)
    outs = []
    for code in (B.MAX_POOL_2D, B.AVERAGE_POOL_2D):
        p = S.Pool2DOptionsT()
        p.padding, p.strideH, p.strideW, p.filterHeight, p.filterWidth = S.Padding.SAME, 2, 2, 3, 3
        y = b.tensor([1, 4, 4, 4], np.int8, 0.08, 5, name=f"pool{code}")
        b.op(code, [a], [y], S.BuiltinOptions.Pool2DOptions, p, version=2)
        outs.append(y)
    return b.build([x], outs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    failures, compared = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in [("relus", relus), ("relu_tie", relu_tie), ("conv_chain", conv_chain), ("residual_pools", residual_pools)]:
            path = os.path.join(tmp, f"{name}.tflite")
            with open(path, "wb") as f:
                f.write(make(rng))
            it = Interpreter(model_path=path, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
            it.allocate_tensors()
            inp = it.get_input_details()[0]
            npub = os.path.join(tmp, f"{name}.npub")
            r = subprocess.run([args.bin, "compile", path, "--target", "ethos-u55-128", "--out", npub],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"compile {name}: {r.stderr}")
            for k in range(4):
                x = rng.integers(-128, 128, inp["shape"]).astype(np.int8)
                it.set_tensor(inp["index"], x)
                it.invoke()
                xp = os.path.join(tmp, "x.npy")
                np.save(xp, x)
                for how, cmd in [
                    ("run", [args.bin, "run", path, "--input", f"{inp['name']}={xp}", "--output-dir", os.path.join(tmp, "o")]),
                    ("emulate", [args.bin, "emulate", npub, "--input", f"{inp['name']}={xp}", "--output-dir", os.path.join(tmp, "e")]),
                ]:
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    if r.returncode != 0:
                        sys.exit(f"{how} {name}: {r.stderr}")
                    out = cmd[cmd.index("--output-dir") + 1]
                    for d in it.get_output_details():
                        ours = np.load(os.path.join(out, d["name"] + ".npy"))
                        ref = it.get_tensor(d["index"])
                        compared += ref.size
                        if ours.shape != ref.shape or not np.array_equal(ours, ref):
                            diff = int((ours != ref).sum()) if ours.shape == ref.shape else "shape"
                            failures.append(f"{name} {how} {d['name']}: {diff} codes differ")
            print(f"{name}: 4 random inputs, run and emulated, every output equal to LiteRT" if not failures else name)
    print(f"{compared} codes compared, {len(failures)} mismatching outputs")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
