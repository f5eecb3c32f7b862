#!/usr/bin/env python3
"""The per-op conformance suite: generated quantized TFLite files, one op each, against
LiteRT's reference kernels (`OpResolverType.BUILTIN_REF`), code for code.

Every case is a `.tflite` file built from the schema (no TensorFlow): one op with random
shapes, broadcasting, parameters and grids, in int8 and, where LiteRT has a 16x8 kernel,
int16 (zero points 0, int64 biases). For each case and two random inputs over the whole
code range (a random stretch around code 0, at least a quarter of it each side):
  - LiteRT runs the file;
  - `npu-studio run FILE.tflite` runs the integer program read from the file (its scales,
    zero points and codes, no plan) on our integer reference;
  - `npu-studio compile FILE.tflite --target ethos-u55-128 --out F.npub` and
    `npu-studio emulate F.npub` run the compiled binary;
and every output code of both must equal LiteRT's.

The export leg does the same for files we write: one-op ONNX models (28 op families,
random shapes, broadcasting and attributes) quantized by `npu-studio quantize` (synthetic
calibration, w8a8 and w8a16), exported by `npu-studio export --format tflite`, compiled for
the U55; on random inputs quantized onto the file's input grids, LiteRT's output codes must
equal `run --plan`'s (the integer reference) and the emulated binary's. A case whose LiteRT output is one code
everywhere would test nothing: it is drawn again (and counted). The manifest (op, scheme, case count)
is `tests/conformance/manifest.txt`; the script fails when it is stale
(`--write-manifest` rewrites it). Exits non-zero on any mismatch or refusal, naming the
case, the engine and the count of differing codes.

Usage: check_op_suite.py [--bin PATH] [--ops ADD,onnx:Conv,...] [--write-manifest] [--keep DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter

import numpy as np

from check_tflite_litert import sanitize
from check_tflite_program import B, S, Builder, ROOT

MANIFEST = os.path.join(ROOT, "tests", "conformance", "manifest.txt")
I8, I16 = np.int8, np.int16
ACT = S.ActivationFunctionType


def grid(rng, ty, lo=0.005, hi=0.1):
    """A random scale and zero point: asymmetric int8, symmetric int16."""
    s = float(rng.uniform(lo, hi))
    return (s, int(rng.integers(-40, 40))) if ty == I8 else (s / 200.0, 0)


def rand_shape(rng, rank, lo=1, hi=7):
    return [int(v) for v in rng.integers(lo, hi + 1, rank)]


def broadcast_partner(rng, shape):
    """A shape that broadcasts against `shape`: some dims 1, maybe fewer dims."""
    drop = int(rng.integers(0, len(shape)))
    tail = shape[drop:]
    return [1 if rng.random() < 0.4 else d for d in tail] or [1]


def opts(kind, **kw):
    o = getattr(S, kind + "T")()
    for k, v in kw.items():
        setattr(o, k, v)
    return getattr(S.BuiltinOptions, kind), o


# Each maker takes (rng, ty) and returns the file's bytes.

def broadcast_operands(rng, ty, b):
    """Two inputs on random grids whose shapes broadcast (either way round): (a, b, output
    shape, grid of a, grid of b)."""
    a_shape = rand_shape(rng, int(rng.integers(1, 5)))
    b_shape = broadcast_partner(rng, a_shape) if rng.random() < 0.6 else list(a_shape)
    if rng.random() < 0.5:
        a_shape, b_shape = b_shape, a_shape
    out = list(np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    ga, gb = grid(rng, ty), grid(rng, ty)
    return b.tensor(a_shape, ty, *ga, name="a"), b.tensor(b_shape, ty, *gb, name="b"), out, ga, gb


def binary(code, kind):
    def make(rng, ty):
        b = Builder()
        x, y, out, ga, gb = broadcast_operands(rng, ty, b)
        # The output grid near the result's range, so codes neither saturate nor collapse.
        top = 127 if ty == I8 else 32767
        so = (ga[0] * gb[0] * top if kind == "MulOptions" else ga[0] + gb[0]) * float(rng.uniform(0.5, 1.5))
        z = b.tensor(out, ty, so, int(rng.integers(-20, 20)) if ty == I8 else 0, name="y")
        act = [ACT.NONE, ACT.RELU, ACT.RELU6][int(rng.integers(0, 3))]
        kw = {"fusedActivationFunction": act}
        if kind in ("AddOptions", "SubOptions") and ty == I16:
            kw["potScaleInt16"] = False
        b.op(code, [x, y], [z], *opts(kind, **kw), version=1)
        return b.build([x, y], [z])
    return make


def max_min(code):
    def make(rng, ty):
        b = Builder()
        shape = rand_shape(rng, int(rng.integers(1, 5)))
        other = broadcast_partner(rng, shape) if rng.random() < 0.5 else list(shape)
        g = grid(rng, ty)
        x = b.tensor(shape, ty, *g, name="a")
        y = b.tensor(other, ty, *g, name="b")
        out = list(np.broadcast_shapes(tuple(shape), tuple(other)))
        z = b.tensor(out, ty, *g, name="y")
        b.op(code, [x, y], [z], version=1)
        return b.build([x, y], [z])
    return make


def unary(code, out_grid=None, options=None):
    """One input, one output; `out_grid(rng, ty)` fixes the output's grid (else random)."""
    def make(rng, ty):
        b = Builder()
        shape = rand_shape(rng, int(rng.integers(1, 5)))
        xg = grid(rng, ty, 0.01, 0.08)
        x = b.tensor(shape, ty, *xg, name="x")
        yg = out_grid(rng, ty, xg) if out_grid else grid(rng, ty, 0.005, 0.05)
        y = b.tensor(shape, ty, *yg, name="y")
        if options:
            b.op(code, [x], [y], *options(rng), version=1)
        else:
            b.op(code, [x], [y], version=1)
        return b.build([x], [y])
    return make


def fixed(s8, s16):
    return lambda rng, ty, xg: s8 if ty == I8 else s16


def softmax(rng, ty):
    b = Builder()
    shape = rand_shape(rng, int(rng.integers(1, 4)), 1, 12)
    shape[-1] = max(shape[-1], 2)
    x = b.tensor(shape, ty, *grid(rng, ty, 0.02, 0.2), name="x")
    y = b.tensor(shape, ty, *((1 / 256, -128) if ty == I8 else (1 / 32768, 0)), name="y")
    b.op(B.SOFTMAX, [x], [y], *opts("SoftmaxOptions", beta=1.0), version=1)
    return b.build([x], [y])


