"""`train.py` end to end at a tiny budget: the run folder and its summary."""

import csv
import json
import re
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from probe_envs import register_probes

import train
from rlax_trpo import cli, make_trainer
from rlax_trpo.experiment import checkpoint, driver

ROOT = Path(__file__).resolve().parents[1]
register_probes()

SUMMARY_KEYS = {
    "algorithm",
    "env",
    "num_seeds",
    "total_env_steps",
    "wall_seconds",
    "compile_seconds",
    "env_steps_per_second",
    "final_return_mean",
    "final_return_std",
    "eval_return_mean",
    "num_devices",
    "members",
}


def test_run_folder(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    code = train.main(
        [
            "--seeds",
            "2",
            "--out",
            str(out),
            "--no-progress",
            "num_envs=4",
            "num_steps=32",
            "total_env_steps=1280",
            "eval_episodes=3",
        ]
    )
    assert code == 0
    names = {p.name for p in out.iterdir()}
    assert {
        "config.yaml",
        "metrics.csv",
        "summary.json",
        "learning_curve.png",
        "checkpoint",
    } <= names
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["num_seeds"] == 2 and summary["total_env_steps"] == 1280
    # one CPU device per core (conftest's setup_cpu): the 2 seeds use 2 devices where there are
    assert summary["num_devices"] == min(2, jax.device_count())
    assert len(summary["members"]) == 1  # no sweep: 1 setting
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 10  # a row per seed x iteration
    assert {"seed", "iteration", "env_steps", "episode/return", "ppo/clip_frac"} <= set(rows[0])
    # final_return_mean is recomputed from the CSV: last 10% of iterations (1 of 10), per seed
    per_seed = []
    for s in ("0", "1"):
        last = [r for r in rows if r["seed"] == s][-1]
        per_seed.append(float(last["episode/return_sum"]) / float(last["episode/count"]))
    np.testing.assert_allclose(summary["final_return_mean"], np.mean(per_seed), rtol=1e-5)
    assert "final return" in capsys.readouterr().out

    # the checkpoint restores into the structure of a fresh state
    config = checkpoint.load_config(out / "checkpoint")
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), 2)
    target = jax.vmap(trainer.init, in_axes=(0, None))(keys, config.hp)
    restored = checkpoint.restore(out / "checkpoint", target)
    assert int(restored.iteration[0]) == 10
    assert jax.tree.structure(restored) == jax.tree.structure(target)

    # eval's mistakes that need no compilation are refused before any: a member out of range,
    # the run's checkpoint folder given for the run folder
    from rlax_trpo.experiment import saved

    def no_evaluation(*args, **kwargs):
        raise AssertionError("evaluated (compiled) before refusing")

    monkeypatch.setattr(saved, "evaluate_run", no_evaluation)
    capsys.readouterr()
    assert train.main(["eval", "--run", str(out), "--member", "2"]) == 2
    assert capsys.readouterr().err == "error: --member: must be between 0 and 1 (got 2)\n"
    assert train.main(["eval", "--run", str(out / "checkpoint")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --run: {str(out / 'checkpoint')!r} is inside the run folder {str(out)!r}; "
        f"give --run {out}\n"
    )


DIVERGE = {  # algorithm -> (extra settings, the iteration whose rollout holds step 40)
    "ppo": (["num_minibatches=1", "num_epochs=4"], 2),
    "trpo": (["value_minibatches=2"], 2),
    "npg": (["value_minibatches=2"], 2),
    "vpg": (["value_minibatches=2"], 2),
    "grpo": (["group_size=2", "num_steps=48", "num_minibatches=1"], 0),  # horizons start at 1
}


@pytest.mark.parametrize("algorithm", sorted(DIVERGE))
def test_divergence_stops_the_run_names_where_and_keeps_the_last_finite_state(
    algorithm, tmp_path, capsys
):
    # Probe-nan_at_40 pays a NaN reward at an episode's 40th step: the update of the
    # iteration that collects it is non-finite. The chunked run must stop after that chunk,
    # say which seed, iteration and metric, and keep the parameters from before it.
    extra, at = DIVERGE[algorithm]
    out = tmp_path / "run"
    argv = ["--out", str(out), "--no-progress", "--chunk-iterations", "1", f"algorithm={algorithm}"]
    argv += ["env=Probe-nan_at_40", "num_envs=2", "num_steps=16", "hidden_sizes=[8]"]
    argv += ["total_env_steps=576", "eval_episodes=1", *extra]
    assert train.main(argv) == 1
    *warned, err = capsys.readouterr().err.strip().splitlines()
    summary = json.loads((out / "summary.json").read_text())
    d = summary["diverged"]
    assert (d["seed"], d["iteration"]) == (0, at), d
    # one error line; GRPO's 48-step horizon is below the probe's 100-step episode limit
    assert len(warned) == (algorithm == "grpo")
    assert all(w.startswith("warning: num_steps: the GRPO horizon (48 ") for w in warned)
    assert f"seed 0 became non-finite at iteration {at} ({d['metric']})" in err and str(out) in err
    with (out / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["iteration"] == str(at)]
    assert rows[0][d["metric"]] == "nan"
    record = checkpoint.read_record(out / "checkpoint")
    assert record.iterations_done == at + 1 < record.num_iterations  # stopped there

    config = checkpoint.load_config(out / "checkpoint")
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), 1)
    hps = jax.tree.map(lambda x: x[None], config.hp)
    before = jax.jit(jax.vmap(trainer.init))(keys, hps)
    kept = checkpoint.restore(out / "checkpoint", before).params
    # The same run stopped just before the non-finite update has the very same parameters.
    if at:
        run = jax.jit(jax.vmap(trainer.run, in_axes=(0, 0, None)), static_argnums=2)
        before, _ = run(before, hps, at)
    for a, b in zip(jax.tree.leaves(kept), jax.tree.leaves(before.params), strict=True):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


