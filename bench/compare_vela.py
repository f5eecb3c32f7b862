#!/usr/bin/env python3
"""Our performance model for the Ethos-U55-128 target against Arm Vela's estimate.

For each model: calibrate a w8a8 plan (`npu-studio quantize`, the calibration set of
model_sets.py), export it as TFLite (`npu-studio export --format tflite`), compile the
same plan for our `ethos-u55-128` target (`npu-studio compile --report`), and compile the
TFLite file with Vela (`vela --accelerator-config ethos-u55-128`, its default system:
Ethos_U55_High_End_Embedded, Shared_Sram, 500 MHz). Printed per model: the share of ops
each puts on the NPU, the NPU cycles of each (Vela's `cycles_npu` of its summary CSV, the
sum over NPU layers of max(compute, memory); ours `npu_cycles`) and the ratio ours/Vela;
and our total with the CPU segments and hand-offs, which Vela leaves out. Exits 1 when a
ratio is outside 0.5..2 or Vela fails on a model.

Usage: compare_vela.py [--bin PATH] [--models cls,det,rec,yolox,pitch,magika]
Needs `pip install ethos-u-vela==5.2.0` (scripts/requirements.txt has it).
"""
import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from model_sets import MODELS, ROOT, model_path, run, w8a8_plan  # noqa: E402


def vela(tflite, out_dir):
    cmd = [sys.executable, "-m", "ethosu.vela", tflite, "--accelerator-config", "ethos-u55-128"]
    cmd += ["--output-dir", out_dir, "--verbose-performance"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip().splitlines()[-1:]
    cpu = re.search(r"CPU operators = (\d+)", r.stdout)
    npu = re.search(r"NPU operators = (\d+)", r.stdout)
    summary = glob.glob(os.path.join(out_dir, "*_summary_*.csv"))
    row = next(csv.DictReader(open(summary[0])))
    return {
        "cpu_ops": int(cpu.group(1)) if cpu else None,
        "npu_ops": int(npu.group(1)) if npu else None,
        "cycles_npu": float(row["cycles_npu"]),
        "cycles_total": float(row["cycles_total"]),
        "macs": float(row["nn_macs"]),
        "sram_kib": float(row["sram_memory_used"]),
    }, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/npu-studio"))
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    rows = []
    for m in args.models.split(","):
        tmp = tempfile.mkdtemp(prefix=f"vela_{m}_")
        plan = w8a8_plan(args.bin, m, tmp)
        tfl = os.path.join(tmp, f"{m}.tflite")
        run([args.bin, "export", model_path(m), "--plan", plan, "--format", "tflite", "--out", tfl])
        rep = os.path.join(tmp, "ours.json")
        run([args.bin, "compile", model_path(m), "--plan", plan, "--target", "ethos-u55-128", "--report", rep])
        ours = json.load(open(rep))["totals"]
        v, err = vela(tfl, os.path.join(tmp, "vela"))
        rows.append((m, ours, v, err))
    print("Ethos-U55-128, w8a8 plans; NPU cycles: ours npu_cycles, Vela cycles_npu")
    print(f"{'model':8} {'Vela NPU ops':>14} {'ours NPU ops':>14} {'Vela NPU cycles':>16} {'ours NPU cycles':>16} "
          f"{'ratio':>6} {'Vela SRAM KiB':>14} {'ours total ms (with CPU)':>24}")
    ratios = []
    for m, o, v, err in rows:
        ours_ops = f"{o['ops_on_npu']}/{o['ops_total']}"
        if v is None:
            print(f"{m:8} Vela failed: {' '.join(err)}; ours {ours_ops}, {o['npu_cycles']:.0f} cycles")
            continue
        total = (v["npu_ops"] or 0) + (v["cpu_ops"] or 0)
        ratio = o["npu_cycles"] / v["cycles_npu"] if v["cycles_npu"] else float("nan")
        ratios.append(ratio)
        print(f"{m:8} {v['npu_ops']:>6}/{total:<7} {ours_ops:>14} {v['cycles_npu']:>16.0f} {o['npu_cycles']:>16.0f} "
              f"{ratio:>6.2f} {v['sram_kib']:>14.1f} {o['latency_ms']:>24.3f}")
    if ratios:
        print(f"ratio ours/Vela: min {min(ratios):.2f}, max {max(ratios):.2f}")
    # Our estimate must stay within a factor of 2 of Vela's on every model it compiles.
    off = [m for (m, _, v, _), r in zip([x for x in rows if x[2] is not None], ratios) if not 0.5 <= r <= 2.0]
    failed = [m for m, _, v, _ in rows if v is None]
    if off or failed:
        print(f"outside the 2x band: {', '.join(off) or 'none'}; Vela failed: {', '.join(failed) or 'none'}")
        sys.exit(1)


if __name__ == "__main__":
    main()
