"""Orbax checkpoints of a (population-batched) TrainState, with config, metrics and run facts.

Layout of a checkpoint folder (a run folder's `checkpoint/`):

    checkpoint/
      plan.json              the run's facts (config, seeds, seed, sweep, chunking), written
                             before the first step: a run that dies before it starts over
      config.yaml            the resolved config (also readable by `load_config`)
      LATEST                 name of the newest complete step folder, e.g. `iter_000010`
      iter_000008/           the previous step (the newest `keep` steps are kept, default 2)
      iter_000010/
        state/               orbax StandardCheckpointer: the TrainState (keys as key data)
        metrics.npz          every metric so far, `[population, iterations_done]`
        meta.json            the run's facts and the step's: iterations done, timings
        MANIFEST.json        sha256 of every file above (corruption check on restore)

A step folder is written under a temporary name and renamed when complete; `LATEST` is then
replaced atomically (`os.replace`) and steps older than the newest `keep` are removed. A
crash at any point leaves the previous checkpoints intact, and restore never writes. Restore
takes the step LATEST names when it verifies, else the newest step that does (and says so):
a step folder only exists under its final name once complete, so every verified one is whole.
plan.json and meta.json, with their format version, are `rlax_trpo.experiment.record`'s
(`RunRecord`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from rlax_trpo.config.configuration import Config, config_from_dict
from rlax_trpo.experiment import state_paths
from rlax_trpo.experiment.record import (  # noqa: F401  (the run record's names are this module's too)
    FORMAT_VERSION,
    META,
    PLAN,
    CheckpointError,
    RunRecord,
    atomic_write,
    has_plan,
    has_step,
    read_config_file,
    read_plan,
    read_step,
    save_plan,
    saved_steps,
    write_step_facts,
)


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (disk full, permissions): one line naming the
    folder, the cause and the newest checkpoint that is kept. Nothing half-written stays."""


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_savable(tree: Any) -> Any:
    """Typed PRNG keys cannot be serialised: store their raw key data instead. Nor can
    empty arrays (MJX physics states hold some): store one zero element in their place."""

    def savable(x):
        if _is_key(x):
            return jax.random.key_data(x)
        return jnp.zeros((1,), x.dtype) if x.size == 0 else x

    return jax.tree.map(savable, tree)


def _wrap_keys(target: Any, restored: Any) -> Any:
    def back(t, r):
        if _is_key(t):
            return jax.random.wrap_key_data(r)
        return np.zeros(t.shape, t.dtype) if t.size == 0 else r

    return jax.tree.map(back, target, restored)


# ---------------------------------------------------------------- step checkpoints


def save_step(
    ckpt_dir: str | Path,
    state: Any,
    metrics: Mapping[str, np.ndarray],
    record: RunRecord,
    keep: int = 2,
) -> Path:
    """Write one complete checkpoint step atomically and point `LATEST` at it; keep the
    newest `keep` steps.

    The step folder is named after `record.iterations_done`; config.yaml is `record.config`.
    In a multi-process run every process calls this (orbax writes each process's shards);
    process 0 alone writes the other files and renames the folder, between barriers. A failed
    write (disk full, permissions) removes its temporary folder and raises
    `CheckpointWriteError`.
    """
    from rlax_trpo.experiment.parallel import barrier, run_token

    primary = jax.process_index() == 0
    ckpt_dir = Path(ckpt_dir).absolute()
    name = f"iter_{record.iterations_done:06d}"
    tmp = ckpt_dir / f".{name}.tmp-{run_token()}"
    try:
        if primary:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            remove_leftovers(ckpt_dir)
            tmp.mkdir()
        barrier("checkpoint-start")
        _write_state(tmp / "state", state)
        if primary:
            _finish_step(ckpt_dir, tmp, name, metrics, record, keep)
    except Exception as err:
        if primary:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(_write_failure(ckpt_dir, name, err)) from None
    barrier("checkpoint-done")
    return ckpt_dir / name


