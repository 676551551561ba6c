#!/usr/bin/env python
"""How far TRPO's conjugate gradient is from solving F s = g on a trained run's next batch.

For one member of a TRPO or NPG run folder it collects the batch the run would learn from
next (its checkpointed state: environments, key, normalisation), takes the surrogate's
gradient g there, and solves (F + d I) s = g with CG of each length in `--iters` and with a
long `--reference` solve, at each damping d in `--damping` (default: the run's). For each it
prints the true residual ||(F + d I) s - g|| / ||g||, the cosine between s and the reference
solve's direction, and for the step scaled to the run's trust region (max KL delta, no line
search) the surrogate gain the quadratic model expects, the gain it realises on the batch,
the realised mean KL over the whole batch, and the realised gain scaled to KL = delta
(gain x sqrt(delta / KL): gain grows linearly along a ray, KL quadratically), the figure that
compares directions at equal trust-region cost. With `--holdout` it also collects the batch
after that one with the same parameters (the environments continue; the policy does not
learn in between) and reports the same step's gain and KL on it: the step is fitted to the
first batch, so its gain on the second is what it is worth on states it was not fitted to.
F is the run's: the Hessian of the KL on the run's `fisher_fraction` of the batch; the
hyperparameters are the member's (its sweep setting or PBT carry).

    python benchmarks/cg_convergence.py runs/trpo_craftax --iters 5 10 20 40 --reference 80 \
        --damping 0.1 0.01
    python benchmarks/cg_convergence.py runs/trpo_craftax --iters 10 40 --damping 0.1 1.0 --holdout
    python benchmarks/cg_convergence.py runs/tiny --train trpo_cartpole total_env_steps=4096

With `--train CONFIG key=value ...` it first trains that configuration into the run folder.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlax_trpo.platform import setup_cpu

setup_cpu()

import jax
import jax.numpy as jnp
from _publish import publish, run_folder

import rlax_trpo
from rlax_trpo import losses
from rlax_trpo import trust_region as tr
from rlax_trpo.algorithms import trpo
from rlax_trpo.algorithms.common import batch_layout
from rlax_trpo.normalization import Statistics, normalize_trajectory
from rlax_trpo.rollout import EnvCarry, collect
from rlax_trpo.training import acting_policy, make_trainer


def member_hparams(policy):
    """The member's hyperparameters: its PBT carry's, its sweep setting's, or the config's."""
    if policy.state.pbt is not None:
        return policy.state.pbt.hparams
    swept = {k.removeprefix("hp."): v for k, v in policy.setting.items() if k.startswith("hp.")}
    return policy.config.hp.replace(**{k: jnp.float32(v) for k, v in swept.items()})


def next_trajectories(policy, hp, count=1):
    """The trainer of the run's config, and the trajectory its next iteration learns from
    followed by `count - 1` more collected with the same parameters (the environments carry
    on; the policy does not learn in between), each normalised as the learner sees it."""
    config, state = policy.config, policy.state
    trainer = make_trainer(config)
    rollout = (
        functools.partial(collect, reset_ratio=config.reset_ratio)
        if config.reset_ratio > 1
        else collect
    )

    def trajectories_of(state):
        k_rollout = jax.random.split(state.key, 3)[1]  # as `make_trainer`'s iteration draws it
        act = acting_policy(trainer.networks, state.params, policy.observe)
        start = EnvCarry(state.env_state, state.obs, state.episode, state.memory, state.first)
        stats = Statistics(state.obs_stats, state.return_stats, state.return_acc)
        trajectories = []
        for key in [k_rollout, *jax.random.split(jax.random.fold_in(k_rollout, 1), count - 1)]:
            ro = rollout(trainer.env, act, start, key, config.num_steps)
            traj, _ = normalize_trajectory(config, stats, ro.trajectory, ro.done, hp.gamma)
            trajectories.append(traj)
            start = ro.carry
        return trajectories

    return trainer, jax.jit(trajectories_of)(state)


def next_batches(policy, hp, count=1):
    """The flat batch the run's next iteration learns from (and with `count=2` the batch
    after it, collected with the same parameters), and the trainer that made them."""
    trainer, trajectories = next_trajectories(policy, hp, count)
    config, state = policy.config, policy.state
    layout = batch_layout(config, trainer.networks, value_minibatches=config.value_minibatches)
    make_batch = jax.jit(trainer.algorithm.make_batch)
    return trainer, layout, [layout.learner(make_batch(state.params, t, hp)) for t in trajectories]


def make_solve(trainer, layout, hp):
    """(iters, damping, policy params, flat batch, held-out batch or None) -> the scaled
    natural step, its realised gain and KL on the batch, and on the held-out batch."""
    config, networks = trainer.config, trainer.networks

    def surrogate_of(flat):
        adv = losses.normalize(flat.advantage) if config.normalize_advantages else flat.advantage
        return trpo.surrogate_fn(networks, flat, jax.lax.stop_gradient(adv))

    def gain_and_kl(params, candidate, flat):
        surrogate = surrogate_of(flat)
        kl = trpo.kl_fn(networks, layout, params, flat)(candidate)
        return surrogate(candidate) - surrogate(params), kl

    @functools.partial(jax.jit, static_argnums=0)
    def solve(iters, damping, params, flat, held_out=None):
        fisher_kl = trpo.kl_fn(networks, layout, params, flat, config.fisher_fraction)
        grad = jax.grad(surrogate_of(flat))(params)
        nat = tr.natural_step(
            fisher_kl, params, grad, hp.max_kl, damping, iters, hp.cg_tol, config.cg_solver
        )
        candidate = tr.tree_axpy(1.0, nat.step, params)
        on_held_out = None if held_out is None else gain_and_kl(params, candidate, held_out)
        return nat, *gain_and_kl(params, candidate, flat), on_held_out

    return solve


def at_max_kl(gain, kl, max_kl):
    """The realised gain scaled to KL = max_kl along the step's ray (gain linear, KL square)."""
    return round(float(gain) * (max_kl / max(float(kl), 1e-12)) ** 0.5, 5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a TRPO or NPG run folder")
    p.add_argument("--member", type=int, default=0)
    p.add_argument("--iters", type=int, nargs="+", default=[5, 10, 20, 40], help="CG lengths")
    p.add_argument("--reference", type=int, default=80, help="CG length of the reference solve")
    p.add_argument("--damping", type=float, nargs="+", help="default: the run's hp.damping")
    p.add_argument(
        "--holdout", action="store_true", help="also the step's gain and KL on the next batch"
    )
    p.add_argument("--json", type=Path)
    p.add_argument("--train", nargs="+", metavar="CONFIG key=value", help="train this first")
    args = p.parse_args(argv)
    if min(args.iters + [args.reference]) < 1:
        print("cg_convergence: --iters and --reference must be at least 1", file=sys.stderr)
        return 2
    if not run_folder("cg_convergence", args.run, args.train):
        return 2
    policy = rlax_trpo.load_policy(args.run, member=args.member)
    algorithm, sampling = policy.config.algorithm, getattr(policy.config, "sampling", None)
    if algorithm not in ("trpo", "npg") or sampling != "single_path":
        print(
            f"cg_convergence: needs a single-path TRPO or NPG run; {str(args.run)!r} is "
            f"{algorithm}" + (f" with {sampling} sampling" if sampling else ""),
            file=sys.stderr,
        )
        return 2
    hp = member_hparams(policy)
    trainer, layout, batches = next_batches(policy, hp, 2 if args.holdout else 1)
    flat, held_out = batches[0], (batches[1] if args.holdout else None)
    solve = make_solve(trainer, layout, hp)
    params, max_kl = policy.state.params.policy, round(float(hp.max_kl), 6)
    rows = []
    for damping in args.damping or [round(float(hp.damping), 6)]:
        reference = solve(args.reference, damping, params, flat, held_out)[0].step
        for iters in sorted(set(args.iters + [args.reference])):
            nat, gain, kl, on_held_out = jax.block_until_ready(
                solve(iters, damping, params, flat, held_out)
            )
            cosine = tr.tree_vdot(nat.step, reference) / (
                tr.tree_norm(nat.step) * tr.tree_norm(reference)
            )
            row = {
                "damping": damping,
                "cg_iters": iters,
                "residual": round(float(nat.cg_residual), 4),
                "cosine_to_reference": round(float(cosine), 4),
                "expected_gain": round(float(nat.expected_improvement), 5),
                "realised_gain": round(float(gain), 5),
                "realised_kl": round(float(kl), 5),
                "gain_at_max_kl": at_max_kl(gain, kl, max_kl),
            }
            if on_held_out is not None:
                held_gain, held_kl = on_held_out
                row["held_out_gain"] = round(float(held_gain), 5)
                row["held_out_kl"] = round(float(held_kl), 5)
                row["held_out_gain_at_max_kl"] = at_max_kl(held_gain, held_kl, max_kl)
            rows.append(row)
            print(" ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    config = trainer.config
    figures = {
        "run": str(args.run),
        "member": args.member,
        "iterations_done": int(policy.state.iteration),
        "env": config.env,
        "batch": config.batch_size,
        "fisher_fraction": config.fisher_fraction,
        "max_kl": max_kl,
        "reference_cg_iters": args.reference,
        "held_out_batch": args.holdout,
        "rows": rows,
    }
    publish("cg_convergence", figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
