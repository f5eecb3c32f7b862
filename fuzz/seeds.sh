#!/bin/sh
# Seeds for `cargo fuzz run npub`: the U55 binaries of the bundled sample model and of
# PP-OCR cls (after scripts/fetch_models.py and bench/make_crops.py 8 data/crops8).
set -e
cd "$(dirname "$0")/.."
bin=target/release/npu-studio
out=fuzz/corpus/npub
tmp=$(mktemp -d)
mkdir -p "$out"
$bin quantize assets/models/sample_cnn.onnx --calib assets/calibration/sample_cnn --out "$tmp/sample.ron"
$bin compile assets/models/sample_cnn.onnx --plan "$tmp/sample.ron" --out "$out/sample.npub"
$bin quantize data/models/ppocr_cls.onnx --calib data/crops8 \
  --preprocess 'size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5' --out "$tmp/cls.ron"
$bin compile data/models/ppocr_cls.onnx --plan "$tmp/cls.ron" --out "$out/cls.npub"
