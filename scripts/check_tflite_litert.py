#!/usr/bin/env python3
"""Our TFLite int8 export against LiteRT's reference kernels, element for element.

For each model: calibrate a w8a8 plan (`npu-studio quantize`) on one set of images,
export it (`npu-studio export --format tflite`), then on real inputs that were not in
the calibration set run both LiteRT (`ai-edge-litert`, `OpResolverType.BUILTIN_REF`) on
the .tflite file and our integer reference (`npu-studio run --plan`) on the same int8
input codes, and compare every output's codes. The same plan is also compiled for the
U55 (`npu-studio compile --out FILE.npub`) and the binary emulated
(`npu-studio emulate FILE.npub --model MODEL --plan PLAN --json`) on the same codes: its
outputs are compared with LiteRT's too, and its output SQNR against FP32 is printed beside
the fake-quant simulator's. With `--all-tensors MODEL`, every intermediate tensor LiteRT
exposes (`experimental_preserve_all_tensors=True`) is compared with ours (the integer
reference's and the emulator's) too. The exported file is then read back as a model of
its own: `npu-studio run FILE.tflite` runs the integer program the file carries (its
scales, zero points and codes, no plan) and its outputs must equal LiteRT's; with the U55,
`npu-studio compile FILE.tflite` (no plan) and the emulated binary too (float islands,
LayerNorm's ops and the one-hot EQUAL on int32 values included: a file not read back as a
program is a failure). Exits non-zero on any mismatch, naming the tensor,
the count of differing elements and the largest difference.

With `--recipe FILE.ron` the plans follow a recipe (layers it keeps in float are float32
ops in the file, compared bit for bit).

Usage: check_tflite_litert.py [--bin PATH] [--models cls,...] [--all-tensors cls] [--preset w8a16] [--recipe FILE.ron] [--no-emulate] [--seq-mse] [--gptq]
"""
import argparse
import json
import os
import subprocess
import re
import sys
import tempfile

import numpy as np
from model_sets import PREPROCESS, ROOT, model_path, run, sets

def sanitize(name):
    """The CLI's file stem of a tensor name (long names end in their FNV-1a hash)."""
    s = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if len(s) <= 120:
        return s
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{s[:100]}_{h:016x}"


def roundf(x):
    """C roundf: half away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))


def quantize(x, scale, zp, dtype=np.int8):
    """TFLite's QUANTIZE of float inputs: roundf(x / s) + zp, saturated to the type."""
    q = roundf((x.astype(np.float32) / np.float32(scale)).astype(np.float32)) + zp
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


def to_file_layout(a, shape=None):
    """Our array (graph layout) in the file's layout: NHWC where the file has it."""
    if a.ndim != 4 or (shape is not None and tuple(shape) == a.shape):
        return a
    return a.transpose(0, 2, 3, 1)


def oriented(ours, theirs):
    """A tensor whose NCHW and NHWC shapes coincide (1xCxCxC, as an NCHW convolution's output
    in an imported TFLite graph may be): the orientation whose codes equal LiteRT's, if one
    does; else the graph-layout rule's."""
    if ours.ndim == 4 and ours.shape[1] == ours.shape[3] and ours.shape == theirs.shape:
        alt = ours.transpose(0, 2, 3, 1)
        if not np.array_equal(ours, theirs) and np.array_equal(alt, theirs):
            return alt
    return ours


