#!/usr/bin/env bash
# PPO CartPole at PureJaxRL's settings beside PureJaxRL's own ppo.py, in one invocation each,
# with XLA:GPU's default command buffers and with while loops and conditionals captured into
# CUDA graphs too (XLA_FLAGS applies to both programs alike). Run from the checkout's root.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$TMP/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps wheelhouse/*.whl 2>&1 | tail -n 2
P=wheelhouse/purejaxrl/ppo.py
CB=""
for cand in "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL" \
            "--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"; do
    if XLA_FLAGS="$cand" timeout 60 python3 -c "import jax, jax.numpy as jnp; print(jax.lax.fori_loop(0, 5, lambda i, x: x * 2, jnp.ones(3)))" >/dev/null 2>&1; then
        CB="$cand --xla_gpu_graph_min_graph_size=1"; break
    fi
done
echo "command buffer flags: ${CB:-none accepted}"
run() {  # name, XLA_FLAGS, throughput arguments...
    local name=$1 flags=$2; shift 2
    echo "== $name: XLA_FLAGS='$flags' $*"
    XLA_FLAGS="$flags" timeout ${LIMIT:-110} python3 benchmarks/throughput.py --purejaxrl $P "$@" \
        --json $OUT/$name.json 2>&1 | grep -v "^W0\|^I0" | tail -n 12
}
run default_2048 "" --num-envs 2048 --iterations 20 --repeats 2
[ -n "$CB" ] && run graphs_2048 "$CB" --num-envs 2048 --iterations 20 --repeats 2
[ -n "$CB" ] && run graphs_4x2048 "$CB" --num-envs 4 --seeds 2048 --iterations 30 --repeats 2
date -u
