"""What the integer, QDQ and LiteRT checks share: the models, their calibration and
evaluation sets (never the same sample), and running the CLI.

PP-OCR cls calibrates on the eight crops (data/crops8, `bench/make_crops.py 8 data/crops8`)
and is evaluated on the six full photos (`cls-crops`: on 60 other crops); det, rec and the YOLOX detector calibrate on three
photos and are evaluated on the other three; Basic Pitch calibrates on two windows of the
house loop and one effect, and is evaluated on the third window and the two other effects;
Magika (int32 byte values) calibrates on three batches of six files and is evaluated on
three other batches; MediaPipe's face detector (a TFLite file) calibrates on three photos
and is evaluated on the other three.
All inputs are written by fetch_models.py into data/inputs.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = ("astronaut", "chelsea", "coffee", "page", "rocket", "text")
PREPROCESS = {"cls": "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5"}
PREPROCESS["cls-crops"] = PREPROCESS["cls"]

# name -> (model file, calibration inputs, evaluation inputs); paths relative to the root.
MODELS = {
    "cls": ("data/models/ppocr_cls.onnx", None, ["data/inputs/cls_%s.npy" % n for n in PHOTOS]),
    "det": (
        "data/models/ppocr_det.onnx",
        ["data/inputs/det_%s.npy" % n for n in PHOTOS[:3]],
        ["data/inputs/det_%s.npy" % n for n in PHOTOS[3:]],
    ),
    "rec": (
        "data/models/ppocr_rec.onnx",
        ["data/inputs/rec_%s.npy" % n for n in PHOTOS[:3]],
        ["data/inputs/rec_%s.npy" % n for n in PHOTOS[3:]],
    ),
    "yolox": (
        "data/models/yolox_ddddocr.onnx",
        ["data/inputs/yolox_%s.npy" % n for n in PHOTOS[:3]],
        ["data/inputs/yolox_%s.npy" % n for n in PHOTOS[3:]],
    ),
    "pitch": (
        "data/models/basic_pitch.onnx",
        ["data/inputs/pitch_%s.npy" % n for n in ("house0", "house1", "boom")],
        ["data/inputs/pitch_%s.npy" % n for n in ("house2", "punch", "car_door")],
    ),
    # The bundled demo: its shipped calibration images; held-out images drawn by the same
    # generator (fetch_models.py writes them).
    "sample": (
        "assets/models/sample_cnn.onnx",
        "assets/calibration/sample_cnn",
        ["data/inputs/sample_%d.npy" % k for k in range(6)],
    ),
    # A TFLite model in (MediaPipe's short-range face detector, float16 weights, NHWC).
    "face": (
        "data/models/face_short.tflite",
        ["data/inputs/face_short_%s.npy" % n for n in PHOTOS[:3]],
        ["data/inputs/face_short_%s.npy" % n for n in PHOTOS[3:]],
    ),
    "magika": (
        "data/real/magika_standard_v3_3/model.onnx",
        ["data/inputs/magika_%d.npy" % k for k in (0, 1, 2)],
        ["data/inputs/magika_%d.npy" % k for k in (3, 4, 5)],
    ),
}

# Sets measured on request only (not part of the default model lists): PP-OCR cls on a ten
# times larger held-out set, 60 other crops of the photos (`bench/make_crops.py 60
# data/crops60_eval 1`), for a figure that six photos with a 2-value output cannot pin down.
EXTRA_MODELS = {"cls-crops": ("data/models/ppocr_cls.onnx", None, "data/crops60_eval")}


def model_path(model):
    return {**MODELS, **EXTRA_MODELS}[model][0]


def sets(model, tmp):
    """(calibration folder, evaluation .npy files) for a model of MODELS."""
    _, calib, evals = {**MODELS, **EXTRA_MODELS}[model]
    if isinstance(evals, str):
        folder = os.path.join(ROOT, evals)
        if not os.path.isdir(folder):
            sys.exit(f"no {evals}: run `python3 bench/make_crops.py 60 {evals} 1` first")
        evals = sorted(os.path.join(evals, f) for f in os.listdir(folder))
    if calib is None:
        return os.path.join(ROOT, "data/crops8"), evals
    if isinstance(calib, str):
        return os.path.join(ROOT, calib), evals
    return linked_folder(tmp, "calib", calib), evals


def linked_folder(tmp, name, files):
    """A folder of links to `files` (paths relative to the repository)."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for f in files:
        os.symlink(os.path.join(ROOT, f), os.path.join(d, os.path.basename(f)))
    return d


def run(cmd):
    """Runs a command in the repository; exits with its output when it fails."""
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def quantize_eval(binary, model, calib, ev, tmp, preset="w8a8", extra=()):
    """`npu-studio quantize` of `model` (a MODELS key) calibrated on the folder `calib` and
    simulated on the folder `ev`, with `extra` options (e.g. `--equalize`; a `--recipe`
    with `preset` None); (plan path,
    report as a dict), written into `tmp`."""
    stem = (preset or "recipe") + "".join(os.path.basename(e) for e in extra).replace("-", "_")
    plan, report = os.path.join(tmp, f"{stem}.ron"), os.path.join(tmp, f"{stem}.json")
    cmd = [binary, "quantize", model_path(model), "--calib", calib, "--eval", ev, "--out", plan,
           "--report", report, *(["--preset", preset] if preset else []), *extra]
    if model in PREPROCESS:
        cmd += ["--preprocess", PREPROCESS[model]]
    run(cmd)
    with open(report) as f:
        return plan, json.load(f)


def w8a8_plan(binary, model, tmp):
    """Calibrates a w8a8 plan of `model` on its calibration set into `tmp`; its path."""
    calib, _ = sets(model, tmp)
    plan = os.path.join(tmp, "plan.ron")
    cmd = [binary, "quantize", model_path(model), "--calib", calib, "--out", plan, "--preset", "w8a8"]
    if model in PREPROCESS:
        cmd += ["--preprocess", PREPROCESS[model]]
    run(cmd)
    return plan
