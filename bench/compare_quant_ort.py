#!/usr/bin/env python3
"""W8A8 and W8A16 output SQNR: npu-studio against onnxruntime's quantize_static, side by side,
with calibration and evaluation on disjoint samples.

Usage: python3 bench/compare_quant_ort.py [--models cls,det,rec,yolox,pitch,magika]
       [--binary target/release/npu-studio] [--a16w8]

`--models cls-crops` measures PP-OCR cls on 60 held-out crops instead of the six photos
(`python3 bench/make_crops.py 60 data/crops60_eval 1` writes them first).

Models and splits are scripts/model_sets.py's (fetch_models.py fetches them): PP-OCR cls
(calibrated on eight crops, evaluated on the six photos), det and rec (three photos / the
other three), the YOLOX detector (same), Basic Pitch (audio windows), Magika (int32 byte
values, Keras export). Both quantizers calibrate on the calibration samples only, and both
are evaluated on the held-out samples only.

npu-studio: `quantize --preset w8a8` (also with `--equalize`, cross-layer equalization, with
`--absorb-bias`, per-channel constants moved into the next conv's bias,
with `--refine-ranges`, activation ranges judged downstream and validated on held-back
calibration samples, with `--seq-mse`, per-channel weight ranges chosen by each layer's
output error, with `--smooth-quant`, LayerNorm outlier channels moved into the MatMul
weights, with `--gptq`, the linear layers' weight codes chosen against their inputs, with
`--calibration percentile-99.999`, onnxruntime's Percentile default, and
`--preset w8a16`, also with `--gptq`, and with the op types onnxruntime leaves in float kept
in float: the `w8a16 ORT-float` column, see below) on the calibration set, `--eval` on the held-out
set; the margin is plain w8a8's; the figure is the integer reference's output SQNR (`integer_sqnr_db`: the
plan run with LiteRT's integer kernels), with the fake-quant simulation's beside it.

onnxruntime gets its best chance: the model is converted to opset 13 first when it is older
(per-channel QDQ needs it; `onnx.version_converter`), then quant_pre_process; its six W8A8
configurations (per-tensor / per-channel int8 weights x MinMax / Percentile / Entropy,
uint8 activations) and the same three calibrations with uint16 activations (A16W8) run in
QDQ format. A configuration that fails to quantize or to run is reported as such.

onnxruntime's quantize_static quantizes only the op types of its QLinear and QDQ registries;
the rest (Sub, Exp, ReduceSum, Tanh, ... on Magika) run in float between a DequantizeLinear and
a QuantizeLinear. The `w8a16 ORT-float` column gives ours the same: a recipe on w8a16 that
keeps those op types in float (`precision: "float"`: float32 ops on the host in the integer
program and the TFLite file), where our integer program has a float32 form for them; the op
types are printed.

Output SQNR = 10 log10(sum ref^2 / sum (ref - q)^2) of the first output over all held-out
samples, against the FP32 model in onnxruntime. Prints one table: ours, onnxruntime's best,
the margin of plain w8a8 and of our best W8A8 column; then every configuration.
"""
import argparse
import contextlib
import io
import os
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_static)
from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from model_sets import PREPROCESS, ROOT, linked_folder, model_path, quantize_eval, sets  # noqa: E402

DEFAULT_MODELS = "cls,det,rec,yolox,pitch,magika"
# The op types our integer program can keep in float (legalize's FLOAT_LAYER_OPS).
FLOAT_LAYER_OPS = {"Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Neg", "Abs", "Relu", "Reciprocal", "HardSwish", "Add",
                   "Sub", "Mul", "Div", "Max", "Min", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "Softmax",
                   "LayerNormalization"}


def ort_float_recipe(model, tmp):
    """(recipe path, op types) of a w8a16 recipe keeping in float the op types of `model` that
    onnxruntime's quantize_static leaves in float (outside its QLinear and QDQ registries) and
    ours can run in float32; (None, []) when there are none."""
    quantized = set(QLinearOpsRegistry) | set(QDQRegistry)
    ops = sorted(({n.op_type for n in onnx.load(model).graph.node} - quantized) & FLOAT_LAYER_OPS)
    if not ops:
        return None, []
    path = os.path.join(tmp, "ort_float.ron")
    rules = ", ".join(f'(op: Some("{o}"), precision: "float")' for o in ops)
    with open(path, "w") as f:
        f.write(f'Recipe(preset: "w8a16", rules: [{rules}])\n')
    return path, ops


