#!/usr/bin/env python
"""The GPU suite: tests, throughput against references, MinAtar, TRPO seeds and the LM tasks.

One command runs, in order, every step below as its own process under its own time limit,
and writes JSON into the output folder; a failed or timed-out step is recorded and the next
one runs. `suite.json` (rewritten after every step) lists each step's command, exit status,
wall time and results; `steps/<step>.json` and `logs/<step>.log` hold the details, and
`runs/` the run folders of the training steps.

    python benchmarks/gpu_suite.py OUT                      # every step, full budgets
    python benchmarks/gpu_suite.py OUT --steps ppo trpo     # some steps (names or groups)
    python benchmarks/gpu_suite.py OUT --budget tiny        # every step at tiny budgets (CPU)
    python benchmarks/gpu_suite.py --list                   # the steps and their commands

Steps (group: names): env; tests; learning; ppo: ppo_widths, ppo_seeds (PPO CartPole at
PureJaxRL's settings, 2048-65536 envs and 1/16/256 seeds of 2048 envs, with PureJaxRL's own
`ppo.py` timed in the same invocation when `--purejaxrl` finds it); trpo: trpo_seeds (the RL
Zoo CartPole configuration, 256/1024/4096 seeds); minatar: minatar_breakout,
minatar_space_invaders, minatar_asterix, minatar_freeway (10M steps, 4 seeds each);
recurrent (bundled configs with a recurrent policy, when there are any); craftax (bundled
Craftax configs, when there are any, and craftax_baselines: Craftax_Baselines' own ppo.py at 4
seeds, from wheelhouse/craftax_baselines); lm: lm_add, lm_max_digit, lm_sort.

`--deadline S` ends the whole invocation within S seconds: each step's limit is cut to what
is left, and steps that no longer fit are recorded as skipped. docs/gpu.md gives the wheels,
the device-machine invocation and a plan that fits the steps into 10-minute calls.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
DEFAULT_PUREJAXRL = ROOT / "wheelhouse" / "purejaxrl" / "ppo.py"
CRAFTAX_BASELINES = ROOT / "wheelhouse" / "craftax_baselines"  # benchmarks/gpu_wheels.sh
MINATAR = {
    "breakout": "Breakout-MinAtar",
    "space_invaders": "SpaceInvaders-MinAtar",
    "asterix": "Asterix-MinAtar",
    "freeway": "Freeway-MinAtar",
}
LM_TASKS = ("add", "max_digit", "sort")
RECURRENT = re.compile(r"(recurrent|rnn|lstm|gru|memory)", re.IGNORECASE)
CRAFTAX = re.compile(r"craftax", re.IGNORECASE)
ENV_PROBE = """
import importlib.metadata as md, json, jax
names = ("jax", "jaxlib", "flax", "optax", "chex", "orbax-checkpoint", "gymnax", "distrax",
         "tfp-nightly", "pydantic", "numpy")
versions = {}
for n in names:
    try:
        versions[n] = md.version(n)
    except md.PackageNotFoundError:
        versions[n] = None
import distrax, gymnax, pydantic, rlax_trpo.training  # what every step imports
print(json.dumps({"backend": jax.default_backend(),
                  "devices": [d.device_kind for d in jax.devices()], "versions": versions}))
