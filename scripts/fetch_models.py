#!/usr/bin/env python3
"""Copies the real models and images the tests use into data/ (ignored by git).

Models: PP-OCRv4 det, PP-OCR mobile cls, PP-OCRv4 rec from the rapidocr-onnxruntime wheel.
Images: scikit-image sample photos and its scanned text page, preprocessed the way each
PP-OCR model expects, saved as .npy. Reference outputs come from onnxruntime.
"""
import os
import shutil
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "data")


def models():
    import rapidocr_onnxruntime

    src = os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models")
    out = os.path.join(DATA, "models")
    os.makedirs(out, exist_ok=True)
    names = {
        "ch_PP-OCRv4_det_infer.onnx": "ppocr_det.onnx",
        "ch_ppocr_mobile_v2.0_cls_infer.onnx": "ppocr_cls.onnx",
        "ch_PP-OCRv4_rec_infer.onnx": "ppocr_rec.onnx",
    }
    for s, d in names.items():
        shutil.copyfile(os.path.join(src, s), os.path.join(out, d))
    return out


def resize(img, h, w):
    from skimage.transform import resize as sk_resize

    return sk_resize(img, (h, w), anti_aliasing=True, preserve_range=True).astype(np.float32)


def rgb(img):
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return img[..., :3].astype(np.float32)


def images():
    from skimage import data

    photos = {
        "astronaut": data.astronaut(),
        "coffee": data.coffee(),
        "chelsea": data.chelsea(),
        "rocket": data.rocket(),
        "text": data.text(),
        "page": data.page(),
    }
    out = os.path.join(DATA, "inputs")
    os.makedirs(out, exist_ok=True)
    for name, img in photos.items():
        img = rgb(img)
        # det: 736x736, ImageNet mean/std, BGR order as PaddleOCR feeds it.
        det = resize(img, 736, 736)[..., ::-1] / 255.0
        det = (det - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
        np.save(os.path.join(out, f"det_{name}.npy"), det.transpose(2, 0, 1)[None].astype(np.float32))
        # cls: 48x192, (x/255 - 0.5) / 0.5
        cls = (resize(img, 48, 192)[..., ::-1] / 255.0 - 0.5) / 0.5
        np.save(os.path.join(out, f"cls_{name}.npy"), cls.transpose(2, 0, 1)[None].astype(np.float32))
        # rec: 48x320
        rec = (resize(img, 48, 320)[..., ::-1] / 255.0 - 0.5) / 0.5
        np.save(os.path.join(out, f"rec_{name}.npy"), rec.transpose(2, 0, 1)[None].astype(np.float32))
    return out


def references(model_dir, input_dir):
    import onnxruntime as ort

    out = os.path.join(DATA, "reference")
    os.makedirs(out, exist_ok=True)
    for kind in ("det", "cls", "rec"):
        sess = ort.InferenceSession(os.path.join(model_dir, f"ppocr_{kind}.onnx"), providers=["CPUExecutionProvider"])
        iname = sess.get_inputs()[0].name
        for f in sorted(os.listdir(input_dir)):
            if not f.startswith(kind + "_"):
                continue
            x = np.load(os.path.join(input_dir, f))
            y = sess.run(None, {iname: x})[0]
            np.save(os.path.join(out, f), y)
    return out


if __name__ == "__main__":
    m = models()
    i = images()
    r = references(m, i)
    print(f"models in {m}, inputs in {i}, onnxruntime references in {r}")
    sys.exit(0)