def session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


class Reader(CalibrationDataReader):
    def __init__(self, name, arrays):
        self.it = iter([{name: a} for a in arrays])

    def get_next(self):
        return next(self.it, None)


def sqnr(refs, outs):
    num = sum(float(np.sum(r.astype(np.float64) ** 2)) for r in refs)
    den = sum(float(np.sum((r.astype(np.float64) - o.astype(np.float64)) ** 2)) for r, o in zip(refs, outs))
    return float("inf") if den == 0 else 10 * np.log10(num / den)


def load_sample(path, spec):
    """A calibration sample as the model takes it: an .npy as stored, an image through the
    preprocessing spec (the subset PREPROCESS uses: size, color, scale, mean, std; NCHW)."""
    if path.endswith(".npy"):
        return np.load(path)
    from PIL import Image
    opts = dict(kv.split("=", 1) for kv in spec.split(";"))
    h, w = (int(v) for v in opts["size"].split("x"))
    img = np.asarray(Image.open(path).convert("RGB").resize((w, h), Image.BILINEAR), dtype=np.float32)
    if opts.get("color") == "bgr":
        img = img[..., ::-1]
    num, _, den = opts.get("scale", "1/255").partition("/")
    x = img * (float(num) / float(den or 1))
    x = (x - float(opts.get("mean", 0))) / float(opts.get("std", 1))
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def opset13(model, tmp):
    """The model at opset 13 or later (converted when older), for per-channel QDQ."""
    m = onnx.load(model)
    ver = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=13)
    if ver >= 13:
        return model, ver
    out = os.path.join(tmp, "opset13.onnx")
    onnx.save(onnx.version_converter.convert_version(m, 13), out)
    return out, ver


def ort_config(model, name, calib, evals, refs, per_channel, method, a16, tmp):
    pre = os.path.join(tmp, "pre.onnx")
    if not os.path.exists(pre):
        try:
            from onnxruntime.quantization.shape_inference import quant_pre_process
            quant_pre_process(model, pre, skip_symbolic_shape=True)
        except Exception as e:  # noqa: BLE001 - report and fall back to the converted model
            print(f"  quant_pre_process failed ({type(e).__name__}); quantizing without it", file=sys.stderr)
            pre = model
    out = os.path.join(tmp, f"q_{per_channel}_{method.name}_{a16}.onnx")
    extra = {"ActivationSymmetric": False, "WeightSymmetric": True}
    try:
        # Its calibrators print their progress; the table is this script's output.
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(pre, out, Reader(name, calib), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                            activation_type=QuantType.QUInt16 if a16 else QuantType.QUInt8,
                            weight_type=QuantType.QInt8, calibrate_method=method, extra_options=extra)
    except Exception as e:  # noqa: BLE001
        return None, f"quantize failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
    try:
        s = session(out)
        outs = [s.run(None, {name: a})[0] for a in evals]
    except Exception as e:  # noqa: BLE001
        return None, f"invalid model: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return sqnr(refs, outs), ""


def ours(binary, m, calib, ev, preset, tmp, extra=()):
    """(integer reference dB, fake-quant dB, seconds) of a preset calibrated on `calib`."""
    t0 = time.perf_counter()
    out = quantize_eval(binary, m, calib, ev, tmp, preset, extra)[1]["outputs"][0]
    return out.get("integer_sqnr_db"), out.get("sqnr_db"), time.perf_counter() - t0