def same_grid_unary(code, make_opts, version=1):
    """Data movement on one grid: `make_opts(rng, b, shape)` gives (extra inputs, options, output shape)."""
    def make(rng, ty):
        b = Builder()
        shape = rand_shape(rng, int(rng.integers(2, 5)))
        g = grid(rng, ty)
        x = b.tensor(shape, ty, *g, name="x")
        extra, op_opts, out = make_opts(rng, b, shape)
        y = b.tensor(out, ty, *g, name="y")
        if op_opts:
            b.op(code, [x] + extra, [y], *op_opts, version=version)
        else:
            b.op(code, [x] + extra, [y], version=version)
        return b.build([x], [y])
    return make


def int32(b, values, shape=None):
    """A constant int32 tensor as converters write them: no quantization parameters."""
    v = np.asarray(values, dtype=np.int32)
    t = b.tensor(list(shape or v.shape), np.int32, 1.0, 0, data=v)
    b.tensors[t].quantization = None
    return t


def transpose_opts(rng, b, shape):
    perm = [int(p) for p in rng.permutation(len(shape))]
    return [int32(b, perm)], None, [shape[p] for p in perm]


def reshape_opts(rng, b, shape):
    n = int(np.prod(shape))
    new = [n] if rng.random() < 0.3 else [int(np.prod(shape[:-1])), shape[-1]]
    return [int32(b, new)], opts("ReshapeOptions", newShape=new), new


def pad_opts(rng, b, shape):
    pads = rng.integers(0, 3, (len(shape), 2))
    return [int32(b, pads)], None, [d + int(p[0] + p[1]) for d, p in zip(shape, pads)]


def slice_opts(rng, b, shape):
    begin, end, strides, out = [], [], [], []
    for d in shape:
        s = int(rng.integers(1, 3))
        a = int(rng.integers(0, d))
        e = int(rng.integers(a + 1, d + 1))
        begin.append(a)
        end.append(e)
        strides.append(s)
        out.append(len(range(a, e, s)))
    return [int32(b, begin), int32(b, end), int32(b, strides)], opts("StridedSliceOptions"), out


def gather_opts(rng, b, shape):
    axis = int(rng.integers(0, len(shape)))
    n = int(rng.integers(1, 5))
    idx = rng.integers(0, shape[axis], n)
    return [int32(b, idx)], opts("GatherOptions", axis=axis, batchDims=0), shape[:axis] + [n] + shape[axis + 1:]


def reduce_opts(rng, b, shape):
    axes = sorted(int(a) for a in rng.choice(len(shape), int(rng.integers(1, len(shape) + 1)), replace=False))
    return [int32(b, axes)], opts("ReducerOptions", keepDims=True), [1 if i in axes else d for i, d in enumerate(shape)]


def mean(rng, ty):
    b = Builder()
    shape = rand_shape(rng, 4)
    x = b.tensor(shape, ty, *grid(rng, ty), name="x")
    axes = [[1, 2], [3], [1], [2]][int(rng.integers(0, 4))]
    out = [1 if i in axes else d for i, d in enumerate(shape)]
    y = b.tensor(out, ty, *grid(rng, ty), name="y")
    b.op(B.MEAN, [x, int32(b, axes)], [y], *opts("ReducerOptions", keepDims=True), version=1)
    return b.build([x], [y])


def concat(rng, ty):
    b = Builder()
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    axis = int(rng.integers(0, len(shape)))
    g = grid(rng, ty)
    ins = []
    total = 0
    for k in range(int(rng.integers(2, 4))):
        s = list(shape)
        s[axis] = int(rng.integers(1, 5))
        total += s[axis]
        ins.append(b.tensor(s, ty, *g, name=f"x{k}"))
    out = list(shape)
    out[axis] = total
    y = b.tensor(out, ty, *g, name="y")
    b.op(B.CONCATENATION, ins, [y], *opts("ConcatenationOptions", axis=axis), version=1)
    return b.build(ins, [y])


def quantize(rng, ty):
    b = Builder()
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    x = b.tensor(shape, ty, *grid(rng, ty), name="x")
    y = b.tensor(shape, ty, *grid(rng, ty), name="y")
    b.op(B.QUANTIZE, [x], [y], version=1)
    return b.build([x], [y])


def weights_and_bias(rng, b, w_shape, n_out, axis, s_in, ty):
    ws = rng.uniform(0.002, 0.02, n_out)
    w = b.tensor(w_shape, I8, ws, [0] * n_out, data=rng.integers(-127, 128, w_shape), axis=axis, name="w")
    bty = np.int32 if ty == I8 else np.int64
    bias = b.tensor([n_out], bty, ws * s_in, [0] * n_out, data=rng.integers(-2000, 2000, n_out), name="bias")
    return w, bias


