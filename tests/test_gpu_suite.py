"""benchmarks/gpu_suite.py: a failed or timed-out step is recorded and the next one runs;
--deadline skips what no longer fits; bad input exits 2 before anything is written."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_suite", ROOT / "benchmarks" / "gpu_suite.py")
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)


def _steps(tmp_path):
    py = sys.executable
    return [
        suite.Step("sleepy", [py, "-c", "import time; time.sleep(60)"], 1.0, "lines"),
        suite.Step(
            "broken", [py, "-c", "import sys; print('{\"a\": 1}'); sys.exit(3)"], 30, "lines"
        ),
        suite.Step("fine", [py, "-c", "print('{\"b\": 2}')"], 30, "lines"),
        suite.Step("absent", [], 0, "run", skip="no such config"),
    ]


def test_failures_and_timeouts_are_recorded_and_the_next_step_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "plan", lambda *a: _steps(tmp_path))
    t0 = time.time()
    code = suite.main([str(tmp_path / "out")])
    assert time.time() - t0 < 20  # the 60 s sleeper was stopped at its 1 s limit
    assert code == 1
    steps = json.loads((tmp_path / "out" / "suite.json").read_text())["steps"]
    by_name = {s["step"]: s for s in steps}
    assert [s["step"] for s in steps] == ["sleepy", "broken", "fine", "absent"]
    assert by_name["sleepy"]["status"] == "timeout"
    assert (by_name["broken"]["status"], by_name["broken"]["returncode"]) == ("failed", 3)
    assert by_name["broken"]["results"] == [{"a": 1}]
    assert (by_name["fine"]["status"], by_name["fine"]["results"]) == ("ok", [{"b": 2}])
    assert by_name["absent"] == {
        "step": "absent",
        "command": "",
        "status": "skipped",
        "reason": "no such config",
    }


def test_the_deadline_skips_steps_that_no_longer_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "plan", lambda *a: _steps(tmp_path)[1:3])
    assert suite.main([str(tmp_path / "out"), "--deadline", "20"]) == 0
    steps = json.loads((tmp_path / "out" / "suite.json").read_text())["steps"]
    assert [(s["step"], s["status"], s.get("reason")) for s in steps] == [
        ("broken", "skipped", "deadline"),
        ("fine", "skipped", "deadline"),
    ]


def test_every_step_of_the_full_plan_is_selectable_by_name_or_group(tmp_path):
    steps = suite.plan(tmp_path, False, None, None)
    names = [s.name for s in steps]
    for group in ("ppo", "trpo", "minatar", "lm"):
        assert suite.select(steps, [group]), group
    assert [s.name for s in suite.select(steps, ["minatar"])] == [
        n for n in names if n.startswith("minatar_")
    ]
    assert len([n for n in names if n.startswith("minatar_")]) == 4
    assert {"env", "tests", "learning", "ppo_widths", "ppo_seeds", "trpo_seeds"} <= set(names)
    assert {"lm_add", "lm_max_digit", "lm_sort"} <= set(names)
    tests = {s.name: s for s in suite.plan(tmp_path, False, None, None, 12)}
    for name in ("tests", "learning"):  # --workers: the xdist processes of both pytest steps
        command = tests[name].command
        assert command[command.index("-n") + 1] == "12", command
    ppo = {s.name: s for s in steps}["ppo_widths"]
    assert ppo.skip and "PureJaxRL" in ppo.skip  # no ppo.py given: recorded, not run


def test_the_craftax_baselines_step_runs_the_copied_baseline_or_says_why_not(tmp_path, monkeypatch):
    def step(tiny, steps=None):
        found = [s for s in suite.plan(tmp_path, tiny, None, steps) if s.name.startswith("craftax")]
        assert found[-1].name == "craftax_baselines"  # in the craftax group, after the table
        return found[-1]

    copy = tmp_path / "craftax_baselines"
    monkeypatch.setattr(suite, "CRAFTAX_BASELINES", copy)
    assert "gpu_wheels.sh" in step(False).skip  # no copy: recorded, not run
    copy.mkdir()
    (copy / "ppo.py").write_text("")
    full = step(False, 2_000_000)
    assert full.skip is None and full.kind == "json"
    cmd = full.command
    assert cmd[cmd.index("--baselines") + 1] == str(copy) and cmd[cmd.index("--seeds") + 1] == "4"
    assert cmd[cmd.index("--steps") + 1] == "2000000"  # --craftax-steps reaches it too
    assert "tiny" in step(True).skip  # its one update is 65536 steps: never at the tiny budget


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "nope"], "--steps: unknown nope"),
        (["--purejaxrl", "/nonexistent/ppo.py"], "--purejaxrl"),
        (["--deadline", "0"], "--deadline: must be positive"),
        (["--workers", "0"], "--workers: must be at least 1"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, argv, message):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), str(out), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_test_step_cut_before_its_report_still_names_its_failures(tmp_path):
    """The test steps run pytest -v; without a JUnit report (a step cut by its limit) the
    failures printed so far, with or without xdist, are the step's results."""
    step = next(s for s in suite.plan(tmp_path, True, None, None) if s.name == "tests")
    assert "-v" in step.command and "-q" not in step.command
    log = (
        "[gw1] [ 40%] PASSED tests/test_losses.py::test_a\n"
        "[gw0] [ 45%] FAILED tests/test_trpo.py::test_b[x-1]\n"
        "tests/test_ppo.py::test_c FAILED                [ 50%]\n"
        "tests/test_ppo.py::test_d ERROR                 [ 55%]\n"
        "[gw0] [ 45%] FAILED tests/test_trpo.py::test_b[x-1]\n"
    )
    results = suite.results_of(step, tmp_path, log)
    assert results["failed_in_log"] == [
        "tests/test_trpo.py::test_b[x-1]",
        "tests/test_ppo.py::test_c",
        "tests/test_ppo.py::test_d",
    ]
    assert "failed_in_log" not in suite.results_of(
        step, tmp_path, log.replace("FAILED", "PASSED").replace("ERROR", "PASSED")
    )