"""


class Step(NamedTuple):
    name: str
    command: list[str]
    timeout: float  # seconds
    kind: str  # how results are read: "lines", "pytest", "json", "run"
    env: dict[str, str] = {}
    skip: str | None = None  # why the step does not run


def _train(name: str, out: Path, config: str, seeds: int, overrides: list[str]) -> list[str]:
    run = out / "runs" / name
    return [PY, "train.py", "--config", config, "--seeds", str(seeds), "--out", str(run),
            "--no-progress", *overrides]  # fmt: skip


def _throughput(name: str, out: Path, args: list[str]) -> list[str]:
    return [PY, "benchmarks/throughput.py", *args, "--json", str(out / "steps" / f"{name}.json")]


def _bundled(pattern: re.Pattern) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from rlax_trpo.config.defaults import bundled_config_names

    return [n for n in bundled_config_names() if pattern.search(n)]


def _pytest_steps(out: Path, tiny: bool, workers: int) -> list[Step]:
    junit = out / "steps"
    ignore = []  # the notebook tests need Jupyter (nbclient), which GPU images rarely have
    if importlib.util.find_spec("nbclient") is None:
        ignore = ["--ignore", "tests/test_notebooks.py"]
    xdist = []
    if not tiny and workers > 1 and importlib.util.find_spec("xdist") is not None:
        xdist = ["-n", str(workers), "--dist", "loadfile"]
    fast = ["tests/test_advantages.py"] if tiny else ["-m", "not slow", *xdist]
    slow = ["-m", "slow", "--collect-only"] if tiny else ["-m", "slow", *xdist]
    # -v: each test's outcome is in the step's log as it ends, so a step cut by its limit
    # (before pytest writes its JUnit report) still says which tests failed.
    base = [PY, "-m", "pytest", "-v", "-p", "no:cacheprovider", *ignore]
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # several test processes share the GPU
    return [
        Step("tests", [*base, *fast, f"--junitxml={junit / 'tests.xml'}"], 540, "pytest", env),
        Step(
            "learning", [*base, *slow, f"--junitxml={junit / 'learning.xml'}"], 540, "pytest", env
        ),
    ]


def _ppo_steps(out: Path, tiny: bool, purejaxrl: Path | None) -> list[Step]:
    ref = ["--purejaxrl", str(purejaxrl)] if purejaxrl else []
    skip = None if purejaxrl else "PureJaxRL's ppo.py not found (see --purejaxrl)"
    if tiny:
        widths = ["--num-envs", "8", "--num-steps", "8", "--iterations", "2"]
        seeds = ["--num-envs", "4", "--num-steps", "8", "--iterations", "2", "--seeds", "1", "2"]
        repeats = ["--repeats", "1"]
    else:
        widths = ["--num-envs", "2048", "4096", "8192", "16384", "32768", "65536",
                  "--iterations", "8"]  # fmt: skip
        seeds = ["--num-envs", "2048", "--iterations", "5", "--seeds", "1", "16", "256"]
        repeats = ["--repeats", "2"]
    base = ["--config", "ppo_cartpole_purejaxrl", *repeats, *ref]
    return [
        Step("ppo_widths", _throughput("ppo_widths", out, [*base, *widths]), 420, "json",
             skip=skip),
        Step("ppo_seeds", _throughput("ppo_seeds", out, [*base, *seeds]), 420, "json", skip=skip),
    ]  # fmt: skip


def _run_steps(out: Path, tiny: bool, craftax_steps: int | None) -> list[Step]:
    steps = []
    trpo = ["--config", "trpo_cartpole", "--repeats", "2", "--seeds", "256", "1024", "4096"]
    if tiny:
        trpo = ["--config", "trpo_cartpole", "--repeats", "1", "--seeds", "2",
                "--num-envs", "2", "--num-steps", "8", "--iterations", "2"]  # fmt: skip
    steps.append(Step("trpo_seeds", _throughput("trpo_seeds", out, trpo), 420, "json"))
    small = ["num_envs=4", "num_steps=8", "total_env_steps=64"] if tiny else []
    for short, env in MINATAR.items():
        name = f"minatar_{short}"
        cmd = _train(name, out, "ppo_breakout_minatar", 4, [f"env={env}", *small])
        steps.append(Step(name, cmd, 540, "run"))
    for kind, pattern, what in (("recurrent", RECURRENT, "recurrent-policy"),
                                ("craftax", CRAFTAX, "Craftax")):  # fmt: skip
        names = _bundled(pattern)
        if kind == "recurrent":  # recurrent Craftax configs run in the craftax steps
            names = [n for n in names if not CRAFTAX.search(n)]
        for config in names:
            extra = list(small)
            if kind == "craftax" and craftax_steps and not tiny:
                extra = [f"total_env_steps={craftax_steps}"]
            seeds = 4  # the Craftax-1M table reports 4 seeds
            steps.append(Step(f"{kind}_{config}", _train(f"{kind}_{config}", out, config, seeds,
                                                           extra), 540, "run"))  # fmt: skip
        if not names:
            steps.append(Step(kind, [], 0, "run", skip=f"no bundled {what} config"))
    steps.append(_craftax_baselines_step(out, tiny, craftax_steps))
    for task in LM_TASKS:
        name, config = f"lm_{task}", f"grpo_lm_{task}"
        extra = []
        if tiny:
            extra = ["num_iterations=2", "num_prompts=4", "eval_size=8", "eval_every=1"]
            extra += ["warm_start_steps=2"] if task != "max_digit" else []
        steps.append(Step(name, _train(name, out, config, 1, extra), 300, "run"))
    return steps


def _craftax_baselines_step(out: Path, tiny: bool, craftax_steps: int | None) -> Step:
    """Craftax_Baselines' own ppo.py at 4 seeds beside the Craftax table (same release)."""
    cmd = [PY, "benchmarks/craftax_baselines.py", "--baselines", str(CRAFTAX_BASELINES),
           "--seeds", "4", "--json", str(out / "steps" / "craftax_baselines.json")]  # fmt: skip
    if craftax_steps:
        cmd += ["--steps", str(craftax_steps)]
    skip = None
    if tiny:
        skip = "no tiny budget: the baseline's one update is 65536 env steps"
    elif not (CRAFTAX_BASELINES / "ppo.py").is_file():
        skip = "wheelhouse/craftax_baselines not found (benchmarks/gpu_wheels.sh)"
    return Step("craftax_baselines", cmd, 540, "json", skip=skip)


