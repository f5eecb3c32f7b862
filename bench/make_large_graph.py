#!/usr/bin/env python3
"""Writes a large ONNX model for the graph-view benchmark: N nodes named
/stageA/blockB/unitC/opD (10 per unit, 10 units a block, 10 blocks a stage), a deep chain
with skip connections every 5 nodes and a four-way parallel block every 40 nodes, like
app/src/graph/synthetic.rs. Weights are tiny so the file stays small.

Usage: python3 bench/make_large_graph.py N OUT.onnx
Then:  npu-studio bench-layout --synthetic 0 OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
out = sys.argv[2] if len(sys.argv) > 2 else f"data/large_{n}.onnx"
rng = np.random.default_rng(1)
nodes, inits = [], []
outputs = ["x"]
heads = [None] * 4
fork = "x"
for i in range(n):
    name = f"/stage{i // 1000}/block{(i // 100) % 10}/unit{(i // 10) % 10}/op{i % 10}"
    y = f"{name}_out"
    k = i % 40
    last = outputs[-1]
    if k < 8 and i >= 40 and i + 9 < n:
        if k == 0:
            fork = last
        src = fork if k < 4 else heads[k % 4]
        heads[k % 4] = y
        nodes.append(helper.make_node("Relu", [src], [y], name=name))
    elif k == 8 and i >= 40:
        nodes.append(helper.make_node("Sum", list(heads), [y], name=name))
    elif i % 5 == 4 and len(outputs) > 6:
        nodes.append(helper.make_node("Add", [last, outputs[-2 - int(rng.integers(5))]], [y], name=name))
    elif i % 2 == 0:
        w = f"{name}.weight"
        inits.append(numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), w))
        nodes.append(helper.make_node("Conv", [last, w], [y], name=name, kernel_shape=[1, 1]))
    else:
        nodes.append(helper.make_node("Sigmoid", [last], [y], name=name))
    outputs.append(y)
graph = helper.make_graph(
    nodes, f"large_{n}",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
    [helper.make_tensor_value_info(outputs[-1], TensorProto.FLOAT, [1, 8, 4, 4])],
    inits,
)
model = helper.make_model(graph, producer_name="npu-studio bench", opset_imports=[helper.make_opsetid("", 17)])
onnx.save(model, out)
print(f"wrote {out}: {len(nodes)} nodes")