def conv(depthwise):
    def make(rng, ty):
        b = Builder()
        n, h, w_, c = 1, int(rng.integers(3, 10)), int(rng.integers(3, 10)), int(rng.integers(1, 6))
        k = int(rng.integers(1, 4))
        stride = int(rng.integers(1, 3))
        pad = [S.Padding.SAME, S.Padding.VALID][int(rng.integers(0, 2))]
        xg = grid(rng, ty)
        x = b.tensor([n, h, w_, c], ty, *xg, name="x")
        if depthwise:
            o = c
            wt, bias = weights_and_bias(rng, b, [1, k, k, o], o, 3, xg[0], ty)
        else:
            o = int(rng.integers(1, 7))
            wt, bias = weights_and_bias(rng, b, [o, k, k, c], o, 0, xg[0], ty)
        if pad == S.Padding.SAME:
            oh, ow = -(-h // stride), -(-w_ // stride)
        else:
            oh, ow = (h - k) // stride + 1, (w_ - k) // stride + 1
        y = b.tensor([n, oh, ow, o], ty, *grid(rng, ty, 0.02, 0.3), name="y")
        act = [ACT.NONE, ACT.RELU, ACT.RELU6][int(rng.integers(0, 3))]
        common = dict(padding=pad, strideH=stride, strideW=stride, dilationHFactor=1, dilationWFactor=1,
                      fusedActivationFunction=act)
        if depthwise:
            b.op(B.DEPTHWISE_CONV_2D, [x, wt, bias], [y], *opts("DepthwiseConv2DOptions", depthMultiplier=1, **common),
                 version=1)
        else:
            b.op(B.CONV_2D, [x, wt, bias], [y], *opts("Conv2DOptions", **common), version=1)
        return b.build([x], [y])
    return make


def fully_connected(rng, ty):
    b = Builder()
    rows, k, n = int(rng.integers(1, 5)), int(rng.integers(1, 20)), int(rng.integers(1, 9))
    xg = grid(rng, ty)
    x = b.tensor([rows, k], ty, *xg, name="x")
    wt, bias = weights_and_bias(rng, b, [n, k], n, 0, xg[0], ty)
    y = b.tensor([rows, n], ty, *grid(rng, ty, 0.02, 0.3), name="y")
    act = [ACT.NONE, ACT.RELU][int(rng.integers(0, 2))]
    b.op(B.FULLY_CONNECTED, [x, wt, bias], [y], *opts("FullyConnectedOptions", fusedActivationFunction=act),
         version=1)
    return b.build([x], [y])


def batch_matmul(rng, ty):
    b = Builder()
    batch = [int(rng.integers(1, 4))]
    m, k, n = (int(v) for v in rng.integers(1, 8, 3))
    x = b.tensor(batch + [m, k], ty, *grid(rng, ty), name="a")
    y = b.tensor(batch + [k, n], ty, *grid(rng, ty), name="b")
    z = b.tensor(batch + [m, n], ty, *grid(rng, ty, 0.02, 0.3), name="y")
    b.op(B.BATCH_MATMUL, [x, y], [z], *opts("BatchMatMulOptions", adjX=False, adjY=False), version=1)
    return b.build([x, y], [z])


def pool(code):
    def make(rng, ty):
        b = Builder()
        h, w_, c = int(rng.integers(2, 10)), int(rng.integers(2, 10)), int(rng.integers(1, 5))
        k = int(rng.integers(1, 4))
        stride = int(rng.integers(1, 3))
        pad = [S.Padding.SAME, S.Padding.VALID][int(rng.integers(0, 2))]
        if pad == S.Padding.VALID and (k > h or k > w_):
            k = 1
        g = grid(rng, ty)
        x = b.tensor([1, h, w_, c], ty, *g, name="x")
        if pad == S.Padding.SAME:
            oh, ow = -(-h // stride), -(-w_ // stride)
        else:
            oh, ow = (h - k) // stride + 1, (w_ - k) // stride + 1
        y = b.tensor([1, oh, ow, c], ty, *g, name="y")
        b.op(code, [x], [y], *opts("Pool2DOptions", padding=pad, strideH=stride, strideW=stride, filterHeight=k,
                                   filterWidth=k), version=1)
        return b.build([x], [y])
    return make


def resize_nearest(rng, ty):
    b = Builder()
    h, w_, c = int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
    f = int(rng.integers(1, 4))
    g = grid(rng, ty)
    x = b.tensor([1, h, w_, c], ty, *g, name="x")
    y = b.tensor([1, h * f, w_ * f, c], ty, *g, name="y")
    b.op(B.RESIZE_NEAREST_NEIGHBOR, [x, int32(b, [h * f, w_ * f])], [y], *opts("ResizeNearestNeighborOptions"),
         version=1)
    return b.build([x], [y])


def nonnegative(code):
    """SQRT and LOG on a grid whose lowest code is 0 (their inputs are not negative)."""
    def make(rng, ty):
        b = Builder()
        shape = rand_shape(rng, int(rng.integers(1, 5)))
        x = b.tensor(shape, ty, float(rng.uniform(0.01, 0.1)), -128, name="x")
        y = b.tensor(shape, ty, *grid(rng, ty, 0.005, 0.05), name="y")
        b.op(code, [x], [y], version=1)
        return b.build([x], [y])
    return make


def rsqrt(rng, ty):
    """RSQRT on a grid whose lowest code is the zero point (int8 −128, int16 0: LiteRT fails on
    codes below it; the int16 case's input is named so that it gets non-negative codes)."""
    b = Builder()
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    if ty == I8:
        si = float(rng.uniform(0.005, 0.1))
        x = b.tensor(shape, ty, si, -128, name="x")
        top = 1 / np.sqrt(si)
        y = b.tensor(shape, ty, top / float(rng.uniform(60, 250)), int(rng.integers(-128, -60)), name="y")
    else:
        si = float(rng.uniform(1e-5, 1e-3))
        x = b.tensor(shape, ty, si, 0, name="x_nonneg")
        y = b.tensor(shape, ty, 1 / np.sqrt(si) / float(rng.uniform(3000, 30000)), 0, name="y")
    b.op(B.RSQRT, [x], [y], version=2 if ty == I8 else 3)
    return b.build([x], [y])


def squared_difference(rng, ty):
    b = Builder()
    x, y, out, ga, gb = broadcast_operands(rng, ty, b)
    # Squares of differences up to ~(128·(s_a + s_b))²: the output grid covers a random part.
    so = (128 * (ga[0] + gb[0])) ** 2 / 255 * float(rng.uniform(0.05, 0.6))
    z = b.tensor(out, ty, so, int(rng.integers(-128, -100)), name="y")
    b.op(B.SQUARED_DIFFERENCE, [x, y], [z], *opts("SquaredDifferenceOptions"), version=2)
    return b.build([x, y], [z])


def block_move(code):
    """DEPTH_TO_SPACE / SPACE_TO_DEPTH on an NHWC input, block 2 or 3."""
    def make(rng, ty):
        b = Builder()
        k = int(rng.integers(2, 4))
        n, h, w, c = 1, *(int(v) for v in rng.integers(1, 4, 3))
        if code == B.DEPTH_TO_SPACE:
            shape, out, kind = [n, h, w, c * k * k], [n, h * k, w * k, c], "DepthToSpaceOptions"
        else:
            shape, out, kind = [n, h * k, w * k, c], [n, h, w, c * k * k], "SpaceToDepthOptions"
        g = grid(rng, ty)
        x = b.tensor(shape, ty, *g, name="x")
        y = b.tensor(out, ty, *g, name="y")
        b.op(code, [x], [y], *opts(kind, blockSize=k), version=1)
        return b.build([x], [y])
    return make


def tile_opts(rng, b, shape):
    reps = [int(r) for r in rng.integers(1, 4, len(shape))]
    return [int32(b, reps)], None, [d * r for d, r in zip(shape, reps)]


def pack(rng, ty):
    b = Builder()
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    n = int(rng.integers(2, 4))
    axis = int(rng.integers(-len(shape) - 1, len(shape) + 1))
    g = grid(rng, ty)
    xs = [b.tensor(shape, ty, *g, name=f"x{k}") for k in range(n)]
    out = list(shape)
    out.insert(axis if axis >= 0 else axis + len(shape) + 1, n)
    y = b.tensor(out, ty, *g, name="y")
    b.op(B.PACK, xs, [y], *opts("PackOptions", valuesCount=n, axis=axis), version=1)
    return b.build(xs, [y])


def split_family(code):
    """SPLIT (equal parts), SPLIT_V (given sizes, one of them −1) and UNPACK along a random axis."""
    def make(rng, ty):
        b = Builder()
        shape = rand_shape(rng, int(rng.integers(1, 5)), 1, 5)
        axis = int(rng.integers(0, len(shape)))
        g = grid(rng, ty)
        if code == B.SPLIT:
            n = int(rng.integers(1, 4))
            shape[axis] = n * int(rng.integers(1, 3))
            sizes = [shape[axis] // n] * n
        elif code == B.SPLIT_V:
            shape[axis] = int(rng.integers(2, 7))
            cuts = sorted(int(c) for c in rng.choice(np.arange(1, shape[axis]), int(rng.integers(1, min(3, shape[axis] - 1) + 1)),
                                                     replace=False))
            sizes = [e - a for a, e in zip([0] + cuts, cuts + [shape[axis]])]
        else:
            shape[axis] = int(rng.integers(1, 4))
            sizes = [1] * shape[axis]
        x = b.tensor(shape, ty, *g, name="x")
        ys = []
        for k, n in enumerate(sizes):
            out = list(shape)
            if code == B.UNPACK:
                out.pop(axis)
            else:
                out[axis] = n
            ys.append(b.tensor(out, ty, *g, name=f"y{k}"))
        neg = axis - len(shape) if rng.random() < 0.3 else axis
        if code == B.SPLIT:
            b.op(code, [int32(b, [neg], []), x], ys, *opts("SplitOptions", numSplits=len(sizes)), version=1)
        elif code == B.SPLIT_V:
            given = list(sizes)
            given[int(rng.integers(0, len(given)))] = -1
            b.op(code, [x, int32(b, given), int32(b, [neg], [])], ys, *opts("SplitVOptions", numSplits=len(sizes)),
                 version=1)
        else:
            b.op(code, [x], ys, *opts("UnpackOptions", num=len(sizes), axis=neg), version=1)
        return b.build([x], ys)
    return make


def padv2_opts(rng, b, shape):
    pads = rng.integers(0, 3, (len(shape), 2))
    g = b.tensors[0].quantization
    value = b.tensor([], I8 if b.tensors[0].type == S.TensorType.INT8 else I16, g.scale, g.zeroPoint,
                     data=[int(rng.integers(-100, 100))])
    return [int32(b, pads), value], None, [d + int(p[0] + p[1]) for d, p in zip(shape, pads)]


def mirror_pad_opts(rng, b, shape):
    pads = np.array([[int(rng.integers(0, d)), int(rng.integers(0, d))] for d in shape])
    return [int32(b, pads)], opts("MirrorPadOptions", mode=S.MirrorPadMode.REFLECT), \
        [d + int(p[0] + p[1]) for d, p in zip(shape, pads)]


def expand_dims_opts(rng, b, shape):
    axis = int(rng.integers(0, len(shape) + 1))
    return [int32(b, [axis], [])], None, shape[:axis] + [1] + shape[axis:]


def squeeze(rng, ty):
    b = Builder()
    shape = rand_shape(rng, int(rng.integers(2, 5)))
    ones = sorted(int(a) for a in rng.choice(len(shape), int(rng.integers(1, len(shape))), replace=False))
    for a in ones:
        shape[a] = 1
    g = grid(rng, ty)
    x = b.tensor(shape, ty, *g, name="x")
    y = b.tensor([d for i, d in enumerate(shape) if i not in ones], ty, *g, name="y")
    b.op(B.SQUEEZE, [x], [y], *opts("SqueezeOptions", squeezeDims=ones), version=1)
    return b.build([x], [y])


def broadcast_to_opts(rng, b, shape):
    out = [d if d > 1 or rng.random() < 0.5 else int(rng.integers(2, 5)) for d in shape]
    small = [1 if rng.random() < 0.5 else d for d in out]
    # The input's own shape is drawn first; BROADCAST_TO needs one that broadcasts: reshape it.
    b.tensors[0].shape = small
    return [int32(b, out)], None, out


def arg_extreme(code, kind):
    def make(rng, ty):
        b = Builder()
        shape = rand_shape(rng, int(rng.integers(1, 5)))
        x = b.tensor(shape, ty, *grid(rng, ty), name="x")
        axis = int(rng.integers(0, len(shape)))
        a = int32(b, [axis - len(shape) if rng.random() < 0.3 else axis])
        y = b.tensor(shape[:axis] + shape[axis + 1:], np.int32, 1.0, 0, name="y")
        b.tensors[y].quantization = None
        b.op(code, [x, a], [y], *opts(kind, outputType=S.TensorType.INT32), version=2)
        return b.build([x], [y])
    return make


def transpose_conv(rng, ty):
    b = Builder()
    h, w_, c = int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 5))
    k, stride, o = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 5))
    xg = grid(rng, ty)
    x = b.tensor([1, h, w_, c], ty, *xg, name="x")
    wt, bias = weights_and_bias(rng, b, [o, k, k, c], o, 0, xg[0], ty)
    oh, ow = (h - 1) * stride + k, (w_ - 1) * stride + k
    y = b.tensor([1, oh, ow, o], ty, *grid(rng, ty, 0.02, 0.3), name="y")
    shape = int32(b, [1, oh, ow, o])
    b.op(B.TRANSPOSE_CONV, [shape, wt, x, bias], [y],
         *opts("TransposeConvOptions", padding=S.Padding.VALID, strideH=stride, strideW=stride), version=1)
    return b.build([x], [y])