def _write_state(path: Path, state: Any) -> None:
    import orbax.checkpoint as ocp

    checkpointer = ocp.StandardCheckpointer()
    try:
        checkpointer.save(path, to_savable(state))
        checkpointer.wait_until_finished()
    finally:
        checkpointer.close()


def _finish_step(ckpt_dir, tmp, name, metrics, record: RunRecord, keep: int) -> None:
    """The step's other files, the rename, LATEST, and the steps beyond `keep` removed."""
    np.savez(tmp / "metrics.npz", **{k: np.asarray(v) for k, v in metrics.items()})
    write_step_facts(tmp, record)
    (tmp / "MANIFEST.json").write_text(json.dumps(_manifest(tmp), indent=1) + "\n")
    atomic_write(ckpt_dir / "config.yaml", yaml.safe_dump(record.config, sort_keys=False))
    final = ckpt_dir / name
    if final.exists():  # same step written again (e.g. a resumed run re-saving): replace
        shutil.rmtree(final)
    tmp.rename(final)
    atomic_write(ckpt_dir / "LATEST", name + "\n")
    for old in saved_steps(ckpt_dir)[max(keep, 1) :]:
        shutil.rmtree(old, ignore_errors=True)


def _write_failure(ckpt_dir: Path, name: str, err: BaseException) -> str:
    """One line: where, why (the first line of the cause, e.g. `[Errno 28] No space left on
    device`), and which checkpoint is kept."""
    cause = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
    if "RESOURCE_EXHAUSTED" in cause or "No space left" in str(err):
        cause = "no space left on the device"
    kept = saved_steps(ckpt_dir)
    still = f"the checkpoint {kept[0].name} is kept" if kept else "no earlier checkpoint exists"
    return f"could not write checkpoint {name} in {str(ckpt_dir)!r}: {cause[:200]}; {still}"


def remove_leftovers(ckpt_dir: Path, keep: int | None = None) -> None:
    """Temporary files and step folders of writes that never finished (`.NAME.tmp-PID`);
    with `keep`, steps beyond it (`prune_steps`: a kill before the pruning left one more)."""
    for left in Path(ckpt_dir).glob(".*.tmp-*"):
        if left.is_dir():
            shutil.rmtree(left, ignore_errors=True)
        else:
            left.unlink(missing_ok=True)
    if keep is not None:
        prune_steps(ckpt_dir, keep)


def prune_steps(ckpt_dir: str | Path, keep: int) -> None:
    """Remove the steps older than the newest `keep` that verify (a damaged one is not
    counted), but never the one LATEST names: what a resume restores stays."""
    steps, verified, latest = saved_steps(ckpt_dir), 0, Path(ckpt_dir) / "LATEST"
    named = latest.read_text(errors="replace").strip() if latest.is_file() else None
    for i, step in enumerate(steps):
        verified += _verify(step) is None
        if verified >= max(keep, 1):
            for old in steps[i + 1 :]:
                if old.name != named:
                    shutil.rmtree(old, ignore_errors=True)
            return


