"""A saved state's arrays by their paths: whether a checkpoint's tree fits a run's state, and
the restore between the two structures (`rlax_trpo.experiment.checkpoint.restore_step`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from rlax_trpo.experiment.record import CheckpointError

# Arrays a state holds today that a checkpoint saved before they existed lacks, each with the
# value it restores as: the fitness a PBT member was last ranked on (`rlax_trpo.pbt.Carry`;
# NaN, not measured yet: the next step ranks the member on its window).
ADDED_SINCE = {"pbt.fitness": float("nan")}


def as_saved(saved: Any, abstract: Any) -> Any:
    """`abstract`'s arrays in the saved tree's structure: a state whose record gained a field
    that holds no arrays (`TrainState.pbt` of a run without PBT) still restores a step saved
    before it existed; arrays are matched by their path (`check_structure` has compared them)."""
    wanted = dict(_leaves_by_path(abstract))
    return jax.tree_util.tree_map_with_path(lambda path, _: wanted[_path_name(path)], saved)


def as_target(restored: Any, abstract: Any) -> Any:
    """The restored arrays (in the saved tree's structure) in `abstract`'s structure."""
    got = dict(_leaves_by_path(restored))
    leaves = [
        got[name] if name in got else np.full(leaf.shape, ADDED_SINCE[name], leaf.dtype)
        for name, leaf in _leaves_by_path(abstract)
    ]
    return jax.tree_util.tree_unflatten(jax.tree.structure(abstract), leaves)


def check_structure(saved: Any, abstract: Any, step: Path) -> None:
    saved_shapes = _shapes_by_path(saved)
    wanted = _shapes_by_path(abstract)
    wanted = {k: v for k, v in wanted.items() if k in saved_shapes or k not in ADDED_SINCE}
    if set(saved_shapes) != set(wanted):
        extra = sorted(set(saved_shapes) ^ set(wanted))
        raise CheckpointError(
            f"checkpoint {str(step)!r} does not match this run: its state "
            f"has {len(saved_shapes)} arrays, the run's {len(wanted)} "
            f"(first difference: {extra[0]})"
        )
    for name, shape in wanted.items():
        if saved_shapes[name] != shape:
            raise CheckpointError(
                f"checkpoint {str(step)!r} does not match this run: {name} "
                f"has shape {saved_shapes[name]}, expected {shape}"
            )


def _path_name(path: Any) -> str:
    """A leaf's path as `params.policy.Dense_0.kernel`, the same for a record and for the
    dicts orbax saves it as."""

    def name(entry: Any) -> str:
        for attr in ("key", "name", "idx"):
            if hasattr(entry, attr):
                return str(getattr(entry, attr))
        return str(entry)

    return ".".join(name(e) for e in path)


def _leaves_by_path(tree: Any) -> list[tuple[str, Any]]:
    return [(_path_name(p), leaf) for p, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def _shapes_by_path(tree: Any) -> dict[str, tuple[int, ...]]:
    return {name: tuple(getattr(leaf, "shape", ())) for name, leaf in _leaves_by_path(tree)}
