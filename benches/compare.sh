#!/usr/bin/env bash
# Runs the dropmc benchmark (reference and fast paths) and the numpy reference
# one after the other on the same machine, and prints mask elements per second
# and the ratios fast/numpy and reference/numpy per workload.
#
#   bash benches/compare.sh [--masks N] [--workload W1|W2|W3]
#
# Needs python3 with numpy (pip install numpy). Options are passed to both
# sides; the numpy side and the fast path run the same number of masks.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
./target/release/dropmc bench --json "$@" >"$out/dropmc.json"
# numpy's BLAS settings from the environment are not wanted for this run.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 benches/numpy_reference.py --json "$@" >"$out/numpy.json"
python3 - "$out/dropmc.json" "$out/numpy.json" <<'PY'
import json, platform, sys
ours = json.load(open(sys.argv[1]))
theirs = json.load(open(sys.argv[2]))
numpy = {r["workload"]: r for r in theirs["results"]}
print(f"machine: {platform.processor() or platform.machine()}, {ours['threads']} rayon threads; numpy {theirs['numpy']}")
print("x numpy: ratio of mask elements per wall second; per cpu s: ratio of mask elements per CPU second")
print(f"{'workload':8}  {'path':9}  {'masks':>10}  {'seconds':>8}  {'cpu s':>7}  {'elements/s':>10}  {'x numpy':>8}  {'per cpu s':>9}")
def per_cpu(r):
    c = r.get("cpu_seconds")
    return r["elements"] / c if c else float("nan")
for r in ours["results"]:
    w = r["workload"]
    n = numpy.get(w)
    if r["path"] == "reference" and n:
        print(f"{w:8}  {'numpy':9}  {n['masks']:>10}  {n['seconds']:8.3f}  {n['cpu_seconds']:7.2f}  {n['elements_per_second']:10.3e}  {1.0:8.1f}  {1.0:9.1f}")
    ratio = r["elements_per_second"] / n["elements_per_second"] if n else float("nan")
    cpu_ratio = per_cpu(r) / per_cpu(n) if n else float("nan")
    cpu = r.get("cpu_seconds") or float("nan")
    print(f"{w:8}  {r['path']:9}  {r['masks']:>10}  {r['seconds']:8.3f}  {cpu:7.2f}  {r['elements_per_second']:10.3e}  {ratio:8.1f}  {cpu_ratio:9.1f}")
PY
