#!/bin/bash
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile wheelhouse/*.whl 2>&1 | tail -3
timeout 75 python3 -m pytest -p no:cacheprovider --tb=long -vv "tests/test_trpo.py::test_trpo_cartpole_learns_and_respects_the_trust_region" > $OUT/trpo.log 2>&1
echo "trpo rc=$?"; grep -E "^E |assert|Error" $OUT/trpo.log | head -30
timeout 80 python3 -m pytest -v -p no:cacheprovider -n 14 --dist load -m "not slow" tests/test_config.py tests/test_structure.py tests/test_report.py tests/test_aggregate.py tests/test_lm_tasks.py tests/test_vine.py tests/test_sweep.py tests/test_progress.py tests/test_platform.py > $OUT/more.log 2>&1
echo "more rc=$?"; grep -cE " PASSED" $OUT/more.log; grep -E " (FAILED|ERROR) " $OUT/more.log | head -20
