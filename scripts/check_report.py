#!/usr/bin/env python3
"""The HTML study report as a reader meets it, in headless Chromium with no network.

Calibrates a w8a8 plan of PP-OCR cls on the eight crops, writes the report on the six
held-out photos with the Ethos-U55-128 placement and the mixed-precision curve
(`npu-studio export --format report`), then:
- reads the page for anything it would fetch (no `src=`, `<link>`, `url(`, `@import`,
  `fetch(`, and no `http(s)://` address other than the SVG namespace);
- checks the JSON and CSV beside it against the page (one row per simulated tensor);
- opens it in Debian's Chromium through Playwright with every request other than the
  file itself refused, counts the refused requests (must be 0), clicks the "cumulative dB"
  header and checks that the rows are sorted by it, and writes a screenshot.

Usage: check_report.py [--bin PATH] [--out DIR] [--screenshot FILE.png]
Needs `apt-get install chromium` and `pip install playwright` (no browser download: the
system Chromium is used).
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PRE = "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5"


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.abspath(os.path.join(ROOT, "target/release/npu-studio")))
    ap.add_argument("--out", default=None, help="folder for the report (default: a temporary one)")
    ap.add_argument("--screenshot", default=None)
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="report-")
    os.makedirs(out, exist_ok=True)
    # Paths as a user in the repository types them (the report shows the model's path).
    model = "data/models/ppocr_cls.onnx"
    out = os.path.abspath(out)
    evald = os.path.join(out, "eval")
    os.makedirs(evald, exist_ok=True)
    for n in ["astronaut", "chelsea", "coffee", "page", "rocket", "text"]:
        shutil.copy(os.path.join(ROOT, f"data/inputs/cls_{n}.npy"), evald)
    plan = os.path.join(out, "cls.quant.ron")
    run([args.bin, "quantize", model, "--calib", "data/crops8", "--preprocess", PRE, "--out", plan])
    html_path = os.path.join(out, "cls_report.html")
    said = run([args.bin, "export", model, "--plan", plan, "--format", "report", "--out", html_path,
                "--eval", evald, "--preprocess", PRE, "--target", "ethos-u55-128",
                "--target-sqnr", "30", "--calib", "data/crops8"])
    print(said.strip())
    failures = []
    page = open(html_path, encoding="utf-8").read()
    for pattern in [r"\bsrc\s*=", r"<link\b", r"url\(", r"@import", r"fetch\(", r"XMLHttpRequest"]:
        if re.search(pattern, page):
            failures.append(f"the page would fetch something: {pattern}")
    for addr in set(re.findall(r"https?://[^\s\"'<>]+", page)):
        if addr != "http://www.w3.org/2000/svg":
            failures.append(f"an address in the page: {addr}")
    report = json.load(open(html_path[:-5] + ".json"))
    rows = list(csv.DictReader(open(html_path[:-5] + ".csv")))
    if len(rows) != len(report["layers"]) or not rows:
        failures.append(f"{len(rows)} CSV rows for {len(report['layers'])} layers")
    for sec in ["summary", "outputs", "plots", "graph", "layers", "target"]:
        if f'<section id="{sec}"' not in page:
            failures.append(f"no {sec} section")
    if page.count("<svg") < 4:
        failures.append(f"{page.count('<svg')} pictures (cumulative SQNR, sensitivity, mixed precision, graph)")
    if not report.get("mixed_precision") or not report["mixed_precision"]["curve"]:
        failures.append("no mixed-precision curve")
    if not report.get("target") or report["target"]["ops_total"] == 0:
        failures.append("no placement section")

    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("Chromium is not installed (apt-get install chromium)")
    refused = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
        url = "file://" + os.path.abspath(html_path)

        def route(r):
            if r.request.url == url:
                r.continue_()
            else:
                refused.append(r.request.url)
                r.abort()

        ctx.route("**/*", route)
        pg = ctx.new_page()
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(url)
        shown = pg.locator("#layers tbody tr").count()
        if shown != len(report["layers"]):
            failures.append(f"{shown} table rows shown for {len(report['layers'])} layers")
        header = pg.locator("#layers th", has_text="cumulative dB").first
        col = [h.strip() for h in pg.locator("#layers th").all_inner_texts()].index(header.inner_text().strip())
        header.click()
        keys = pg.eval_on_selector_all(
            "#layers tbody tr", f"rs => rs.map(r => parseFloat(r.cells[{col}].dataset.v))")
        if keys != sorted(keys):
            failures.append("clicking 'cumulative dB' did not sort the rows ascending")
        header.click()
        keys = pg.eval_on_selector_all(
            "#layers tbody tr", f"rs => rs.map(r => parseFloat(r.cells[{col}].dataset.v))")
        if keys != sorted(keys, reverse=True):
            failures.append("a second click did not sort the rows descending")
        header.click()
        if args.screenshot:
            pg.goto(url)
            pg.screenshot(path=args.screenshot, full_page=False)
        failures += [f"script error: {e}" for e in errors]
        browser.close()
    if refused:
        failures.append(f"{len(refused)} request(s) beyond the file: {refused[:3]}")
    print(f"report: {len(page) // 1024} KB, {len(report['layers'])} layers, {page.count('<svg')} pictures, "
          f"{len(refused)} requests beyond the file, sorting by a column works in Chromium")
    if failures:
        print("\n".join("FAIL " + f for f in failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
