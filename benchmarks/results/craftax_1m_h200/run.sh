#!/usr/bin/env bash
# Craftax-1M's smaller-batch settings on one GPU, chosen and measured on separate seeds. Per
# algorithm, a chain of two runs of benchmarks/standard_tables.py:
#   choose   one compiled population over the settings that matter, 4 seeds per setting
#            (base seed 20; the CPU pilots used seeds 0-3);
#   measure  the setting with the best mean return re-run fresh at 4 new seeds (base seed 30):
#            the row that is published.
# PPO's chain and TRPO's run side by side on the one GPU (one compiles while the other
# trains). Run from the checkout's root with wheelhouse/ (benchmarks/gpu_wheels.sh) beside it.
# Results go to $OUT/<algo>_choose/ and $OUT/<algo>_measure/, each chain's log to
# $OUT/<algo>.log, the runs' metrics.csv and config.yaml to $OUT/runs.tgz. Every part ends
# by DEADLINE seconds (default 520) after the start. PICK_PPO or PICK_TRPO (the chosen
# settings as key=value overrides, e.g. PICK_TRPO="hp.max_kl=0.02 hp.value_learning_rate=0.001
# hp.gamma=0.99") skips that chain's choosing run; PPO_SWEEP or TRPO_SWEEP (--sweep arguments)
# replace a population's settings. Compiling dominates a call (each program
# 165-263 s on the H200 machine's CPUs): the compiled programs are kept in jax's persistent
# cache at $PWD/compile_cache_h200 (git-ignored), packed to $OUT/compile_cache.tgz when it is
# under 16 MB; unpack it there and name the folder in the next call's carry to skip them.
# A smoke run on a CPU: BUDGET=N runs every part at N env steps, and
# EXTRA="num_envs=16 hidden_sizes=[32,32]" shrinks each member.
#
#   bash benchmarks/results/craftax_1m_h200/run.sh [ppo] [trpo]   # default: both
set -u
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # two processes share the GPU's memory
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/compile_cache_h200}
algos=("${@:-ppo trpo}")
algos=(${algos[*]})
for a in "${algos[@]}"; do
    case $a in ppo | trpo) ;; *) echo "run.sh: unknown algorithm '$a' (ppo, trpo)" >&2; exit 2 ;; esac
done
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
if [ -d wheelhouse ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target $TMP/site \
        wheelhouse/*.whl 2>&1 | tail -2
    export PYTHONPATH=$PWD:$TMP/site
fi
OUT=${OUT:-$TMP/out}
RUNS=${RUNS:-$TMP/craftax_runs}
DEADLINE=${DEADLINE:-520}
mkdir -p "$OUT"
# The settings every member shares; a swept setting is never also one of these.
PPO_BASE="num_envs=512 num_steps=32 num_minibatches=32 layer_norm=true"
# PPO_SWEEP and TRPO_SWEEP in the environment replace the populations' settings.
PPO_SWEEP=${PPO_SWEEP:-"--sweep hp.learning_rate=1.5e-4,2e-4 --sweep hp.ent_coef=0.005,0.01"}
TRPO_BASE="num_envs=256 num_steps=32 fisher_fraction=0.25 value_minibatches=16"
TRPO_SWEEP=${TRPO_SWEEP:-"--sweep hp.max_kl=0.02,0.04 --sweep hp.value_learning_rate=1e-3,2e-3 --sweep hp.gamma=0.99,0.995"}

part() {  # ALGO PART SEED ARGS...: one standard_tables run, cut off at the deadline
    local algo=$1 name=$1_$2 seed=$3 t0=$SECONDS
    shift 3
    local left=$((DEADLINE - SECONDS))
    [ -n "${BUDGET:-}" ] && left=0  # a smoke run: no time limit
    [ "$left" -lt 0 ] && { echo "$name: not started, past the deadline"; return 1; }
    echo "== $name: $(date -u +%T) seed $seed $*"
    timeout "$left" python3 benchmarks/standard_tables.py craftax --algos "$algo" --seeds 4 \
        --seed "$seed" --runs "$RUNS/$name" --results "$OUT/$name" \
        ${BUDGET:+--budget $BUDGET} "$@" ${EXTRA:-}
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    return $rc
}

chosen() {  # the swept settings of the member with the best mean, as key=value overrides
    python3 - "$1" <<'EOF'
import json, sys
members = json.load(open(sys.argv[1]))["summary"]["members"]
mean = {m["index"]: m["final_return_mean"] for m in members}  # None: a member saw no episode
for m in members:
    print(m["hp"], m["final_return_per_seed"], mean[m["index"]], file=sys.stderr)
best = max(members, key=lambda m: -1e9 if mean[m["index"]] is None else mean[m["index"]])
print(" ".join(f"{k}={v}" for k, v in best["hp"].items()))
EOF
}

chain() {  # ALGO BASE SWEEP [PICK]
    local algo=$1 base=$2 sweep=$3 pick=${4:-}
    if [ -z "$pick" ]; then
        # shellcheck disable=SC2086
        part "$algo" choose 20 $sweep $base || return
        pick=$(chosen "$OUT/${algo}_choose/${algo}_Craftax-Symbolic-v1.json") || return
    fi
    echo "== $algo: chosen $pick"
    # shellcheck disable=SC2086
    part "$algo" measure 30 $base $pick
}

for a in "${algos[@]}"; do
    case $a in
    ppo) chain ppo "$PPO_BASE" "$PPO_SWEEP" "${PICK_PPO:-}" >"$OUT/ppo.log" 2>&1 & ;;
    trpo) chain trpo "$TRPO_BASE" "$TRPO_SWEEP" "${PICK_TRPO:-}" >"$OUT/trpo.log" 2>&1 & ;;
    esac
    sleep 5
done
while [ -n "$(jobs -r)" ]; do  # progress into the call's own output
    sleep 30
    echo "-- $((SECONDS)) s: $(tail -qn 1 "$OUT"/*.log | tr '\n' '|' | cut -c1-300)"
done
wait
grep -h "^== " "$OUT"/*.log
tar czf "$OUT/runs.tgz" -C "$RUNS" $(cd "$RUNS" && ls -d */craftax*/*/metrics.csv */craftax*/*/config.yaml 2>/dev/null)
if [ -d "$JAX_COMPILATION_CACHE_DIR" ]; then
    tar czf $TMP/compile_cache.tgz -C "$(dirname "$JAX_COMPILATION_CACHE_DIR")" \
        "$(basename "$JAX_COMPILATION_CACHE_DIR")"
    size=$(stat -c %s $TMP/compile_cache.tgz)
    echo "compile cache: $((size / 1024 / 1024)) MB packed"
    [ "$size" -lt $((16 * 1024 * 1024)) ] && mv $TMP/compile_cache.tgz "$OUT/"
fi
date -u
