"""Every script under benchmarks/ has a smoke command (`benchmarks/smoke.py`, run by CI)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _smoke():
    spec = importlib.util.spec_from_file_location("smoke", ROOT / "benchmarks/smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_benchmark_script_has_a_smoke_command():
    smoke = _smoke()
    assert smoke.scripts() and set(smoke.scripts()) == set(smoke.SMOKE)
    for name, (command, _) in smoke.SMOKE.items():
        assert any(name in part for part in command), name  # the command runs that script


def test_ci_runs_the_smoke_runs_and_the_mutation_check():
    ci = (ROOT / ".ci/run").read_text()
    assert "python benchmarks/smoke.py" in ci and "python tests/mutants.py" in ci
