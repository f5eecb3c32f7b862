#!/usr/bin/env python3
"""Generates the studio's bundled demo: a small MobileNet-style classifier with weights
learned from images, and the images it calibrates on.

- assets/models/sample_cnn.onnx: name scopes, BatchNorm, HardSwish, depthwise convs,
  squeeze-excite, a classifier head (224x224 RGB in, scaled to 0..1; 10 classes out).
- assets/calibration/sample_cnn/*.jpg: 16 images the project ships (drawn here), and
  labels.txt with the class names.

The images are procedural: ten classes of shapes and patterns (circle, square, triangle,
ring, cross, horizontal, vertical and diagonal stripes, checkerboard, dots) in random
colours, sizes, positions and angles, on noisy gradients. The weights are learned layer by
layer, without a deep-learning framework:
- every convolution's filters are principal components of its input (3x3 patches for the
  stem and the depthwise convs, channel vectors for the 1x1 convs): edge, colour-opponent
  and texture detectors, as trained networks' first layers look;
- every BatchNorm holds the measured mean and variance of its input on the training images;
- the squeeze-excite layers reduce onto principal components of the pooled channels;
- the last 1x1 convolution and the classifier head are fitted together by gradient
  descent on softmax cross-entropy (backpropagated through HardSwish and the pooling).
Training, calibration and the printed held-out accuracy use three disjoint sets of images
(about 70% held out, against 10% by chance). Takes about ten minutes on two cores. Needs
numpy, onnx, onnxruntime and Pillow.
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from PIL import Image, ImageDraw

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CLASSES = ["circle", "square", "triangle", "ring", "cross",
           "horizontal stripes", "vertical stripes", "diagonal stripes", "checkerboard", "dots"]
SIZE = 224


# ------------------------------------------------------------------ images

def colour(rng):
    return tuple(int(v) for v in rng.integers(0, 256, 3))


def contrast(rng, bg):
    while True:
        c = colour(rng)
        if abs(np.dot(c, (0.3, 0.59, 0.11)) - np.dot(bg, (0.3, 0.59, 0.11))) > 70:
            return c


def rotated(cx, cy, pts, angle):
    c, s = np.cos(angle), np.sin(angle)
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in pts]


def image(cls, rng):
    """One image of class `cls` as an HxWx3 uint8 array."""
    a, b = np.array(colour(rng), float), np.array(colour(rng), float)
    t = np.linspace(0, 1, SIZE)
    theta = rng.uniform(0, 2 * np.pi)
    ramp = np.cos(theta) * t[None, :] + np.sin(theta) * t[:, None]
    ramp = (ramp - ramp.min()) / (np.ptp(ramp) + 1e-9)
    bg = a[None, None] * (1 - ramp[..., None] * 0.5) + b[None, None] * ramp[..., None] * 0.5
    bg_mean = tuple(int(v) for v in bg.mean(axis=(0, 1)))
    fg = contrast(rng, bg_mean)
    img = Image.fromarray(bg.clip(0, 255).astype(np.uint8))
    d = ImageDraw.Draw(img)
    cx, cy = rng.uniform(70, SIZE - 70, 2)
    r = rng.uniform(30, 60)
    ang = rng.uniform(0, np.pi)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    mask = None
    if cls == 0:
        e = rng.uniform(0.8, 1.2)
        d.ellipse([cx - r, cy - r * e, cx + r, cy + r * e], fill=fg)
    elif cls == 1:
        d.polygon(rotated(cx, cy, [(-r, -r), (r, -r), (r, r), (-r, r)], ang), fill=fg)
    elif cls == 2:
        pts = [(r * np.cos(k * 2 * np.pi / 3), r * np.sin(k * 2 * np.pi / 3)) for k in range(3)]
        d.polygon(rotated(cx, cy, pts, ang), fill=fg)
    elif cls == 3:
        d.ellipse([cx - r, cy - r, cx + r, cy + r], outline=fg, width=int(rng.uniform(7, 14)))
    elif cls == 4:
        w = r * rng.uniform(0.25, 0.4)
        for bar in ([(-r, -w), (r, -w), (r, w), (-r, w)], [(-w, -r), (w, -r), (w, r), (-w, r)]):
            d.polygon(rotated(cx, cy, bar, ang), fill=fg)
    elif cls in (5, 6, 7):
        period = rng.uniform(14, 32)
        coord = {5: yy, 6: xx, 7: (xx + yy) / np.sqrt(2)}[cls]
        mask = ((coord + rng.uniform(0, period)) % period) < period / 2
    elif cls == 8:
        period = rng.uniform(18, 40)
        mask = ((xx // (period / 2)).astype(int) + (yy // (period / 2)).astype(int)) % 2 == 0
    else:
        step = rng.uniform(22, 36)
        rad = rng.uniform(4, 8)
        off = rng.uniform(0, step, 2)
        mask = ((xx - off[0]) % step - step / 2) ** 2 + ((yy - off[1]) % step - step / 2) ** 2 < rad ** 2
    out = np.asarray(img, float)
    if mask is not None:
        out[mask] = fg
    out += rng.normal(0, 3.0, out.shape)
    return out.clip(0, 255).astype(np.uint8)


def dataset(n, seed):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % len(CLASSES)
    rng.shuffle(labels)
    imgs = np.stack([image(int(c), rng) for c in labels])
    return imgs, labels


def tensor(imgs):
    """As the studio's default preprocessing: RGB, x/255, NCHW float32."""
    return (imgs.astype(np.float32) / 255.0).transpose(0, 3, 1, 2).copy()


