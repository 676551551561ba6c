#!/bin/bash
# Call 1: PPO CartPole at PureJaxRL's settings, ours (float32, bfloat16) beside PureJaxRL's ppo.py.
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile wheelhouse/*.whl 2>&1 | tail -3
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv > $OUT/nvidia_smi.csv
python3 -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tail -1
export JAX_COMPILATION_CACHE_DIR=$TMP/jcc JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
PJ=wheelhouse/purejaxrl/ppo.py
run() { # name limit args...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout $limit python3 benchmarks/throughput.py --purejaxrl $PJ "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s (elapsed $(( $(date +%s) - START ))s)"
}
run wide_f32 110 --num-envs 2048 16384 131072 --iterations 20 --repeats 2
run wide_bf16 110 --num-envs 2048 16384 131072 --iterations 20 --repeats 2 compute_dtype=bfloat16
run agents_f32 100 --num-envs 4 --seeds 2048 8192 --iterations 30 --repeats 2
run agents_bf16 100 --num-envs 4 --seeds 2048 8192 --iterations 30 --repeats 2 compute_dtype=bfloat16
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable", e); continue
    rs = d["results"]; by = {}
    for r in rs:
        by.setdefault((r["num_envs"], r["seeds"]), {})[r["implementation"]] = r
    for k, v in by.items():
        o, p = v.get("rlax_trpo"), v.get("purejaxrl")
        if o and p:
            print(os.path.basename(f), k, f"ours {o['env_steps_per_second']/1e6:.1f}M pjr {p['env_steps_per_second']/1e6:.1f}M ratio {o['env_steps_per_second']/p['env_steps_per_second']:.3f} ret {o['final_return_mean']:.1f}/{p['final_return_mean']:.1f}")
PY
