"""Two processes on localhost (`jax.distributed`, gloo CPU collectives), 2 CPU devices each:
a 4-member population sharded over the 4 devices trains as a single process does, process 0
writes the run folder, and an interrupted run resumes across processes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import conftest
import numpy as np
import pytest

from rlax_trpo.experiment import checkpoint

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--no-progress", "--seeds", "4", "num_envs=4", "num_steps=16", "total_env_steps=256",
        "num_epochs=1", "num_minibatches=2", "eval_episodes=2"]  # fmt: skip

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gloo on Linux")


def _env(devices: int) -> dict:
    return conftest.forced_devices_env(devices)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start_pair(argv: list[str], env: dict | None = None) -> list[subprocess.Popen]:
    address = f"localhost:{_free_port()}"
    return [
        subprocess.Popen(
            [
                sys.executable,
                "train.py",
                "--coordinator-address",
                address,
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                *argv,
            ],  # fmt: skip
            cwd=ROOT,
            env={**_env(2), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]


def _wait(procs: list[subprocess.Popen], timeout: float = 240) -> list[tuple[int, str, str]]:
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out, err))
    return outs


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "run"
    proc = subprocess.run([sys.executable, "train.py", *TINY, "--out", str(out)], cwd=ROOT,
                          env=_env(4), capture_output=True, text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_interrupted_two_process_run_resumes(single, tmp_path):
    out, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()  # the processes' temporary folder
    procs = _start_pair([*TINY, "--chunk-iterations", "1", "--out", str(out)], {"TMPDIR": str(tmp)})
    time.sleep(2.0)  # both are importing or compiling (>= 10 s): they stop after chunk 1
    deadline = time.time() + 60
    while not (out / "config.yaml").exists() and time.time() < deadline:
        time.sleep(0.2)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for code, _, err in _wait(procs):
        assert code == 128 + signal.SIGTERM, err[-3000:]
    assert list(tmp.iterdir()) == []  # an exit the child explained leaves no native log
    assert checkpoint.read_step(out / "checkpoint" / "iter_000001").iterations_done == 1
    for code, _, err in _wait(_start_pair(["--resume", str(out), "--no-progress"])):
        assert code == 0, err[-3000:]
    s, s1 = _summary(out), _summary(single)
    assert s["iterations_done"] == s1["iterations_done"] == 4
    np.testing.assert_allclose(s["final_return_per_seed"], s1["final_return_per_seed"])


@pytest.mark.parametrize("which", [0, 1])
def test_a_signal_to_either_process_stops_both_after_the_same_call(single, which, tmp_path):
    """SIGTERM to one process only (its command: the supervisor, which passes it on): the
    processes agree after every segment call, so both stop after the same one, save its
    checkpoint together, write the run's files and exit 143; --resume on both finishes the
    run as one process does."""
    out = tmp_path / "run"
    procs = _start_pair([*TINY, "--out", str(out)])
    deadline = time.time() + 120
    while not (out / "config.yaml").exists() and time.time() < deadline:
        time.sleep(0.05)
    procs[which].send_signal(signal.SIGTERM)  # before the first call ends: it stops after it
    for code, _, err in _wait(procs, timeout=120):
        assert code == 128 + signal.SIGTERM, err[-3000:]
    done = checkpoint.read_record(out / "checkpoint").iterations_done
    assert done == 1 and _summary(out)["status"] == "interrupted"
    for code, _, err in _wait(_start_pair(["--resume", str(out), "--no-progress"])):
        assert code == 0, err[-3000:]
    s, s1 = _summary(out), _summary(single)
    assert s["status"] == "complete" and s["iterations_done"] == s1["iterations_done"] == 4
    np.testing.assert_allclose(s["final_return_per_seed"], s1["final_return_per_seed"])


def test_a_killed_peer_ends_the_other_within_the_peer_timeout_in_one_line(tmp_path):
    """kill -9 of one process mid-run (its command: the supervisor, whose training child dies
    with it): the other ends within --peer-timeout (plus the runtime's few seconds) with one
    line on stderr naming the cause and what was kept, exit status 3, and no native stack;
    the run folder keeps its checkpoints."""
    out, timeout = tmp_path / "run", 5
    long_run = [*TINY[:-5], "total_env_steps=400000", "num_epochs=1", "num_minibatches=2",
                "eval_episodes=2", "--chunk-iterations", "100"]  # fmt: skip
    procs = _start_pair([*long_run, "--peer-timeout", str(timeout), "--out", str(out)])
    deadline = time.time() + 120
    while not (out / "checkpoint" / "LATEST").exists() and time.time() < deadline:
        assert procs[0].poll() is None, procs[0].communicate()[1][-3000:]
        time.sleep(0.1)
    procs[1].kill()
    killed = time.time()
    try:
        _, err = procs[0].communicate(timeout=timeout + 50)
    finally:
        procs[1].communicate()
    elapsed = time.time() - killed
    lines = [x for x in err.splitlines() if x.strip()]
    assert procs[0].returncode == 3, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: a process of this multi-process run stopped or cannot be "
                               "reached"), lines  # fmt: skip
    assert f"the run folder {str(out)!r} keeps its last checkpoint" in lines[0]
    assert elapsed < timeout + 15, elapsed
    assert (out / "checkpoint" / "LATEST").is_file()


def test_the_timeouts_reach_the_runtime(monkeypatch):
    """--peer-timeout reaches JAX's runtime as its heartbeat timeout (the end-to-end test
    above may see the kill through Gloo first, so it cannot tell whether heartbeats are
    bounded); --startup-timeout as every wait for a live process: joining, the devices'
    topology, the meeting after compiling, shutdown."""
    import jax

    from rlax_trpo.experiment import parallel

    seen, configured = {}, {}
    monkeypatch.setattr(jax.config, "update", lambda name, value: configured.update({name: value}))
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: seen.update(kw))
    monkeypatch.setattr(parallel, "_startup_timeout", [parallel.STARTUP_TIMEOUT])
    parallel.initialize_distributed("localhost:1234", 2, 1, peer_timeout=7, startup_timeout=90)
    assert seen["heartbeat_timeout_seconds"] == 7
    assert seen["initialization_timeout"] == seen["shutdown_timeout_seconds"] == 90
    assert configured["jax_cpu_get_local_topology_timeout_minutes"] == 2
    assert configured["jax_cpu_get_global_topology_timeout_minutes"] == 3
    assert parallel._startup_timeout == [90]  # the meeting after compiling waits as long
    assert (seen["coordinator_address"], seen["num_processes"], seen["process_id"]) == (
        "localhost:1234", 2, 1)  # fmt: skip


# Installed through PYTHONPATH in every process of a test (the supervised training children
# inherit it): the process given `--process-id` DELAYED_PROCESS sleeps DELAY_S seconds after
# it compiled, as a process of a loaded machine may finish compiling that much later.
DELAYED_COMPILE = """
import os, sys