def fmt(v):
    return "—" if v is None else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "npu-studio"))
    ap.add_argument("--a16w8", action="store_true", help="accepted for older scripts: A16W8 always runs now")
    args = ap.parse_args()
    rows = []
    for m in args.models.split(","):
        tmp = tempfile.mkdtemp(prefix=f"quant_ort_{m}_")
        calib_dir, eval_files = sets(m, tmp)
        ev = linked_folder(tmp, "eval", eval_files)
        calib_files = sorted(os.path.join(calib_dir, f) for f in os.listdir(calib_dir))
        calib = [load_sample(f, PREPROCESS.get(m, "")) for f in calib_files]
        evals = [load_sample(os.path.join(ROOT, f), PREPROCESS.get(m, "")) for f in eval_files]
        model = os.path.join(ROOT, model_path(m))
        fp = session(model)
        name = fp.get_inputs()[0].name
        refs = [fp.run(None, {name: a})[0] for a in evals]
        w8a8 = ours(args.binary, m, calib_dir, ev, "w8a8", tmp)
        w8a16 = ours(args.binary, m, calib_dir, ev, "w8a16", tmp)
        cle = ours(args.binary, m, calib_dir, ev, "w8a8", tmp, ["--equalize"])
        absorb = ours(args.binary, m, calib_dir, ev, "w8a8", tmp, ["--absorb-bias"])
        refine = ours(args.binary, m, calib_dir, ev, "w8a8", tmp, ["--refine-ranges"])
        seqmse = ours(args.binary, m, calib_dir, ev, "w8a8", tmp, ["--seq-mse"])
        smooth = ours(args.binary, m, calib_dir, ev, "w8a8", tmp, ["--smooth-quant"])
        gptq = ours(args.binary, m, calib_dir, ev, "w8a8", tmp, ["--gptq"])
        gptq16 = ours(args.binary, m, calib_dir, ev, "w8a16", tmp, ["--gptq"])
        pctl = ours(args.binary, m, calib_dir, ev, "w8a8", tmp, ["--calibration", "percentile-99.999"])
        recipe, float_ops = ort_float_recipe(model, tmp)
        float16 = ours(args.binary, m, calib_dir, ev, None, tmp, ["--recipe", recipe]) if recipe else (None, None, 0)
        conv, ver = opset13(model, tmp)
        results = []
        for a16 in (False, True):
            for pc in (False, True):
                for meth in (CalibrationMethod.MinMax, CalibrationMethod.Percentile, CalibrationMethod.Entropy):
                    t0 = time.perf_counter()
                    db, err = ort_config(conv, name, calib, evals, refs, pc, meth, a16, tmp)
                    label = f"{'A16W8' if a16 else 'W8A8'} {'per-channel' if pc else 'per-tensor'} {meth.name}"
                    results.append((label, db, err))
                    shown = f"{db:6.2f} dB" if db is not None else err
                    print(f"{m}: onnxruntime {label}: {shown} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        print(f"{m}: npu-studio w8a8 {fmt(w8a8[0])} dB (fake-quant {fmt(w8a8[1])}), "
              f"w8a8 + CLE {fmt(cle[0])} dB (fake-quant {fmt(cle[1])}), "
              f"w8a8 + bias absorption {fmt(absorb[0])} dB (fake-quant {fmt(absorb[1])}), "
              f"w8a8 + refined ranges {fmt(refine[0])} dB (fake-quant {fmt(refine[1])}, {refine[2]:.0f} s), "
              f"w8a8 + SeqMSE {fmt(seqmse[0])} dB (fake-quant {fmt(seqmse[1])}, {seqmse[2]:.0f} s), "
              f"w8a8 + SmoothQuant {fmt(smooth[0])} dB (fake-quant {fmt(smooth[1])}), "
              f"w8a8 + GPTQ {fmt(gptq[0])} dB (fake-quant {fmt(gptq[1])}, {gptq[2]:.0f} s), "
              f"w8a8 percentile {fmt(pctl[0])} dB (fake-quant {fmt(pctl[1])}), "
              f"w8a16 {fmt(w8a16[0])} dB "
              f"(fake-quant {fmt(w8a16[1])}), w8a16 + GPTQ {fmt(gptq16[0])} dB (fake-quant {fmt(gptq16[1])}), "
              f"w8a16 with {','.join(float_ops) or 'no op types'} in float {fmt(float16[0])} dB "
              f"(fake-quant {fmt(float16[1])}), {w8a8[2]:.0f} s", file=sys.stderr)
        best8 = max((db for lab, db, _ in results if db is not None and lab.startswith("W8A8")), default=None)
        best16 = max((db for lab, db, _ in results if db is not None and lab.startswith("A16W8")), default=None)
        rows.append((m, len(calib), len(evals), ver, w8a8, cle, absorb, refine, seqmse, smooth, gptq, pctl, w8a16,
                     gptq16, float16, float_ops, best8, best16, results))

    print("\nOutput SQNR vs FP32 (dB) on held-out samples; calibration and evaluation disjoint; "
          "npu-studio on its integer reference")
    print(f"{'model':7} {'calib/eval':>10} {'w8a8':>7} {'+CLE':>7} {'+Absorb':>8} {'+refine':>8} {'+SeqMSE':>8} "
          f"{'+Smooth':>8} {'+GPTQ':>7} {'Pctl':>7} "
          f"{'ORT W8A8':>9} {'margin':>7} {'best':>7}   {'w8a16':>7} {'+GPTQ':>7} {'ORT-float':>9} {'ORT A16W8':>10} "
          f"{'margin':>7} {'best':>7}")
    for m, nc, ne, ver, w8a8, cle, absorb, refine, seqmse, smooth, gptq, pctl, w8a16, gptq16, float16, _, best8, best16, \
            _ in rows:
        def margin(a, b):
            return "—" if a is None or b is None else f"{a - b:+.2f}"
        # The best of our W8A8 columns against onnxruntime's best W8A8 configuration.
        ours8 = [r[0] for r in (w8a8, cle, absorb, refine, seqmse, smooth, gptq, pctl) if r[0] is not None]
        ours16 = [r[0] for r in (w8a16, gptq16, float16) if r[0] is not None]
        print(f"{m:7} {f'{nc}/{ne}':>10} {fmt(w8a8[0]):>7} {fmt(cle[0]):>7} {fmt(absorb[0]):>8} {fmt(refine[0]):>8} "
              f"{fmt(seqmse[0]):>8} {fmt(smooth[0]):>8} {fmt(gptq[0]):>7} {fmt(pctl[0]):>7} {fmt(best8):>9} "
              f"{margin(w8a8[0], best8):>7} {margin(max(ours8, default=None), best8):>7}   "
              f"{fmt(w8a16[0]):>7} {fmt(gptq16[0]):>7} {fmt(float16[0]):>9} {fmt(best16):>10} "
              f"{margin(w8a16[0], best16):>7} {margin(max(ours16, default=None), best16):>7}")
    print("\nevery configuration (onnxruntime on the model at opset max(13, its own)):")
    for m, nc, ne, ver, w8a8, cle, absorb, refine, seqmse, smooth, gptq, pctl, w8a16, gptq16, float16, float_ops, \
            best8, best16, results in rows:
        print(f"  {m:6} npu-studio w8a8 integer {fmt(w8a8[0])} / fake-quant {fmt(w8a8[1])}; "
              f"w8a8 + CLE integer {fmt(cle[0])} / fake-quant {fmt(cle[1])}; "
              f"w8a8 + bias absorption integer {fmt(absorb[0])} / fake-quant {fmt(absorb[1])}; "
              f"w8a8 + refined ranges integer {fmt(refine[0])} / fake-quant {fmt(refine[1])}; "
              f"w8a8 + SeqMSE integer {fmt(seqmse[0])} / fake-quant {fmt(seqmse[1])}; "
              f"w8a8 + SmoothQuant integer {fmt(smooth[0])} / fake-quant {fmt(smooth[1])}; "
              f"w8a8 + GPTQ integer {fmt(gptq[0])} / fake-quant {fmt(gptq[1])}; "
              f"w8a8 percentile integer {fmt(pctl[0])} / fake-quant {fmt(pctl[1])}; "
              f"w8a16 integer {fmt(w8a16[0])} / fake-quant {fmt(w8a16[1])}; "
              f"w8a16 + GPTQ integer {fmt(gptq16[0])} / fake-quant {fmt(gptq16[1])}; "
              f"w8a16 with {','.join(float_ops) or 'no op types'} in float (as onnxruntime leaves them) integer "
              f"{fmt(float16[0])} / fake-quant {fmt(float16[1])}; model opset {ver}")
        for label, db, err in results:
            print(f"  {m:6} onnxruntime {label:32} {f'{db:7.2f}' if db is not None else err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
