"""Chunked, checkpointed runs: chunked == unchunked, interrupt + resume == uninterrupted
(bitwise on CPU), and corrupt or mismatched checkpoints are refused without being touched."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import conftest
import jax
import numpy as np
import pytest

import train
from rlax_trpo import make_trainer
from rlax_trpo.experiment import checkpoint, driver

ROOT = Path(__file__).resolve().parents[1]
# 8 iterations of a tiny PPO run, checkpointed every 2.
TINY = [
    "--seeds",
    "2",
    "--no-progress",
    "num_envs=4",
    "num_steps=16",
    "total_env_steps=512",
    "num_epochs=1",
    "num_minibatches=1",
    "eval_episodes=2",
]
CHUNK = ["--chunk-iterations", "2"]


def _params(run_dir: Path):
    config = checkpoint.load_config(run_dir / "checkpoint")
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), 2)
    target = jax.eval_shape(jax.vmap(trainer.init, in_axes=(0, None)), keys, config.hp)
    state = checkpoint.restore(run_dir / "checkpoint", target)
    return jax.tree.leaves(jax.tree.map(np.asarray, state.params)), state


def _tree_hash(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One compiled `lax.scan` for all 8 iterations (`--single-call`): what every split of
    the run into segment calls must give bit for bit."""
    out = tmp_path_factory.mktemp("ref") / "run"
    assert train.main([*TINY, "--single-call", "--out", str(out)]) == 0
    return out


