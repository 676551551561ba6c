#!/usr/bin/env python
"""How much of one update's improvement holds on batches it was not fitted to, for any
policy-gradient run folder (PPO, TRPO, NPG, VPG), and for variants of its settings.

For one member of a run folder it collects the batch the run would learn from next and
`--holdout` more after it with the same parameters (the environments carry on; the policy
does not learn in between), applies the algorithm's own update (`algorithm.update`: the
member's hyperparameters, the run's optimiser state) to the first, and reports for the new
policy against the old, on the fitted batch and on each held-out one, the surrogate gain
mean_n (pi_new(a_n|s_n) / pi_old(a_n|s_n) - 1) A_n (A normalised per batch, the run's own
advantages) and the mean KL(pi_old || pi_new). The gain on the fitted batch is what the update
saw; the held-out gain estimates what it is worth on the states the policy will meet.

Each `--variant "key=value ..."` re-runs the update with those settings (the algorithm's and
its hyperparameters', not the network's or the batch's shape) on the same batches, so the
variants are compared on identical data (TRPO reads its place in an annealing schedule,
`anneal_max_kl` or `anneal_ent_coef`, off its critic's step count, which a variant of
`value_epochs` or `value_minibatches` would misread):

    python benchmarks/update_holdout.py runs/trpo_craftax --holdout 3 \\
        --variant "hp.damping=1.0" --variant "cg_iters=40"
    python benchmarks/update_holdout.py runs/ppo_craftax --variant "num_epochs=8"
    python benchmarks/update_holdout.py runs/tiny --train ppo_cartpole total_env_steps=4096
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlax_trpo.platform import setup_cpu

setup_cpu()

import jax
import jax.numpy as jnp
from _publish import publish, run_folder
from cg_convergence import member_hparams, next_trajectories

import rlax_trpo
from rlax_trpo import load_config, losses, make_trainer
from rlax_trpo.algorithms import trpo
from rlax_trpo.algorithms.common import batch_layout
from rlax_trpo.errors import ConfigError

SHAPE_FIELDS = ("algorithm", "env", "num_envs", "num_steps", "network", "hidden_sizes", "memory")


def variant_config(policy, run_dir: Path, overrides: list[str]):
    """The run's config with `overrides` (one-line ConfigError if they reshape the run)."""
    config = load_config(str(run_dir / "config.yaml"), overrides)
    for field in SHAPE_FIELDS:
        if getattr(config, field, None) != getattr(policy.config, field, None):
            raise ConfigError(f"--variant may not change {field} (the batches and network)")
    return config


def variant_hparams(base_hp, config, overrides: list[str]):
    """The member's hyperparameters with the variant's `hp.*` overrides from `config`."""
    names = [o.split("=", 1)[0].removeprefix("hp.") for o in overrides if o.startswith("hp.")]
    return base_hp.replace(
        **{
            n: jnp.asarray(getattr(config.hp, n), jnp.result_type(getattr(base_hp, n)))
            for n in names
        }
    )


def make_measure(trainer):
    """(old policy params, new, flat batch) -> (surrogate gain, mean KL(old || new))."""
    config, networks = trainer.config, trainer.networks
    layout = batch_layout(config, networks)

    def measure(old, new, batch):
        flat = layout.learner(batch)
        adv = losses.normalize(flat.advantage)
        surrogate = trpo.surrogate_fn(networks, flat, adv)
        return surrogate(new) - surrogate(old), trpo.kl_fn(networks, layout, old, flat)(new)

    return jax.jit(measure)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a run folder of PPO, TRPO, NPG or VPG")
    p.add_argument("--member", type=int, default=0)
    p.add_argument("--holdout", type=int, default=3, help="held-out batches (at least 1)")
    p.add_argument("--variant", action="append", default=[], metavar='"key=value ..."')
    p.add_argument("--json", type=Path)
    p.add_argument("--train", nargs="+", metavar="CONFIG key=value", help="train this first")
    args = p.parse_args(argv)
    if args.holdout < 1:
        print("update_holdout: --holdout must be at least 1", file=sys.stderr)
        return 2
    if not run_folder("update_holdout", args.run, args.train):
        return 2
    policy = rlax_trpo.load_policy(args.run, member=args.member)
    if policy.config.algorithm not in ("ppo", "trpo", "npg", "vpg"):
        algorithm = policy.config.algorithm
        print(
            f"update_holdout: needs a PPO, TRPO, NPG or VPG run; {str(args.run)!r} is {algorithm}",
            file=sys.stderr,
        )
        return 2
    if getattr(policy.config, "sampling", "single_path") != "single_path":
        why = "needs single-path sampling (the vine collects its own batch)"
        print(f"update_holdout: {why}", file=sys.stderr)
        return 2
    variants = [[], *[shlex.split(v) for v in args.variant]]
    try:
        configs = [variant_config(policy, args.run, v) for v in variants]
    except ConfigError as e:
        print(f"update_holdout: {e}", file=sys.stderr)
        return 2
    base_hp = member_hparams(policy)
    trainer, trajectories = next_trajectories(policy, base_hp, 1 + args.holdout)
    state = policy.state
    make_batch = jax.jit(trainer.algorithm.make_batch)
    yardstick = [make_batch(state.params, t, base_hp) for t in trajectories]
    measure = make_measure(trainer)
    rows = []
    for overrides, config in zip(variants, configs, strict=True):
        variant = make_trainer(config) if overrides else trainer
        hp = variant_hparams(base_hp, config, overrides)
        batch = jax.jit(variant.algorithm.make_batch)(state.params, trajectories[0], hp)
        update = jax.jit(variant.algorithm.update)
        new = update(state.params, state.algo_state, batch, hp, jax.random.key(0))[0]
        figures = [measure(state.params.policy, new.policy, b) for b in yardstick]
        (gain, kl), held = figures[0], figures[1:]
        held_gains = [float(g) for g, _ in held]
        row = {
            "variant": " ".join(overrides) or "the run's settings",
            "fitted_gain": round(float(gain), 5),
            "fitted_kl": round(float(kl), 5),
            "held_out_gain": round(statistics.mean(held_gains), 5),
            "held_out_gains": [round(g, 5) for g in held_gains],
            "held_out_kl": round(statistics.mean(float(k) for _, k in held), 5),
            # None where the update did not move the policy (e.g. an annealed learning rate at 0)
            "held_out_share": (
                round(statistics.mean(held_gains) / float(gain), 3) if gain > 1e-9 else None
            ),
        }
        rows.append(row)
        print(" ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    config = policy.config
    figures = {
        "run": str(args.run),
        "member": args.member,
        "iterations_done": int(state.iteration),
        "env": config.env,
        "algorithm": config.algorithm,
        "batch": config.batch_size,
        "held_out_batches": args.holdout,
        "rows": rows,
    }
    publish("update_holdout", figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
