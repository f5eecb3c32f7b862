#!/usr/bin/env bash
# Runs every test: fetches the real models, images and ONNX node tests into data/, then cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -r scripts/requirements.txt
python3 scripts/fetch_models.py
python3 scripts/fetch_onnx_node_tests.py
cargo test --workspace --release -- --nocapture
