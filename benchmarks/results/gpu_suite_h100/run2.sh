#!/bin/bash
# The test files that run.sh's 400 s did not finish, on one GPU: 13 xdist workers, XLA's GPU
# autotuning off for the tests (RLAX_TRPO_TEST_XLA_FLAGS), 120 s per test; beside them, the
# tests that failed in run.sh, one process, with their tracebacks.
set -u
export PYTHONUNBUFFERED=1
D=${1:-330}
python3 -m pip install -q --no-index --no-deps --no-compile wheelhouse/*.whl 2>&1 | tail -3
export PYTHONPATH=$PWD RLAX_TRPO_TEST_XLA_FLAGS="--xla_gpu_autotune_level=0"
START=$(date +%s)
( F="python3 -m pytest -p no:cacheprovider --tb=short -q --timeout 150"
  timeout $D $F "tests/test_packaging.py::test_the_wheel_ships_the_configs_the_command_and_the_license" \
    "tests/test_multihost.py::test_a_killed_peer_ends_the_other_within_the_peer_timeout_in_one_line" \
    "tests/test_multihost.py::test_interrupted_two_process_run_resumes"
  timeout $D $F tests/test_faults.py::test_killed_in_any_phase_resume_finishes_identically -k evaluation
) > $OUT/failures.log 2>&1 &
timeout $D python3 -m pytest -v -p no:cacheprovider -n 13 --dist loadfile -m "not slow" --timeout 150 \
  --junitxml=$OUT/rest.xml tests/test_cli.py tests/test_compile_cache.py tests/test_craftax.py tests/test_devices.py tests/test_evaluate.py tests/test_extending.py tests/test_faults.py tests/test_grpo.py tests/test_initializers.py tests/test_lm_grpo.py tests/test_lm_run.py tests/test_lm_sampling.py tests/test_lm_tasks.py tests/test_loggers.py tests/test_losses.py tests/test_lowering.py tests/test_memory.py tests/test_networks.py tests/test_pbt.py tests/test_pbt_run.py tests/test_platform.py tests/test_policy.py tests/test_ppo_kl.py tests/test_probes.py tests/test_progress.py tests/test_readme.py tests/test_report.py tests/test_resume.py tests/test_rollout.py tests/test_shuffle.py tests/test_structure.py tests/test_sweep.py tests/test_trpo.py tests/test_trust_region.py tests/test_vine.py tests/test_vpg.py > $OUT/rest.log 2>&1
echo "rest rc=$? $(( $(date +%s) - START ))s"
wait
echo "failures rc=$? $(( $(date +%s) - START ))s"
grep -E " (FAILED|ERROR) " $OUT/rest.log | sort -u | head -30; tail -3 $OUT/rest.log; tail -5 $OUT/failures.log
