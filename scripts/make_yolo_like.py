"""Writes a YOLO-family detector (YOLOv8n's structure at a quarter of its widths) as ONNX,
with dynamic batch, height and width, into data/models/yolo_like.onnx.

The structure is what PyTorch exports of YOLOv8 carry: Conv+BatchNorm-free convs with SiLU
written as x*Sigmoid(x), C2f blocks (1x1 conv, Split, bottlenecks with residual Adds,
Concat, 1x1 conv), an SPPF block of three 5x5 stride-1 max pools, and a detection head
whose three scales are reshaped to [batch, 4 + classes, N] and concatenated. Weights are
random (seeded): the model is for latency, layout and the studio's handling of dynamic
shapes, not for detections. onnxruntime's symbolic shape inference then writes every
intermediate shape as an expression of `batch`, `height` and `width`, as it does for
exported detectors, so the file carries dims such as `floor(height/2 - 1/2) + 1`.

usage: python3 scripts/make_yolo_like.py [OUT.onnx]
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CLASSES = 80
rng = np.random.default_rng(7)
nodes, inits = [], []
count = {}


def name(kind):
    count[kind] = count.get(kind, 0) + 1
    return f"/model/{kind}_{count[kind]}"


def conv(x, cin, cout, k=1, s=1, act=True, scope=None):
    n = scope or name("conv")
    w = (rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
    inits.append(numpy_helper.from_array(w, f"{n}.weight"))
    inits.append(numpy_helper.from_array(b, f"{n}.bias"))
    y = f"{n}/conv_out"
    nodes.append(
        helper.make_node(
            "Conv", [x, f"{n}.weight", f"{n}.bias"], [y], name=f"{n}/conv",
            kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4,
        )
    )
    if not act:
        return y
    sig = f"{n}/sigmoid_out"
    nodes.append(helper.make_node("Sigmoid", [y], [sig], name=f"{n}/act/Sigmoid"))
    out = f"{n}/act_out"
    nodes.append(helper.make_node("Mul", [y, sig], [out], name=f"{n}/act/Mul"))
    return out


def c2f(x, c, n_bottlenecks=1):
    scope = name("c2f")
    h = c // 2
    y = conv(x, c, 2 * h, 1, scope=f"{scope}/cv1")
    split = helper.make_tensor(f"{scope}.split", TensorProto.INT64, [2], [h, h])
    inits.append(split)
    a, b = f"{scope}/a", f"{scope}/b"
    nodes.append(helper.make_node("Split", [y, f"{scope}.split"], [a, b], name=f"{scope}/Split", axis=1))
    parts = [a, b]
    for k in range(n_bottlenecks):
        t = conv(parts[-1], h, h, 3, scope=f"{scope}/m.{k}/cv1")
        t = conv(t, h, h, 3, scope=f"{scope}/m.{k}/cv2")
        out = f"{scope}/m.{k}/add_out"
        nodes.append(helper.make_node("Add", [parts[-1], t], [out], name=f"{scope}/m.{k}/Add"))
        parts.append(out)
    cat = f"{scope}/cat_out"
    nodes.append(helper.make_node("Concat", parts, [cat], name=f"{scope}/Concat", axis=1))
    return conv(cat, h * len(parts), c, 1, scope=f"{scope}/cv2")


def sppf(x, c):
    scope = name("sppf")
    h = c // 2
    y = conv(x, c, h, 1, scope=f"{scope}/cv1")
    pools = [y]
    for k in range(3):
        p = f"{scope}/pool{k}_out"
        nodes.append(
            helper.make_node(
                "MaxPool", [pools[-1]], [p], name=f"{scope}/m/MaxPool_{k}",
                kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2],
            )
        )
        pools.append(p)
    cat = f"{scope}/cat_out"
    nodes.append(helper.make_node("Concat", pools, [cat], name=f"{scope}/Concat", axis=1))
    return conv(cat, 4 * h, c, 1, scope=f"{scope}/cv2")


def head(x, c, k):
    scope = f"/model/detect/scale{k}"
    box = conv(conv(x, c, 32, 3, scope=f"{scope}/box0"), 32, 4, 1, act=False, scope=f"{scope}/box1")
    cls = conv(conv(x, c, 32, 3, scope=f"{scope}/cls0"), 32, CLASSES, 1, act=False, scope=f"{scope}/cls1")
    cat = f"{scope}/cat_out"
    nodes.append(helper.make_node("Concat", [box, cls], [cat], name=f"{scope}/Concat", axis=1))
    shape = f"{scope}.shape"
    inits.append(helper.make_tensor(shape, TensorProto.INT64, [3], [0, 4 + CLASSES, -1]))
    out = f"{scope}/reshape_out"
    nodes.append(helper.make_node("Reshape", [cat, shape], [out], name=f"{scope}/Reshape"))
    return out


def build():
    x = conv("images", 3, 16, 3, 2)
    x = conv(x, 16, 32, 3, 2)
    x = c2f(x, 32)
    x = conv(x, 32, 64, 3, 2)
    p3 = c2f(x, 64, 2)
    x = conv(p3, 64, 128, 3, 2)
    p4 = c2f(x, 128, 2)
    x = conv(p4, 128, 256, 3, 2)
    x = c2f(x, 256)
    p5 = sppf(x, 256)
    outs = [head(p3, 64, 0), head(p4, 128, 1), head(p5, 256, 2)]
    nodes.append(helper.make_node("Concat", outs, ["output0"], name="/model/detect/Concat", axis=2))
    graph = helper.make_graph(
        nodes,
        "yolo_like",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 4 + CLASSES, "anchors"])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="npu-studio-scripts")
    model.ir_version = 8
    onnx.checker.check_model(model)
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    return SymbolicShapeInference.infer_shapes(model, auto_merge=True)


def conv_macs(model, shape):
    """Multiply-accumulates of every Conv at a fixed input shape, from onnx's own shape
    inference: an oracle for the studio's count."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    del fixed.graph.value_info[:]
    dims = fixed.graph.input[0].type.tensor_type.shape.dim
    for d, n in zip(dims, shape):
        d.ClearField("dim_param")
        d.dim_value = n
    inferred = onnx.shape_inference.infer_shapes(fixed)
    shapes = {
        vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input)
    }
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            out = shapes[n.output[0]]
            w = weights[n.input[1]]
            total += out[0] * out[1] * out[2] * out[3] * w[1] * w[2] * w[3]
    return total


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "models", "yolo_like.onnx")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    model = build()
    macs = conv_macs(model, [1, 3, 320, 320])
    helper.set_model_props(model, {"conv_macs_at_1x3x320x320": str(macs)})
    onnx.save(model, out)
    dims = [d.dim_param for vi in model.graph.output for d in vi.type.tensor_type.shape.dim]
    print(f"wrote {out}: {len(model.graph.node)} nodes, {macs} conv MACs at 1x3x320x320, output0 dims {dims}")


if __name__ == "__main__":
    main()
