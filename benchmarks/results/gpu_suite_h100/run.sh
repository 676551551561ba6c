#!/bin/bash
# The test suite on one GPU: `-m "not slow"` (12 xdist workers) and `-m slow` (3 workers) as
# two benchmarks/gpu_suite.py invocations side by side, each under a deadline of $1 seconds
# (default 420). Needs wheelhouse/ from benchmarks/gpu_wheels.sh beside the checkout.
set -u
export PYTHONUNBUFFERED=1
D=${1:-420}
python3 -m pip install -q --no-index --no-deps --no-compile wheelhouse/*.whl 2>&1 | tail -3
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/nvidia_smi.csv
nproc
python3 benchmarks/gpu_suite.py $TMP/fast --steps env tests --workers 12 --deadline $D > $OUT/fast.out 2>&1 &
python3 benchmarks/gpu_suite.py $TMP/slow --steps learning --workers 3 --deadline $D > $OUT/slow.out 2>&1 &
wait
cp $TMP/fast/suite.json $OUT/suite_tests.json; cp $TMP/slow/suite.json $OUT/suite_learning.json
tar czf $OUT/logs.tgz -C $TMP fast/logs fast/steps slow/logs slow/steps
for f in $TMP/fast/logs/tests.log $TMP/slow/logs/learning.log; do
  echo "== $f"; grep -E " (FAILED|ERROR) |^(FAILED|ERROR) " $f | sort -u | head -40; tail -2 $f
done
