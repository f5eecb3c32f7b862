#!/usr/bin/env python3
"""What emulating the binary costs next to running the FP32 model.

For each model: calibrate a w8a8 plan (model_sets.py's calibration set), compile it for the
U55 (`npu-studio compile … --out FILE.npub`), then time, alternately and on the same
thread count (`--threads`, default 1), pinned to one core where `taskset` exists:
- `npu-studio bench MODEL --input …`: the FP32 executor on the model as given;
- `npu-studio bench MODEL --optimize --input …`: the same on the optimized graph (the
  graph the plan was made on);
- `npu-studio bench FILE.npub --input …`: the emulator running the binary (decoded and
  checked once before the timed runs, as the FP32 bench imports its model once).
Each is the best median of `--rounds` rounds of `--runs` runs. Printed: the three times
and the ratios emulated / FP32. PP-OCR cls must emulate in at most 3x the FP32 executor's
time on the model as given (exit status 1 otherwise).

Usage: emulate_vs_fp32.py [--bin PATH] [--models cls,det,rec] [--threads N] [--rounds R] [--runs N]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from model_sets import MODELS, ROOT, model_path, run, w8a8_plan  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/npu-studio"))
    ap.add_argument("--models", default="cls")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and args.threads == 1 else []
    print(f"{'model':6} {'threads':>7} {'FP32 ms':>8} {'FP32 opt ms':>11} {'emulated ms':>11} "
          f"{'emulated/FP32':>13} {'emulated/FP32 opt':>17}")
    bad = []
    for m in args.models.split(","):
        tmp = tempfile.mkdtemp(prefix=f"emulate_{m}_")
        plan = w8a8_plan(args.bin, m, tmp)
        npub = os.path.join(tmp, "u55.npub")
        run([args.bin, "compile", model_path(m), "--plan", plan, "--target", "ethos-u55-128", "--out", npub])
        x = MODELS[m][2][0]
        name = json.loads(run([args.bin, "info", npub, "--json"]))["inputs"][0]["name"]
        common = ["--input", f"{name}={x}", "--threads", str(args.threads), "--runs", str(args.runs), "--json"]
        best = {"fp32": [], "opt": [], "emu": []}
        for _ in range(args.rounds):
            for k, cmd in (("fp32", [model_path(m)]), ("opt", [model_path(m), "--optimize"]), ("emu", [npub])):
                r = json.loads(run(pin + [args.bin, "bench"] + cmd + common))
                best[k].append(r["median_ms"])
        f, o, e = (min(best[k]) for k in ("fp32", "opt", "emu"))
        print(f"{m:6} {args.threads:>7} {f:>8.2f} {o:>11.2f} {e:>11.2f} {e / f:>13.2f} {e / o:>17.2f}")
        if m == "cls" and e / f > 3.0:
            bad.append(f"cls emulates in {e / f:.2f}x the FP32 time")
    for b in bad:
        print("over budget:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