def compare(name, ours, theirs, failures):
    if ours.shape != theirs.shape:
        failures.append(f"{name}: shape {ours.shape} (ours) vs {theirs.shape} (LiteRT)")
        return 0
    if theirs.dtype == np.float32:
        # A float32 tensor (a layer the plan keeps in float): bit for bit.
        if ours.dtype != np.float32:
            failures.append(f"{name}: {ours.dtype} (ours) vs float32 (LiteRT)")
            return 0
        bad = int((ours.view(np.uint32) != theirs.view(np.uint32)).sum())
        if bad:
            rel = float(np.max(np.abs(ours.astype(np.float64) - theirs)) / (np.max(np.abs(theirs)) or 1.0))
            failures.append(f"{name}: {bad} of {ours.size} float32 elements differ in their bits, "
                            f"largest difference {rel:.3g} of the largest value")
        return ours.size
    d = np.abs(ours.astype(np.int32) - theirs.astype(np.int32))
    bad = int((d > 0).sum())
    if bad:
        failures.append(f"{name}: {bad} of {d.size} elements differ, largest difference {int(d.max())}")
    return d.size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/npu-studio"))
    ap.add_argument("--models", default="cls,det")
    ap.add_argument("--all-tensors", default="cls")
    ap.add_argument("--preset", default="w8a8", help="the quantize preset of the plans (w8a8, w8a16, ...)")
    ap.add_argument(
        "--target-sqnr",
        help="mixed precision: promote layers to int16 until the calibration set's output SQNR reaches this (dB)",
    )
    ap.add_argument("--recipe", help="a recipe (RON) for the plans instead of --preset")
    ap.add_argument("--no-emulate", action="store_true", help="skip compiling and emulating the U55 binary")
    ap.add_argument("--seq-mse", action="store_true", help="plans with SeqMSE weight ranges (quantize --seq-mse)")
    ap.add_argument("--gptq", action="store_true", help="plans with GPTQ's int4 codes (quantize --gptq)")
    args = ap.parse_args()
    from ai_edge_litert import interpreter as litert

    failures = []
    summary = []
    sqnr_rows = []
    for m in args.models.split(","):
        model = model_path(m)
        tmp = tempfile.mkdtemp(prefix=f"tflite_{m}_")
        plan = os.path.join(tmp, "plan.ron")
        tfl = os.path.join(tmp, "model.tflite")
        calib, evals = sets(m, tmp)
        cmd = [args.bin, "quantize", model, "--calib", calib, "--out", plan]
        cmd += ["--recipe", args.recipe] if args.recipe else ["--preset", args.preset]
        if args.target_sqnr:
            cmd += ["--eval", calib, "--target-sqnr", args.target_sqnr]
        if args.seq_mse:
            cmd += ["--seq-mse"]
        if args.gptq:
            cmd += ["--gptq"]
        if m in PREPROCESS:
            cmd += ["--preprocess", PREPROCESS[m]]
        run(cmd)
        run([args.bin, "export", model, "--plan", plan, "--format", "tflite", "--out", tfl])
        npub = os.path.join(tmp, "u55.npub")
        compiled = False
        if not args.no_emulate:
            r = subprocess.run([args.bin, "compile", model, "--plan", plan, "--target", "ethos-u55-128", "--out", npub],
                               cwd=ROOT, capture_output=True, text=True)
            compiled = r.returncode == 0
            if not compiled:
                summary.append(f"{m}: does not compile for the U55, not emulated: {r.stderr.strip().splitlines()[-1:]}")
        all_tensors = m in args.all_tensors.split(",")
        it = litert.Interpreter(
            model_path=tfl,
            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF,
            experimental_preserve_all_tensors=all_tensors,
        )
        it.allocate_tensors()
        (inp,) = it.get_input_details()
        scale, zp = inp["quantization"]
        checked = 0
        emulated = 0
        from_file = 0
        tensors_checked = 0
        for path in evals:
            x = np.load(os.path.join(ROOT, path))
            # Float inputs quantized to the input's grid (graph layout); integer ones as they are.
            codes = x.astype(inp["dtype"]) if np.issubdtype(x.dtype, np.integer) else quantize(x, scale, zp, inp["dtype"])
            it.set_tensor(inp["index"], to_file_layout(codes, inp["shape"]))
            it.invoke()
            cpath = os.path.join(tmp, "x.npy")
            np.save(cpath, codes)
            out = os.path.join(tmp, "out")
            dump = os.path.join(tmp, "dump")
            cmd = [args.bin, "run", model, "--plan", plan, "--input", f"{inp['name']}={cpath}", "--output-dir", out]
            if all_tensors:
                cmd += ["--dump", dump]
            run(cmd)
            eout = etrace = None
            if compiled:
                eout = os.path.join(tmp, "emulated")
                etrace = os.path.join(tmp, "etrace")
                # The float input for the FP32 and simulated comparisons; the codes as given.
                fpath = os.path.join(tmp, "xf.npy")
                np.save(fpath, x)
                ecmd = [args.bin, "emulate", npub, "--input", f"{inp['name']}={cpath}", "--output-dir", eout, "--json"]
                if all_tensors:
                    ecmd += ["--trace", etrace]
                run(ecmd)
                rep = json.loads(run([args.bin, "emulate", npub, "--input", f"{inp['name']}={fpath}", "--output-dir",
                                      os.path.join(tmp, "emulated_f"), "--model", model, "--plan", plan, "--json"]))
                for o in rep["outputs"]:
                    fmt = lambda v: "exact" if v is None else f"{v:.2f} dB"
                    sqnr_rows.append(f"{m} {os.path.basename(path)} {o['name']}: emulated {fmt(o.get('emulated_sqnr_db'))}, "
                                     f"simulated {fmt(o.get('simulated_sqnr_db'))} (vs FP32); "
                                     f"{o.get('integer_mismatches')} codes differ from the integer reference")
                    if o.get("integer_mismatches") != 0:
                        failures.append(f"{m} {os.path.basename(path)} emulated output {o['name']}: "
                                        f"{o.get('integer_mismatches')} codes differ from the integer reference")
            # The exported file read back: its own integer program, no plan.
            fout = os.path.join(tmp, "from_file")
            fpath_codes = os.path.join(tmp, "x_file.npy")
            np.save(fpath_codes, to_file_layout(codes, inp["shape"]))
            r = subprocess.run([args.bin, "run", tfl, "--input", f"{inp['name']}={fpath_codes}", "--output-dir", fout],
                               cwd=ROOT, capture_output=True, text=True)
            if r.returncode != 0:
                failures.append(f"{m}: run {tfl} failed: {r.stderr.strip()}")
            if "QDQ float graph instead" in r.stderr:
                # Every op our export writes has an integer or float32 form in the program
                # importer: a file that is not read back as its own program is a failure.
                why = r.stderr.strip().splitlines()
                failures.append(f"{m}: {tfl} is not read back as a program: {why[1].strip() if len(why) > 1 else why[0]}")
            else:
                femu = None
                if compiled:
                    fnpub = os.path.join(tmp, "from_file.npub")
                    if not os.path.exists(fnpub):
                        run([args.bin, "compile", tfl, "--target", "ethos-u55-128", "--out", fnpub])
                    femu = os.path.join(tmp, "from_file_emulated")
                    run([args.bin, "emulate", fnpub, "--input", f"{inp['name']}={fpath_codes}", "--output-dir", femu])
                for d in it.get_output_details():
                    theirs = it.get_tensor(d["index"])
                    mine = np.load(os.path.join(fout, sanitize(d["name"]) + ".npy"))
                    from_file += compare(f"{m} {os.path.basename(path)} read-back output {d['name']}", mine, theirs, failures)
                    if femu:
                        mine = np.load(os.path.join(femu, sanitize(d["name"]) + ".npy"))
                        from_file += compare(f"{m} {os.path.basename(path)} read-back emulated output {d['name']}", mine,
                                             theirs, failures)
            for d in it.get_output_details():
                ours = to_file_layout(np.load(os.path.join(out, sanitize(d["name"]) + ".npy")), d["shape"])
                checked += compare(f"{m} {os.path.basename(path)} output {d['name']}", ours, it.get_tensor(d["index"]), failures)
                if eout:
                    emu = to_file_layout(np.load(os.path.join(eout, sanitize(d["name"]) + ".npy")), d["shape"])
                    emulated += compare(f"{m} {os.path.basename(path)} emulated output {d['name']}", emu, it.get_tensor(d["index"]), failures)
                q = json.load(open(os.path.join(out, sanitize(d["name"]) + ".quant.json")))
                if d["dtype"] == np.float32:
                    if q.get("dtype") not in (None, "float32"):
                        failures.append(f"{m} output {d['name']}: {q} (ours) vs float32 (LiteRT)")
                elif np.float32(q["scale"][0]) != np.float32(d["quantization"][0]) or q["zero_point"][0] != d["quantization"][1]:
                    failures.append(f"{m} output {d['name']}: grid {q} vs LiteRT {d['quantization']}")
            if all_tensors:
                for t in it.get_tensor_details():
                    f = os.path.join(dump, sanitize(t["name"]) + ".npy")
                    if not os.path.exists(f):
                        continue  # constants, and the file's own layout tensors
                    ours = np.load(f)
                    ours = to_file_layout(ours, t["shape"]) if len(t["shape"]) == 4 else ours
                    ours = oriented(ours, it.get_tensor(t["index"]))
                    checked += compare(f"{m} {os.path.basename(path)} tensor {t['name']}", ours, it.get_tensor(t["index"]), failures)
                    tensors_checked += 1
                    f = os.path.join(etrace, sanitize(t["name"]) + ".npy") if etrace else ""
                    if etrace and os.path.exists(f):
                        emu = np.load(f)
                        emu = to_file_layout(emu, t["shape"]) if len(t["shape"]) == 4 else emu
                        emu = oriented(emu, it.get_tensor(t["index"]))
                        emulated += compare(f"{m} {os.path.basename(path)} emulated tensor {t['name']}", emu,
                                            it.get_tensor(t["index"]), failures)
        summary.append(
            f"{m}: {len(evals)} inputs, {checked} elements compared"
            + (f" ({tensors_checked} tensor comparisons incl. intermediates)" if all_tensors else "")
            + f"; the emulated U55 binary: {emulated} elements compared with LiteRT"
            + f"; the file read back (its own program{', compiled and emulated' if compiled else ''}): {from_file}"
        )
    for s in summary:
        print(s)
    for s in sqnr_rows:
        print(s)
    if failures:
        print(f"{len(failures)} mismatching tensors:")
        for f in failures[:60]:
            print("  " + f)
        sys.exit(1)
    print("0 mismatched elements")


if __name__ == "__main__":
    main()
