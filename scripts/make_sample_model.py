#!/usr/bin/env python3
"""Generates assets/models/sample_cnn.onnx: a small MobileNet-style classifier with
name scopes, BatchNorm, HardSwish, depthwise convs, squeeze-excite, a classifier head and
seeded random weights. It is the model the studio opens when started without a file."""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
nodes, inits = [], []


def w(name, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    a = rng.normal(0, scale or (2.0 / fan_in) ** 0.5, shape).astype(np.float32)
    inits.append(numpy_helper.from_array(a, name))
    return name


def conv_bn_act(scope, x, cin, cout, k, stride=1, group=1, act="HardSwish"):
    wt = w(f"{scope}/conv.weight", cout, cin // group, k, k)
    y = f"{scope}/conv_out"
    nodes.append(helper.make_node("Conv", [x, wt], [y], name=f"{scope}/conv", kernel_shape=[k, k],
                                  strides=[stride, stride], pads=[k // 2] * 4, group=group))
    g = numpy_helper.from_array((1 + 0.1 * rng.normal(size=cout)).astype(np.float32), f"{scope}/bn.scale")
    b = numpy_helper.from_array((0.1 * rng.normal(size=cout)).astype(np.float32), f"{scope}/bn.bias")
    m = numpy_helper.from_array((0.1 * rng.normal(size=cout)).astype(np.float32), f"{scope}/bn.mean")
    v = numpy_helper.from_array((1 + 0.1 * rng.random(cout)).astype(np.float32), f"{scope}/bn.var")
    inits.extend([g, b, m, v])
    z = f"{scope}/bn_out"
    nodes.append(helper.make_node("BatchNormalization", [y, g.name, b.name, m.name, v.name], [z], name=f"{scope}/bn"))
    if act is None:
        return z
    o = f"{scope}/act_out"
    nodes.append(helper.make_node(act, [z], [o], name=f"{scope}/act"))
    return o


def se(scope, x, c):
    p = f"{scope}/pool_out"
    nodes.append(helper.make_node("GlobalAveragePool", [x], [p], name=f"{scope}/pool"))
    r = c // 4
    w1, b1 = w(f"{scope}/fc1.weight", r, c, 1, 1), w(f"{scope}/fc1.bias", r, scale=0.01)
    nodes.append(helper.make_node("Conv", [p, w1, b1], [f"{scope}/fc1_out"], name=f"{scope}/fc1"))
    nodes.append(helper.make_node("Relu", [f"{scope}/fc1_out"], [f"{scope}/relu_out"], name=f"{scope}/relu"))
    w2, b2 = w(f"{scope}/fc2.weight", c, r, 1, 1), w(f"{scope}/fc2.bias", c, scale=0.01)
    nodes.append(helper.make_node("Conv", [f"{scope}/relu_out", w2, b2], [f"{scope}/fc2_out"], name=f"{scope}/fc2"))
    nodes.append(helper.make_node("HardSigmoid", [f"{scope}/fc2_out"], [f"{scope}/gate"], name=f"{scope}/gate"))
    o = f"{scope}/se_out"
    nodes.append(helper.make_node("Mul", [x, f"{scope}/gate"], [o], name=f"{scope}/scale"))
    return o


x = "image"
h = conv_bn_act("/backbone/stem", x, 3, 16, 3, stride=2)
cin = 16
for i, (cout, stride) in enumerate([(24, 2), (24, 1), (48, 2), (48, 1), (96, 2)]):
    scope = f"/backbone/stage{i + 1}"
    d = conv_bn_act(f"{scope}/dw", h, cin, cin, 3, stride=stride, group=cin)
    if i >= 3:
        d = se(f"{scope}/se", d, cin)
    p = conv_bn_act(f"{scope}/pw", d, cin, cout, 1, act=None if stride == 1 and cin == cout else "HardSwish")
    if stride == 1 and cin == cout:
        nodes.append(helper.make_node("Add", [h, p], [f"{scope}/residual_out"], name=f"{scope}/residual"))
        p = f"{scope}/residual_out"
    h, cin = p, cout
nodes.append(helper.make_node("GlobalAveragePool", [h], ["/head/pool_out"], name="/head/pool"))
nodes.append(helper.make_node("Flatten", ["/head/pool_out"], ["/head/flat_out"], name="/head/flatten", axis=1))
fw, fb = w("/head/fc.weight", 10, cin), w("/head/fc.bias", 10, scale=0.01)
nodes.append(helper.make_node("Gemm", ["/head/flat_out", fw, fb], ["/head/logits"], name="/head/fc", transB=1))
nodes.append(helper.make_node("Softmax", ["/head/logits"], ["probabilities"], name="/head/softmax", axis=-1))

graph = helper.make_graph(
    nodes, "sample_cnn",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 224, 224])],
    [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
    inits,
)
model = helper.make_model(graph, producer_name="npu-studio sample generator", opset_imports=[helper.make_opsetid("", 14)])
model.ir_version = 8
onnx.checker.check_model(model)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "assets", "models", "sample_cnn.onnx")
onnx.save(model, out)
print(f"wrote {os.path.normpath(out)}: {len(nodes)} nodes, {sum(int(np.prod(t.dims)) for t in inits)} parameters")
