#!/bin/bash
# Call 2: the numerical test files on the GPU, each outcome printed as it ends.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile wheelhouse/*.whl 2>&1 | tail -3
LIMIT=${1:-230}
FILES="tests/test_advantages.py tests/test_losses.py tests/test_trust_region.py tests/test_networks.py tests/test_common.py tests/test_ppo.py tests/test_ppo_kl.py tests/test_trpo.py tests/test_pbt.py tests/test_shuffle.py tests/test_memory.py tests/test_rollout.py tests/test_vpg.py tests/test_initializers.py tests/test_probes.py tests/test_grpo.py tests/test_lm_losses_trl.py tests/test_lm_sampling.py tests/test_evaluate.py tests/test_policy.py tests/test_training.py tests/test_envs.py tests/test_pbt_run.py tests/test_checkpoint.py"
timeout $LIMIT python3 -m pytest -v -p no:cacheprovider -n 14 --dist loadfile -m "not slow" -rfE --junitxml=$OUT/tests.xml $FILES > $OUT/suite.log 2>&1
echo "pytest rc=$?"
grep -E "FAILED|ERROR" $OUT/suite.log | grep -v "^\[gw" | head -40
grep -cE " PASSED" $OUT/suite.log; grep -E " (FAILED|ERROR) " $OUT/suite.log | head -40
tail -3 $OUT/suite.log
