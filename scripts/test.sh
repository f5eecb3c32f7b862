#!/usr/bin/env bash
# Runs every test: fetches the real models, images and ONNX node tests into data/, runs
# cargo test, then checks the CLI against onnxruntime on the real models.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -r scripts/requirements.txt
python3 scripts/fetch_models.py
python3 scripts/fetch_onnx_node_tests.py
cargo test --workspace --release -- --nocapture
cargo build --release -p npu-studio
python3 scripts/check_cli_vs_ort.py
