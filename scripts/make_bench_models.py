#!/usr/bin/env python3
"""Writes two models of real architectures with random (seeded) weights, for latency only:

- data/models/resnet18_like.onnx: torchvision's ResNet-18 as `torch.onnx.export` writes it in
  eval mode (BatchNorm folded into the convs, Conv+Relu, a 3x3 stride-2 MaxPool, BasicBlocks
  with 1x1 stride-2 downsampling, GlobalAveragePool, Flatten, Gemm), input 1x3x224x224;
- data/models/vit_tiny_like.onnx: timm's ViT-Tiny/16 as PyTorch exports it at opset 17
  (16x16 patch Conv, class token and position embedding, 12 pre-norm encoder blocks of
  LayerNormalization, a fused qkv MatMul reshaped and transposed into 3 heads, scaled
  Q·Kᵀ, Softmax, ·V, output projection, and an MLP of MatMul+Add, GELU written with Erf,
  MatMul+Add), input 1x3x224x224.

No package on the registry ships these architectures as ONNX with trained weights, and the
latency of a dense model does not depend on its weights. Inputs: the six photos at 224x224,
normalized with ImageNet's mean and deviation, as data/inputs/imagenet_<photo>.npy.

usage: python3 scripts/make_bench_models.py
"""
import glob
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], {}

    def name(self, kind):
        self.count[kind] = self.count.get(kind, 0) + 1
        return f"{kind}_{self.count[kind]}"

    def const(self, arr, kind="w"):
        n = self.name(kind)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def rand(self, shape, fan_in):
        return self.const((self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))

    def op(self, op, inputs, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, relu=True):
        w = self.rand((cout, cin, k, k), cin * k * k)
        b = self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b")
        y = self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        return self.op("Relu", [y]) if relu else y

    def model(self, name, out, shape_out, opset):
        g = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape_out)],
            self.inits,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch")
        m.ir_version = 8  # as torch.onnx.export writes it
        onnx.checker.check_model(m)
        return m


def resnet18():
    b = Builder(18)
    x = b.conv("input", 3, 64, 7, 2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        for blk in range(2):
            s = stride if blk == 0 else 1
            y = b.conv(x, cin, cout, 3, s)
            y = b.conv(y, cout, cout, 3, 1, relu=False)
            short = b.conv(x, cin, cout, 1, s, relu=False) if (s != 1 or cin != cout) else x
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    w = b.rand((1000, 512), 512)
    bias = b.const(np.zeros(1000, np.float32), "b")
    y = b.op("Gemm", [x, w, bias], transB=1)
    return b.model("resnet18_like", y, [1, 1000], 13)


def vit_tiny(depth=12, dim=192, heads=3, mlp=768):
    b = Builder(16)
    tokens = 197
    hd = dim // heads
    x = b.op("Conv", ["input", b.rand((dim, 3, 16, 16), 768), b.const(np.zeros(dim, np.float32), "b")],
             kernel_shape=[16, 16], strides=[16, 16])
    x = b.op("Reshape", [x, b.const(np.array([1, dim, 196], np.int64), "shape")])
    x = b.op("Transpose", [x], perm=[0, 2, 1])
    cls = b.const((b.rng.standard_normal((1, 1, dim)) * 0.02).astype(np.float32), "cls")
    x = b.op("Concat", [cls, x], axis=1)
    x = b.op("Add", [x, b.const((b.rng.standard_normal((1, tokens, dim)) * 0.02).astype(np.float32), "pos")])

    def ln(x):
        return b.op("LayerNormalization", [x, b.const(np.ones(dim, np.float32), "g"), b.const(np.zeros(dim, np.float32), "beta")],
                    axis=-1, epsilon=1e-6)

    def linear(x, cin, cout):
        return b.op("Add", [b.op("MatMul", [x, b.rand((cin, cout), cin)]), b.const(np.zeros(cout, np.float32), "b")])

    for _ in range(depth):
        h = linear(ln(x), dim, 3 * dim)
        h = b.op("Reshape", [h, b.const(np.array([1, tokens, 3, heads, hd], np.int64), "shape")])
        h = b.op("Transpose", [h], perm=[2, 0, 3, 1, 4])
        q, k, v = (b.op("Gather", [h, b.const(np.array(i, np.int64), "idx")], axis=0) for i in range(3))
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        a = b.op("Mul", [b.op("MatMul", [q, kt]), b.const(np.array(hd**-0.5, np.float32), "scale")])
        a = b.op("Softmax", [a], axis=-1)
        o = b.op("Transpose", [b.op("MatMul", [a, v])], perm=[0, 2, 1, 3])
        o = b.op("Reshape", [o, b.const(np.array([1, tokens, dim], np.int64), "shape")])
        x = b.op("Add", [x, linear(o, dim, dim)])
        h = linear(ln(x), dim, mlp)
        erf = b.op("Erf", [b.op("Div", [h, b.const(np.array(np.sqrt(2.0), np.float32), "sqrt2")])])
        h = b.op("Mul", [b.op("Mul", [h, b.op("Add", [erf, b.const(np.array(1.0, np.float32), "one")])]),
                         b.const(np.array(0.5, np.float32), "half")])
        x = b.op("Add", [x, linear(h, mlp, dim)])
    x = b.op("Gather", [ln(x), b.const(np.array(0, np.int64), "idx")], axis=1)
    w = b.rand((1000, dim), dim)
    y = b.op("Gemm", [x, w, b.const(np.zeros(1000, np.float32), "b")], transB=1)
    return b.model("vit_tiny_like", y, [1, 1000], 17)


def inputs():
    from PIL import Image

    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    for img in sorted(glob.glob(os.path.join(ROOT, "data", "images", "*.png"))):
        name = os.path.splitext(os.path.basename(img))[0]
        x = np.asarray(Image.open(img).convert("RGB").resize((224, 224), Image.BILINEAR), np.float32) / 255.0
        x = ((x - mean) / std).transpose(2, 0, 1)[None]
        np.save(os.path.join(ROOT, "data", "inputs", f"imagenet_{name}.npy"), np.ascontiguousarray(x))


def main():
    out = os.path.join(ROOT, "data", "models")
    os.makedirs(out, exist_ok=True)
    onnx.save(resnet18(), os.path.join(out, "resnet18_like.onnx"))
    onnx.save(vit_tiny(), os.path.join(out, "vit_tiny_like.onnx"))
    inputs()


if __name__ == "__main__":
    main()