# (op name, maker, schemes, cases per scheme)
OPS = [
    ("ADD", binary(B.ADD, "AddOptions"), (I8, I16), 12),
    ("SUB", binary(B.SUB, "SubOptions"), (I8, I16), 12),
    ("MUL", binary(B.MUL, "MulOptions"), (I8, I16), 12),
    ("MAXIMUM", max_min(B.MAXIMUM), (I8, I16), 6),
    ("MINIMUM", max_min(B.MINIMUM), (I8, I16), 6),
    ("CONCATENATION", concat, (I8, I16), 8),
    ("STRIDED_SLICE", same_grid_unary(B.STRIDED_SLICE, slice_opts), (I8, I16), 8),
    ("GATHER", same_grid_unary(B.GATHER, gather_opts), (I8, I16), 8),
    ("TRANSPOSE", same_grid_unary(B.TRANSPOSE, transpose_opts), (I8, I16), 8),
    ("RESHAPE", same_grid_unary(B.RESHAPE, reshape_opts), (I8, I16), 4),
    ("PAD", same_grid_unary(B.PAD, pad_opts), (I8, I16), 6),
    ("REDUCE_MAX", same_grid_unary(B.REDUCE_MAX, reduce_opts), (I8, I16), 6),
    ("REDUCE_MIN", same_grid_unary(B.REDUCE_MIN, reduce_opts), (I8, I16), 6),
    ("MEAN", mean, (I8, I16), 8),
    ("SOFTMAX", softmax, (I8, I16), 8),
    ("LOGISTIC", unary(B.LOGISTIC, fixed((1 / 256, -128), (1 / 32768, 0))), (I8, I16), 8),
    ("TANH", unary(B.TANH, fixed((1 / 128, 0), (1 / 32768, 0))), (I8, I16), 8),
    ("HARD_SWISH", unary(B.HARD_SWISH), (I8,), 8),
    ("RELU", unary(B.RELU), (I8, I16), 6),
    ("RELU6", unary(B.RELU6), (I8, I16), 6),
    ("RELU_N1_TO_1", unary(B.RELU_N1_TO_1), (I8,), 6),
    ("EXP", unary(B.EXP), (I8,), 6),
    ("QUANTIZE", quantize, (I8, I16), 6),
    ("CONV_2D", conv(False), (I8, I16), 12),
    ("DEPTHWISE_CONV_2D", conv(True), (I8, I16), 10),
    ("FULLY_CONNECTED", fully_connected, (I8, I16), 10),
    ("BATCH_MATMUL", batch_matmul, (I8, I16), 8),
    ("AVERAGE_POOL_2D", pool(B.AVERAGE_POOL_2D), (I8, I16), 8),
    ("MAX_POOL_2D", pool(B.MAX_POOL_2D), (I8, I16), 8),
    ("RESIZE_NEAREST_NEIGHBOR", resize_nearest, (I8, I16), 6),
    ("SQRT", nonnegative(B.SQRT), (I8,), 6),
    ("LOG", nonnegative(B.LOG), (I8,), 6),
    ("PADV2", same_grid_unary(B.PADV2, padv2_opts), (I8, I16), 6),
    ("MIRROR_PAD", same_grid_unary(B.MIRROR_PAD, mirror_pad_opts), (I8, I16), 6),
    ("EXPAND_DIMS", same_grid_unary(B.EXPAND_DIMS, expand_dims_opts), (I8, I16), 4),
    ("SQUEEZE", squeeze, (I8, I16), 4),
    ("BROADCAST_TO", same_grid_unary(B.BROADCAST_TO, broadcast_to_opts, 2), (I8, I16), 6),
    ("TRANSPOSE_CONV", transpose_conv, (I8, I16), 8),
    # LiteRT has no int16 ARG_MAX / ARG_MIN (it refuses the file); a 16-bit plan runs them in float.
    ("ARG_MAX", arg_extreme(B.ARG_MAX, "ArgMaxOptions"), (I8,), 8),
    ("ARG_MIN", arg_extreme(B.ARG_MIN, "ArgMinOptions"), (I8,), 8),
    ("RSQRT", rsqrt, (I8, I16), 8),
    # LiteRT has no int16 DEPTH_TO_SPACE / SPACE_TO_DEPTH (ours, a reshape and a transpose, has).
    ("DEPTH_TO_SPACE", block_move(B.DEPTH_TO_SPACE), (I8,), 6),
    ("SPACE_TO_DEPTH", block_move(B.SPACE_TO_DEPTH), (I8,), 6),
    ("TILE", same_grid_unary(B.TILE, tile_opts), (I8, I16), 6),
    ("PACK", pack, (I8, I16), 6),
    ("UNPACK", split_family(B.UNPACK), (I8, I16), 6),
    ("SPLIT", split_family(B.SPLIT), (I8, I16), 6),
    ("SPLIT_V", split_family(B.SPLIT_V), (I8, I16), 6),
    # LiteRT's SQUARED_DIFFERENCE has no int16 kernel.
    ("SQUARED_DIFFERENCE", squared_difference, (I8,), 8),
]