def plan(
    out: Path, tiny: bool, purejaxrl: Path | None, craftax_steps: int | None, workers: int = 4
) -> list[Step]:
    """Every step of the suite, in order (`workers`: xdist processes of each pytest step)."""
    return [
        Step("env", [PY, "-c", ENV_PROBE], 120, "lines"),
        *_pytest_steps(out, tiny, workers),
        *_ppo_steps(out, tiny, purejaxrl),
        *_run_steps(out, tiny, craftax_steps),
    ]


def select(steps: list[Step], wanted: list[str] | None) -> list[Step]:
    """The steps named in `wanted` (a name, or a group: the part before the first `_`)."""
    if not wanted:
        return steps
    known = {s.name for s in steps} | {s.name.split("_")[0] for s in steps}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(_bad(f"--steps: unknown {', '.join(unknown)}; known: {sorted(known)}"))
    return [s for s in steps if s.name in wanted or s.name.split("_")[0] in wanted]


def _bad(message: str) -> int:
    print(f"gpu_suite.py: {message}", file=sys.stderr)
    return 2


def _pytest_results(step: Step) -> dict[str, Any]:
    xml = next((a.split("=", 1)[1] for a in step.command if a.startswith("--junitxml=")), None)
    if xml is None or not Path(xml).is_file():
        return {}
    suites = ET.parse(xml).getroot()
    suites = [suites] if suites.tag == "testsuite" else list(suites)
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in
              ("tests", "failures", "errors", "skipped")}  # fmt: skip
    failed = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            first = (bad.get("message") or "").splitlines()[:1]
            failed.append(f"{case.get('classname')}::{case.get('name')}: {''.join(first)[:300]}")
    return {**counts, "failed": failed}


def _failed_in_log(text: str) -> dict[str, Any]:
    """The tests that `pytest -v` printed as failed or in error, as they ended (with xdist,
    `[gw0] [ 5%] FAILED tests/a.py::b`; alone, `tests/a.py::b FAILED [ 5%]`): what a step
    cut by its limit, before its JUnit report, still tells."""
    found = re.findall(r"(?:FAILED|ERROR) (tests/\S+::\S+)|(tests/\S+::\S+) (?:FAILED|ERROR)", text)
    names = list(dict.fromkeys(a or b for a, b in found))
    return {"failed_in_log": names} if names else {}


def _collected(text: str) -> dict[str, Any]:
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", text)
    return {"collected": int(found.group(1))} if found else {}


