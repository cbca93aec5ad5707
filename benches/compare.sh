#!/usr/bin/env bash
# Times what users run against the obvious numpy loops, in one run on one
# machine, and prints mask elements per second and the ratio to numpy.
#
#   bash benches/compare.sh [--samples N] [--masks M]
#
# 1. The commands, as whole processes (wall clock from start to exit, so
#    process start, parsing, the exact formulas and JSON printing count):
#      dropmc eval ln   --x <W1's x> --p 0.1 --samples N --seed 1 --json
#      dropmc eval rms  --x <W1's x> --p 0.1 --samples N --seed 1 --json
#      dropmc eval attn --a softmax(x) --values x --p 0.1 --samples N --seed 1 --json
#    against `numpy_reference.py --workload eval-ln|eval-rms|eval-attn
#    --masks N`, also timed as whole processes; those compute per draw the
#    same statistics as the commands (see the script's docs). W1's input is
#    d = 512 values x ~ N(0.7, 1.3^2) drawn once by numpy from seed 20261130
#    (`numpy_reference.py --print-input x`). N defaults to 10^7.
# 2. The internal benchmark, `dropmc bench --workload W1 --masks M` (median
#    of 3 timed runs, its own clock), against numpy's W1 loop on M masks
#    (its own clock). M defaults to 10^7.
#
# Mask elements = draws x d on both sides (the second mask per draw that
# `eval ln` and `eval attn` make for a variance is work on both sides, but
# not counted). Needs numpy for ${PYTHON:-python3} (for example
# `python3 -m venv /tmp/venv-bench && /tmp/venv-bench/bin/pip install numpy`,
# then PYTHON=/tmp/venv-bench/bin/python). numpy's BLAS settings from the
# environment are not wanted for these elementwise loops and are unset.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
samples=10000000
masks=10000000
while [ $# -gt 0 ]; do
    case "$1" in
        --samples) samples=$2; shift 2 ;;
        --masks) masks=$2; shift 2 ;;
        *) echo "usage: bash benches/compare.sh [--samples N] [--masks M]" >&2; exit 2 ;;
    esac
done
cargo build --release --quiet
bin=./target/release/dropmc
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
numpy() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" benches/numpy_reference.py "$@"; }
x=$(numpy --print-input x)
a=$(numpy --print-input a)

# wall NAME CMD...: runs CMD with stdout to $out/NAME.out, appends
# "NAME seconds" to $out/times.
wall() {
    local name=$1 start end
    shift
    start=$(date +%s%N)
    "$@" >"$out/$name.out"
    end=$(date +%s%N)
    echo "$name $(( (end - start) / 1000 ))" >>"$out/times"
}

common=(--p 0.1 --samples "$samples" --seed 1 --json)
wall dropmc-ln "$bin" eval ln --x "$x" "${common[@]}"
wall numpy-ln numpy --workload eval-ln --masks "$samples" --json
wall dropmc-rms "$bin" eval rms --x "$x" "${common[@]}"
wall numpy-rms numpy --workload eval-rms --masks "$samples" --json
wall dropmc-attn "$bin" eval attn --a "$a" --values "$x" "${common[@]}"
wall numpy-attn numpy --workload eval-attn --masks "$samples" --json
"$bin" bench --workload W1 --masks "$masks" --json >"$out/bench.json"
numpy --workload W1 --masks "$masks" --json >"$out/numpy-w1.json"

"$PY" - "$out" "$samples" "$masks" "$bin" <<'PY'
import json, os, platform, sys
out, samples, masks, binary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
times = dict(line.split() for line in open(os.path.join(out, "times")))
secs = {k: int(v) / 1e6 for k, v in times.items()}
numpy_version = json.load(open(os.path.join(out, "numpy-ln.out")))["numpy"]
d = 512
print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; numpy {numpy_version}")
print("whole processes, wall clock; mask elements = draws x d (d = 512)")
print(f"{'command':38}  {'draws':>10}  {'seconds':>8}  {'elements/s':>10}  {'x numpy':>8}")
for q in ("ln", "rms", "attn"):
    mc = json.load(open(os.path.join(out, f"dropmc-{q}.out")))
    assert mc["samples"] == samples and mc["d"] == d, mc
    rate = samples * d / secs[f"dropmc-{q}"]
    base = samples * d / secs[f"numpy-{q}"]
    print(f"{'dropmc eval ' + q:38}  {samples:>10}  {secs['dropmc-' + q]:8.2f}  {rate:10.3e}  {rate / base:8.1f}")
    print(f"{'numpy eval-' + q:38}  {samples:>10}  {secs['numpy-' + q]:8.2f}  {base:10.3e}  {1.0:8.1f}")
bench = json.load(open(os.path.join(out, "bench.json")))
theirs = json.load(open(os.path.join(out, "numpy-w1.json")))["results"][0]
print(f"internal clocks (dropmc bench: median of {bench['repeat']} runs after a warm-up, {bench['threads']} threads)")
for r in bench["results"]:
    ratio = r["elements_per_second"] / theirs["elements_per_second"]
    print(f"{'dropmc bench W1 ' + r['path']:38}  {r['masks']:>10}  {r['seconds']:8.3f}  {r['elements_per_second']:10.3e}  {ratio:8.1f}")
print(f"{'numpy W1':38}  {theirs['masks']:>10}  {theirs['seconds']:8.3f}  {theirs['elements_per_second']:10.3e}  {1.0:8.1f}")
PY
