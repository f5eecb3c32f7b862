#!/usr/bin/env python3
"""Materializes the ONNX backend node tests from the `onnx` wheel into data/onnx-node/.

The onnx 1.22.0 wheel ships onnx/backend/test/data/node/<test>/{model.onnx,
test_data_set_0/{input,output}_N.pb}; this copies them so the Rust conformance test can
read them without Python.
"""
import os
import shutil

import onnx

SRC = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
DST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "onnx-node")

if not os.path.isdir(SRC):
    raise SystemExit(f"onnx {onnx.__version__} does not ship the node tests; install onnx==1.22.0")
if os.path.isdir(DST):
    shutil.rmtree(DST)
shutil.copytree(SRC, DST)
print(f"{len(os.listdir(DST))} node tests from onnx {onnx.__version__} in {os.path.normpath(DST)}")
