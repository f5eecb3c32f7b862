#!/usr/bin/env bash
# Runs every test: installs the system packages the studio's rendered tests need (when
# missing), fetches the real models, images and ONNX node tests into data/, runs cargo
# test, then checks the CLI against onnxruntime on the real models.
set -euo pipefail
cd "$(dirname "$0")/.."
# System packages: Mesa's software Vulkan/GL for the studio's rendered snapshot tests,
# Xvfb + ImageMagick for screenshots of the real window, Chromium for the HTML report.
apt_packages="mesa-vulkan-drivers libvulkan1 libegl1 libegl-mesa0 libgl1 libglx-mesa0 libgl1-mesa-dri \
  libxkbcommon-x11-0 libxcursor1 libxi6 libxrandr2 libx11-xcb1 libwayland-client0 xvfb xauth imagemagick chromium"
missing=""
if command -v dpkg >/dev/null && command -v apt-get >/dev/null; then
  for p in $apt_packages; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
fi
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
fi

python3 -m pip install --quiet --disable-pip-version-check -r scripts/requirements.txt
python3 scripts/fetch_models.py
python3 scripts/make_yolo_like.py
python3 scripts/fetch_onnx_node_tests.py
# Eight crops of the photos: the calibration set of the integer and QDQ checks.
[ -d data/crops8 ] || python3 bench/make_crops.py 8 data/crops8
cargo test --workspace --release -- --nocapture
cargo build --release -p npu-studio
python3 scripts/check_cli_vs_ort.py
# Every numpy dtype in and out of `run` as .npy, in either byte order and memory order.
python3 scripts/check_npy_dtypes.py
python3 scripts/check_tflite_import.py
# IF and WHILE (hand-built files: branches and loop bodies as subgraphs) against LiteRT.
python3 scripts/check_tflite_control_flow.py
# Quantized TFLite files read as their own integer programs (standalone RELUs included),
# run, compiled and emulated, against LiteRT code for code.
python3 scripts/check_tflite_program.py
# The per-op conformance suite: generated one-op int8 and 16x8 files (manifest in
# tests/conformance/manifest.txt), run, compiled and emulated, against LiteRT code for code.
python3 scripts/check_op_suite.py
# Int8 files quantized by TensorFlow's converter (MLPerf Tiny and MLTK models, trained
# weights) read as their own programs: every tensor equal to LiteRT's, run and emulated.
python3 scripts/check_tflite_int8_files.py
python3 scripts/check_fusions_ort.py
# Our TFLite export in LiteRT's reference kernels against our integer reference, element
# for element: int8 (every tensor of four models), the 16x8 scheme, 4-bit weights, a
# mixed int8/int16 plan, and layers kept in float.
python3 scripts/check_tflite_litert.py --models cls,det,rec,yolox,pitch,magika,sample,face --all-tensors cls,rec,pitch,magika,sample,face
python3 scripts/check_tflite_litert.py --models cls,det,rec,yolox,pitch,magika,sample --all-tensors cls --preset w8a16 --no-emulate
python3 scripts/check_tflite_litert.py --models cls,rec --preset w4a16
python3 scripts/check_tflite_litert.py --models cls,rec --preset w4a16 --seq-mse
python3 scripts/check_tflite_litert.py --models magika --preset w4a16 --gptq
python3 scripts/check_tflite_litert.py --models magika --preset w8a16 --gptq
python3 scripts/check_tflite_litert.py --models cls --all-tensors cls --target-sqnr 30
# Layers kept in float (the op types onnxruntime leaves in float, on w8a16): float32 ops in
# the file, every float32 tensor equal to LiteRT's bit for bit.
python3 scripts/check_tflite_litert.py --models magika --all-tensors magika --recipe scripts/recipes/w8a16_ort_float_ops.ron
# Every model converts: openwakeword's eight models, silero-vad and YOLOv8n (nodes with no
# integer form run in the float fallback) through quantize, export (in LiteRT, code for code),
# compile for every target and emulate (equal to the integer reference).
python3 scripts/check_every_model.py
# The compiler: our U55 estimate within 2x of Arm Vela's on every model, and PP-OCR det
# compiled in under a second and four times its weight bytes, for every target.
python3 bench/compare_vela.py
python3 bench/compile_cost.py --models det,sample
# Our QDQ ONNX export in onnxruntime against the simulator's prediction.
python3 scripts/check_qdq_ort.py
# The HTML report in headless Chromium with the network refused: nothing fetched, the
# table sorts by a column.
python3 scripts/check_report.py --screenshot target/report.png
# The real window, as a user starts it, under Xvfb.
scripts/screenshot_window.sh assets/models/sample_cnn.onnx target/window.png 8