def _json_lines(text: str) -> list[Any]:
    found = []
    for line in text.splitlines():
        if line.startswith("{") and line.endswith("}"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return found


def results_of(step: Step, out: Path, log_text: str) -> Any:
    """What the step measured, read from its files (or its printed JSON lines)."""
    if step.kind == "pytest":
        return {**_pytest_results(step), **_collected(log_text), **_failed_in_log(log_text)}
    if step.kind == "json":
        path = out / "steps" / f"{step.name}.json"
        return json.loads(path.read_text()) if path.is_file() else None
    if step.kind == "run":
        summary = out / "runs" / step.name / "summary.json"
        return json.loads(summary.read_text()) if summary.is_file() else None
    return _json_lines(log_text)


def run_step(step: Step, out: Path, limit: float) -> dict[str, Any]:
    """Run one step under `limit` seconds; its record for suite.json."""
    record: dict[str, Any] = {"step": step.name, "command": shlex.join(step.command)}
    if step.skip:
        return {**record, "status": "skipped", "reason": step.skip}
    log = out / "logs" / f"{step.name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **step.env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    start = time.time()
    with open(log, "w") as fh:
        proc = subprocess.Popen(step.command, cwd=ROOT, env=env, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            rc = proc.wait(timeout=limit)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the step and everything it started
            rc, status = proc.wait(), "timeout"
    wall = time.time() - start
    text = log.read_text(errors="replace")
    try:
        results = results_of(step, out, text)
    except (OSError, ValueError, ET.ParseError) as err:
        results = {"unreadable": str(err)}
    tail = text[-3000:] if status != "ok" else text[-600:]
    return {**record, "status": status, "returncode": rc, "limit_seconds": round(limit),
            "wall_seconds": round(wall, 1), "results": results, "log_tail": tail}  # fmt: skip


def _header(args: argparse.Namespace) -> dict[str, Any]:
    smi = None
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "suite": "gpu_suite",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "nvidia_smi": smi,
        "budget": args.budget,
        "command": shlex.join([Path(PY).name, *sys.argv]),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path, help="output folder (created; must be empty)")
    p.add_argument(
        "--budget",
        choices=("full", "tiny"),
        default="full",
        help="full: the GPU budgets; tiny: seconds-long versions (a dry run)",
    )
    p.add_argument("--steps", nargs="+", metavar="NAME", help="only these steps or groups")
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="S",
        help="end within S seconds: limits shrink, steps that do not fit are skipped",
    )
    p.add_argument(
        "--purejaxrl",
        type=Path,
        default=None,
        metavar="PPO_PY",
        help=f"PureJaxRL's ppo.py (default {DEFAULT_PUREJAXRL.relative_to(ROOT)})",
    )
    p.add_argument(
        "--craftax-steps",
        type=int,
        default=None,
        help="env steps of the Craftax step (default: its config's)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=4,
        metavar="N",
        help="xdist processes of each pytest step, sharing the GPU (default 4; 1: none)",
    )
    p.add_argument("--list", action="store_true", help="print the steps and exit")
    args = p.parse_args(argv)  # fmt: skip
    if not args.list and args.out is None:
        p.error("the output folder is required")
    if (
        args.out is not None
        and args.out.exists()
        and (not args.out.is_dir() or any(args.out.iterdir()))
    ):
        raise SystemExit(_bad(f"{str(args.out)!r} exists and is not empty"))
    if args.purejaxrl is not None and not args.purejaxrl.is_file():
        raise SystemExit(_bad(f"--purejaxrl: {str(args.purejaxrl)!r} does not exist"))
    if args.workers < 1:
        raise SystemExit(_bad(f"--workers: must be at least 1 (got {args.workers})"))
    if args.deadline is not None and args.deadline <= 0:
        raise SystemExit(_bad(f"--deadline: must be positive (got {args.deadline})"))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = (args.out or Path("gpu_suite_out")).resolve()
    purejaxrl = args.purejaxrl or (DEFAULT_PUREJAXRL if DEFAULT_PUREJAXRL.is_file() else None)
    steps = select(
        plan(out, args.budget == "tiny", purejaxrl, args.craftax_steps, args.workers), args.steps
    )
    if args.list:
        for s in steps:
            print(f"{s.name:28s} {s.timeout:5.0f}s  {s.skip or shlex.join(s.command)}")
        return 0
    for sub in ("steps", "logs", "runs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    suite = {**_header(args), "steps": []}
    t0 = time.time()
    for step in steps:
        left = None if args.deadline is None else args.deadline - (time.time() - t0)
        if left is not None and left < 30 and not step.skip:
            record = {"step": step.name, "status": "skipped", "reason": "deadline"}
        else:
            limit = step.timeout if left is None else min(step.timeout, left - 10)
            if not step.skip:
                print(f"[gpu_suite] {step.name} (limit {limit:.0f}s)", flush=True)
            record = run_step(step, out, limit)
        print(f"[gpu_suite] {step.name}: {record['status']} "
              f"{record.get('wall_seconds', 0)}s", flush=True)  # fmt: skip
        suite["steps"].append(record)
        (out / "suite.json").write_text(json.dumps(suite, indent=1) + "\n")
    suite["wall_seconds"] = round(time.time() - t0, 1)
    (out / "suite.json").write_text(json.dumps(suite, indent=1) + "\n")
    bad = [s["step"] for s in suite["steps"] if s["status"] in ("failed", "timeout")]
    print(f"[gpu_suite] done in {suite['wall_seconds']}s; not ok: {bad or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
