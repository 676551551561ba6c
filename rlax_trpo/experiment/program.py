"""`make_program(config)`: what `experiment.run` compiles and drives, for either kind of config.

A control algorithm's config (gymnax and registered environments) becomes the training loop
of `rlax_trpo.training` with greedy-episode evaluation (`control_program`); a language-model
config (`algorithm: grpo_lm`) becomes `rlax_trpo.lm.program`'s. Which one is the algorithm's
registry entry's choice (`AlgorithmSpec.program`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlax_trpo import pbt
from rlax_trpo.config.configuration import Config
from rlax_trpo.evaluate import make_evaluate
from rlax_trpo.report import run_files
from rlax_trpo.training import ProgressFn, make_trainer
from rlax_trpo.types import Program


def control_program(config: Config, progress: ProgressFn | None = None) -> Program:
    """The training loop of `config` as a `Program` (host side, before any tracing)."""
    trainer = make_trainer(config, progress)  # ConfigError for bad names and sizes
    evaluate = make_evaluate(config, trainer.env, trainer.networks, config.eval_episodes)

    def summarize(metrics, scores, state, sweep, seeds, facts) -> dict[str, Any]:
        return run_files.return_summary(metrics, scores, sweep, seeds)

    population_run = None
    if config.pbt is not None:  # the members act on each other: one scan of the population
        settings = config.pbt.settings()
        population_run = pbt.population_run(trainer.iteration, settings, config.pbt.ready)

    return Program(
        name=config.env,
        run_name=config.env,
        hparams=config.hp,
        hparam_names=tuple(f.name for f in dataclasses.fields(config.hp)),
        init=trainer.init,
        run=trainer.run,
        evaluate=evaluate,
        steps_per_iteration=trainer.steps_per_iteration,
        num_iterations=trainer.num_iterations,
        unit="env steps",
        num_envs=config.num_envs,
        eval_every=None,
        eval_metric="eval/return",
        curve="episode/return",
        summarize=summarize,
        diverged_at=lambda state: state.diverged_at,
        population_run=population_run,
        horizon=config.num_iterations,
    )


def make_program(config: Config, progress: ProgressFn | None = None) -> Program:
    """The `Program` of a configuration of any kind, built by its algorithm's registry entry
    (`AlgorithmSpec.program`: `control_program` for control algorithms)."""
    from rlax_trpo.algorithms import resolve

    return resolve(config.spec.program)(config, progress)