# ------------------------------------------------------------------ the network

W = {}      # initializer name -> array
nodes = []


def param(name, a):
    W[name] = np.asarray(a, np.float32)
    return name


def conv_bn_act(scope, x, cin, cout, k, stride=1, group=1, act="HardSwish"):
    wt = param(f"{scope}/conv.weight", np.zeros((cout, cin // group, k, k)))
    y = f"{scope}/conv_out"
    nodes.append(helper.make_node("Conv", [x, wt], [y], name=f"{scope}/conv", kernel_shape=[k, k],
                                  strides=[stride, stride], pads=[k // 2] * 4, group=group))
    names = [param(f"{scope}/bn.{p}", v) for p, v in
             (("scale", np.ones(cout)), ("bias", np.zeros(cout)), ("mean", np.zeros(cout)), ("var", np.ones(cout)))]
    z = f"{scope}/bn_out"
    nodes.append(helper.make_node("BatchNormalization", [y] + names, [z], name=f"{scope}/bn"))
    if act is None:
        return z
    o = f"{scope}/act_out"
    nodes.append(helper.make_node(act, [z], [o], name=f"{scope}/act"))
    return o


def se(scope, x, c):
    p = f"{scope}/pool_out"
    nodes.append(helper.make_node("GlobalAveragePool", [x], [p], name=f"{scope}/pool"))
    r = c // 4
    w1, b1 = param(f"{scope}/fc1.weight", np.zeros((r, c, 1, 1))), param(f"{scope}/fc1.bias", np.zeros(r))
    nodes.append(helper.make_node("Conv", [p, w1, b1], [f"{scope}/fc1_out"], name=f"{scope}/fc1"))
    nodes.append(helper.make_node("Relu", [f"{scope}/fc1_out"], [f"{scope}/relu_out"], name=f"{scope}/relu"))
    w2, b2 = param(f"{scope}/fc2.weight", np.zeros((c, r, 1, 1))), param(f"{scope}/fc2.bias", np.zeros(c))
    nodes.append(helper.make_node("Conv", [f"{scope}/relu_out", w2, b2], [f"{scope}/fc2_out"], name=f"{scope}/fc2"))
    nodes.append(helper.make_node("HardSigmoid", [f"{scope}/fc2_out"], [f"{scope}/gate"], name=f"{scope}/gate"))
    o = f"{scope}/se_out"
    nodes.append(helper.make_node("Mul", [x, f"{scope}/gate"], [o], name=f"{scope}/scale"))
    return o


LAYERS = []  # (kind, scope, input value, channels in, channels out)
x = "image"
h = conv_bn_act("/backbone/stem", x, 3, 16, 3, stride=2)
LAYERS.append(("patch", "/backbone/stem", x, 3, 16))
cin = 16
for i, (cout, stride) in enumerate([(24, 2), (24, 1), (48, 2), (48, 1), (96, 2)]):
    scope = f"/backbone/stage{i + 1}"
    d = conv_bn_act(f"{scope}/dw", h, cin, cin, 3, stride=stride, group=cin)
    LAYERS.append(("depthwise", f"{scope}/dw", h, cin, cin))
    if i >= 3:
        LAYERS.append(("se", f"{scope}/se", d, cin, cin))
        d = se(f"{scope}/se", d, cin)
    residual = stride == 1 and cin == cout
    p = conv_bn_act(f"{scope}/pw", d, cin, cout, 1, act=None if residual else "HardSwish")
    LAYERS.append(("pointwise", f"{scope}/pw", d, cin, cout))
    if residual:
        nodes.append(helper.make_node("Add", [h, p], [f"{scope}/residual_out"], name=f"{scope}/residual"))
        p = f"{scope}/residual_out"
    h, cin = p, cout
nodes.append(helper.make_node("GlobalAveragePool", [h], ["/head/pool_out"], name="/head/pool"))
nodes.append(helper.make_node("Flatten", ["/head/pool_out"], ["/head/flat_out"], name="/head/flatten", axis=1))
fw, fb = param("/head/fc.weight", np.zeros((10, cin))), param("/head/fc.bias", np.zeros(10))
nodes.append(helper.make_node("Gemm", ["/head/flat_out", fw, fb], ["/head/logits"], name="/head/fc", transB=1))
nodes.append(helper.make_node("Softmax", ["/head/logits"], ["probabilities"], name="/head/softmax", axis=-1))


def model(extra=()):
    inits = [numpy_helper.from_array(v, k) for k, v in W.items()]
    outs = [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])]
    outs += [helper.make_tensor_value_info(e, TensorProto.FLOAT, None) for e in extra]
    g = helper.make_graph(nodes, "sample_cnn",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                          outs, inits)
    m = helper.make_model(g, producer_name="npu-studio sample generator",
                          opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def values(xs, names):
    """The named values for every input image (ORT, one image at a time: batch 1)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model(names).SerializeToString(), opts, providers=["CPUExecutionProvider"])
    got = [s.run(names, {"image": xs[k:k + 1]}) for k in range(len(xs))]
    return [np.concatenate([g[j] for g in got]) for j in range(len(names))]


def pca(rows, k):
    """The first k principal directions of the rows (unit vectors), largest first."""
    rows = rows - rows.mean(axis=0)
    _, _, vt = np.linalg.svd(rows, full_matrices=False)
    return vt[:k]


def patches(x, k, stride, limit, rng):
    """Random kxk patches of NCHW `x` as rows (C*k*k), `limit` of them."""
    n, c, hh, ww = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    ni = rng.integers(0, n, limit)
    yi = rng.integers(0, (hh - 1) // stride + 1, limit) * stride
    xi = rng.integers(0, (ww - 1) // stride + 1, limit) * stride
    return np.stack([xp[a, :, b:b + k, d:d + k].reshape(-1) for a, b, d in zip(ni, yi, xi)])


def fit_bn(scope, xs, rng):
    (y,) = values(xs, [f"{scope}/conv_out"])
    c = y.shape[1]
    W[f"{scope}/bn.mean"] = y.mean(axis=(0, 2, 3)).astype(np.float32)
    W[f"{scope}/bn.var"] = (y.var(axis=(0, 2, 3)) + 1e-5).astype(np.float32)
    W[f"{scope}/bn.scale"] = rng.uniform(0.9, 1.3, c).astype(np.float32)
    W[f"{scope}/bn.bias"] = rng.normal(0.0, 0.1, c).astype(np.float32)


def learn(xs, rng):
    for kind, scope, inp, cin, cout in LAYERS:
        (x_in,) = values(xs, [inp])
        if kind == "patch":
            comp = pca(patches(x_in, 3, 2, 20000, rng), cout)
            W[f"{scope}/conv.weight"] = comp.reshape(cout, cin, 3, 3).astype(np.float32)
        elif kind == "depthwise":
            w = np.zeros((cin, 1, 3, 3), np.float32)
            for ch in range(cin):
                p = patches(x_in[:, ch:ch + 1], 3, 1, 4000, rng)
                comp = pca(p, 3)
                w[ch, 0] = comp[ch % 3].reshape(3, 3) * np.sign(comp[ch % 3].sum() + 1e-9)
            W[f"{scope}/conv.weight"] = w
        elif kind == "pointwise":
            rows = x_in.transpose(0, 2, 3, 1).reshape(-1, cin)
            rows = rows[rng.integers(0, len(rows), 40000)]
            # Rectified pairs: each direction and its opposite, so the HardSwish after
            # keeps the energy of both signs (texture strength survives the pooling).
            comp = pca(rows, min(cin, (cout + 1) // 2))
            w = np.concatenate([comp, -comp])[:cout]
            W[f"{scope}/conv.weight"] = w.reshape(cout, cin, 1, 1).astype(np.float32)
        elif kind == "se":
            pooled = x_in.mean(axis=(2, 3))
            r = cin // 4
            comp = pca(pooled, r)
            proj = (pooled - pooled.mean(axis=0)) @ comp.T
            W[f"{scope}/fc1.weight"] = (comp / (proj.std(axis=0)[:, None] + 1e-6)).reshape(r, cin, 1, 1).astype(np.float32)
            W[f"{scope}/fc1.bias"] = (-(pooled.mean(axis=0) @ W[f"{scope}/fc1.weight"].reshape(r, cin).T) + 0.5).astype(np.float32)
            W[f"{scope}/fc2.weight"] = rng.normal(0, 0.6, (cin, r, 1, 1)).astype(np.float32)
            W[f"{scope}/fc2.bias"] = rng.normal(1.0, 0.5, cin).astype(np.float32)
            continue
        fit_bn(scope, xs, rng)


def hswish(z):
    return z * np.clip(z + 3, 0, 6) / 6


def fit_top(xs, labels, steps=1500, lr=0.01, l2=1e-4):
    """Fits the last 1x1 convolution (with its BatchNorm folded in) and the classifier head
    together: softmax cross-entropy through HardSwish and the global pooling, by Adam."""
    scope = "/backbone/stage5/pw"
    (x,) = values(xs, ["/backbone/stage5/se/se_out"])
    n, c, hh, ww = x.shape
    X = x.transpose(0, 2, 3, 1).reshape(n, hh * ww, c)
    a = W[f"{scope}/bn.scale"] / np.sqrt(W[f"{scope}/bn.var"] + 1e-5)
    wc = W[f"{scope}/conv.weight"].reshape(-1, c) * a[:, None]
    bc = W[f"{scope}/bn.bias"] - a * W[f"{scope}/bn.mean"]
    k = len(CLASSES)
    wf, bf = np.zeros((k, wc.shape[0]), np.float32), np.zeros(k, np.float32)
    t = np.eye(k, dtype=np.float32)[labels]
    params = [wc, bc, wf, bf]
    m1 = [np.zeros_like(q) for q in params]
    m2 = [np.zeros_like(q) for q in params]
    for step in range(1, steps + 1):
        z = X @ wc.T + bc
        hz = hswish(z)
        pooled = hz.mean(axis=1)
        logits = pooled @ wf.T + bf
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        g = (p - t) / n
        g_pooled = g @ wf
        gz = (g_pooled[:, None, :] / (hh * ww)) * np.where(z < -3, 0, np.where(z > 3, 1, (2 * z + 3) / 6))
        grads = [gz.reshape(-1, gz.shape[2]).T @ X.reshape(-1, c) + l2 * wc, gz.sum(axis=(0, 1)), g.T @ pooled + l2 * wf, g.sum(axis=0)]
        for q, gq, u, v in zip(params, grads, m1, m2):
            u *= 0.9
            u += 0.1 * gq
            v *= 0.999
            v += 0.001 * gq * gq
            q -= lr * (u / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    cout = wc.shape[0]
    W[f"{scope}/conv.weight"] = wc.reshape(cout, c, 1, 1).astype(np.float32)
    W[f"{scope}/bn.mean"] = np.zeros(cout, np.float32)
    W[f"{scope}/bn.var"] = np.full(cout, 1 - 1e-5, np.float32)
    W[f"{scope}/bn.scale"] = np.ones(cout, np.float32)
    W[f"{scope}/bn.bias"] = bc.astype(np.float32)
    W["/head/fc.weight"] = wf.astype(np.float32)
    W["/head/fc.bias"] = bf.astype(np.float32)


def accuracy(xs, labels):
    (p,) = values(xs, ["probabilities"])
    return float((p.argmax(axis=1) == labels).mean())


def main():
    rng = np.random.default_rng(7)
    train_imgs, train_labels = dataset(2000, seed=1)
    calib_imgs, calib_labels = dataset(16, seed=2)
    test_imgs, test_labels = dataset(300, seed=3)
    xs = tensor(train_imgs)
    learn(xs[:160], rng)
    fit_top(xs, train_labels)
    train_acc = accuracy(xs, train_labels)
    test_acc = accuracy(tensor(test_imgs), test_labels)
    m = model()
    onnx.checker.check_model(m)
    out = os.path.join(ROOT, "assets", "models", "sample_cnn.onnx")
    onnx.save(m, out)
    cal = os.path.join(ROOT, "assets", "calibration", "sample_cnn")
    os.makedirs(cal, exist_ok=True)
    for f in os.listdir(cal):
        os.remove(os.path.join(cal, f))
    for k, (img, c) in enumerate(zip(calib_imgs, calib_labels)):
        Image.fromarray(img).save(os.path.join(cal, f"{k:02d}_{CLASSES[c].replace(' ', '_')}.jpg"), quality=92)
    with open(os.path.join(cal, "labels.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")
    print(f"wrote {os.path.normpath(out)}: {len(nodes)} nodes, {sum(v.size for v in W.values())} parameters; "
          f"accuracy {train_acc:.1%} on its {len(xs)} training images, {test_acc:.1%} on 300 held-out ones; "
          f"{len(calib_imgs)} calibration images in {os.path.normpath(cal)}")


if __name__ == "__main__":
    main()
