#!/usr/bin/env bash
# Starts the real studio window under Xvfb on a model, saves a screenshot of the screen
# and checks that the window drew something (many colours, not a blank screen).
# Usage: scripts/screenshot_window.sh [MODEL] [OUT.png] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-assets/models/sample_cnn.onnx}
out=${2:-window.png}
wait_s=${3:-8}
cargo build --release -p npu-studio
rm -f "$out"
xvfb-run -a -s '-screen 0 1600x1000x24' bash -c "
  target/release/npu-studio '$model' 2>/dev/null &
  pid=\$!
  sleep $wait_s
  import -window root '$out'
  kill \$pid 2>/dev/null || { echo 'the studio exited before the screenshot' >&2; exit 1; }
"
colours=$(convert "$out" -format %k info:)
echo "wrote $out: $colours colours"
if [ "$colours" -lt 50 ]; then
  echo "the window looks blank ($colours colours)" >&2
  exit 1
fi