def _delay():
    import importlib.abc, importlib.machinery, time

    argv, delay = sys.argv, float(os.environ["DELAY_S"])
    if "--process-id" not in argv or argv[argv.index("--process-id") + 1] != os.environ[
        "DELAYED_PROCESS"
    ]:
        return

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "rlax_trpo.experiment.chunks":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                compile_run = module.compile_run

                def delayed(*args, **kwargs):
                    compiled = compile_run(*args, **kwargs)
                    time.sleep(delay)
                    return compiled

                module.compile_run = delayed

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())

_delay()
"""


@pytest.mark.slow
def test_two_processes_train_like_one_when_a_peer_compiles_much_later(single, tmp_path):
    """Two processes of 2 devices each train as one process of 4 does, process 0 writing the
    run folder; here one process compiles 40 s after the other (more than Gloo's fixed 30 s
    for setting up its first collective): the processes meet after compiling, within the
    start-up timeout. (Without the delay the run is the same, so one test covers both.)"""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(DELAYED_COMPILE)
    out = tmp_path / "run"
    env = {"PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", "DELAY_S": "40", "DELAYED_PROCESS": "1"}
    t0 = time.time()
    results = _wait(_start_pair([*TINY, "--out", str(out)], env))
    for code, stdout, err in results:
        assert code == 0, (stdout + err)[-3000:]
    assert time.time() - t0 > 40  # the delay happened
    assert "final return" in results[0][1] and "final return" not in results[1][1]
    s2, s1 = _summary(out), _summary(single)
    assert s2["num_processes"] == 2 and s2["num_devices"] == 4 and s1["num_devices"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook", "run"]  # no temporary folder
    np.testing.assert_allclose(s2["final_return_per_seed"], s1["final_return_per_seed"])
    np.testing.assert_allclose(s2["eval_return_mean"], s1["eval_return_mean"])
