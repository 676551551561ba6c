"""Orbax save/restore of a (possibly seed-batched) TrainState, with its config beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import yaml

from rlax_trpo.config import Config


def _to_savable(tree: Any) -> Any:
    """Typed PRNG keys cannot be serialised; store their raw key data instead."""
    return jax.tree.map(
        lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        else x,
        tree,
    )


def save(path: str | Path, state: Any, config: Config) -> None:
    """Write `state` (any pytree, e.g. a TrainState) and `config.yaml` under `path`.

    Orbax writes to a temporary directory and renames it, so a checkpoint is either whole
    or absent.
    """
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    path.mkdir(parents=True, exist_ok=True)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path / "state", _to_savable(state))
    checkpointer.wait_until_finished()
    (path / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def restore(path: str | Path, target: Any) -> Any:
    """Restore the pytree saved at `path` into the structure of `target`.

    Leaves of `target` that are typed PRNG keys are restored from their key data.
    """
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    restored = ocp.StandardCheckpointer().restore(path / "state", _to_savable(target))
    return jax.tree.map(
        lambda t, r: jax.random.wrap_key_data(r)
        if jax.dtypes.issubdtype(t.dtype, jax.dtypes.prng_key) else r,
        target,
        restored,
    )


def load_config(path: str | Path) -> Config:
    return Config.create(**yaml.safe_load((Path(path) / "config.yaml").read_text()))
