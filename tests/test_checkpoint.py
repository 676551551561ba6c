"""The run record (`rlax_trpo.experiment.record`, also `rlax_trpo.experiment.checkpoint`'s):
a run's facts in plan.json and each step's meta.json, their format version, and folders of
version 1 (written before versions existed) still resumed. And recovery: a run resumes from
any surviving copy of its config, eval says what it could not use, old steps are pruned.

tests/data/format_v1/ holds two run folders written by the release before format versions
(commit 980b8e0), PPO on CartPole-v1 with `hidden_sizes=[8]`, 2 seeds, 3 iterations, a
checkpoint after each:

    python train.py --config ppo_cartpole --out DIR --no-progress --seeds 2 --devices 1 \\
        --chunk-iterations 1 total_env_steps=768 hidden_sizes=[8] eval_episodes=2

`stopped_after_iteration_1`: stopped by SIGTERM after its first checkpoint (the
`StopRequest` of tests/test_resume.py). `died_before_first_checkpoint`: SIGKILLed while
compiling (its plan.json and config.yaml; the stale `.lock` removed).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

import train
from rlax_trpo import load_policy
from rlax_trpo.config import load_config
from rlax_trpo.config.sweep import Sweep
from rlax_trpo.experiment import checkpoint
from rlax_trpo.experiment import record as run_record
from rlax_trpo.experiment.checkpoint import CheckpointError, RunRecord
from rlax_trpo.experiment.saved import SavedRun

V1 = Path(__file__).parent / "data" / "format_v1"
STOPPED, DIED = "stopped_after_iteration_1", "died_before_first_checkpoint"

RECORD = RunRecord(
    config={"algorithm": "ppo", "hp": {"gamma": 0.99}}, seeds=3, seed=7,
    sweep=Sweep(("hp.learning_rate",), ((1e-3, 1e-4),)), num_iterations=10, chunk_iterations=2,
    population=6, num_devices=2, iterations_done=4, wall_seconds=1.5, compile_seconds=9.0,
)  # fmt: skip


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(V1 / name, tmp_path / name))


def _rewrite(file: Path, change) -> None:
    """`file`'s JSON changed by `change(data)`; in a step folder, its manifest entry too (the
    checksum that `checkpoint.find_step` verifies)."""
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data, indent=2) + "\n")
    manifest = file.parent / "MANIFEST.json"
    if manifest.is_file():
        entries = json.loads(manifest.read_text())
        entries[file.name] = hashlib.sha256(file.read_bytes()).hexdigest()
        manifest.write_text(json.dumps(entries, indent=1) + "\n")


def _write_step(ckpt: Path, data: dict) -> Path:
    step = ckpt / "iter_000002"
    step.mkdir(parents=True)
    (step / "meta.json").write_text(json.dumps(data))
    return step


def test_a_record_round_trips_through_its_files(tmp_path):
    checkpoint.save_plan(tmp_path, RECORD)
    no_step = {"num_devices": None, "iterations_done": 0, "wall_seconds": 0.0,
               "compile_seconds": 0.0}  # fmt: skip
    assert checkpoint.read_plan(tmp_path) == dataclasses.replace(RECORD, **no_step)
    assert checkpoint.has_plan(tmp_path) and not checkpoint.has_step(tmp_path)
    step = tmp_path / "iter_000004"
    step.mkdir()
    run_record.write_step_facts(step, RECORD)
    assert checkpoint.read_step(step) == RECORD and checkpoint.has_step(tmp_path)
    meta = json.loads((step / "meta.json").read_text())
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert list(meta) == ["format_version", *run_record.STEP_KEYS]
    assert list(plan) == ["format_version", *run_record.PLAN_KEYS]
    assert meta["format_version"] == plan["format_version"] == checkpoint.FORMAT_VERSION == 2
    assert meta["sweep"] == {"hp.learning_rate": [1e-3, 1e-4]} and meta["iterations_done"] == 4


def test_version_1_is_read_as_it_was_before_versions(tmp_path):
    """No `format_version`: only num_iterations (and a step's iterations_done) are needed;
    `seeds` falls back to `population` (folders older than `seeds` had only that), then 1."""
    old = {"num_iterations": 5, "iterations_done": 2, "population": 4}
    record = checkpoint.read_step(_write_step(tmp_path / "a", old))
    assert (record.seeds, record.population, record.seed) == (4, 4, 0)
    assert (record.sweep, record.config, record.chunk_iterations) == (Sweep((), ()), None, None)
    assert (record.wall_seconds, record.compile_seconds, record.num_devices) == (0.0, 0.0, None)
    oldest = {"num_iterations": 5, "iterations_done": 2}
    oldest = checkpoint.read_step(_write_step(tmp_path / "b", oldest))
    assert (oldest.seeds, oldest.population) == (1, 1)
    # the committed folders of the release before versions
    record = checkpoint.read_record(V1 / STOPPED / "checkpoint")
    assert (record.seeds, record.seed, record.population, record.num_iterations) == (2, 0, 2, 3)
    assert (record.chunk_iterations, record.iterations_done, record.num_devices) == (1, 1, 1)
    assert record.config["hidden_sizes"] == [8] and record.compile_seconds > 0
    plan = checkpoint.read_plan(V1 / DIED / "checkpoint")
    assert plan == dataclasses.replace(record, num_devices=None, iterations_done=0,
                                       wall_seconds=0.0, compile_seconds=0.0)  # fmt: skip
    assert not checkpoint.has_step(V1 / DIED / "checkpoint")


@pytest.mark.parametrize("version", [3, 0, "2", None])
@pytest.mark.parametrize("which", ["plan.json", "meta.json"])
def test_a_version_this_release_does_not_read_is_one_line(tmp_path, which, version):
    if which == "plan.json":
        checkpoint.save_plan(tmp_path, RECORD)
        file, read = tmp_path / "plan.json", checkpoint.read_plan
    else:
        step = _write_step(tmp_path, RECORD.to_dict())
        file, read = step / "meta.json", lambda _: checkpoint.read_step(step)
    _rewrite(file, lambda data: data.update(format_version=version))
    with pytest.raises(CheckpointError) as info:
        read(tmp_path)
    message = str(info.value)
    assert "\n" not in message and repr(str(file)) in message, message
    reads = "this release of rlax_trpo reads versions 1 and 2"
    assert f"has format version {version!r}; {reads}" in message, message


def test_a_newer_folder_is_refused_by_resume_and_eval_in_one_line(tmp_path, capsys):
    died, stopped = _copy(DIED, tmp_path), _copy(STOPPED, tmp_path)
    _rewrite(died / "checkpoint" / "plan.json", lambda data: data.update(format_version=3))
    meta = stopped / "checkpoint" / "iter_000001" / "meta.json"
    _rewrite(meta, lambda data: data.update(format_version=3))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for argv, file in [(["--resume", str(died)], died / "checkpoint" / "plan.json"),
                       (["--resume", str(stopped)], meta),
                       (["eval", "--run", str(stopped)], meta)]:  # fmt: skip
        assert train.main([*argv, "--no-progress"] if argv[0] == "--resume" else argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err
        assert f"{str(file)!r} has format version 3; this release" in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    "version, change, expected",
    [
        (2, lambda d: d.pop("seeds"), "has no 'seeds' (format version 2)"),
        (2, lambda d: d.pop("compile_seconds"), "has no 'compile_seconds' (format version 2)"),
        (1, lambda d: d.pop("num_iterations"), "has no 'num_iterations' (format version 1)"),
        (1, lambda d: d.pop("iterations_done"), "has no 'iterations_done' (format version 1)"),
        (2, lambda d: d.update(seeds="two"), "seeds is 'two', not a number"),
        (2, lambda d: d.update(iterations_done=True), "iterations_done is True, not a number"),
        (2, lambda d: d.update(sweep=[1, 2]), "its config or sweep is not a mapping"),
        (2, lambda d: d.update(sweep={"hp.x": "ab"}), "its sweep is not lists of numbers"),
    ],
)
def test_a_record_without_what_its_version_needs_is_one_line(tmp_path, version, change, expected):
    data = RECORD.to_dict()
    if version == 1:
        del data["format_version"]
    change(data)
    step = _write_step(tmp_path, data)
    with pytest.raises(CheckpointError) as info:
        checkpoint.read_step(step)
    message = str(info.value)
    assert "\n" not in message and expected in message, message
    assert message.startswith(f"checkpoint facts {str(step / 'meta.json')!r}"), message


def test_a_version_1_run_without_seeds_loads_with_its_population(tmp_path):
    """As `load_policy` read such folders before versions: seeds from `population`."""
    run = _copy(STOPPED, tmp_path)
    _rewrite(run / "checkpoint" / "iter_000001" / "meta.json", lambda data: data.pop("seeds"))
    saved = SavedRun(run)
    assert (saved.seeds, saved.population, saved.record.iterations_done) == (2, 2, 1)
    assert load_policy(run, member=1).setting == {}


def _metrics(run: Path) -> tuple[list[str], np.ndarray]:
    with (run / "metrics.csv").open() as f:
        rows = list(csv.reader(f))
    return rows[0], np.array(rows[1:], dtype=float)


def test_version_1_folders_still_resume_to_the_end(tmp_path, capsys):
    """Both folders of the release before versions finish under --resume: the stopped one
    from its checkpoint (its first iteration's metrics and timings carried over), the other
    from its plan; they agree (to rounding: the checkpoint's state came from other
    programs), and their new checkpoints are of the current version."""
    stopped, died = _copy(STOPPED, tmp_path), _copy(DIED, tmp_path)
    assert train.main(["--resume", str(stopped), "--no-progress"]) == 0
    assert train.main(["--resume", str(died), "--no-progress"]) == 0
    assert "no checkpoint was saved before the run stopped; it starts over" in (
        capsys.readouterr().err
    )
    old = checkpoint.read_record(V1 / STOPPED / "checkpoint")
    # The old config as this version reads it: fields added since take their defaults.
    old = dataclasses.replace(old, config=load_config(None, base=old.config).to_dict())
    for run in (stopped, died):
        summary = json.loads((run / "summary.json").read_text())
        assert (summary["iterations_done"], summary["num_iterations"]) == (3, 3)
        assert (summary["num_seeds"], summary["population"]) == (2, 2)
        record = checkpoint.read_record(run / "checkpoint")
        meta = json.loads((checkpoint.latest_step(run / "checkpoint") / "meta.json").read_text())
        assert meta["format_version"] == checkpoint.FORMAT_VERSION
        untimed = {"wall_seconds": 0.0, "compile_seconds": 0.0}
        as_old = {"num_devices": old.num_devices, "iterations_done": 1, **untimed}
        assert dataclasses.replace(record, **as_old) == dataclasses.replace(old, **untimed)
    record = checkpoint.read_record(stopped / "checkpoint")
    assert record.wall_seconds > old.wall_seconds and record.compile_seconds > old.compile_seconds
    names, values = _metrics(stopped)
    with np.load(V1 / STOPPED / "checkpoint" / "iter_000001" / "metrics.npz") as saved:
        for seed in range(2):
            (row,) = values[(values[:, 0] == seed) & (values[:, 1] == 0)]
            for name in saved.files:  # metrics.csv holds 6 significant digits
                assert row[names.index(name)] == pytest.approx(saved[name][seed, 0], rel=1e-5)
    names_died, values_died = _metrics(died)
    assert names_died == names
    np.testing.assert_allclose(values, values_died, rtol=1e-3, atol=1e-6)


# ------------------------------------------------ recovery: any copy of the config, messages


def _plan_resume(run: Path):
    """What `--resume RUN` alone continues with (read only: nothing written)."""
    from rlax_trpo.experiment.resume import plan_resume

    return plan_resume(run, None, None, None, None)


def _drop_config(file: Path) -> None:
    """`file` (a plan.json or meta.json) without its config, as version 1 allowed."""
    _rewrite(file, lambda data: data.pop("config"))


STEP = "checkpoint/iter_000001/meta.json"
COPIES = {  # what is lost -> the copy read instead (the usual one: the first path)
    "checkpoint config.yaml": (STOPPED, ["checkpoint/config.yaml"], STEP),
    "checkpoint config.yaml not YAML": (STOPPED, ["checkpoint/config.yaml:garbled"], STEP),
    "and the step's": (STOPPED, ["checkpoint/config.yaml", f"{STEP}:config"], "config.yaml"),
    "all but the plan": (
        STOPPED,
        ["checkpoint/config.yaml", f"{STEP}:config", "config.yaml"],
        "checkpoint/plan.json",
    ),
    "before the first step": (DIED, ["config.yaml"], "checkpoint/plan.json"),
    "before the first step, not a mapping": (DIED, ["config.yaml:list"], "checkpoint/plan.json"),
}


def _lose(run: Path, lost: list[str]) -> None:
    for entry in lost:
        name, _, how = entry.partition(":")
        file = run / name
        if how == "config":
            _drop_config(file)
        elif how == "garbled":
            file.write_text("algorithm: [ppo\n")
        elif how == "list":
            file.write_text("- 1\n- 2\n")
        else:
            file.unlink()


@pytest.mark.parametrize("case", sorted(COPIES))
def test_a_run_resumes_from_any_surviving_copy_of_its_config_and_says_which(tmp_path, case):
    """checkpoint/config.yaml (or before a step, the run folder's) is the usual copy; each
    step's meta.json, the run folder's config.yaml and plan.json hold it too."""
    name, lost, used = COPIES[case]
    run = _copy(name, tmp_path)
    expected = checkpoint.load_config(V1 / STOPPED / "checkpoint")
    _lose(run, lost)
    plan = _plan_resume(run)
    assert plan.config == expected
    usual = lost[0].partition(":")[0]
    lines = plan.note.splitlines()
    assert f"note: {str(run / usual)!r} " in lines[-1], plan.note
    assert lines[-1].endswith(f"the run's config is read from {str(run / used)!r}"), plan.note
    if name == STOPPED:  # eval reads it the same way, and says so
        assert SavedRun(run).notes == [lines[-1]]


def test_a_run_with_no_copy_of_its_config_left_is_one_line(tmp_path):
    run = _copy(DIED, tmp_path)
    _lose(run, ["config.yaml", "checkpoint/plan.json:config"])
    with pytest.raises(CheckpointError) as info:
        _plan_resume(run)
    message = str(info.value)
    assert "\n" not in message and message.startswith(
        f"no copy of the run's config survives in {str(run)!r}: "
        f"{str(run / 'config.yaml')!r} is missing"
    ), message


def test_the_usual_copies_are_read_without_a_note(tmp_path):
    for name in (STOPPED, DIED):
        assert _plan_resume(_copy(name, tmp_path)).note in (
            None,
            f"{tmp_path / DIED}: no checkpoint was saved before the run stopped; it starts over",
        )


def test_a_config_field_added_later_with_a_default_does_not_make_a_folder_differ(tmp_path):
    """A folder written before `Config` had `reset_ratio` (default 1) holds no such key in
    any copy of its config; compared validated, its copies and a resume's agree."""
    for name in (STOPPED, DIED):
        run = _copy(name, tmp_path)
        for file in (run / "config.yaml", run / "checkpoint" / "config.yaml"):
            if file.exists():
                raw = yaml.safe_load(file.read_text())
                del raw["reset_ratio"]
                file.write_text(yaml.safe_dump(raw, sort_keys=False))
        for file in (run / "checkpoint" / "plan.json", run / STEP):
            if file.exists():
                _rewrite(file, lambda data: data["config"].pop("reset_ratio"))
        plan = _plan_resume(run)
        assert plan.config == checkpoint.load_config(V1 / STOPPED / "checkpoint")
        assert plan.config.reset_ratio == 1 and (name == DIED) == (plan.note is not None)


@pytest.mark.parametrize("what", ["plan", "no plan", "being written"])
def test_eval_of_a_run_without_a_checkpoint_says_so_and_whether_it_resumes(tmp_path, capsys, what):
    from rlax_trpo.experiment.lock import RunLock

    run = _copy(DIED, tmp_path)
    if what == "no plan":
        (run / "checkpoint" / "plan.json").unlink()
    lock = RunLock.acquire(run) if what == "being written" else None
    try:
        assert train.main(["eval", "--run", str(run)]) == 2
    finally:
        if lock is not None:
            lock.release()
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --run: the run in {str(run)!r} has no checkpoint ") and (
        "\n" not in err
    ), err
    expected = {
        "plan": f"yet: it stopped before its first; `--resume {run}` starts it over",
        "no plan": "and cannot be resumed (no checkpoint/plan.json): train it again",
        "being written": f"yet: it is being written (pid {os.getpid()} on ",
    }[what]
    assert expected in err, err
    assert "config.yaml" not in err.replace("checkpoint/plan.json", "")


def _older_step(run: Path) -> Path:
    """A second, older step (a copy of the first, under iter_000000): the one to fall back
    to when the newest is damaged."""
    ckpt = run / "checkpoint"
    return Path(shutil.copytree(ckpt / "iter_000001", ckpt / "iter_000000"))


def test_eval_says_which_step_it_used_and_why(tmp_path, capsys):
    run = _copy(STOPPED, tmp_path)
    _older_step(run)
    with (run / "checkpoint" / "iter_000001" / "metrics.npz").open("ab") as f:
        f.write(b"damage")
    argv = ["eval", "--run", str(run), "--episodes", "1", "--max-steps", "5"]
    assert train.main(argv) == 0
    out, err = capsys.readouterr()
    newest = str(run / "checkpoint" / "iter_000001")
    assert err.splitlines() == [
        f"warning: checkpoint {newest!r} is corrupt: metrics.npz does not match its checksum; "
        "using iter_000000 (1 of 3 iterations)"
    ], err
    assert "(iteration 1 of 3)" in out
    with pytest.warns(UserWarning, match="using iter_000000"):
        load_policy(run, member=0)


def _resume_folder(run: Path, keep: int = 2):
    """The folder stage of `--resume RUN --keep-checkpoints KEEP` (`make_folder`)."""
    from types import SimpleNamespace as Given

    from rlax_trpo.experiment.folder import make_folder, release_folder

    plan = Given(
        config=Given(algorithm="ppo"), out=run, resume=run, start_over=False, keep_checkpoints=keep
    )
    release_folder(make_folder(plan, Given(run_name="CartPole-v1"), owner=True), keep=True)


def _steps(run: Path, latest: str, damaged: str | None = None) -> None:
    """iter_000000 to iter_000002, each whole (copies of the first), LATEST naming `latest`,
    and `damaged` corrupt."""
    ckpt = run / "checkpoint"
    _older_step(run)
    shutil.copytree(ckpt / "iter_000001", ckpt / "iter_000002")
    (ckpt / "LATEST").write_text(latest + "\n")
    if damaged:
        (ckpt / damaged / "metrics.npz").unlink()


@pytest.mark.parametrize(
    "latest, damaged, keep, kept",
    [
        ("iter_000002", None, 2, ["iter_000001", "iter_000002"]),  # killed before pruning
        ("iter_000002", None, 1, ["iter_000002"]),
        ("iter_000002", "iter_000002", 2, ["iter_000000", "iter_000001", "iter_000002"]),
        ("iter_000001", None, 1, ["iter_000001", "iter_000002"]),  # LATEST's step stays
    ],
)
def test_steps_beyond_keep_are_pruned_when_a_run_resumes(tmp_path, latest, damaged, keep, kept):
    """A kill between a step's rename and the pruning leaves one step too many; the next
    start prunes it, keeping the newest `keep` that verify (a damaged one is not counted)
    and the one LATEST names."""
    run = _copy(STOPPED, tmp_path)
    _steps(run, latest, damaged)
    _resume_folder(run, keep)
    assert [p.name for p in checkpoint.saved_steps(run / "checkpoint")][::-1] == kept


def test_the_loser_of_two_resumes_started_at_once_is_told_about_resume(
    tmp_path, monkeypatch, capsys
):
    """Both pass the check that nobody writes the folder; the second to take its lock loses,
    and its line names the option it was given."""
    from rlax_trpo.experiment import plan as run_plan
    from rlax_trpo.experiment.lock import RunLock

    run = _copy(STOPPED, tmp_path)

    class NobodyYet(RunLock):  # the check before the lock, run before the other took it
        holder = staticmethod(lambda folder: None)

    monkeypatch.setattr(run_plan, "RunLock", NobodyYet)
    first = RunLock.acquire(run, "--resume")
    try:
        assert train.main(["--resume", str(run), "--no-progress"]) == 2
    finally:
        first.release()
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"error: --resume: {str(run)!r} is being written by another run (pid {os.getpid()} on "
    ), err
    assert "\n" not in err and "--out" not in err and "choose another folder" not in err, err