# The export leg: one-op ONNX models of our own, quantized by `npu-studio quantize`
# (synthetic calibration), exported by `npu-studio export --format tflite` and run in LiteRT
# against `run --plan` (the integer reference) and the emulated U55 binary on the same codes.

def onnx_case(op, inputs, consts=(), attrs=None, outputs=1, opset=14, out_type=None):
    """`inputs`: [(name, shape)] graph inputs; `consts`: [(name, array)] initializers, read
    after the inputs in order; `out_type`: the outputs' ONNX element type (float)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in consts]
    outs = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n, _ in consts], outs, **(attrs or {}))
    g = helper.make_graph([node], "case", ins, [helper.make_tensor_value_info(o, out_type or TensorProto.FLOAT, None)
                                                for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    return m.SerializeToString()


def f32(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def x_binary(op):
    def make(rng):
        a = rand_shape(rng, int(rng.integers(1, 5)))
        b = broadcast_partner(rng, a) if rng.random() < 0.6 else list(a)
        return onnx_case(op, [("a", a), ("b", b)])
    return make


def x_unary(op, attrs=None, consts=None):
    def make(rng):
        shape = rand_shape(rng, int(rng.integers(1, 5)))
        return onnx_case(op, [("x", shape)], consts(rng, shape) if consts else (), attrs(rng, shape) if attrs else None)
    return make


def image(rng, c, lo=3, hi=10):
    """An NCHW shape [1, c, h, w] that no NHWC shape reads the same (not h = w = c), so the
    file's layout is clear from its shape."""
    while True:
        h, w = int(rng.integers(lo, hi)), int(rng.integers(lo, hi))
        if not h == w == c:
            return [1, c, h, w]