def test_the_segmented_run_equals_the_single_call_bit_for_bit(tmp_path):
    """Without --single-call the run is segment calls of one compiled program, whose count
    and annealing horizon are inputs (tests/test_compile_cache.py: one program for every
    budget): the same metrics.csv as one `lax.scan`, bit for bit, with `anneal_lr` (on by
    default) over 7 iterations, where i / 7 and i * (1 / 7) differ in float32 at i = 3."""
    seven = [x for x in TINY if not x.startswith("total_env_steps")] + ["total_env_steps=448"]
    runs = {how: tmp_path / (how[0] if how else "segments") for how in ((), ("--single-call",))}
    for how, out in runs.items():
        assert train.main([*seven, *how, "--out", str(out)]) == 0
    segments, single = runs.values()
    assert (segments / "metrics.csv").read_bytes() == (single / "metrics.csv").read_bytes()
    summary = json.loads((segments / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["compiled_run_programs"] == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupt_then_resume_equals_uninterrupted(uninterrupted, tmp_path, sig):
    """Chunks of 2, a signal, --resume: the same parameters and metrics.csv, bit for bit, as
    the run that compiled all 8 iterations into one call (so chunking is exact too)."""
    out = tmp_path / "run"
    env = {**os.environ, **conftest.SAME_BACKEND}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *TINY, *CHUNK, "--out", str(out)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # config.yaml appears once the signal handlers are installed (before compilation); the
    # run must honour SIGTERM after its first chunk and checkpoint, not die mid-way.
    deadline = time.time() + 240
    while not (out / "config.yaml").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err
    assert f"interrupted by {sig.name}" in err and "--resume" in err
    assert "" not in err.splitlines(), err  # no bar (--no-progress) to end: no empty line
    done = checkpoint.read_record(out / "checkpoint").iterations_done
    assert 1 <= done < 8  # after the call the signal came in, not at a checkpoint
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["iterations_done"] == done
    assert len((out / "metrics.csv").read_text().splitlines()) == 1 + 2 * done  # 2 seeds
    assert (out / "learning_curve.png").is_file()

    assert train.main(["--resume", str(out), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_bytes() == (uninterrupted / "metrics.csv").read_bytes()
    a, state = _params(out)
    b, _ = _params(uninterrupted)
    assert int(state.iteration[0]) == 8
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _start(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, **conftest.SAME_BACKEND}
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), *argv], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.time() + 240
    while not path.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)


def test_signals_stop_an_unchunked_run_after_its_call_or_at_once(uninterrupted, tmp_path, capsys):
    """A run without --chunk-iterations is still computed in calls of seconds. SIGTERM:
    acknowledged at once; the run stops after the call it came in with a checkpoint, its
    metrics.csv, summary.json (`interrupted`) and figure, exit 143; --resume finishes it to
    the single call's metrics.csv. --single-call waits for its one call, after which the
    training is done: the run finishes as it would have (exit 0, nothing to resume). A
    second SIGTERM: one line saying what was kept, exit 143 at once, the folder left with
    its plan (--resume starting over is tests/test_faults.py's)."""
    out = tmp_path / "run"
    proc = _start([*TINY, "--out", str(out)], tmp_path)
    _wait_for(out / "config.yaml", proc)  # handlers are installed before the folder is made
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines[-2].startswith("SIGTERM received: stopping after the current call"), err
    assert lines[-1].startswith(
        "error: interrupted by SIGTERM after iteration 1; checkpoint saved; metrics.csv, "
        "summary.json and the learning curve hold them; resume with: "
    ), err
    assert checkpoint.read_record(out / "checkpoint").iterations_done == 1
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    assert len((out / "metrics.csv").read_text().splitlines()) == 1 + 2  # 2 seeds
    assert train.main([*TINY, "--out", str(out)]) == 2  # not a finished run: --resume it
    assert f"continue it with --resume {out}" in capsys.readouterr().err
    assert train.main(["--resume", str(out), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_bytes() == (uninterrupted / "metrics.csv").read_bytes()
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"

    out = tmp_path / "single"
    proc = _start([*TINY, "--single-call", "--out", str(out)], tmp_path)
    _wait_for(out / "config.yaml", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "SIGTERM received: stopping when its compiled call ends" in err, err
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"
    assert (out / "metrics.csv").read_bytes() == (uninterrupted / "metrics.csv").read_bytes()

    out = tmp_path / "twice"
    proc = _start([*TINY, "--out", str(out)], tmp_path)
    _wait_for(out / "config.yaml", proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)  # "at once": a process that keeps running fails
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.splitlines()[-1] == (
        f"error: stopped by a second SIGTERM; the run folder {str(out)!r} has no checkpoint "
        "yet (--resume starts the run over)"
    ), err
    assert "Traceback" not in err
    assert checkpoint.read_plan(out / "checkpoint").seeds == 2  # what --resume starts over from


def _resumable_copy(uninterrupted: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(uninterrupted, run)
    (run / "summary.json").unlink()  # an unfinished run
    return run


@pytest.mark.parametrize(
    "damage, expected",
    [
        ("flip", "is corrupt: state/"),
        ("missing", "is corrupt: metrics.npz is missing"),
        ("config", "config.yaml differs"),
    ],
)
def test_corrupt_checkpoint_is_refused_and_kept(uninterrupted, tmp_path, capsys, damage, expected):
    """The run's only checkpoint is damaged: nothing to fall back to (tests/test_faults.py
    has the fallback to an older one)."""
    run = _resumable_copy(uninterrupted, tmp_path)
    ckpt = run / "checkpoint"
    step = ckpt / (ckpt / "LATEST").read_text().strip()
    if damage == "flip":
        victim = max(
            (p for p in (step / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
        )
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
    elif damage == "missing":
        (step / "metrics.npz").unlink()
    else:
        text = (ckpt / "config.yaml").read_text().replace("num_envs: 4", "num_envs: 8")
        (ckpt / "config.yaml").write_text(text)
    before = _tree_hash(run)
    assert train.main(["--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and expected in err, err
    assert _tree_hash(run) == before  # never overwritten


def test_a_run_resumes_without_its_checkpoints_config_and_prunes_a_leftover_step(
    uninterrupted, tmp_path, capsys
):
    """checkpoint/config.yaml lost: the config of the step's meta.json is taken (and said),
    also for overrides checked against it; steps a kill left beyond `keep` are pruned."""
    run = _resumable_copy(uninterrupted, tmp_path)
    ckpt = run / "checkpoint"
    (ckpt / "config.yaml").unlink()
    for name in ("iter_000006", "iter_000004"):  # killed after the renames, before pruning
        shutil.copytree(ckpt / "iter_000008", ckpt / name)
    assert train.main(["--resume", str(run), "--no-progress", "num_envs=4"]) == 0
    err = capsys.readouterr().err
    assert (
        f"note: {str(ckpt / 'config.yaml')!r} is missing; the run's config is read from "
        f"{str(ckpt / 'iter_000008' / 'meta.json')!r}\n"
    ) in err, err
    assert (run / "metrics.csv").read_bytes() == (uninterrupted / "metrics.csv").read_bytes()
    assert sorted(p.name for p in ckpt.glob("iter_*")) == ["iter_000006", "iter_000008"]


@pytest.mark.parametrize(
    "damage, problem",
    [
        ("latest", "LATEST names 'iter_999999', which does not exist"),
        ("empty_latest", "LATEST is empty or unreadable"),
        ("no_latest", "has no LATEST file"),
    ],
)
def test_a_damaged_latest_pointer_falls_back_to_the_newest_verified_step(
    uninterrupted, tmp_path, capsys, damage, problem
):
    """LATEST only points: a step folder exists under its name only once complete, and its
    manifest verifies it, so the newest verified step is taken (and the problem named)."""
    run = _resumable_copy(uninterrupted, tmp_path)
    latest = run / "checkpoint" / "LATEST"
    if damage == "no_latest":
        latest.unlink()
    else:
        latest.write_text("iter_999999\n" if damage == "latest" else "")
    assert train.main(["--resume", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"warning: checkpoint {str(run / 'checkpoint')!r}" in err and problem in err, err
    assert "resuming from iter_000008" in err
    assert (run / "metrics.csv").read_bytes() == (uninterrupted / "metrics.csv").read_bytes()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--seeds", "3"], "was made with seeds=2, not 3"),
        (["--sweep", "hp.learning_rate=1e-3,1e-4"], "was made with sweep={}"),
        (["num_envs=8"], "the given config differs"),
        (["--out", "elsewhere"], "--out: a resumed run continues in its own folder"),
    ],
)
def test_mismatched_resume_is_refused(uninterrupted, tmp_path, capsys, argv, expected):
    run = _resumable_copy(uninterrupted, tmp_path)
    before = _tree_hash(run)
    assert train.main(["--resume", str(run), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and expected in err, err
    assert _tree_hash(run) == before


def test_resume_of_a_finished_run_is_refused(uninterrupted, capsys):
    assert train.main(["--resume", str(uninterrupted), "--no-progress"]) == 2
    assert "already complete" in capsys.readouterr().err


class _AlreadySignalled(driver.StopRequest):
    """As if SIGTERM had arrived before the first chunk finished."""

    def __enter__(self):
        self.signum = signal.SIGTERM
        return self


def test_an_interrupted_chunked_sweep_resumes_to_the_same_result(tmp_path, monkeypatch):
    sweep = [
        "--seed",
        "3",
        "--sweep",
        "hp.learning_rate=1e-4,1e-3",
        "--sweep",
        "hp.clip_eps=0.1,0.3",
    ]
    whole = tmp_path / "whole"
    assert train.main([*TINY, *sweep, "--out", str(whole)]) == 0
    parts = tmp_path / "parts"
    with monkeypatch.context() as m:
        m.setattr(driver, "StopRequest", _AlreadySignalled)
        code = train.main([*TINY, *sweep, *CHUNK, "--out", str(parts)])
    assert code == 128 + signal.SIGTERM
    assert checkpoint.read_record(parts / "checkpoint").iterations_done == 1  # its first call
    assert train.main(["--resume", str(parts), "--no-progress"]) == 0
    assert (parts / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()
    summary = json.loads((parts / "summary.json").read_text())
    assert summary["population"] == 8 and summary["num_settings"] == 4


def test_the_seed_flag_chooses_the_seeds(uninterrupted, tmp_path):
    # --seed S: other keys than seed 0, the same ones for the same S, recorded for --resume.
    again = tmp_path / "again"
    assert train.main([*TINY, "--seed", "0", "--out", str(again)]) == 0
    assert (again / "metrics.csv").read_bytes() == (uninterrupted / "metrics.csv").read_bytes()
    other = tmp_path / "other"
    assert train.main([*TINY, "--seed", "5", "--out", str(other)]) == 0
    assert (other / "metrics.csv").read_bytes() != (uninterrupted / "metrics.csv").read_bytes()
    assert checkpoint.read_record(other / "checkpoint").seed == 5
