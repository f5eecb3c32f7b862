#!/usr/bin/env python3
"""Writes N crops of the real photos in data/images (scikit-image's samples, fetched by
scripts/fetch_models.py) as PNG files: a larger calibration/evaluation set of real image
content, e.g. for timing `npu-studio analyze` with 32 images.

    python3 bench/make_crops.py 32 data/crops
    python3 bench/make_crops.py 60 data/crops60_eval 1   # another seed: other crops

The optional third argument seeds the crop positions (default 0, which `data/crops8` uses).
"""

import random
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "data" / "crops"
    photos = sorted((ROOT / "data" / "images").glob("*.png"))
    if not photos:
        sys.exit("no photos in data/images: run scripts/fetch_models.py first")
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    for k in range(n):
        src = photos[k % len(photos)]
        img = Image.open(src).convert("RGB")
        w, h = img.size
        # A text-line-like strip (wide) or a square patch, at least a quarter of each side.
        cw = rng.randint(w // 4, w)
        ch = rng.randint(h // 4, h) if k % 2 else max(8, min(h, cw // 4))
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        img.crop((x, y, x + cw, y + ch)).save(out / f"{src.stem}_{k:02}.png")
    print(f"{n} crops of {len(photos)} photos written to {out}")


if __name__ == "__main__":
    main()
