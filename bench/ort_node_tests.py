#!/usr/bin/env python3
"""Counts the ONNX backend node tests (onnx 1.22.0, fetched by scripts/fetch_onnx_node_tests.py)
that onnxruntime passes under the rule of `tests/tests/onnx_conformance.rs`: every output
present, same dtype and shape, floats within |got - want| <= 1e-5 + 1e-3 * |want| (NaN matches
NaN, infinities and non-floats exactly), sequences element by element, optionals by presence.

    python3 bench/ort_node_tests.py [--list]

Prints "onnxruntime X.Y.Z: N of M pass"; --list prints each passing test as `PASS name`."""
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "onnx-node")
RTOL, ATOL = 1e-3, 1e-5


def read_value(path, type_proto):
    """An input or output .pb as the value its graph declares (tensor, sequence, optional)."""
    data = open(path, "rb").read()
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        return numpy_helper.to_list(p)
    if kind == "optional_type":
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        return numpy_helper.to_optional(p)
    p = onnx.TensorProto()
    p.ParseFromString(data)
    return numpy_helper.to_array(p)


def same(got, want):
    if want is None or got is None:
        return (got is None) == (want is None)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if want.dtype.kind not in "fc":
        return np.array_equal(got, want)
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    nan = np.isnan(g) | np.isnan(w)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return False
    inf = (np.isinf(g) | np.isinf(w)) & ~nan
    if not np.array_equal(g[inf], w[inf]):
        return False
    ok = ~(nan | inf)
    return bool(np.all(np.abs(g[ok] - w[ok]) <= ATOL + RTOL * np.abs(w[ok])))


def run_case(d):
    model = onnx.load(os.path.join(d, "model.onnx"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    init = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in init]
    ds = os.path.join(d, "test_data_set_0")
    n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
    n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
    if n_in != len(graph_inputs) or n_out != len(model.graph.output) or n_out == 0:
        return False
    feeds = {
        vi.name: read_value(os.path.join(ds, f"input_{i}.pb"), vi.type) for i, vi in enumerate(graph_inputs)
    }
    outs = sess.run(None, feeds)
    wants = [read_value(os.path.join(ds, f"output_{i}.pb"), vi.type) for i, vi in enumerate(model.graph.output)]
    return len(outs) == len(wants) and all(map(same, outs, wants))


def main():
    dirs = sorted(d for d in glob.glob(os.path.join(ROOT, "test_*")) if os.path.isdir(d))
    if not dirs:
        sys.exit(f"{ROOT} is empty: run `python3 scripts/fetch_onnx_node_tests.py`")
    passed = 0
    for d in dirs:
        try:
            ok = run_case(d)
        except Exception:  # a model onnxruntime refuses counts as a failure, as for us
            ok = False
        passed += ok
        if ok and "--list" in sys.argv:
            print("PASS", os.path.basename(d))
    print(f"onnxruntime {ort.__version__}: {passed} of {len(dirs)} pass")


if __name__ == "__main__":
    main()
