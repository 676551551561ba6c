"""Faults an operator meets, at a small budget: a process killed (SIGKILL) in each phase of
a chunked run, a second writer, an empty mount point as `--out`, a full disk, a damaged
newest checkpoint. Whatever was computed before the fault is kept, and `--resume` finishes
the run with a metrics.csv byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import conftest
import pytest
from probe_envs import register_probes

import train
from rlax_trpo.experiment import checkpoint, chunks, driver

register_probes()

ROOT = Path(__file__).resolve().parents[1]
# 8 iterations of a tiny PPO run, 2 seeds, a checkpoint after every 2.
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
    "--chunk-iterations",
    "2",
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> bytes:
    """metrics.csv of the same run, never interrupted."""
    out = tmp_path_factory.mktemp("ref") / "run"
    assert train.main([*TINY, "--out", str(out)]) == 0
    assert not (out / ".lock").exists()  # released at the end
    return (out / "metrics.csv").read_bytes()


# A run that SIGKILLs itself the moment it calls MODULE.FUNCTION for the N-th time: a crash at
# a precise point of a phase (no `finally`, no handler runs, as with `kill -9`).
KILL_AT = textwrap.dedent("""
    import importlib, os, signal, sys
    sys.path.insert(0, os.environ["ROOT"])
    module, function, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    target = importlib.import_module(module)
    original, calls = getattr(target, function), [0]

    def killing(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(target, function, killing)
    import train
    sys.exit(train.main(sys.argv[4:]))
""")

PHASES = {  # phase -> (module, function, call): where the process dies
    "compiling, before any checkpoint": ("rlax_trpo.experiment.driver", "compile_run", 1),
    "inside the second checkpoint write": ("rlax_trpo.experiment.checkpoint", "_finish_step", 2),
    "between chunks": ("rlax_trpo.experiment.chunks", "_chunk_metrics", 3),
    "after the last checkpoint (evaluation)": ("rlax_trpo.experiment.driver", "evaluate", 1),
    "writing metrics.csv": ("rlax_trpo.report.run_files", "write_metrics_csv", 1),
}


def _run_killed(where: tuple[str, str, int], argv: list[str], cwd: Path):
    (cwd / "tmp").mkdir()  # the process's temporary folder: a kill leaves nothing there
    env = {**os.environ, "ROOT": str(ROOT), **conftest.SAME_BACKEND, "TMPDIR": str(cwd / "tmp")}
    cmd = [sys.executable, "-c", KILL_AT, *map(str, where), *argv]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_killed_in_any_phase_resume_finishes_identically(phase, reference, tmp_path, capsys):
    out = tmp_path / "run"
    proc = _run_killed(PHASES[phase], [*TINY, "--out", str(out)], tmp_path)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not (out / "summary.json").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # its log had no name until the folder
    # The same folder is refused as a fresh run's --out with a pointer to --resume ...
    assert train.main([*TINY, "--out", str(out)]) == 2
    assert f"continue it with --resume {out}" in capsys.readouterr().err
    # ... and --resume finishes it (from the start when no checkpoint had been saved).
    assert train.main(["--resume", str(out), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_bytes() == reference
    assert not list(out.rglob(".*tmp*")) and not (out / ".lock").exists()


# A run that waits after its first chunk until the file $GO exists: it holds its folder for
# as long as a test needs (a warm compilation cache makes a tiny run end within seconds).
HOLD_AFTER_FIRST_CHUNK = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["ROOT"])
    from rlax_trpo.experiment import chunks

    original, calls = chunks._chunk_metrics, [0]

    def held(*args, **kwargs):
        calls[0] += 1
        deadline = time.time() + 300
        while calls[0] == 1 and not os.path.exists(os.environ["GO"]) and time.time() < deadline:
            time.sleep(0.05)
        return original(*args, **kwargs)

    chunks._chunk_metrics = held
    import train
    sys.exit(train.main(sys.argv[1:]))
""")


