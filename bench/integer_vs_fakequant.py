#!/usr/bin/env python3
"""What the integer plan costs against the fake-quant simulation, model by model.

For each model: calibrate a plan (`npu-studio quantize --preset P`) on one set of samples
and evaluate it on a disjoint set (`--eval`, see model_sets.py), then read the report:
the output SQNR vs FP32 of the fake-quant simulation (`outputs[].sqnr_db`) and of the
integer reference (`outputs[].integer_sqnr_db`), and every legalization constraint with
the local SQNR of its tensor under both (`constraints[]`), summed up by rule: how many
places, and the mean local loss (fake-quant minus integer) where both are measured.

Usage: integer_vs_fakequant.py [--bin PATH] [--models cls,det,rec,...] [--preset w8a8]
"""
import argparse
import os
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from model_sets import MODELS, ROOT, linked_folder, quantize_eval, sets  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/npu-studio"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--preset", default="w8a8")
    args = ap.parse_args()
    rows = []
    for m in args.models.split(","):
        tmp = tempfile.mkdtemp(prefix=f"intcost_{m}_")
        calib, evals = sets(m, tmp)
        ev = linked_folder(tmp, "eval", evals)
        _, r = quantize_eval(args.bin, m, calib, ev, tmp, args.preset)
        outs = r["outputs"]
        fake = [o.get("sqnr_db") for o in outs]
        integer = [o.get("integer_sqnr_db") for o in outs]
        by_rule = defaultdict(list)
        for c in r.get("constraints", []):
            f, i = c.get("fake_quant_local_db"), c.get("integer_local_db")
            by_rule[c["rule"]].append(None if f is None or i is None else f - i)
        rows.append((m, len(evals), fake, integer, by_rule, r.get("integer_note")))
    print(f"preset {args.preset}; output SQNR vs FP32 on held-out samples (calibration and evaluation disjoint)")
    for m, n, fake, integer, by_rule, note in rows:
        f = ", ".join("—" if v is None else f"{v:.2f}" for v in fake)
        i = ", ".join("—" if v is None else f"{v:.2f}" for v in integer)
        print(f"{m}: {n} samples; fake-quant {f} dB; integer reference {i} dB" + (f" ({note})" if note else ""))
        for rule, costs in sorted(by_rule.items()):
            measured = [c for c in costs if c is not None]
            mean = f"mean local loss {sum(measured) / len(measured):+.2f} dB over {len(measured)}" if measured else "not measured"
            print(f"    {rule}: {len(costs)} place(s), {mean}")


if __name__ == "__main__":
    main()
