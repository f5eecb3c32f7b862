#!/usr/bin/env python3
"""TFLite control flow (IF, WHILE) through the importer, against LiteRT.

Builds small float TFLite files by hand (no TensorFlow): an IF whose branches are other
subgraphs (then: x + c, else: x * x), and a WHILE whose condition subgraph compares a
counter (i < n) and whose body steps the counter and a tensor (i + 1, x * 1.5 + 0.25).
Each runs in LiteRT 2.3 (BUILTIN_REF) and through `npu-studio run` (the importer makes an
ONNX If and Loop of them); outputs must agree to 1e-6 relative. With `--out DIR` the files
are also written there (the Rust tests read them).

Usage: check_tflite_control_flow.py [--bin PATH] [--out DIR]
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
TYPES = {np.float32: S.TensorType.FLOAT32, np.int32: S.TensorType.INT32, np.bool_: S.TensorType.BOOL}


class Model:
    """Subgraphs sharing one buffer list and one opcode table."""

    def __init__(self):
        self.buffers = [S.BufferT()]
        self.codes = []
        self.subgraphs = []

    def code(self, op):
        if op not in self.codes:
            self.codes.append(op)
        return self.codes.index(op)

    def pack(self):
        m = S.ModelT()
        m.version, m.description, m.buffers = 3, "check_tflite_control_flow", self.buffers
        m.subgraphs = [g.pack() for g in self.subgraphs]
        m.operatorCodes = []
        for c in self.codes:
            oc = S.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = c, min(c, 127), 1
            m.operatorCodes.append(oc)
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())


class Graph:
    def __init__(self, model, name):
        self.m, self.name = model, name
        self.tensors, self.ops, self.inputs, self.outputs = [], [], [], []
        model.subgraphs.append(self)
        self.index = len(model.subgraphs) - 1

    def tensor(self, name, shape, dtype, data=None):
        t = S.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(shape), TYPES[dtype], 0
        if data is not None:
            b = S.BufferT()
            b.data = list(np.ascontiguousarray(np.asarray(data, dtype=dtype).reshape(shape)).tobytes())
            self.m.buffers.append(b)
            t.buffer = len(self.m.buffers) - 1
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, code, ins, outs, opt_type=None, opt=None):
        o = S.OperatorT()
        o.opcodeIndex = self.m.code(code)
        o.inputs, o.outputs = list(ins), list(outs)
        if opt_type is not None:
            o.builtinOptionsType, o.builtinOptions = opt_type, opt
        self.ops.append(o)

    def pack(self):
        sg = S.SubGraphT()
        sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = (
            self.tensors,
            self.inputs,
            self.outputs,
            self.ops,
            self.name,
        )
        return sg


def if_model():
    m = Model()
    main = Graph(m, "main")
    then_g, else_g = Graph(m, "then"), Graph(m, "else")
    shape = [1, 4]
    c = main.tensor("cond", [1], np.bool_)
    x = main.tensor("x", shape, np.float32)
    y = main.tensor("y", shape, np.float32)
    opt = S.IfOptionsT()
    opt.thenSubgraphIndex, opt.elseSubgraphIndex = then_g.index, else_g.index
    main.op(B.IF, [c, x], [y], S.BuiltinOptions.IfOptions, opt)
    main.inputs, main.outputs = [c, x], [y]
    # then: x + [1, 2, 3, 4]
    tx = then_g.tensor("then_x", shape, np.float32)
    k = then_g.tensor("then_k", shape, np.float32, [1, 2, 3, 4])
    ty = then_g.tensor("then_y", shape, np.float32)
    then_g.op(B.ADD, [tx, k], [ty], S.BuiltinOptions.AddOptions, S.AddOptionsT())
    then_g.inputs, then_g.outputs = [tx], [ty]
    # else: x * x
    ex = else_g.tensor("else_x", shape, np.float32)
    ey = else_g.tensor("else_y", shape, np.float32)
    else_g.op(B.MUL, [ex, ex], [ey], S.BuiltinOptions.MulOptions, S.MulOptionsT())
    else_g.inputs, else_g.outputs = [ex], [ey]
    return m.pack()


def while_model():
    m = Model()
    main = Graph(m, "main")
    cond_g, body_g = Graph(m, "cond"), Graph(m, "body")
    shape = [2, 3]
    i = main.tensor("i", [1], np.int32)
    x = main.tensor("x", shape, np.float32)
    i_out = main.tensor("i_out", [1], np.int32)
    x_out = main.tensor("x_out", shape, np.float32)
    opt = S.WhileOptionsT()
    opt.condSubgraphIndex, opt.bodySubgraphIndex = cond_g.index, body_g.index
    main.op(B.WHILE, [i, x], [i_out, x_out], S.BuiltinOptions.WhileOptions, opt)
    main.inputs, main.outputs = [i, x], [i_out, x_out]
    # cond: i < 5
    ci = cond_g.tensor("cond_i", [1], np.int32)
    cx = cond_g.tensor("cond_x", shape, np.float32)
    n = cond_g.tensor("cond_n", [1], np.int32, [5])
    less = cond_g.tensor("cond_less", [1], np.bool_)
    cond_g.op(B.LESS, [ci, n], [less])
    cond_g.inputs, cond_g.outputs = [ci, cx], [less]
    # body: i + 1, x * 1.5 + 0.25
    bi = body_g.tensor("body_i", [1], np.int32)
    bx = body_g.tensor("body_x", shape, np.float32)
    one = body_g.tensor("body_one", [1], np.int32, [1])
    i2 = body_g.tensor("body_i2", [1], np.int32)
    k = body_g.tensor("body_k", [1], np.float32, [1.5])
    b = body_g.tensor("body_b", [1], np.float32, [0.25])
    xm = body_g.tensor("body_xm", shape, np.float32)
    x2 = body_g.tensor("body_x2", shape, np.float32)
    body_g.op(B.ADD, [bi, one], [i2], S.BuiltinOptions.AddOptions, S.AddOptionsT())
    body_g.op(B.MUL, [bx, k], [xm], S.BuiltinOptions.MulOptions, S.MulOptionsT())
    body_g.op(B.ADD, [xm, b], [x2], S.BuiltinOptions.AddOptions, S.AddOptionsT())
    body_g.inputs, body_g.outputs = [bi, bx], [i2, x2]
    return m.pack()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    ap.add_argument("--out", help="also write the .tflite files here")
    args = ap.parse_args()
    rng = np.random.default_rng(3)
    cases = {
        "if": (if_model(), [
            {"cond": np.array([True]), "x": rng.normal(size=(1, 4)).astype(np.float32)},
            {"cond": np.array([False]), "x": rng.normal(size=(1, 4)).astype(np.float32)},
        ]),
        "while": (while_model(), [
            {"i": np.array([0], np.int32), "x": rng.normal(size=(2, 3)).astype(np.float32)},
            {"i": np.array([3], np.int32), "x": rng.normal(size=(2, 3)).astype(np.float32)},
            # The condition false on entry: the body never runs.
            {"i": np.array([9], np.int32), "x": rng.normal(size=(2, 3)).astype(np.float32)},
        ]),
    }
    failures, compared = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, (blob, feeds) in cases.items():
            path = os.path.join(args.out or tmp, f"control_{name}.tflite")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(blob)
            for k, feed in enumerate(feeds):
                it = Interpreter(model_path=path, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
                it.allocate_tensors()
                cmd = [args.bin, "run", path, "--output-dir", os.path.join(tmp, f"{name}{k}")]
                for d in it.get_input_details():
                    it.set_tensor(d["index"], feed[d["name"]])
                    p = os.path.join(tmp, f"{name}{k}_{d['name']}.npy")
                    np.save(p, feed[d["name"]])
                    cmd += ["--input", f"{d['name']}={p}"]
                it.invoke()
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"{name}: {r.stderr.strip()}")
                for d in it.get_output_details():
                    ref = it.get_tensor(d["index"])
                    ours = np.load(os.path.join(tmp, f"{name}{k}", d["name"] + ".npy"))
                    compared += ref.size
                    err = np.abs(ours.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-12)
                    if ours.shape != ref.shape or err > 1e-6:
                        failures.append(f"{name} input {k} {d['name']}: {ours.tolist()} vs LiteRT {ref.tolist()}")
            print(f"{name}: {len(feeds)} inputs, every output equal to LiteRT's")
    print(f"{compared} values compared, {len(failures)} mismatching outputs")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
