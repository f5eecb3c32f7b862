"""What the integer and QDQ checks share: the PP-OCR calibration and evaluation sets
(never the same sample), and running the CLI.

cls calibrates on the eight crops (data/crops8, `bench/make_crops.py 8 data/crops8`) and
is evaluated on the six full photos (data/inputs, written by fetch_models.py); det and rec
calibrate on three photos and are evaluated on the other three.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = ("astronaut", "chelsea", "coffee", "page", "rocket", "text")
PREPROCESS = {"cls": "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5"}


def sets(model, tmp):
    """(calibration folder, evaluation .npy files) for ppocr_<model>."""
    if model == "cls":
        return os.path.join(ROOT, "data/crops8"), ["data/inputs/cls_%s.npy" % n for n in PHOTOS]
    calib = os.path.join(tmp, "calib")
    os.makedirs(calib, exist_ok=True)
    for n in PHOTOS[:3]:
        f = os.path.join(ROOT, "data/inputs/%s_%s.npy" % (model, n))
        os.symlink(f, os.path.join(calib, os.path.basename(f)))
    return calib, ["data/inputs/%s_%s.npy" % (model, n) for n in PHOTOS[3:]]


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