def test_a_second_writer_fails_at_once_and_the_first_is_unharmed(reference, tmp_path):
    out, go = tmp_path / "run", tmp_path / "go"
    env = {**os.environ, **conftest.SAME_BACKEND, "ROOT": str(ROOT), "GO": str(go)}
    cmd = [sys.executable, str(ROOT / "train.py"), *TINY]
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD_AFTER_FIRST_CHUNK, *TINY, "--out", str(out)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 240
    while not (out / ".lock").exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    for second_argv in ([*cmd, "--out", str(out)], [*cmd[:2], "--resume", str(out)]):
        t0 = time.time()
        second = subprocess.run(second_argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        if first.poll() is not None:
            pytest.fail("the first run ended before the second started; nothing was tested")
        assert second.returncode == 2, second.stderr
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and "is being written by another run (pid" in err[0], err
        assert time.time() - t0 < 60
    go.touch()
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert (out / "metrics.csv").read_bytes() == reference


def test_an_empty_mount_point_as_out_keeps_the_results(tmp_path):
    """`--out` an existing empty folder (as a container volume is): the run writes inside it
    and never renames or removes it."""
    out = tmp_path / "volume"
    out.mkdir()
    argv = [*TINY[:-2], "--out", str(out)]  # unchunked
    assert train.main(argv) == 0
    names = {p.name for p in out.iterdir()}
    assert {"summary.json", "metrics.csv", "config.yaml", "checkpoint"} <= names, names
    assert ".lock" not in names


def test_a_failure_before_the_plan_leaves_nothing(tmp_path, monkeypatch, capsys):
    """Nothing planned, nothing kept: a fresh folder is removed, an empty mount point emptied
    (never removed itself)."""

    def out_of_disk(*args, **kwargs):
        raise OSError(28, "No space left on device", "config.yaml")

    monkeypatch.setattr(driver, "open_folder", out_of_disk)
    for out, existed in ((tmp_path / "new", False), (tmp_path / "volume", True)):
        if existed:
            out.mkdir()
        assert train.main([*TINY, "--out", str(out)]) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == "error: No space left on device: config.yaml; nothing was kept", err
        assert out.exists() == existed and not (existed and any(out.iterdir()))


def test_a_failed_start_keeps_the_plan_and_resume_runs_it(reference, tmp_path, monkeypatch):
    """A failure once the plan is written (here compiling, as when a peer cannot be met): the
    folder is kept with its plan, the line says so, and --resume runs it to the same end."""

    def out_of_disk(*args, **kwargs):
        raise OSError(28, "No space left on device", "compile cache")

    monkeypatch.setattr(driver, "compile_run", out_of_disk)
    out = tmp_path / "run"
    code, err = _capture_main([*TINY, "--out", str(out)])
    monkeypatch.undo()
    assert code == 3 and err == [
        f"error: No space left on device: compile cache; the run folder {str(out)!r} has no "
        "checkpoint yet (--resume starts the run over)"
    ], err
    assert (out / "checkpoint" / "plan.json").is_file() and not (out / ".lock").exists()
    assert train.main(["--resume", str(out), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_bytes() == reference


@pytest.fixture(scope="module")
def unchunked(tmp_path_factory) -> Path:
    """The run folder of TINY without chunks, never interrupted."""
    out = tmp_path_factory.mktemp("unchunked") / "run"
    assert train.main([*TINY[:-2], "--out", str(out)]) == 0
    return out


def _no_state_written(*args, **kwargs):
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("where", ["run folder", "elsewhere"])
def test_an_unchunked_run_whose_checkpoint_fails_keeps_its_results(
    where, unchunked, tmp_path, monkeypatch
):
    """Its one (final) checkpoint cannot be written: the final phase still runs, metrics.csv
    and summary.json are written (in the run folder, or where the line says when that cannot
    take them either), exit 3 with one line; --resume then says the run is complete."""
    out = tmp_path / "run"
    monkeypatch.setattr(checkpoint, "_write_state", _no_state_written)
    if where == "elsewhere":
        from rlax_trpo.report import run_files

        original = run_files.write_run_files

        def folder_full(folder, *args, **kwargs):
            if Path(folder) == out:
                (out / ".metrics.tmp.csv").write_text("seed,")  # it began, then the disk filled
                raise OSError(28, "No space left on device", str(out / ".metrics.tmp.csv"))
            return original(folder, *args, **kwargs)

        monkeypatch.setattr(run_files, "write_run_files", folder_full)
    code, err = _capture_main([*TINY[:-2], "--out", str(out)])
    monkeypatch.undo()
    assert code == 3 and len(err) == 1, err
    ckpt = out / "checkpoint"
    assert err[0].startswith(f"error: could not write checkpoint iter_000008 in {str(ckpt)!r}")
    assert "no space left on the device; no earlier checkpoint exists" in err[0], err
    found = re.search(r"metrics\.csv and summary\.json are in '([^']+)' \(its trained state "
                      r"is not kept\)$", err[0])  # fmt: skip
    assert found, err
    kept = Path(found.group(1))
    assert (kept == out) == (where == "run folder"), kept
    assert (kept / "metrics.csv").read_bytes() == (unchunked / "metrics.csv").read_bytes()
    summary, whole = (json.loads((d / "summary.json").read_text()) for d in (kept, unchunked))
    assert summary["iterations_done"] == 8
    assert summary["final_return_per_seed"] == whole["final_return_per_seed"]
    assert not list(out.glob(".*.tmp*")) and not (out / ".lock").exists()
    assert not list((out / "checkpoint").glob("iter_*"))
    if where == "elsewhere":
        shutil.rmtree(kept)
        return
    code, err = _capture_main(["--resume", str(out), "--no-progress"])
    assert code == 2 and err == [f"error: --resume: the run in {str(out)!r} is already complete"]


def test_a_disk_full_in_the_final_phase_leaves_no_temporary_file(reference, tmp_path, monkeypatch):
    """The disk fills while metrics.csv is being written, after the last checkpoint: one
    line, exit 3, the checkpoint kept, and no temporary file left (a 0-byte
    .metrics.tmp.csv stayed until the next --resume); --resume then finishes the run."""
    from rlax_trpo.report import run_files

    out = tmp_path / "run"

    def full(path, *args, **kwargs):
        Path(path).write_text("")  # opened, then the disk filled
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(run_files, "write_metrics_csv", full)
    code, err = _capture_main([*TINY, "--out", str(out)])
    monkeypatch.undo()
    assert code == 3 and len(err) == 1 and "No space left on device" in err[0], err
    assert not list(out.rglob(".*tmp*")), list(out.rglob(".*tmp*"))
    assert checkpoint.read_meta(out / "checkpoint")["iterations_done"] == 8
    assert train.main(["--resume", str(out), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_bytes() == reference


def test_a_second_signal_on_the_way_out_discards_the_writes_in_progress(tmp_path):
    """The command line's second signal ends the process (`os._exit`) after asking the
    driver what is kept: that call first removes the temporaries of writes that will not
    finish (a checkpoint step half written, a summary being renamed), keeping finished steps."""
    from rlax_trpo.experiment.folder import stopping_now
    from rlax_trpo.experiment.plan import Folder

    out = tmp_path / "run"
    step = out / "checkpoint" / "iter_000002"
    step.mkdir(parents=True)
    (out / "checkpoint" / ".iter_000004.tmp-123-abc" / "state").mkdir(parents=True)
    (out / ".summary.json.tmp").write_text("{")
    said = stopping_now(Folder(out=out, owner=True))
    assert sorted(p.name for p in out.rglob("*")) == ["checkpoint", "iter_000002"]
    assert "keeps its last checkpoint iter_000002" in said


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return proc.returncode == 0


def test_disk_full_is_one_line_and_keeps_the_last_checkpoint(reference, tmp_path, monkeypatch):
    """A real full disk: a small tmpfs filled up after the first checkpoint."""
    disk = tmp_path / "disk"
    if shutil.which("mount") is None or not _mount_tmpfs(disk, "16m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        out = disk / "run"
        save = chunks._save

        def save_then_fill(setup, *args):
            save(setup, *args)
            with (disk / "filler").open("wb") as f:  # the disk fills up after this checkpoint
                try:
                    while True:
                        f.write(b"\0" * (1 << 16))
                except OSError:
                    pass

        monkeypatch.setattr(chunks, "_save", save_then_fill)
        proc_err = _capture_main([*TINY, "--out", str(out)])
        monkeypatch.undo()
        code, err = proc_err
        assert code == 3, err
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert "no space left" in err[0].lower() and "iter_000002" in err[0], err
        assert checkpoint.read_meta(out / "checkpoint")["iterations_done"] == 2
        (disk / "filler").unlink()
        assert train.main(["--resume", str(out), "--no-progress"]) == 0
        assert (out / "metrics.csv").read_bytes() == reference
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# The command, whose disk runs out of files (inodes) just before its FILL_AT-th checkpoint,
# FREE left: orbax starts writing and fails from its threads, as on a full disk, while the
# log file, already open, can still grow (blocks are left).
FILL_BEFORE_SAVE = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path.insert(0, os.environ["ROOT"])
    from rlax_trpo.experiment import chunks

    disk, free, save = Path(os.environ["DISK"]), int(os.environ["FREE"]), chunks._save
    calls = [0]

    def fill_then_save(setup, *args):
        calls[0] += 1
        if calls[0] == int(os.environ["FILL_AT"]):
            (disk / "filler").mkdir()
            n = 0
            try:
                while True:
                    (disk / "filler" / str(n)).touch()
                    n += 1
            except OSError:
                for i in range(1, free + 1):
                    (disk / "filler" / str(n - i)).unlink()
        save(setup, *args)

    chunks._save = fill_then_save
    import train
    sys.exit(train.main())  # as the command: its own process
""")


@pytest.mark.parametrize("which", ["the only one", "a later one"])
def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_results(which, unchunked, tmp_path):
    """The command on a disk that is full when a checkpoint is written: stderr is the one
    line (orbax's and absl's messages, tracebacks from their threads, asyncio's futures are
    in <run>/run.log), exit 3. Unchunked (the only checkpoint, the final one), metrics.csv
    and summary.json are in the run folder; chunked, the earlier checkpoint is kept."""
    disk = tmp_path / "disk"
    if shutil.which("mount") is None or not _mount_tmpfs(disk, "16m,nr_inodes=400"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        out, chunked = disk / "run", which == "a later one"
        env = {**os.environ, "ROOT": str(ROOT), **conftest.SAME_BACKEND, "DISK": str(disk)}
        env.update(FREE="3", FILL_AT="2" if chunked else "1")
        argv = [*(TINY if chunked else TINY[:-2]), "--out", str(out)]
        proc = subprocess.run([sys.executable, "-c", FILL_BEFORE_SAVE, *argv], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 3, proc.stderr[-3000:]
        lines = proc.stderr.splitlines()
        step = "iter_000004" if chunked else "iter_000008"
        assert len(lines) == 1 and lines[0].startswith(f"error: could not write checkpoint {step}")
        assert [x.split(" ... ")[0] for x in proc.stdout.splitlines()] == [
            "compiling ppo on CartPole-v1 for 2 member(s)"
        ], proc.stdout
        log = (out / "run.log").read_text()
        assert "No space left on device" in log and "absl" in log, log[-2000:]
        if chunked:
            assert lines[0].endswith("the checkpoint iter_000002 is kept"), lines
            assert checkpoint.read_step(out / "checkpoint" / "iter_000002").iterations_done == 2
            return
        assert f"summary.json are in {str(out)!r}" in lines[0], lines
        assert (out / "metrics.csv").read_bytes() == (unchunked / "metrics.csv").read_bytes()
        assert json.loads((out / "summary.json").read_text())["iterations_done"] == 8
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _capture_main(argv: list[str]) -> tuple[int, list[str]]:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        code = train.main(argv)
    lines = [x for x in buffer.getvalue().splitlines() if x.strip()]
    return code, [x for x in lines if not x.startswith("compiling")]


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(reference, tmp_path):
    out = tmp_path / "run"
    assert train.main([*TINY, "--keep-checkpoints", "3", "--out", str(out)]) == 0
    ckpt = out / "checkpoint"
    assert sorted(p.name for p in ckpt.glob("iter_*")) == [
        "iter_000004",
        "iter_000006",
        "iter_000008",
    ]
    (out / "summary.json").unlink()  # as if it died in its final phase ...
    victim = max((ckpt / "iter_000008" / "state").rglob("*"), key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[::-1])  # ... with its newest checkpoint damaged
    (ckpt / "iter_000008" / "stray.txt").write_text("not the checkpoint's")
    code, err = _capture_main(["--resume", str(out), "--no-progress"])
    assert code == 0, err
    assert any("iter_000008" in x and "resuming from iter_000006" in x for x in err), err
    assert (out / "metrics.csv").read_bytes() == reference
    assert json.loads((out / "summary.json").read_text())["iterations_done"] == 8


def test_a_stray_file_in_a_step_is_not_damage(reference, tmp_path):
    out = tmp_path / "run"
    assert train.main([*TINY, "--out", str(out)]) == 0
    (out / "summary.json").unlink()
    (out / "checkpoint" / "iter_000008" / "notes.txt").write_text("mine")
    code, err = _capture_main(["--resume", str(out), "--no-progress"])
    assert code == 0 and not any("warning" in x for x in err), err
    assert (out / "metrics.csv").read_bytes() == reference


def _metrics(run: Path) -> list[dict[str, str]]:
    import csv

    with (run / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_one_diverging_setting_leaves_the_others_unchanged(tmp_path, capsys):
    """A sweep in which learning rate 1e38 diverges: its members freeze at their last finite
    parameters, the healthy setting runs to the end exactly as it does alone, and the
    message names the setting, seed and member."""
    base = [*TINY[:-2], "--chunk-iterations", "2"]
    mixed, alone = tmp_path / "mixed", tmp_path / "alone"
    sweep = ["--sweep", "hp.learning_rate=3e-4,1e38"]
    assert train.main([*base, *sweep, "--out", str(mixed)]) == 1
    err = capsys.readouterr().err
    summary = json.loads((mixed / "summary.json").read_text())
    d = summary["diverged"]
    assert d["count"] == 2 and {m["member"] for m in d["members"]} == {2, 3}, d
    assert d["setting"] == {"hp.learning_rate": 1e38}
    assert summary["iterations_done"] == 8  # the healthy members were not stopped
    assert summary["best"]["hp"] == {"hp.learning_rate": 3e-4}
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: run diverged in 2 of 4 member(s): setting learning_rate=1e+38")
    assert f"seed {d['seed']} became non-finite at iteration {d['iteration']}" in line
    assert "the other 2 member(s) ran to the end" in line

    assert train.main([*base, "hp.learning_rate=3e-4", "--out", str(alone)]) == 0
    healthy = [r for r in _metrics(mixed) if float(r["hp.learning_rate"]) == 3e-4]
    reference = _metrics(alone)
    assert len(healthy) == len(reference) == 16
    for a, b in zip(healthy, reference, strict=True):
        for name in b:
            assert float(a[name]) == pytest.approx(float(b[name]), rel=1e-5, abs=1e-6), name

    # The diverged members' saved parameters: those before their first non-finite update.
    import jax
    import numpy as np

    from rlax_trpo import make_trainer
    from rlax_trpo.config import sweep as sweeplib

    config = checkpoint.load_config(mixed / "checkpoint")
    trainer = make_trainer(config)
    s = sweeplib.Sweep(("hp.learning_rate",), ((3e-4, 1e38),))
    hps = sweeplib.population_hparams(config.hp, s, 2, tuple(config.hp.names()))
    keys = jax.random.wrap_key_data(sweeplib.population_key_data(0, 2, 2))
    before = jax.jit(jax.vmap(trainer.init))(keys, hps)
    saved = checkpoint.restore(mixed / "checkpoint", before).params
    run = jax.jit(jax.vmap(trainer.run, in_axes=(0, 0, None)), static_argnums=2)
    for m in d["members"]:
        truncated = run(before, hps, m["iteration"])[0].params if m["iteration"] else before.params
        for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(truncated), strict=True):
            assert np.isfinite(a[m["member"]]).all()
            # Updates of learning rate 1e38 take the values to 1e37 and amplify the two
            # programs' differences in rounding to parts in 1e5 of that scale; the parameters
            # of another iteration would differ by the scale itself.
            scale = float(np.abs(b[m["member"]]).max())
            np.testing.assert_allclose(
                a[m["member"]], b[m["member"]], rtol=1e-3, atol=1e-3 * scale + 1e-7
            )


@pytest.mark.parametrize("at_call", [1, 2])
def test_a_second_ctrl_c_is_one_line_saying_what_was_kept(
    at_call, reference, tmp_path, monkeypatch
):
    """KeyboardInterrupt (the second Ctrl-C) in the middle of chunk `at_call`: exit 130 and
    one line; the folder is kept and resumes to the same result (from its checkpoint, or
    from the start with its plan)."""
    out, calls, original = tmp_path / "run", [0], chunks._chunk_metrics

    def interrupted(*args, **kwargs):
        calls[0] += 1
        if calls[0] == at_call:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(chunks, "_chunk_metrics", interrupted)
    code, err = _capture_main([*TINY, "--out", str(out)])
    monkeypatch.undo()
    assert code == 130 and len(err) == 1, err
    if at_call == 1:  # its plan is kept: --resume starts it over
        assert err[0] == (f"error: interrupted; the run folder {str(out)!r} has no checkpoint "
                          "yet (--resume starts the run over)"), err  # fmt: skip
    else:
        assert err[0].startswith(f"error: interrupted; the run folder {str(out)!r} keeps its last")
    assert train.main(["--resume", str(out), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_bytes() == reference


def test_a_diverged_member_applies_no_later_update(tmp_path):
    """Probe-nan_at_40 pays a NaN reward at an episode's 40th step only: the iterations after
    the first non-finite one have finite updates again, and none of them may be applied."""
    import jax
    import numpy as np

    from rlax_trpo import make_trainer

    out = tmp_path / "run"
    argv = ["--out", str(out), "--no-progress", "env=Probe-nan_at_40", "num_envs=2"]
    argv += ["num_steps=16", "hidden_sizes=[8]", "total_env_steps=576", "eval_episodes=1"]
    assert train.main([*argv, "num_minibatches=1", "num_epochs=4"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    at = summary["diverged"]["iteration"]
    assert summary["iterations_done"] == 18 and at < 17  # unchunked: ran to the end
    config = checkpoint.load_config(out / "checkpoint")
    trainer = make_trainer(config)
    hps = jax.tree.map(lambda x: x[None], config.hp)
    before = jax.jit(jax.vmap(trainer.init))(jax.random.split(jax.random.key(0), 1), hps)
    kept = checkpoint.restore(out / "checkpoint", before).params
    run = jax.jit(jax.vmap(trainer.run, in_axes=(0, 0, None)), static_argnums=2)
    last_finite = run(before, hps, at)[0].params if at else before.params
    for a, b in zip(jax.tree.leaves(kept), jax.tree.leaves(last_finite), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_read_only_target_fails_at_once_with_one_line(tmp_path, capsys):
    """A read-only mount as `--out`: refused before anything is compiled or trained."""
    disk = tmp_path / "ro"
    if shutil.which("mount") is None or not _mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        t0 = time.time()
        assert train.main([*TINY, "--out", str(disk)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: --out: cannot write in {str(disk)!r}: Read-only file system"], err
        assert time.time() - t0 < 30 and not any(disk.iterdir())
    finally:
        subprocess.run(["umount", str(disk)], check=False)
