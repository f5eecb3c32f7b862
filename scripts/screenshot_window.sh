#!/usr/bin/env bash
# Starts the real studio window under Xvfb on a model and saves a screenshot of the screen.
# Usage: scripts/screenshot_window.sh [MODEL] [OUT.png] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-assets/models/sample_cnn.onnx}
out=${2:-window.png}
wait_s=${3:-8}
cargo build --release -p npu-studio
xvfb-run -a -s '-screen 0 1600x1000x24' bash -c "
  target/release/npu-studio '$model' &
  pid=\$!
  sleep $wait_s
  import -window root '$out'
  kill \$pid
"
echo "wrote $out"
