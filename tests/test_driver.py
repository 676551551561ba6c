"""The run driver's stages ask the `Program`, not the config's kind: the default run folder's
name and the hyperparameters a sweep may set."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rlax_trpo import Config
from rlax_trpo.config import config_from_dict
from rlax_trpo.config.sweep import Sweep
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment import driver
from rlax_trpo.experiment.folder import make_folder
from rlax_trpo.experiment.program import make_program

LM = {
    "algorithm": "grpo_lm",
    "task": "max_digit",
    "num_digits": 3,
    "model": {"num_layers": 1, "d_model": 16, "num_heads": 2},
    "num_prompts": 8,
    "group_size": 4,
    "num_iterations": 4,
    "eval_size": 32,
}


def _plan(config, **given) -> driver.RunPlan:
    fields = dict.fromkeys(driver.RunPlan._fields)
    fields.update(config=config, shard="population", progress=False, tensorboard=False)
    return driver.plan_run(driver.RunPlan(**{**fields, **given}))


@pytest.mark.parametrize(
    "config, name",
    [
        (Config.create(env="Acrobot-v1"), "ppo_Acrobot-v1_"),
        (config_from_dict(LM), "grpo_lm_max_digit_"),
    ],
    ids=["control", "lm"],
)
def test_the_program_names_the_default_run_folder_and_its_hyperparameters(config, name):
    program = make_program(config)
    assert program.hparam_names == tuple(f.name for f in dataclasses.fields(program.hparams))
    folder = make_folder(_plan(config), program, owner=False)  # names it, writes nothing
    assert folder.out.parent == Path("runs") and folder.out.name.startswith(name), folder
    assert not folder.out.exists() and folder.lock is None


def test_a_swept_name_the_program_lacks_is_refused_before_any_write(tmp_path):
    config, out = config_from_dict(LM), tmp_path / "run"
    assert "clip_eps" in Config.create().to_dict()["hp"]  # a control hyperparameter ...
    sweep = Sweep(("hp.clip_eps",), ((0.1, 0.2),))  # ... that grpo_lm does not have
    with pytest.raises(ConfigError, match="^--sweep hp.clip_eps: not a hyperparameter of grpo"):
        driver.run(config, sweep=sweep, out=out, progress=False)
    assert not out.exists()
