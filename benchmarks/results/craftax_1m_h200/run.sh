#!/usr/bin/env bash
# Craftax-1M's smaller-batch settings on one GPU, each group in one call of under ten minutes:
#   sets    the PPO and TRPO settings of docs/results.md ("A smaller batch at Craftax-1M") at
#           4 seeds none of their pilots used (10-13);
#   sweeps  one compiled population per algorithm over the settings that matter (learning rate
#           or trust region x GAE lambda), 4 seeds per setting (20-23).
# Run from the checkout's root with wheelhouse/ (benchmarks/gpu_wheels.sh) beside it; the
# result JSON go to $OUT/<part>/, each part's log to $OUT/<part>.log. A smoke run on a CPU:
# BUDGET=N runs every part at N env steps without the time limits, and
# EXTRA="num_envs=16 hidden_sizes=[32,32]" shrinks each member (at 256 environments the
# populations' observation buffers alone are 6.5-8.7 GB; at the bundled width the TRPO
# population takes about 12 GB on the host even at 16 environments).
#
#   bash benchmarks/results/craftax_1m_h200/run.sh [GROUP or PART ...]   # default: both groups
#
# PART: ppo_256x64, trpo_256x32 (sets), ppo_256x64_sweep, trpo_256x32_sweep (sweeps).
set -u
export PYTHONUNBUFFERED=1
parts=()
for g in "${@:-sets sweeps}"; do
    for p in $g; do
        case $p in
        sets) parts+=(ppo_256x64 trpo_256x32) ;;
        sweeps) parts+=(ppo_256x64_sweep trpo_256x32_sweep) ;;
        ppo_256x64 | trpo_256x32 | ppo_256x64_sweep | trpo_256x32_sweep) parts+=("$p") ;;
        *) echo "run.sh: unknown group or part '$p' (sets, sweeps, ppo_256x64, trpo_256x32, ppo_256x64_sweep, trpo_256x32_sweep)" >&2; exit 2 ;;
        esac
    done
done
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
if [ -d wheelhouse ]; then
    python3 -m pip install -q --no-index --no-deps wheelhouse/*.whl 2>&1 | tail -2
fi
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-/tmp/craftax_runs}
PPO="num_envs=256 num_minibatches=32 layer_norm=true"
# TRPO's max KL is 0.02 in the set; a swept setting may not also be an override.
TRPO="num_envs=256 num_steps=32 fisher_fraction=0.25 value_minibatches=16 hp.value_learning_rate=1e-3"
part() {  # NAME TIME_LIMIT ALGO SEED [--sweep hp.NAME=V1,V2 ...] OVERRIDES...
    local name=$1 limit=$2 algo=$3 seed=$4
    shift 4
    [ -n "${BUDGET:-}" ] && limit=0  # a smoke run: no time limit
    local t0=$SECONDS
    timeout "$limit" python3 benchmarks/standard_tables.py craftax --algos "$algo" --seeds 4 \
        --seed "$seed" --runs "$RUNS/$name" --results "$OUT/$name" \
        ${BUDGET:+--budget $BUDGET} "$@" ${EXTRA:-} >"$OUT/$name.log" 2>&1
    echo "$name: exit $? after $((SECONDS - t0)) s: $(tail -n 1 "$OUT/$name.log")"
}
mkdir -p "$OUT"
for p in "${parts[@]}"; do
    case $p in
    ppo_256x64) part $p 270 ppo 10 $PPO ;;
    trpo_256x32) part $p 270 trpo 10 $TRPO hp.max_kl=0.02 ;;
    ppo_256x64_sweep)
        part $p 270 ppo 20 --sweep hp.learning_rate=2e-4,4e-4 --sweep hp.gae_lambda=0.8,0.95 $PPO ;;
    trpo_256x32_sweep)
        part $p 270 trpo 20 --sweep hp.max_kl=0.01,0.02,0.04 --sweep hp.gae_lambda=0.8,0.95 $TRPO ;;
    esac
done
date -u