def x_conv(depthwise):
    def make(rng):
        c = int(rng.integers(1, 6))
        shape = image(rng, c)
        k, stride = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        o = c if depthwise else int(rng.integers(1, 7))
        w = f32(rng, [o, 1 if depthwise else c, k, k], 0.5)
        attrs = {"strides": [stride, stride], "pads": [k // 2] * 4, "group": c if depthwise else 1}
        return onnx_case("Conv", [("x", shape)], [("w", w), ("b", f32(rng, [o], 0.1))], attrs)
    return make


def x_pool(op):
    def make(rng):
        shape = image(rng, int(rng.integers(1, 5)))
        k, stride = int(rng.integers(2, 4)), int(rng.integers(1, 3))
        attrs = {"kernel_shape": [k, k], "strides": [stride, stride]}
        return onnx_case(op, [("x", shape)], (), attrs)
    return make


def x_matmul(rng):
    m, k, n = (int(v) for v in rng.integers(1, 9, 3))
    if rng.random() < 0.5:
        return onnx_case("MatMul", [("a", [m, k])], [("w", f32(rng, [k, n], 0.5))])
    batch = int(rng.integers(1, 4))
    return onnx_case("MatMul", [("a", [batch, m, k]), ("b", [batch, k, n])])


def x_concat(rng):
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    axis = int(rng.integers(0, len(shape)))
    ins = []
    for j in range(int(rng.integers(2, 4))):
        s = list(shape)
        s[axis] = int(rng.integers(1, 5))
        ins.append((f"x{j}", s))
    return onnx_case("Concat", ins, (), {"axis": axis})


def x_split(rng):
    shape = rand_shape(rng, int(rng.integers(1, 4)), 2, 8)
    axis = int(rng.integers(0, len(shape)))
    first = int(rng.integers(1, shape[axis]))
    return onnx_case("Split", [("x", shape)], [("split", np.array([first, shape[axis] - first], np.int64))],
                     {"axis": axis}, outputs=2)


def x_gather(rng):
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    axis = int(rng.integers(0, len(shape)))
    idx = rng.integers(-shape[axis], shape[axis], int(rng.integers(1, 4))).astype(np.int64)
    return onnx_case("Gather", [("x", shape)], [("i", idx)], {"axis": axis})


def x_slice(rng):
    shape = rand_shape(rng, int(rng.integers(1, 5)), 2, 8)
    starts, ends, steps = [], [], []
    for d in shape:
        a = int(rng.integers(0, d - 1))
        starts.append(a)
        ends.append(int(rng.integers(a + 1, d + 1)))
        steps.append(int(rng.integers(1, 3)))
    c = [("s", np.array(starts, np.int64)), ("e", np.array(ends, np.int64)),
         ("ax", np.arange(len(shape), dtype=np.int64)), ("st", np.array(steps, np.int64))]
    return onnx_case("Slice", [("x", shape)], c)


def x_transpose(rng):
    shape = rand_shape(rng, int(rng.integers(2, 5)))
    return onnx_case("Transpose", [("x", shape)], (), {"perm": [int(p) for p in rng.permutation(len(shape))]})


def x_reduce(op):
    def make(rng):
        shape = rand_shape(rng, int(rng.integers(2, 5)))
        axes = sorted(int(a) for a in rng.choice(len(shape), int(rng.integers(1, len(shape))), replace=False))
        return onnx_case(op, [("x", shape)], (), {"axes": axes, "keepdims": 1}, opset=13)
    return make


def x_softmax(rng):
    shape = rand_shape(rng, int(rng.integers(1, 4)), 2, 10)
    return onnx_case("Softmax", [("x", shape)], (), {"axis": int(rng.integers(-len(shape), len(shape)))})


def x_pad(rng):
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    pads = rng.integers(0, 3, 2 * len(shape)).astype(np.int64)
    return onnx_case("Pad", [("x", shape)], [("p", pads)])


def x_clip(rng):
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    lo = float(rng.uniform(-1.5, 0.0))
    return onnx_case("Clip", [("x", shape)], [("lo", np.array(lo, np.float32)),
                                              ("hi", np.array(lo + float(rng.uniform(0.5, 3)), np.float32))])


def x_pow(rng):
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    return onnx_case("Pow", [("x", shape)], [("e", np.array(float(rng.choice([2.0, 3.0])), np.float32))])


def x_resize(rng):
    shape = image(rng, int(rng.integers(1, 4)), 1, 6)
    f = float(rng.integers(2, 4))
    return onnx_case("Resize", [("x", shape)], [("roi", np.zeros(0, np.float32)),
                                                ("sc", np.array([1, 1, f, f], np.float32))],
                     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})


def x_arg(op):
    def make(rng):
        shape = rand_shape(rng, int(rng.integers(1, 4)), 2, 7)
        attrs = {"axis": int(rng.integers(-len(shape), len(shape))), "keepdims": int(rng.integers(0, 2))}
        from onnx import TensorProto
        return onnx_case(op, [("x", shape)], attrs=attrs, out_type=TensorProto.INT64)
    return make


def x_depth_to_space(rng):
    b = int(rng.integers(2, 4))
    mode = str(rng.choice(["DCR", "CRD"]))
    return onnx_case("DepthToSpace", [("x", image(rng, b * b * int(rng.integers(1, 4)), 1, 5))], (),
                     {"blocksize": b, "mode": mode})


def x_space_to_depth(rng):
    b = int(rng.integers(2, 4))
    shape = [1, int(rng.integers(1, 4)), b * int(rng.integers(1, 4)), b * int(rng.integers(1, 4))]
    return onnx_case("SpaceToDepth", [("x", shape)], (), {"blocksize": b})


def x_tile(rng):
    shape = rand_shape(rng, int(rng.integers(1, 5)), 1, 5)
    reps = rng.integers(1, 4, len(shape)).astype(np.int64)
    return onnx_case("Tile", [("x", shape)], [("r", reps)])


def x_batchnorm(rng):
    c = int(rng.integers(1, 6))
    shape = image(rng, c, 1, 6)
    return onnx_case("BatchNormalization", [("x", shape)],
                     [("g", f32(rng, [c])), ("b", f32(rng, [c], 0.2)), ("m", f32(rng, [c], 0.2)),
                      ("v", np.abs(f32(rng, [c])) + 0.5)])


X_OPS = [
    ("Add", x_binary("Add")), ("Sub", x_binary("Sub")), ("Mul", x_binary("Mul")),
    ("Max", x_binary("Max")), ("Min", x_binary("Min")),
    ("Concat", x_concat), ("Split", x_split), ("Gather", x_gather), ("Slice", x_slice),
    ("Transpose", x_transpose), ("Pad", x_pad),
    ("ReduceMean", x_reduce("ReduceMean")), ("ReduceMax", x_reduce("ReduceMax")),
    ("Softmax", x_softmax), ("Sigmoid", x_unary("Sigmoid")), ("Tanh", x_unary("Tanh")),
    ("Relu", x_unary("Relu")), ("LeakyRelu", x_unary("LeakyRelu", lambda r, s: {"alpha": float(r.uniform(0.01, 0.3))})),
    ("Clip", x_clip), ("Pow", x_pow), ("Exp", x_unary("Exp")),
    ("Conv", x_conv(False)), ("DepthwiseConv", x_conv(True)), ("MatMul", x_matmul),
    ("AveragePool", x_pool("AveragePool")), ("MaxPool", x_pool("MaxPool")), ("Resize", x_resize),
    ("BatchNormalization", x_batchnorm),
    ("ArgMax", x_arg("ArgMax")), ("ArgMin", x_arg("ArgMin")),
    ("DepthToSpace", x_depth_to_space), ("SpaceToDepth", x_space_to_depth), ("Tile", x_tile),
]
# Export cases that run in float on purpose: LiteRT has no int16 ARG_MAX / ARG_MIN. Every
# other case must export with every op in integer arithmetic.
X_FLOAT = {("ArgMax", "w8a16"), ("ArgMin", "w8a16")}
X_SCHEMES = ("w8a8", "w8a16")
X_CASES = 3


def run_export_case(args, tmp, case, data, preset, rng, stats, integer=True):
    """Quantize, export, compile; LiteRT against `run --plan` and the emulated binary.
    `integer`: the export must write every op in integer arithmetic (no float fallback)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from check_tflite_litert import compare, oriented, quantize as quantize_codes, to_file_layout
    model, plan, tfl, npub = (os.path.join(tmp, case + e) for e in (".onnx", ".ron", ".tflite", ".npub"))
    with open(model, "wb") as f:
        f.write(data)
    for what, cmd in [
        ("quantize", ["quantize", model, "--calib", "synthetic:4", "--preset", preset, "--out", plan]),
        ("export", ["export", model, "--plan", plan, "--format", "tflite", "--out", tfl]),
        ("compile", ["compile", model, "--plan", plan, "--target", "ethos-u55-128", "--out", npub]),
    ]:
        r = subprocess.run([args.bin] + cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return [f"{case} {what} failed: {r.stderr.strip()}"]
        if what == "export" and integer and "every op runs in integer arithmetic" not in r.stdout:
            return [f"{case} export: not all in integer arithmetic: {r.stdout.strip()}"]
    import onnx
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in onnx.load(model).graph.input}
    it = Interpreter(model_path=tfl, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    fails = []
    for k in range(2):
        feeds = []
        for d in it.get_input_details():
            # The file keeps the graph input's name; its layout may be NHWC where ours is NCHW.
            x = f32(rng, shapes[d["name"]])
            codes = quantize_codes(x, *d["quantization"], d["dtype"]) if d["quantization"][0] else x
            it.set_tensor(d["index"], to_file_layout(codes, d["shape"]).reshape(d["shape"]))
            p = os.path.join(tmp, f"{case}_{sanitize(d['name'])}.npy")
            np.save(p, codes)
            feeds += ["--input", f"{d['name']}={p}"]
        it.invoke()
        def compared(name, ours, ref):
            if ours.size == ref.size:
                # 1xCxCxC reads the same in both layouts: the orientation LiteRT's codes take.
                ours = oriented(to_file_layout(ours, ref.shape).reshape(ref.shape), ref)
            stats["export_codes"] += compare(name, ours, ref, fails)
        ours_against_litert(it, case, [("run --plan", [args.bin, "run", model, "--plan", plan]),
                                       ("emulate", [args.bin, "emulate", npub])], feeds, tmp, fails, compared)
    return fails


def ours_against_litert(it, case, engines, feeds, tmp, fails, compared):
    """Runs each engine (`how`, command) on `feeds` and hands every output, as ours and as
    LiteRT's, to `compared(name, ours, litert)`; a failed run is a failure naming it."""
    for how, cmd in engines:
        out = os.path.join(tmp, "out_" + how.split()[0])
        r = subprocess.run(cmd + feeds + ["--output-dir", out], capture_output=True, text=True)
        if r.returncode != 0:
            fails.append(f"{case} {how}: {r.stderr.strip()}")
            continue
        for d in it.get_output_details():
            ours = np.load(os.path.join(out, sanitize(d["name"]) + ".npy"))
            compared(f"{case} {how} {d['name']}", ours, it.get_tensor(d["index"]))


def wrong_shapes_are_named(args, tmp):
    """An input of the right size but another shape: `run --plan` and `emulate` refuse it,
    naming the input and both shapes (not a shape error further down, not a silent
    reinterpretation of the codes)."""
    model, plan, npub = (os.path.join(tmp, "shape" + e) for e in (".onnx", ".ron", ".npub"))
    with open(model, "wb") as f:
        f.write(onnx_case("Add", [("a", [1, 2, 7, 3]), ("b", [7, 3])]))
    for cmd in (["quantize", model, "--calib", "synthetic:2", "--out", plan],
                ["compile", model, "--plan", plan, "--out", npub]):
        subprocess.run([args.bin] + cmd, capture_output=True, text=True, check=True)
    a, b = os.path.join(tmp, "shape_a.npy"), os.path.join(tmp, "shape_b.npy")
    np.save(a, np.zeros([1, 3, 2, 7], np.float32))
    np.save(b, np.zeros([7, 3], np.float32))
    fails = []
    for how, cmd, want in [
        ("run --plan", ["run", model, "--plan", plan], "input 'a' has shape [1, 3, 2, 7]; the model takes [1, 2, 7, 3]"),
        ("emulate", ["emulate", npub], "input 'a' has shape [1, 3, 2, 7]; the program takes [1, 2, 7, 3]"),
    ]:
        r = subprocess.run([args.bin] + cmd + ["--input", f"a={a}", "--input", f"b={b}", "--output-dir",
                                               os.path.join(tmp, "w")], capture_output=True, text=True)
        if r.returncode == 0 or want not in r.stderr:
            fails.append(f"{how} with a mis-shaped input: expected an error saying \"{want}\", got "
                         f"rc {r.returncode}: {r.stderr.strip()[-300:]}")
    return fails


def manifest_text(ops):
    lines = ["# op, scheme, cases (generated by scripts/check_op_suite.py --write-manifest)"]
    total = 0
    for name, _, schemes, n in ops:
        for ty in schemes:
            lines.append(f"{name} {'int8' if ty == I8 else '16x8'} {n}")
            total += n
    for name, _ in X_OPS:
        for preset in X_SCHEMES:
            lines.append(f"onnx:{name} {preset} {X_CASES}")
            total += X_CASES
    lines.append(f"total {total}")
    return "\n".join(lines) + "\n"


def run_case(args, tmp, case, data, rng, stats):
    """Returns the failures of one case (empty when every output code equals LiteRT's), or
    None when LiteRT's output is one code everywhere."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    path = os.path.join(tmp, case + ".tflite")
    with open(path, "wb") as f:
        f.write(data)
    try:
        it = Interpreter(model_path=path, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        it.allocate_tensors()
    except Exception as e:  # noqa: BLE001 - the generator must only build files LiteRT takes
        return [f"{case}: LiteRT refuses the generated file: {e}"]
    npub = os.path.join(tmp, case + ".npub")
    r = subprocess.run([args.bin, "compile", path, "--target", "ethos-u55-128", "--out", npub],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return [f"{case}: compile failed: {r.stderr.strip()}"]
    fails = []
    for k in range(2):
        feeds = []
        for d in it.get_input_details():
            # Codes over a random stretch of the range around 0 (whole range at most).
            info = np.iinfo(d["dtype"])
            lo, hi = int(rng.integers(info.min, info.min // 4)), int(rng.integers(info.max // 4, info.max + 1))
            if d["name"].endswith("_nonneg"):
                lo = 0
            x = rng.integers(lo, hi + 1, d["shape"]).astype(d["dtype"])
            it.set_tensor(d["index"], x)
            xp = os.path.join(tmp, f"{case}_{d['name']}.npy")
            np.save(xp, x)
            feeds += ["--input", f"{d['name']}={xp}"]
        try:
            it.invoke()
        except Exception as e:  # noqa: BLE001
            return [f"{case}: LiteRT fails to run the generated file: {e}"]
        for d in it.get_output_details():
            ref = it.get_tensor(d["index"])
            # A case whose output is one code everywhere tests nothing: drawn again.
            if ref.size >= 4 and np.unique(ref).size < 2:
                return None
            stats["distinct"] += np.unique(ref).size
            stats["outputs"] += 1
        def compared(name, ours, ref):
            stats["codes"] += ref.size
            if ours.shape != ref.shape:
                fails.append(f"{name}: shape {ours.shape}, LiteRT {ref.shape}")
            elif not np.array_equal(ours, ref):
                diff = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
                fails.append(f"{name}: {int((diff > 0).sum())} of {ref.size} codes differ (largest by {int(diff.max())})")
        ours_against_litert(it, case, [("run", [args.bin, "run", path]), ("emulate", [args.bin, "emulate", npub])],
                            feeds, tmp, fails, compared)
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    ap.add_argument("--ops", default="")
    ap.add_argument("--write-manifest", action="store_true")
    ap.add_argument("--keep", default=None)
    args = ap.parse_args()
    want = set(filter(None, args.ops.split(",")))
    ops = [o for o in OPS if not want or o[0] in want]
    text = manifest_text(OPS)
    if args.write_manifest:
        os.makedirs(os.path.dirname(MANIFEST), exist_ok=True)
        with open(MANIFEST, "w") as f:
            f.write(text)
    elif not want:
        have = open(MANIFEST).read() if os.path.exists(MANIFEST) else ""
        if have != text:
            sys.exit(f"{MANIFEST} is stale: run scripts/check_op_suite.py --write-manifest")
    failures, stats, per = [], Counter(), Counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.keep or tmp
        os.makedirs(tmp, exist_ok=True)
        for name, make, schemes, n in ops:
            for ty in schemes:
                scheme = "int8" if ty == I8 else "16x8"
                # Each (op, scheme) draws from its own seed: adding an op leaves the others' cases as they were.
                rng = np.random.default_rng(sum(map(ord, name + scheme)) * 7919)
                bad = 0
                for c in range(n):
                    case = f"{name.lower()}_{scheme}_{c}"
                    for _ in range(8):
                        f = run_case(args, tmp, case, make(rng, ty), rng, stats)
                        if f is not None:
                            break
                        stats["redrawn"] += 1
                    else:
                        f = [f"{case}: 8 draws in a row give LiteRT outputs of one code everywhere"]
                    failures += f
                    bad += bool(f)
                    per[(name, scheme)] += 1
                print(f"{name} {scheme}: {n} cases, {n - bad} equal to LiteRT (run and emulated)", flush=True)
        for name, make in (x for x in X_OPS if not want or f"onnx:{x[0]}" in want):
            for preset in X_SCHEMES:
                rng = np.random.default_rng(sum(map(ord, name + preset)) * 104729)
                bad = 0
                for c in range(X_CASES):
                    case = f"onnx_{name.lower()}_{preset}_{c}"
                    f = run_export_case(args, tmp, case, make(rng), preset, rng, stats,
                                        integer=(name, preset) not in X_FLOAT)
                    failures += f
                    bad += bool(f)
                    per[(f"onnx:{name}", preset)] += 1
                print(f"onnx:{name} {preset}: {X_CASES} cases, {X_CASES - bad} exported files equal to LiteRT "
                      "(integer reference and emulated)", flush=True)
        if not want or any(w.startswith("onnx:") for w in want):
            failures += wrong_shapes_are_named(args, tmp)
    cases = sum(per.values())
    tfl_ops = {k[0] for k in per if not k[0].startswith("onnx:")}
    print(f"{cases} cases ({len(tfl_ops)} TFLite ops in built files, {len({k[0] for k in per}) - len(tfl_ops)} ONNX "
          f"ops through our export), {stats['codes']} output codes of built files compared "
          f"({stats['distinct'] / max(stats['outputs'], 1):.0f} distinct codes per LiteRT output on average; "
          f"{stats['redrawn']} draws of one code everywhere drawn again; {stats['export_codes']} codes of exported files), "
          f"{len(failures)} failures")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