TINY = ["--no-progress", "num_envs=4", "num_steps=16", "total_env_steps=128", "eval_episodes=2"]


def test_overrides_are_accepted_anywhere_on_the_line(tmp_path):
    out = tmp_path / "run"
    argv = ["env=Acrobot-v1", "--seeds", "2", "total_env_steps=128", "--out", str(out)]
    assert train.main([*argv, "num_envs=4", "--no-progress", "num_steps=16"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == "Acrobot-v1" and summary["num_seeds"] == 2
    assert summary["total_env_steps"] == 128


def test_no_numpy_warnings_when_early_iterations_finish_no_episode(tmp_path, recwarn):
    # Pendulum episodes last 200 steps: the first 12 iterations of 16 steps finish none, so
    # episode/return is NaN there (the curve starts later), which must not warn.
    warnings.simplefilter("always")
    argv = [*TINY, "env=Pendulum-v1", "--seeds", "2", "total_env_steps=1024", "num_minibatches=2"]
    assert train.main([*argv, "--out", str(tmp_path / "run")]) == 0
    messages = [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert not messages, messages


def test_compiling_line_comes_before_the_progress_bar(tmp_path):
    argv = [sys.executable, str(ROOT / "train.py"), "num_envs=4", "num_steps=16"]
    argv += ["total_env_steps=320", "eval_episodes=2", "--out", str(tmp_path / "run")]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text = proc.stdout
    assert proc.returncode == 0, text
    line = r"compiling ppo on CartPole-v1 for 1 member\(s\) \.\.\. ([0-9.]+) s\n"
    match = re.search(line, text)
    assert match and float(match.group(1)) > 0, text
    assert match.end() <= text.index("5/5") < text.index("final return")  # then the bar


def test_top_level_help_lists_the_commands(capsys):
    assert train.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("train", "eval", "configs"):
        lines = [line for line in out.splitlines() if line.startswith(f"  {command} ")]
        assert len(lines) == 1 and len(lines[0].split()) > 3, (command, out)  # with a line
    assert "--chunk-iterations" not in out  # train's options are train's help
    with pytest.raises(SystemExit) as exit_:
        train.main(["train", "--help"])
    assert exit_.value.code == 0
    assert "--chunk-iterations" in capsys.readouterr().out


class _SignalledAtOnce(driver.StopRequest):
    """As if SIGTERM had arrived before the first chunk finished."""

    def __enter__(self):
        self.signum = signal.SIGTERM
        return self


def test_the_resume_hint_names_the_command_that_was_run(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(driver, "StopRequest", _SignalledAtOnce)
    argv = [*TINY, "total_env_steps=256", "--chunk-iterations", "2", "--out", str(out)]
    assert cli.main(argv) == 128 + signal.SIGTERM  # as the installed `rlax-trpo`
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"resume with: rlax-trpo train --resume {out}\n" in err, err
    # The same run folder, stopped under a checkout's script, names the script.
    interrupted = driver.RunResult(out, "interrupted", None, {"x": np.zeros((1, 2))}, None, 2)
    assert cli._report(interrupted, "train.py") == 130
    assert f"resume with: python train.py --resume {out}\n" in capsys.readouterr().err


def _libraries_speak() -> None:
    """What libraries do at a fault: log (absl, orbax), end a thread with a traceback, leave
    an exception nobody can raise, warn, write to the native stderr and stdout; then our own
    lines."""
    import logging
    import os
    import threading

    logging.getLogger("absl").error("absl speaks")
    thread = threading.Thread(target=lambda: 1 / 0, name="orbax-writer")
    thread.start()
    thread.join()

    class Unraisable:
        def __del__(self):
            raise ValueError("nobody can raise this")

    Unraisable()
    warnings.warn_explicit("a library warns", UserWarning, "/site-packages/lib.py", 1)
    os.write(2, b"native runtime speaks\n")
    os.write(1, b"[Gloo] Rank 0 is connected to 1 peer ranks\n")
    print("error: the command's own line", file=sys.stderr)
    print("the command's own output")


def test_the_libraries_messages_go_to_the_run_log_unless_verbose(tmp_path, capfd):
    """Inside the command (unless --verbose) the libraries' messages go to the log, kept in
    a temporary file until the run folder exists and then in <run>/run.log; the command's
    own lines stay on stderr."""
    import logging
    import os

    from rlax_trpo.experiment import runlog

    folder = tmp_path / "run"
    folder.mkdir()
    with runlog.quiet_libraries(True):
        logging.getLogger("jax").warning("before the run folder")
        runlog.attach(folder)
        _libraries_speak()
    captured = capfd.readouterr()
    assert captured.err == "error: the command's own line\n"
    assert captured.out == "the command's own output\n"
    log = (folder / "run.log").read_text()
    for said in ("before the run folder", "absl speaks", "orbax-writer", "ZeroDivisionError",
                 "nobody can raise this", "a library warns", "native runtime speaks",
                 "[Gloo] Rank 0"):  # fmt: skip
        assert said in log, (said, log)
    with runlog.quiet_libraries(False):  # --verbose: left as it was (here pytest's hooks)
        os.write(2, b"native runtime speaks\n")
    assert capfd.readouterr().err == "native runtime speaks\n"


def test_a_run_from_python_collects_what_the_libraries_left_into_its_log(tmp_path, capfd):
    """Called from Python (`main([...])`, not to the end of the process), the diversion ends
    with a collection: an unretrieved future's exception that only the cycle collector frees
    is written to the run's log, not to the caller's stderr afterwards."""
    import asyncio
    import gc

    from rlax_trpo.experiment import runlog

    loop = asyncio.new_event_loop()
    gc.disable()  # only the diversion's own collection may free it
    try:
        with runlog.quiet_libraries(True):
            runlog.attach(tmp_path)
            left = loop.create_future()
            left.set_exception(ValueError("a write failed"))
            cycle = [left]
            cycle.append(cycle)
            del left, cycle
        assert capfd.readouterr().err == ""
    finally:
        gc.enable()
        loop.close()
    assert "a write failed" in (tmp_path / "run.log").read_text()


def test_a_command_refused_before_its_run_collects_nothing(tmp_path, monkeypatch, capsys):
    """Bad input ends before any library ran: no collection (0.2-0.5 s in a process holding
    JAX's objects; a table of refusals in one process pays it for every row)."""
    from rlax_trpo.experiment import runlog

    monkeypatch.setattr(runlog.gc, "collect", lambda: pytest.fail("collected"))
    assert cli.main(["num_envs=abc", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.startswith("error: num_envs")


def test_verbose_is_a_train_option():
    assert cli.build_parser().parse_args(["--verbose"]).verbose
    assert not cli.build_parser().parse_args([]).verbose


def test_the_command_keeps_the_libraries_quiet_for_its_whole_process(tmp_path, monkeypatch):
    """What libraries leave behind speaks as the interpreter ends (asyncio's "Future
    exception was never retrieved" after a failed checkpoint write): the command (train.py,
    rlax-trpo: `main()` reading sys.argv) stays diverted to its end; a call from Python
    (`main([...])`) puts everything back."""
    import contextlib

    seen = []

    def quiet(quiet, to_the_end=False):
        seen.append(to_the_end)
        return contextlib.nullcontext()

    from rlax_trpo.cli import commands

    monkeypatch.setattr(commands.runlog, "quiet_libraries", quiet)
    monkeypatch.setattr(commands, "_train", lambda *args: 0)
    monkeypatch.setattr(sys, "argv", ["train.py", "--seeds", "2"])
    assert cli.main() == cli.main(["--seeds", "2"]) == 0
    assert seen == [True, False]

    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from rlax_trpo.experiment import runlog\n"
        "with runlog.quiet_libraries(True, to_the_end=True):\n"
        "    runlog.attach(Path(sys.argv[1]))\n"
        "    left = asyncio.new_event_loop().create_future()\n"
        "    left.set_exception(ValueError('a write failed'))\n"
        "print('error: the one line', file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "error: the one line\n", proc.stderr
    log = (tmp_path / "run.log").read_text()
    assert "exception was never retrieved" in log and "a write failed" in log, log