def _manifest(folder: Path) -> dict[str, str]:
    out = {}
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.name != "MANIFEST.json":
            out[str(f.relative_to(folder))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def _verify(step: Path) -> str | None:
    """None when every file the manifest names has its recorded checksum, else the problem
    (files the manifest does not name are not the checkpoint's and are ignored)."""
    try:
        expected = json.loads((step / "MANIFEST.json").read_text())
    except (OSError, ValueError):
        return f"checkpoint {str(step)!r} is corrupt: unreadable MANIFEST.json"
    for rel, digest in sorted(expected.items()):
        file = step / rel
        try:
            actual = hashlib.sha256(file.read_bytes()).hexdigest()
        except OSError:
            return f"checkpoint {str(step)!r} is corrupt: {rel} is missing"
        if actual != digest:
            return f"checkpoint {str(step)!r} is corrupt: {rel} does not match its checksum"
    return None


def find_step(ckpt_dir: str | Path) -> tuple[Path, str | None]:
    """(the step to restore, why it is not the one LATEST names, or None). The step LATEST
    names if it verifies, else the newest step that does. `CheckpointError` when none does."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise CheckpointError(f"no checkpoint folder at {str(ckpt_dir)!r}")
    pointer = ckpt_dir / "LATEST"
    problem = None
    if not pointer.is_file():
        problem = (
            f"checkpoint {str(ckpt_dir)!r} has no LATEST file (not a checkpoint, or its first "
            "write never finished)"
        )
    else:
        try:
            named = pointer.read_text().strip()
        except (OSError, UnicodeDecodeError):
            named = None
        step = ckpt_dir / named if named else None
        if not named:
            problem = f"checkpoint {str(ckpt_dir)!r} is corrupt: LATEST is empty or unreadable"
        elif not named.startswith("iter_") or "/" in named or not step.is_dir():
            problem = (
                f"checkpoint {str(ckpt_dir)!r} is corrupt: LATEST names {named[:40]!r}, "
                "which does not exist"
            )
        else:
            problem = _verify(step)
            if problem is None:
                return step, None
    for step in saved_steps(ckpt_dir):
        if _verify(step) is None:
            return step, problem
    raise CheckpointError(problem)


def latest_step(ckpt_dir: str | Path) -> Path:
    """The newest complete, verified step folder (see `find_step`)."""
    return find_step(ckpt_dir)[0]


def read_record(ckpt_dir: str | Path) -> RunRecord:
    """The run's facts in its latest step (verified)."""
    return read_step(latest_step(ckpt_dir))


def read_meta(ckpt_dir: str | Path) -> dict[str, Any]:
    """`read_record` as plain values, as meta.json holds them."""
    return read_record(ckpt_dir).to_dict()


def restore_step(
    ckpt_dir: str | Path, target: Any, step: Path | None = None
) -> tuple[Any, dict[str, np.ndarray], RunRecord]:
    """(state, metrics, record) of the latest step, or of `step` (as `find_step` chose it);
    `target` gives the state's structure.

    `target` may be concrete or abstract (`jax.eval_shape`); restored leaves are host-side
    numpy arrays (typed keys wrapped back), to be placed on devices by the caller.
    Raises `CheckpointError` when the saved state does not fit `target`.
    """
    import orbax.checkpoint as ocp

    step = (step or latest_step(ckpt_dir)).absolute()
    record = read_step(step)
    shapes = jax.eval_shape(to_savable, target)
    abstract = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), shapes)
    try:
        with ocp.StandardCheckpointer() as ckptr:
            saved = ckptr.metadata(step / "state")
            saved_tree = getattr(saved, "item_metadata", saved)
            state_paths.check_structure(saved_tree, abstract, step)
            restored = ckptr.restore(step / "state", state_paths.as_saved(saved_tree, abstract))
            restored = state_paths.as_target(restored, abstract)
    except CheckpointError:
        raise
    except Exception as err:  # orbax raises many types; report one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"checkpoint {str(step)!r} cannot be restored into this run's state: {first[:200]}"
        ) from None
    restored = jax.tree.map(np.asarray, restored)
    with np.load(step / "metrics.npz") as data:
        metrics = {k: data[k] for k in data.files}
    return _wrap_keys(target, restored), metrics, record


# ---------------------------------------------------------------- simple API


def restore(path: str | Path, target: Any) -> Any:
    """Restore the latest state saved at `path` into the structure of `target`."""
    return restore_step(path, target)[0]


def load_config(path: str | Path) -> Config:
    """The config saved beside a checkpoint (`path` is the checkpoint folder). A run whose
    copy is lost has others: `rlax_trpo.experiment.resume.saved_config` reads any of them."""
    return config_from_dict(read_config_file(Path(path) / "config.yaml"))
