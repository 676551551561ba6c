#!/usr/bin/env bash
# The whole test suite on one GPU machine (16 cores), in one 10-minute call: the not-slow
# tests (11 xdist workers) beside the slow learning tests (4 workers), each under a deadline.
# Run from the checkout's root with wheelhouse/ (benchmarks/gpu_wheels.sh) beside it.
set -u
export PYTHONUNBUFFERED=1
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -m pip install -q --no-index --no-deps wheelhouse/*.whl 2>&1 | tail -2
S=$TMP/s; mkdir -p $S
python3 benchmarks/gpu_suite.py $S/fast --steps env tests --workers 11 --deadline ${DEADLINE:-520} >$S/fast.log 2>&1 &
python3 benchmarks/gpu_suite.py $S/slow --steps learning --workers 4 --deadline ${DEADLINE:-520} >$S/slow.log 2>&1 &
wait
date -u
tail -n 3 $S/fast.log $S/slow.log
OUT=${OUT:-$TMP/out}; mkdir -p $OUT
cp $S/fast/suite.json $OUT/fast_suite.json; cp $S/slow/suite.json $OUT/slow_suite.json
tar czf $OUT/suite.tgz --exclude=checkpoint -C $TMP s
python3 - <<'PY'
import json
for part in ("fast", "slow"):
    for s in json.load(open(f"$TMP/s/{part}/suite.json"))["steps"]:
        r = s.get("results") or {}
        r = r if isinstance(r, dict) else {}
        print(part, s["step"], s.get("status"), s.get("wall_seconds"), {k: r[k] for k in r if k in ("tests", "failures", "errors", "skipped", "failed", "failed_in_log", "collected")})
PY
