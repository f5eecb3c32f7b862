#!/usr/bin/env python3
"""What compiling costs: time and peak heap of the compile stage, per model and target.

For each model: calibrate a w8a8 plan (`npu-studio quantize` on the calibration set of
model_sets.py), then for every bundled target run
`npu-studio compile MODEL --plan PLAN --target T --out FILE.npub --json` pinned to one core
(`taskset -c 0` where it exists). The CLI measures the stages itself:
- legalize_ms: the plan becomes the integer program;
- compile_ms: partition, performance model, lowering, tiling, and writing the binary;
- compile_peak_heap_bytes: the most heap bytes in use at once during compile_ms, above
  what the loaded model already held (the binary's counting allocator);
- model_weight_bytes: the bytes of the model's weights as stored.
Printed: both times, the peak, the peak over the weight bytes, and the binary's size.
PP-OCR det must compile in under a second and under 4x its weight bytes (exit status 1
otherwise).

Usage: compile_cost.py [--bin PATH] [--models det,cls,rec,yolox,pitch,magika]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from model_sets import MODELS, ROOT, model_path, run, w8a8_plan  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/npu-studio"))
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    targets = [t["id"] for t in json.loads(run([args.bin, "targets", "--json"]))]
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    print(f"{'model':8} {'target':15} {'legalize ms':>11} {'compile ms':>10} {'peak heap':>12} "
          f"{'weights':>10} {'peak/weights':>12} {'binary':>10}")
    bad = []
    for m in args.models.split(","):
        tmp = tempfile.mkdtemp(prefix=f"compile_{m}_")
        plan = w8a8_plan(args.bin, m, tmp)
        for t in targets:
            out = os.path.join(tmp, f"{t}.npub")
            r = json.loads(run(pin + [args.bin, "compile", model_path(m), "--plan", plan, "--target", t,
                                      "--out", out, "--json"]))
            tm = r["timing"]
            peak = tm.get("compile_peak_heap_bytes")
            w = tm["model_weight_bytes"]
            ratio = peak / w if peak is not None and w else float("nan")
            print(f"{m:8} {t:15} {tm['legalize_ms']:>11.1f} {tm['compile_ms']:>10.1f} "
                  f"{peak if peak is not None else 'n/a':>12} {w:>10} {ratio:>12.2f} {r['binary_bytes']:>10}")
            if m == "det" and (tm["compile_ms"] >= 1000 or not ratio < 4):
                bad.append(f"det on {t}: {tm['compile_ms']:.0f} ms, peak {ratio:.2f}x the weights")
    for b in bad:
        print("over budget:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
