#!/usr/bin/env python
"""Mutation check: break one feature at a time in a copy of the code, run the tests that
should catch it, and report each mutant as killed (a test failed) or survived.

    python tests/mutants.py              # every mutant, one per CPU core at a time
    python tests/mutants.py gae critic   # the mutants whose names contain these words
    python tests/mutants.py --list
    python tests/mutants.py --control    # the same test selections on the unchanged code

Each mutant is a one-line textual change that must apply exactly once; it is applied to a
copy of the repository (package, tests, configs, benchmarks, train.py) in a temporary
folder, and the named tests run there with that copy first on the path, in a process forked
from one that has already imported the third-party libraries (JAX, flax, optax, ...; about
2.5 s less per mutant on a 2-core CPU; `--no-fork` starts a fresh Python instead). Exit status
1 if any survived.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import NamedTuple

import suite_env

ROOT = Path(__file__).resolve().parents[1]


class Mutant(NamedTuple):
    name: str
    file: str  # relative to the repository root
    old: str  # must occur exactly once
    new: str
    tests: tuple[str, ...]  # pytest arguments (node ids or `-k` expressions)


M = Mutant
MUTANTS = [
    M("line-search-batch-ignored", "rlax_trpo/trust_region.py",
      "if batch > 0:", "if False:",
      ("tests/test_trust_region.py", "-k", "batches")),
    M("line-search-batches-past-the-first-pass", "rlax_trpo/trust_region.py",
      "return (i < rounds) & ~passes(improvements, kls).any()", "return i < rounds",
      ("tests/test_trust_region.py", "-k", "batches")),
    M("line-search-realised-gain-of-the-full-step", "rlax_trpo/trust_region.py",
      "realised = (pick(improvements), pick(kls))", "realised = (improvements[0], kls[0])",
      ("tests/test_trpo.py", "-k", "rejected or learns_and")),
    M("line-search-batch-not-passed", "rlax_trpo/algorithms/trpo.py",
      "search = (hp.max_kl, hp.kl_slack, config.line_search_batch)",
      "search = (hp.max_kl, hp.kl_slack, 0)",
      ("tests/test_trpo.py", "-k", "line_search_batch")),
    M("runlog-no-collection-after-a-run", "rlax_trpo/experiment/runlog.py",
      "if self.attached:", "if False:",
      ("tests/test_cli.py", "-k", "collects_what_the_libraries_left")),
    M("runlog-collection-after-bad-input", "rlax_trpo/experiment/runlog.py",
      "if self.attached:", "if True:",
      ("tests/test_cli.py", "-k", "refused_before_its_run_collects_nothing")),
    M("gymnax-renderers-imported-eagerly", "rlax_trpo/envs/gymnax_suite.py",
      'RENDER_ONLY_IMPORTS = ("seaborn", "matplotlib.pyplot")', "RENDER_ONLY_IMPORTS = ()",
      ("tests/test_envs.py", "-k", "defers_its_renderers")),
    M("ppo-kl-penalty-off", "rlax_trpo/algorithms/ppo.py",
      "+ kl_beta * approx_kl", "+ 0.0 * kl_beta * approx_kl",
      ("tests/test_ppo_kl.py::test_the_kl_penalty_holds_the_policy_back",)),
    M("ppo-adaptive-beta-rule", "rlax_trpo/algorithms/ppo.py",
      "beta = jnp.where(kl < kl_target / 1.5, beta / 2.0, beta)",
      "beta = jnp.where(kl < kl_target / 1.5, beta * 2.0, beta)",
      ("tests/test_ppo_kl.py", "-k", "rule_table")),
    M("ppo-value-loss-off", "rlax_trpo/algorithms/ppo.py",
      "total = pg_loss + hp.vf_coef * v_loss", "total = pg_loss + 0.0 * v_loss",
      ("tests/test_probes.py", "-k", "constant_reward and ppo")),
    M("ppo-advantage-sign", "rlax_trpo/algorithms/ppo.py",
      "adv = losses.normalize(mb.advantage) if", "adv = -losses.normalize(mb.advantage) if",
      ("tests/test_probes.py", "-k", "picks_the_rewarded_action")),
    M("clipped-surrogate-max", "rlax_trpo/losses.py",
      "return jnp.minimum(ratios * advantages, clipped * advantages)",
      "return jnp.maximum(ratios * advantages, clipped * advantages)",
      ("tests/test_losses.py",)),
    M("critic-frozen", "rlax_trpo/algorithms/common.py",
      "(value_params, opt_state), loss = epochs_of_minibatches(",
      "(_unused, opt_state), loss = epochs_of_minibatches(",
      ("tests/test_probes.py", "-k", "constant_reward and (trpo or npg or vpg)")),
    M("gae-lambda-ignored", "rlax_trpo/advantages.py",
      "decays = gamma * lambda_ * env_continues(terminated, truncated)",
      "decays = gamma * env_continues(terminated, truncated)",
      ("tests/test_advantages.py",)),
    M("truncation-no-bootstrap", "rlax_trpo/advantages.py",
      "discounts = env_discounts(terminated, gamma)\n    decays",
      "discounts = env_discounts(terminated | truncated, gamma)\n    decays",
      ("tests/test_probes.py", "-k", "time_limit")),
    M("monte-carlo-is-td", "rlax_trpo/advantages.py",
      "truncated, gamma, 1.0)", "truncated, gamma, 0.0)",
      ("tests/test_advantages.py",)),
    M("nstep-bootstrap-ignores-termination", "rlax_trpo/advantages.py",
      "boot = env_discounts(terminated, gamma) * next_values",
      "boot = gamma * next_values",
      ("tests/test_advantages.py",)),
    M("group-advantage-uncentred", "rlax_trpo/advantages.py",
      "centred = rewards - mean", "centred = rewards - 0.0 * mean",
      ("tests/test_advantages.py", "tests/test_grpo.py", "-k", "group or reinforce")),
    M("grpo-kl-off", "rlax_trpo/algorithms/grpo.py",
      "surrogate + kl_beta * kl", "surrogate + 0.0 * kl_beta * kl",
      ("tests/test_grpo.py::test_kl_to_the_reference_pulls_the_policy_back",)),
    M("grouped-reset-not-copied", "rlax_trpo/algorithms/grouped.py",
      "copy = lambda x: jnp.repeat(x, group_size, axis=0)",
      "copy = lambda x: jnp.concatenate([x] * group_size, axis=0)",
      ("tests/test_grpo.py", "-k", "grouped")),
    M("lm-kl-off", "rlax_trpo/lm/objectives.py",
      "per_token = -objective + hp.kl_beta * kl", "per_token = -objective + 0.0 * kl",
      ("tests/test_lm_grpo.py", "-k", "kl_penalty_pulls")),
    M("lm-padding-leaks", "rlax_trpo/lm/objectives.py",
      "masked = jnp.where(mask > 0, per_token, 0.0)", "masked = per_token",
      ("tests/test_lm_grpo.py", "-k", "padding")),
    M("lm-gspo-ratio-per-token", "rlax_trpo/lm/objectives.py",
      "        return jnp.broadcast_to(seq, logp.shape)", "        return jnp.exp(log_ratio)",
      ("tests/test_lm_grpo.py", "-k", "gspo")),
    M("lm-cispo-weight-not-stopped", "rlax_trpo/losses.py",
      "return jax.lax.stop_gradient(jnp.minimum(ratios, cap))", "return jnp.minimum(ratios, cap)",
      ("tests/test_lm_grpo.py", "-k", "cispo")),
    M("lm-warm-start-not-reference", "rlax_trpo/lm/program.py",
      "            params, losses = warm_start(", "            _unused, losses = warm_start(",
      ("tests/test_lm_run.py", "-k", "warm_start")),
    M("eval-adds-after-the-end", "rlax_trpo/evaluate.py",
      "total = total + jnp.where(alive, res.reward, 0.0)", "total = total + res.reward",
      ("tests/test_evaluate.py",)),
    M("eval-runs-to-the-time-limit", "rlax_trpo/evaluate.py",
      "return (t < horizon) & alive.any()", "return t < horizon",
      ("tests/test_evaluate.py", "-k", "loop_ends")),
    M("recording-runs-to-the-time-limit", "rlax_trpo/evaluate.py",
      "        if parts[-1].done.any():", "        if False:",
      ("tests/test_evaluate.py", "-k", "recording_stops")),
    M("checkpoint-restores-zeros", "rlax_trpo/experiment/checkpoint.py",
      "restored = jax.tree.map(np.asarray, restored)",
      "restored = jax.tree.map(lambda x: np.zeros_like(np.asarray(x)), restored)",
      ("tests/test_resume.py", "-k", "sweep_resumes")),
    M("line-search-accepts-anything", "rlax_trpo/trust_region.py",
      "passes = lambda imp, kl: (kl <= kl_slack * max_kl) & (imp > 0) & jnp.isfinite(imp)",
      "passes = lambda imp, kl: jnp.isfinite(kl) | True",
      ("tests/test_trpo.py", "-k", "rejected")),
    M("vine-branches-independent-keys", "rlax_trpo/algorithms/vine.py",
      "branch_keys = jnp.repeat(state_keys[:, None], num_actions, axis=1)",
      "branch_keys = jax.vmap(lambda k: jax.random.split(k, num_actions))(state_keys)",
      ("tests/test_vine.py", "-k", "share")),
    M("vine-horizon-not-bootstrapped", "rlax_trpo/algorithms/vine.py",
      "boot_step = jnp.where(alive, horizon, boot_step)",
      "boot_step = jnp.where(alive, -1, boot_step)",
      ("tests/test_vine.py", "-k", "closed_form")),
    M("vine-surrogate-sign", "rlax_trpo/algorithms/vine.py",
      "            return (jnp.exp(log_prob) * advantage).sum(1).mean()",
      "            return -(jnp.exp(log_prob) * advantage).sum(1).mean()",
      ("tests/test_vine.py", "-k", "learns")),
    M("cg-step-size", "rlax_trpo/trust_region.py",
      "alpha = jnp.where(pap > 0, rs / jnp.where(pap > 0, pap, 1.0), 0.0)",
      "alpha = jnp.where(pap > 0, 0.5 * rs / jnp.where(pap > 0, pap, 1.0), 0.0)",
      ("tests/test_trust_region.py",)),
    M("trust-region-scale", "rlax_trpo/trust_region.py",
      "jnp.sqrt(2.0 * max_kl / jnp.where(shs > 0, shs, 1.0))",
      "jnp.sqrt(8.0 * max_kl / jnp.where(shs > 0, shs, 1.0))",
      ("tests/test_trust_region.py",)),
    M("fvp-damping-dropped", "rlax_trpo/trust_region.py",
      "return tree_axpy(damping, vector, fv)", "return fv",
      ("tests/test_trust_region.py",)),
    M("sweep-layout-seed-major", "rlax_trpo/config/sweep.py",
      "np.repeat(np.asarray(per_setting, np.float32), num_seeds)",
      "np.tile(np.asarray(per_setting, np.float32), num_seeds)",
      ("tests/test_sweep.py", "-k", "layout or 3x2")),
    M("obs-normaliser-uncentred", "rlax_trpo/normalization.py",
      "return jnp.clip((x - self.mean) / jnp.sqrt(self.var + 1e-8), -clip, clip)",
      "return jnp.clip(x / jnp.sqrt(self.var + 1e-8), -clip, clip)",
      ("tests/test_envs.py",)),
    M("reward-scaling-off", "rlax_trpo/normalization.py",
      "scale_reward = return_stats.scale", "scale_reward = lambda reward: reward",
      ("tests/test_envs.py", "-k", "reward_scaling")),
    M("divergence-not-kept", "rlax_trpo/training.py",
      "return keep(params, state.params), keep(algo_state", "return params, keep(algo_state",
      ("tests/test_cli.py", "-k", "divergence and ppo")),
    M("vpg-gradient-sign", "rlax_trpo/algorithms/vpg.py",
      "pg_loss = losses.policy_gradient_loss(log_prob, advantages)",
      "pg_loss = losses.policy_gradient_loss(log_prob, -advantages)",
      ("tests/test_vpg.py",)),
    M("ppo-critic-untrained-timelimit", "rlax_trpo/algorithms/ppo.py",
      "total = pg_loss + hp.vf_coef * v_loss", "total = pg_loss + 0.0 * v_loss",
      ("tests/test_probes.py", "-k", "time_limit and terminal")),
    M("sweep-compiles-a-program-per-chunk-length", "rlax_trpo/experiment/chunks.py",
      "    if plan.single_call:\n        run_fn",
      "    if plan.single_call or plan.population > 1:\n        run_fn",
      ("tests/test_sweep.py", "-k", "compiles_no_more")),
    M("package-import-starts-gymnax", "rlax_trpo/__init__.py",
      '__version__ = "0.1.0"', 'import gymnax  # noqa\n\n__version__ = "0.1.0"',
      ("tests/test_platform.py", "-k", "lazy")),
    M("final-return-window", "rlax_trpo/report/stats.py",
      "start = iters - max(1, math.ceil(iters * last_fraction))", "start = 0",
      ("tests/test_cli.py", "-k", "run_folder")),
    M("cg-unbatched-initial-guess", "rlax_trpo/trust_region.py",
      "cg(matvec, b, x0=x0, tol=tol, maxiter=maxiter)", "cg(matvec, b, tol=tol, maxiter=maxiter)",
      ("tests/test_trpo.py", "tests/test_trust_region.py", "-k", "learns_and or zero_guess")),
    M("lapack-orthogonal-init", "rlax_trpo/layers.py",
      "kernel_init=orthogonal(gain)", "kernel_init=nn.initializers.orthogonal(gain)",
      # The traced initialiser, not the lowered program: setup_cpu lowers a QR without LAPACK.
      ("tests/test_initializers.py", "-k", "no_linear_algebra")),
    M("per-env-shuffle-is-global", "rlax_trpo/shuffle.py",
      "    if groups == 1:\n        perm", "    if True:\n        perm",
      ("tests/test_devices.py", "-k", "gathers_nothing")),
    M("exit-does-not-wait-for-running-computations", "rlax_trpo/platform.py",
      "            array.block_until_ready()", "            array.is_ready()",
      ("tests/test_platform.py", "-k", "wait_for_running")),
    M("ent-coef-anneal-ignored", "rlax_trpo/algorithms/trpo.py",
      "        hp = hp.replace(ent_coef=decay(hp.ent_coef))", "        pass",
      ("tests/test_trpo.py", "-k", "annealed and ent_coef")),
    M("max-kl-anneal-ignored", "rlax_trpo/algorithms/trpo.py",
      "        hp = hp.replace(max_kl=decay(hp.max_kl))", "        pass",
      ("tests/test_trpo.py", "-k", "annealed and max_kl")),
    M("max-kl-anneal-with-ent-coef-flag", "rlax_trpo/algorithms/trpo.py",
      "    if config.anneal_max_kl:", "    if config.anneal_ent_coef:",
      ("tests/test_trpo.py", "-k", "annealed and max_kl")),
    M("value-lr-anneal-ignored", "rlax_trpo/algorithms/trpo.py",
      "        hp = hp.replace(value_learning_rate=decay(hp.value_learning_rate))", "        pass",
      ("tests/test_trpo.py", "-k", "annealed_critic")),
    M("value-lr-anneal-with-max-kl-flag", "rlax_trpo/algorithms/trpo.py",
      "    if config.anneal_value_lr:", "    if config.anneal_max_kl:",
      ("tests/test_trpo.py", "-k", "annealed_critic")),
    M("ent-coef-anneal-not-applied", "rlax_trpo/algorithms/trpo.py",
      "        hp = annealed(config, hp, state.value_opt_state)\n        policy, metrics",
      "        policy, metrics",
      ("tests/test_trpo.py", "-k", "annealed")),
    M("ent-coef-anneal-not-applied-in-the-vine", "rlax_trpo/algorithms/trpo.py",
      "        hp = annealed(config, hp, state.value_opt_state)\n        obs = batch",
      "        obs = batch",
      ("tests/test_vine.py", "-k", "anneals")),
    M("exit-wait-asks-the-default-backend-only", "rlax_trpo/platform.py",
      "arrays += jax.live_arrays(platform)", "arrays += jax.live_arrays()",
      ("tests/test_platform.py", "-k", "every_started_backend")),
    M("exit-wait-not-registered-by-programs", "rlax_trpo/training.py",
      "    finish_computations_at_exit()  # a script", "    pass  # a script",
      ("tests/test_platform.py", "-k", "wait_for_running")),
    M("pre-folder-log-has-a-name", "rlax_trpo/experiment/runlog.py",
      "tempfile.TemporaryFile(prefix=", "tempfile.NamedTemporaryFile(delete=False, prefix=",
      ("tests/test_faults.py", "-k", "compiling")),
    M("supervisor-keeps-native-log-of-explained-exit", "rlax_trpo/experiment/peers.py",
      "        log.unlink(missing_ok=True)", "        log.exists()",
      ("tests/test_multihost.py", "-k", "interrupted")),
    M("pbt-copies-from-the-bottom", "rlax_trpo/pbt.py",
      "    source = top[jax.random.randint", "    source = bottom[jax.random.randint",
      ("tests/test_pbt.py",)),
    M("pbt-nan-fitness-ranks-first", "rlax_trpo/pbt.py",
      "jnp.where(jnp.isnan(fitness), -jnp.inf, fitness)", "fitness", ("tests/test_pbt.py",)),
    M("pbt-perturb-ignores-the-factors", "rlax_trpo/pbt.py",
      "    perturbed = value * factors[", "    perturbed = value + 0 * factors[",
      ("tests/test_pbt.py",)),
    M("pbt-explore-unclipped", "rlax_trpo/pbt.py",
      "jnp.clip(jnp.where(resample, drawn, perturbed), prior.low, prior.high)",
      "jnp.where(resample, drawn, perturbed)", ("tests/test_pbt.py",)),
    M("pbt-explores-every-member", "rlax_trpo/pbt.py",
      "jnp.where(copied, explored, value)", "explored", ("tests/test_pbt.py",)),
    M("pbt-log-prior-drawn-uniformly", "rlax_trpo/pbt.py",
      "        if self.log:", "        if False:", ("tests/test_pbt.py",)),
    M("pbt-source-ignores-the-key", "rlax_trpo/pbt.py",
      "top[jax.random.randint(k_source, (n,), 0, n)]", "top[jnp.arange(n)]",
      ("tests/test_pbt.py",)),
    M("restore-into-todays-record", "rlax_trpo/experiment/checkpoint.py",
      "state_paths.as_saved(saved_tree, abstract)", "abstract",
      ("tests/test_checkpoint.py", "-k", "version_1_folders_still_resume")),
    # PBT inside a run (tests/test_pbt_run.py, test_devices.py, test_config.py)
    M("pbt-fitness-counts-episodes", "rlax_trpo/pbt.py",
      "measured = carry.return_sum / jnp.maximum(carry.episodes, 1)", "measured = carry.episodes",
      ("tests/test_pbt_run.py", "-k", "fitness_of_its_window")),
    M("pbt-diverged-member-ranks-by-return", "rlax_trpo/pbt.py",
      "fitness = jnp.where(state.diverged_at < 0, fitness, jnp.nan)", "",
      ("tests/test_pbt_run.py", "-k", "diverged")),
    M("pbt-no-episode-ranks-last", "rlax_trpo/pbt.py",
      "fitness = jnp.where(carry.episodes > 0, measured, carry.fitness)",
      "fitness = jnp.where(carry.episodes > 0, measured, jnp.nan)",
      ("tests/test_pbt_run.py", "-k", "no_episode_keeps")),
    M("pbt-copy-keeps-its-own-fitness", "rlax_trpo/pbt.py",
      "keys, fitness[out.parent])", "keys, fitness)",
      ("tests/test_pbt_run.py", "-k", "no_episode_keeps")),
    M("pbt-fitness-added-since-not-restored", "rlax_trpo/experiment/state_paths.py",
      'ADDED_SINCE = {"pbt.fitness": float("nan")}', "ADDED_SINCE = {}",
      ("tests/test_pbt_run.py", "-k", "before_the_carried_fitness")),
    M("pbt-copy-keeps-its-parents-key", "rlax_trpo/pbt.py",
      "train_key = _select_keys(copied, rekeyed, out.state.key)", "train_key = out.state.key",
      ("tests/test_pbt_run.py", "-k", "diverged")),
    M("pbt-window-not-restarted", "rlax_trpo/pbt.py",
      "pbt=Carry(out.hparams, zeros, zeros, keys,",
      "pbt=Carry(out.hparams, out.state.pbt.return_sum, out.state.pbt.episodes, keys,",
      ("tests/test_pbt_run.py", "-k", "diverged or fitness_of_its_window")),
    M("pbt-step-key-not-advanced", "rlax_trpo/pbt.py",
      "jnp.broadcast_to(jax.random.key_data(key),",
      "jnp.broadcast_to(jax.random.key_data(carry.key[0]),",
      ("tests/test_pbt_run.py", "-k", "diverged")),
    M("pbt-steps-every-iteration", "rlax_trpo/pbt.py",
      "due = state.iteration[0] % ready == 0", "due = state.iteration[0] >= 0",
      ("tests/test_pbt_run.py", "-k", "fitness_of_its_window")),
    M("pbt-window-restarts-every-chunk", "rlax_trpo/pbt.py",
      "        del hp  # each member trains with its own, `state.pbt.hparams`\n",
      "        c = state.pbt\n"
      "        c = c._replace(return_sum=0 * c.return_sum, episodes=0 * c.episodes)\n"
      "        state = state.replace(pbt=c)\n",
      ("tests/test_pbt_run.py", "-k", "resumed or carried_in_the_state")),
    M("pbt-init-ignores-the-prior", "rlax_trpo/pbt.py",
      "        hparams = hparams.replace(**draws)\n", "        pass\n",
      ("tests/test_pbt_run.py", "-k", "init_prior")),
    M("pbt-explores-static-fields-unchecked", "rlax_trpo/config/fields.py",
      "            self.pbt.check_hparams(self.hp)", "            pass",
      ("tests/test_config.py", "-k", "pbt")),
    M("pbt-lineage-not-followed-back", "rlax_trpo/report/lineage.py",
      "        member = holder[t] = parent[member, t]", "        holder[t] = member",
      ("tests/test_pbt_run.py", "-k", "summary_names")),
    M("pbt-load-policy-loads-member-0", "rlax_trpo/experiment/saved.py",
      "        member = _best_pbt_member(Path(run_dir))", "        member = 0",
      ("tests/test_pbt_run.py", "-k", "summary_names")),
    M("one-cpu-device", "rlax_trpo/platform.py",
      "devices = forced if forced is not None else usable_cores()",
      "devices = forced if forced is not None else 1",
      ("tests/test_platform.py", "-k", "per_core")),
    M("straight-threefry-on-every-jaxlib", "rlax_trpo/platform.py",
      "    return version < STRAIGHT_THREEFRY_BEFORE", "    return True",
      ("tests/test_platform.py", "-k", "threefry")),
    M("legacy-emitter-flag-on-every-jaxlib", "rlax_trpo/platform.py",
      "if version < LEGACY_EMITTERS_UNTIL else", "if True else",
      ("tests/test_platform.py", "-k", "fast_compile_flags")),
    M("lapack-linear-algebra-on-cpu", "rlax_trpo/platform.py",
      "        lapack_free_linalg_on_cpu()\n", "        pass\n",
      ("tests/test_platform.py", "-k", "linear_algebra")),
    M("small-triangular-solve-reads-upper-as-lower", "rlax_trpo/small_linalg.py",
      "    if not lower:  # reversing", "    if False:  # reversing",
      ("tests/test_platform.py", "-k", "linear_algebra")),
    M("compile-cache-off-by-default", "rlax_trpo/experiment/compile_cache.py",
      "        on = _own_cache_folder(environ)", "        on = False",
      ("tests/test_compile_cache.py", "-k", "fills or reads_the_programs_back")),
    M("no-compile-cache-flag-ignored", "rlax_trpo/experiment/compile_cache.py",
      "    if not enabled or off:\n", "    if off:\n",
      ("tests/test_compile_cache.py", "-k", "flag")),
    M("progress-program-not-cached", "rlax_trpo/experiment/compile_cache.py",
      "        cache_programs_with_host_callbacks()\n", "        pass\n",
      ("tests/test_compile_cache.py", "-k", "fills")),
    M("lapack-in-physics-programs", "rlax_trpo/platform.py",
      '"cholesky_p", "triangular_solve_p", ', '',
      ("tests/test_lowering.py", "-k", "brax or playground")),
    M("policy-act-skips-normalisation", "rlax_trpo/policy.py",
      "return observation_transform(self.config.normalize_obs, self.state.obs_stats)(obs)",
      "return observation_transform(False, self.state.obs_stats)(obs)",
      ("tests/test_policy.py", "-k", "act_is_the_policy")),
    M("policy-evaluates-with-another-key", "rlax_trpo/experiment/saved.py",
      "eval_key=self.member_keys(self.seed + 1)[member]",
      "eval_key=self.member_keys(self.seed)[member]",
      ("tests/test_policy.py", "-k", "reproduces")),
    M("loggers-log-the-first-seed", "rlax_trpo/experiment/loggers.py",
      "out[name] = np.nanmean(per, axis=1)", "out[name] = per[:, 0]",
      ("tests/test_loggers.py", "-k", "wandb_offline")),
    M("loggers-write-at-the-end-only", "rlax_trpo/experiment/chunks.py",
      "every = (program.eval_every, log_every)",
      "every = (program.eval_every,)",
      ("tests/test_loggers.py", "-k", "while_the_run_goes")),
    M("config-accepts-keys-of-other-algorithms", "rlax_trpo/config/configuration.py",
      "    _check_keys(raw, name, model_cls, spec.hparams.names())\n", "",
      ("tests/test_config.py", "-k", "does_not_read")),
    M("plugins-not-imported", "rlax_trpo/config/configuration.py",
      "    load_plugins(imports)\n", "",
      ("tests/test_config.py", "-k", "no_such_plugin")),
    M("default-run-is-not-ppo-cartpole", "rlax_trpo/algorithms/ppo.py",
      "learning_rate: Any = hp_field(5e-4, gt=0)", "learning_rate: Any = hp_field(2.5e-4, gt=0)",
      ("tests/test_config.py", "-k", "one_source_of_defaults")),
    M("lm-sweep-checks-control-hparams", "rlax_trpo/config/sweep.py",
      "    hp_names = type(config.hp).names()", "    hp_names = Config.create().hp.names()",
      ("tests/test_lm_run.py", "-k", "sweeps_its_own")),
    M("bundled-config-not-found-by-name", "rlax_trpo/config/defaults.py",
      "    if bare and (CONFIG_DIR / f\"{path.stem}.yaml\").is_file():",
      "    if False:",
      ("tests/test_packaging.py", "-k", "empty_directory")),
    M("config-name-without-did-you-mean", "rlax_trpo/config/defaults.py",
      'hint = f"did you mean {close[0]}? " if close else ""', 'hint = ""',
      ("tests/test_packaging.py", "-k", "empty_directory")),
    M("option-given-twice-keeps-the-last", "rlax_trpo/cli/parsers.py",
      "            if action.dest in seen:", "            if False:",
      ("tests/test_config.py", "-k", "bad_input and twice")),
    M("python-api-errors-name-options", "rlax_trpo/errors.py",
      '"rlax_trpo_option_names", default=False', '"rlax_trpo_option_names", default=True',
      ("tests/test_config.py", "-k", "python_api_refuses")),
    M("yaml-exponent-floats-read-as-text", "rlax_trpo/config/yamlio.py",
      '    list("-+0123456789."),', "    [],",
      ("tests/test_config.py", "-k", "bad_input and gravity")),
    M("pbt-prior-ignores-a-sweep-silently", "rlax_trpo/experiment/plan.py",
      'if drawn and pbt.get("init") == "prior":', "if False:",
      ("tests/test_config.py::test_bad_input_one_line_exit_2_nothing_written"
       "[--sweep hp.learning_rate: with]",)),
    M("epochs-memory-unchecked", "rlax_trpo/experiment/memory_check.py",
      "        if isinstance(e, int) and held > available:", "        if False:",
      ("tests/test_config.py", "-k", "bad_input and epochs")),
    M("second-signal-leaves-temporaries", "rlax_trpo/experiment/folder.py",
      "    discard_temporaries(folder)\n    return describe_kept(folder)",
      "    return describe_kept(folder)",
      ("tests/test_faults.py", "-k", "second_signal_on_the_way")),
    M("stopped-run-leaves-temporaries", "rlax_trpo/experiment/folder.py",
      "    else:\n        discard_temporaries(folder)\n", "",
      ("tests/test_faults.py", "-k", "disk_full_in_the_final")),
    M("eval-member-checked-after-compiling", "rlax_trpo/experiment/saved.py",
      "    if args.member is not None and not 0 <= args.member < population:\n        raise",
      "    ev = evaluate_run(run, args.episodes, args.seed, args.max_steps)\n"
      "    if args.member is not None and not 0 <= args.member < population:\n        raise",
      ("tests/test_cli.py", "-k", "test_run_folder")),
    M("wandb-login-not-checked", "rlax_trpo/experiment/loggers.py",
      "    if wandb is not None and not _wandb_can_log():", "    if False:",
      ("tests/test_loggers.py", "-k", "credentials")),
    M("python-api-keeps-one-cpu-device", "rlax_trpo/experiment/driver.py",
      "    note = setup_cpu_for_run(devices)", "    note = None",
      ("tests/test_platform.py", "-k", "python_api")),
    M("resume-hint-names-train-py", "rlax_trpo/cli/commands.py",
      'command = f"python {prog}" if prog.endswith(".py") else prog',
      'command = "python train.py"',
      ("tests/test_cli.py", "-k", "resume_hint")),
    M("top-level-help-is-train-help", "rlax_trpo/cli/__init__.py",
      '    if argv[:1] in (["-h"], ["--help"]):', "    if False:",
      ("tests/test_cli.py", "-k", "top_level_help")),
    M("final-phase-not-resumable", "rlax_trpo/experiment/chunks.py",
      "    if not ends:  # training was done", "    if False:  # training was done",
      ("tests/test_faults.py", "-k", "evaluation")),
    M("unchunked-run-ignores-a-signal", "rlax_trpo/experiment/chunks.py",
      "        if signum is not None and unsaved is None and done < plan.total:",
      "        if False:",
      ("tests/test_resume.py", "-k", "unchunked")),
    M("a-files-key-an-override-made-unread-is-refused", "rlax_trpo/config/configuration.py",
      "    made_unread = checks.unread_in(raw, model_cls) - checks.unread_in(layer, model_cls)",
      "    made_unread = set()",
      ("tests/test_config.py", "-k", "files_key")),
    M("a-files-own-unread-key-is-dropped", "rlax_trpo/config/configuration.py",
      "checks.unread_in(raw, model_cls) - checks.unread_in(layer, model_cls)",
      "checks.unread_in(raw, model_cls)",
      ("tests/test_config.py", "-k", "files_key")),
    M("a-users-unread-key-is-dropped", "rlax_trpo/config/configuration.py",
      "        if not in_layer or any(key == g or key.startswith(f\"{g}.\") for g in given):",
      "        if not in_layer:",
      ("tests/test_config.py", "-k", "bad_input and memory_size")),
    M("an-interrupted-summary-reads-as-finished", "rlax_trpo/report/inputs.py",
      "    return isinstance(summary, dict) and summary.get(\"status\") == \"interrupted\"",
      "    return False",
      ("tests/test_resume.py", "-k", "unchunked")),
    M("a-run-whose-training-is-done-stays-interrupted", "rlax_trpo/experiment/chunks.py",
      "unsaved is None and done < plan.total:", "unsaved is None:",
      ("tests/test_resume.py", "-k", "unchunked")),
    M("a-signal-waits-for-the-whole-chunk", "rlax_trpo/experiment/chunks.py",
      "    while ran < k and signum is None:", "    while ran < k:",
      ("tests/test_resume.py", "-k", "unchunked")),
    M("an-interrupted-run-says-it-is-complete", "rlax_trpo/experiment/folder.py",
      "        if trained.signal is not None\n        else \"diverged\"",
      "        if False\n        else \"diverged\"",
      ("tests/test_resume.py", "-k", "unchunked")),
    M("segment-metrics-all-in-the-first-column", "rlax_trpo/experiment/population.py",
      "dynamic_update_slice_in_dim(r, m, i, axis=1)",
      "dynamic_update_slice_in_dim(r, m, 0, axis=1)",
      ("tests/test_resume.py", "-k", "segmented")),
    M("annealing-horizon-a-constant-of-the-program", "rlax_trpo/schedules.py",
      "    if horizon is None:  # the reciprocal", "    if True:  # the reciprocal",
      ("tests/test_compile_cache.py", "-k", "another_budget")),
    M("segment-divides-by-the-horizon", "rlax_trpo/schedules.py",
      "        reciprocal = 1.0 / horizon.astype(jnp.float32)\n",
      "        return value * (1.0 - iteration / horizon)\n",
      ("tests/test_resume.py", "-k", "segmented")),
    M("processes-do-not-agree-on-a-signal", "rlax_trpo/experiment/chunks.py",
      "    signals = [int(x) for x in every[:, 0] if x]",
      "    signals = [stop.signum] if stop.signum else []",
      ("tests/test_multihost.py", "-k", "either_process")),
    M("second-signal-does-not-stop", "rlax_trpo/experiment/progress.py",
      "            os._exit(128 + signum)", "            pass",
      ("tests/test_resume.py", "-k", "unchunked")),
    M("no-supervisor", "rlax_trpo/cli/commands.py",
      "    if multi_host and not peers.in_supervised_child():",
      "    if False and not peers.in_supervised_child():",
      ("tests/test_multihost.py", "-k", "killed_peer")),
    M("peer-timeout-not-given-to-jax", "rlax_trpo/experiment/parallel.py",
      "        heartbeat_timeout_seconds=peer_timeout,\n", "",
      ("tests/test_multihost.py", "-k", "reach_the_runtime")),
    M("startup-timeout-not-given-to-jax", "rlax_trpo/experiment/parallel.py",
      "        initialization_timeout=startup_timeout,\n", "",
      ("tests/test_multihost.py", "-k", "reach_the_runtime")),
    M("no-meeting-after-compiling", "rlax_trpo/experiment/driver.py",
      '        parallel.meet("compiled")\n', "",
      ("tests/test_multihost.py", "-k", "compiles_much_later")),
    M("meeting-is-a-gloo-collective", "rlax_trpo/experiment/parallel.py",
      'client.wait_at_barrier(f"rlax_trpo/{_meetings[0]}/{name}", _startup_timeout[0] * 1000)',
      "barrier(name)",
      ("tests/test_multihost.py", "-k", "compiles_much_later")),
    M("supervised-child-shadows-the-standard-library", "rlax_trpo/experiment/peers.py",
      "package_root = str(Path(__file__).resolve().parents[2])",
      "package_root = str(Path(__file__).resolve().parents[1])",
      ("tests/test_multihost.py", "-k", "train_like_one")),
    M("failed-start-removes-its-plan", "rlax_trpo/experiment/folder.py",
      'return checkpoint.has_plan(folder.out / "checkpoint") or holds_results(folder)',
      "return holds_results(folder)",
      ("tests/test_faults.py", "-k", "failed_start")),
    M("unsaved-final-checkpoint-loses-the-results", "rlax_trpo/experiment/chunks.py",
      "                if not _only_in_memory(setup, done):", "                if True:",
      ("tests/test_faults.py", "-k", "unchunked_run_whose")),
    M("results-kept-nowhere-when-the-folder-is-full", "rlax_trpo/experiment/folder.py",
      "    except OSError:\n        for left in where.glob",
      "    except ImportError:\n        for left in where.glob",
      ("tests/test_faults.py", "-k", "unchunked_run_whose and elsewhere")),
    M("finished-run-without-its-state-starts-over", "rlax_trpo/experiment/resume.py",
      "record.iterations_done >= record.num_iterations or not has_step(ckpt)",
      "record.iterations_done >= record.num_iterations",
      ("tests/test_faults.py", "-k", "unchunked_run_whose and not elsewhere")),
    M("libraries-speak-on-the-terminal", "rlax_trpo/cli/commands.py",
      "quiet_libraries(not args.verbose, to_the_end=process)",
      "quiet_libraries(False, to_the_end=process)",
      ("tests/test_faults.py", "-k", "full_disk_at_a_checkpoint")),
    M("run-log-not-in-the-run-folder", "rlax_trpo/experiment/driver.py",
      "        runlog.attach(setup.folder.out)", "        pass",
      ("tests/test_faults.py", "-k", "full_disk_at_a_checkpoint")),
    M("late-library-messages-on-the-terminal", "rlax_trpo/cli/commands.py",
      "quiet_libraries(not args.verbose, to_the_end=process)",
      "quiet_libraries(not args.verbose, to_the_end=False)",
      ("tests/test_cli.py", "-k", "whole_process")),
    M("diversion-ends-before-the-process", "rlax_trpo/experiment/runlog.py",
      "        if to_the_end:\n", "        if False:\n",
      ("tests/test_cli.py", "-k", "whole_process")),
    M("thread-tracebacks-on-the-terminal", "rlax_trpo/experiment/runlog.py",
      "        threading.excepthook = _log_thread_exception\n", "",
      ("tests/test_cli.py", "-k", "run_log")),
    M("no-lock", "rlax_trpo/experiment/lock.py",
      "            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n",
      "            pass\n",
      ("tests/test_faults.py", "-k", "second_writer")),
    M("no-start-over", "rlax_trpo/experiment/resume.py",
      "    if not has_step(ckpt) and has_plan(ckpt):", "    if False and has_plan(ckpt):",
      ("tests/test_faults.py", "-k", "compiling")),
    M("record-version-not-checked", "rlax_trpo/experiment/record.py",
      "    if type(version) is not int or version not in READ_VERSIONS:", "    if False:",
      ("tests/test_checkpoint.py", "-k", "does_not_read")),
    M("version-1-seeds-not-from-population", "rlax_trpo/experiment/record.py",
      '"seeds": data.get("seeds", data.get("population", 1))}', '"seeds": data.get("seeds", 1)}',
      ("tests/test_checkpoint.py", "-k", "as_it_was_before or its_population")),
    M("no-checkpoint-fallback", "rlax_trpo/experiment/checkpoint.py",
      "    for step in saved_steps(ckpt_dir):\n        if _verify(step) is None:",
      "    for step in saved_steps(ckpt_dir)[:0]:\n        if _verify(step) is None:",
      ("tests/test_faults.py", "-k", "damaged_newest")),
    M("failed-run-deletes-results", "rlax_trpo/experiment/driver.py",
      "keep = plan.resume is not None or holds_plan(setup.folder)", "keep = False",
      ("tests/test_faults.py", "-k", "ctrl_c")),
    M("diverged-member-stops-everyone", "rlax_trpo/experiment/chunks.py",
      'return found is not None and found["count"] == setup.plan.population',
      "return found is not None",
      ("tests/test_faults.py", "-k", "diverging")),
    M("diverged-member-keeps-updating", "rlax_trpo/training.py",
      "    apply = finite & healthy\n", "    apply = finite\n",
      ("tests/test_faults.py", "-k", "no_later_update")),
    M("trpo-entropy-bonus-off", "rlax_trpo/algorithms/trpo.py",
      "surrogate(params) + ent_coef * entropy(params)",
      "surrogate(params) + 0.0 * ent_coef * entropy(params)",
      ("tests/test_trpo.py", "-k", "entropy")),
    M("trpo-entropy-bonus-not-in-the-single-path-step", "rlax_trpo/algorithms/trpo.py",
      "with_entropy_bonus(surrogate_fn(networks, flat, adv), bonus, hp.ent_coef)",
      "surrogate_fn(networks, flat, adv)",
      ("tests/test_trpo.py", "-k", "no_advantage")),
    M("natural-step-cap-ignored", "rlax_trpo/trust_region.py",
      "alpha = jnp.where(max_scale > 0, jnp.minimum(alpha, max_scale), alpha)",
      "alpha = alpha",
      ("tests/test_trust_region.py", "-k", "max_scale")),
    M("natural-step-cap-not-passed", "rlax_trpo/algorithms/trpo.py",
      "config.cg_solver, hp.natural_lr)", "config.cg_solver)",
      ("tests/test_trpo.py", "-k", "natural_lr")),
    M("log-barrier-is-the-entropy", "rlax_trpo/losses.py",
      "return log_p.mean(-1) + jnp.log(log_p.shape[-1])",
      "return -(jnp.exp(log_p) * log_p).sum(-1)",
      ("tests/test_trpo.py", "-k", "log_barrier_has")),
    M("trpo-bonus-always-the-entropy", "rlax_trpo/algorithms/trpo.py",
      "return lambda dist: losses.log_barrier(dist.logits)",
      "return lambda dist: dist.entropy()",
      ("tests/test_trpo.py", "-k", "bonus_is")),
    M("memory-not-reset", "rlax_trpo/memory.py",
      "return jax.tree.map(lambda h: jnp.where(first[..., None], jnp.zeros_like(h), h), memory)",
      "return memory",
      ("tests/test_memory.py", "-k", "crosses")),
    M("memory-not-stored", "rlax_trpo/rollout.py",
      "RolloutResult(traj._replace(memory=start.memory),",
      "RolloutResult(traj._replace(memory=jax.tree.map(jnp.zeros_like, start.memory)),",
      ("tests/test_memory.py", "-k", "every_algorithm and ppo")),
    M("memory-minibatches-cut-across-time", "rlax_trpo/shuffle.py",
      "seqs = jax.tree.map(lambda x: jnp.take(x, idx, axis=1), steps)",
      "seqs = jax.tree.map(lambda x: jnp.take(jnp.roll(x, 1, axis=0), idx, axis=1), steps)",
      ("tests/test_memory.py", "-k", "whole_environment or every_algorithm and ppo")),
    M("gathered-samples-unshuffled", "rlax_trpo/shuffle.py",
      "perm = permutation(key, n).reshape(num_minibatches, -1)",
      "perm = jnp.arange(n).reshape(num_minibatches, -1)",
      ("tests/test_common.py", "-k", "gathered")),
    M("gathered-blocks-mixed-up", "rlax_trpo/shuffle.py",
      "index = jnp.swapaxes(perms.reshape(groups, num_minibatches, -1), 0, 1)",
      "index = perms.reshape(num_minibatches, groups, -1)",
      ("tests/test_common.py", "-k", "gathered")),
    M("memory-bootstrap-from-initial-state", "rlax_trpo/networks.py",
      "v_rec.bootstrap(params, states, final_obs)",
      "v_rec.bootstrap(params, jax.tree.map(jnp.zeros_like, states), final_obs)",
      ("tests/test_memory.py", "-k", "bootstrap")),
    M("memory-gru-update-gate-flipped", "rlax_trpo/memory.py",
      "h = (1.0 - z) * n + z * h",
      "h = z * n + (1.0 - z) * h",
      ("tests/test_memory.py", "-k", "flaxs")),
    M("memory-gru-reset-gate-outside", "rlax_trpo/memory.py",
      "n = jnp.tanh(xn + r * (hn + self.recurrent_bias))",
      "n = jnp.tanh(xn + r * hn + self.recurrent_bias)",
      ("tests/test_memory.py", "-k", "flaxs")),
    M("rollout-outputs-unpacked-one-column-apart", "rlax_trpo/rollout.py",
      "            start += width", "            start += 1",
      ("tests/test_rollout.py", "-k", "packed or time_major")),
    M("rollout-scalars-unpacked-from-the-first-column", "rlax_trpo/rollout.py",
      "                leaves[i] = array[..., start]", "                leaves[i] = array[..., 0]",
      ("tests/test_rollout.py", "-k", "packed or time_major")),
    M("rollout-outputs-packed-across-shapes", "rlax_trpo/rollout.py",
      "groups.setdefault((x.shape[:1], x.dtype) if small else i, []).append(i)",
      "groups.setdefault(x.dtype if small else i, []).append(i)",
      ("tests/test_rollout.py", "-k", "packed or time_major")),
    M("rollout-large-leaves-packed", "rlax_trpo/rollout.py",
      "small = x.ndim == 0 or x.size // x.shape[0] <= SMALL",
      "small = True",
      ("tests/test_rollout.py", "-k", "packed or time_major")),
    M("pool-fresh-state-not-taken", "rlax_trpo/rollout.py",
      "return jnp.where(done.reshape(done.shape + (1,) * (old.ndim - 1)), new, old)",
      "return old",
      ("tests/test_rollout.py", "-k", "reset_distribution")),
    M("pool-one-slot-for-all", "rlax_trpo/rollout.py",
      "slot = (jnp.cumsum(done) - 1 + ", "slot = (0 * jnp.cumsum(done) - 1 + ",
      ("tests/test_rollout.py", "-k", "distinct_fresh_states")),
    M("training-ignores-reset-ratio", "rlax_trpo/training.py",
      "rollout = functools.partial(collect, reset_ratio=config.reset_ratio)",
      "rollout = collect",
      ("tests/test_rollout.py", "-k", "training_loop")),
    M("episode-info-unmasked", "rlax_trpo/rollout.py",
      "info = {k: jnp.where(done, v, 0.0).sum() for k, v in res.info.items()}",
      "info = {k: v.sum() for k, v in res.info.items()}",
      ("tests/test_rollout.py", "-k", "training_loop")),
    M("craftax-time-limit-as-termination", "rlax_trpo/envs/craftax_suite.py",
      "terminated = jnp.asarray(done, bool) & ~truncated",
      "terminated = jnp.asarray(done, bool)",
      ("tests/test_craftax.py", "-k", "time_limit")),
    M("craftax-score-of-last-reward", "rlax_trpo/envs/craftax_suite.py",
      "100.0 * episode_return / best", "100.0 * reward / best",
      ("tests/test_craftax.py", "-k", "time_limit")),
    M("craftax-achievements-unweighted", "rlax_trpo/envs/craftax_suite.py",
      "jnp.dot(jnp.asarray(unlocked, jnp.float32), weights)",
      "jnp.sum(jnp.asarray(unlocked, jnp.float32))",
      ("tests/test_craftax.py", "-k", "tier")),
    M("craftax-achievement-reward-of-the-return", "rlax_trpo/envs/craftax_suite.py",
      '"achievement_reward_percent": achievement_reward_percent(unlocked, classic),',
      '"achievement_reward_percent": 100.0 * episode_return / best,',
      ("tests/test_craftax.py", "-k", "time_limit")),
    M("report-normalisation-without-low", "rlax_trpo/report/aggregate.py",
      "normalised = {a: (m - lo) / width for a, m in matrices.items()}",
      "normalised = {a: m / width for a, m in matrices.items()}",
      ("tests/test_aggregate.py",)),
    M("report-improvement-reversed", "rlax_trpo/report/aggregate.py",
      "(matrices[x], matrices[y]) for x in matrices",
      "(matrices[y], matrices[x]) for x in matrices",
      ("tests/test_aggregate.py",)),
    M("resume-config-no-fallback", "rlax_trpo/experiment/resume.py",
      "            lost.append(str(err))\n            continue", "            raise",
      ("tests/test_checkpoint.py", "-k", "surviving_copy")),
    M("resume-config-compared-raw", "rlax_trpo/experiment/resume.py",
      "if _validated(record.config, record_file) != config:",
      "if record.config != config.to_dict():",
      ("tests/test_checkpoint.py", "-k", "added_later")),
    M("eval-no-checkpoint-unexplained", "rlax_trpo/experiment/saved.py",
      "        if not checkpoint.has_step(ckpt):", "        if False:",
      ("tests/test_checkpoint.py", "-k", "without_a_checkpoint")),
    M("eval-fallback-unsaid", "rlax_trpo/experiment/saved.py",
      "        if problem is not None:", "        if False:",
      ("tests/test_checkpoint.py", "-k", "which_step")),
    M("lock-names-out-on-resume", "rlax_trpo/experiment/folder.py",
      "RunLock.acquire(out, flag)", "RunLock.acquire(out)",
      ("tests/test_checkpoint.py", "-k", "two_resumes")),
    M("resume-keeps-leftover-steps", "rlax_trpo/experiment/folder.py",
      'remove_leftovers(out / "checkpoint", keep=plan.keep_checkpoints)',
      'remove_leftovers(out / "checkpoint")',
      ("tests/test_checkpoint.py", "-k", "pruned")),
    M("prune-counts-damaged-steps", "rlax_trpo/experiment/checkpoint.py",
      "verified += _verify(step) is None", "verified += 1",
      ("tests/test_checkpoint.py", "-k", "pruned")),
    M("prune-removes-latests-step", "rlax_trpo/experiment/checkpoint.py",
      "                if old.name != named:", "                if True:",
      ("tests/test_checkpoint.py", "-k", "pruned")),
    M("report-no-shared-task-crashes", "rlax_trpo/report/aggregate.py",
      "    for algo in algorithms if tasks else []:", "    for algo in algorithms:",
      ("tests/test_aggregate.py", "-k", "every_combination")),
    M("report-unfinished-run-unsaid", "rlax_trpo/report/inputs.py",
      "            notes.append(_skipped(sub))", "            pass",
      ("tests/test_aggregate.py", "-k", "unfinished_run")),
    M("report-notes-not-printed", "rlax_trpo/report/command.py",
      '        print(f"note: {note}")', "        pass",
      ("tests/test_aggregate.py", "-k", "unfinished_run")),
    M("report-sweep-refused", "rlax_trpo/report/inputs.py",
      "    return _sweep_records(file, summary, published, score, setting)",
      '    raise ReportError(f"{file}: a sweep; a table cell is one setting")',
      ("tests/test_aggregate.py", "-k", "sweep_reports")),
    M("report-setting-ignored", "rlax_trpo/report/inputs.py",
      "    if setting is not None:\n        index = _chosen(",
      "    if False:\n        index = _chosen(",
      ("tests/test_aggregate.py", "-k", "sweep_reports")),
    M("report-many-settings-table-wide", "rlax_trpo/report/tables.py",
      "    if len(algorithms) > WIDE_UP_TO:", "    if False:",
      ("tests/test_report_settings.py", "-k", "many_settings")),
    M("report-long-table-row-of-another-setting", "rlax_trpo/report/tables.py",
      "                cell = per_task[task].get(algo)\n                if cell is None:",
      "                cell = per_task[task].get(algorithms[0])\n                if cell is None:",
      ("tests/test_report_settings.py", "-k", "many_settings")),
    M("report-pbt-members-as-seeds", "rlax_trpo/report/inputs.py",
      '    if settings == 1 and isinstance(summary.get("pbt"), dict):', "    if False:",
      ("tests/test_report_settings.py", "-k", "population")),
    M("report-pbt-section-pools-with-none", "rlax_trpo/report/settings.py",
      '            flat[f"{prefix}{key}"] = SECTION\n', "",
      ("tests/test_report_settings.py", "-k", "never_pools")),
    M("report-budgets-unremarked", "rlax_trpo/report/settings.py",
      "    return cells, notes + _budget_notes(by_cell)", "    return cells, notes",
      ("tests/test_report_settings.py", "-k", "budgets")),
    M("report-four-seeds-called-a-ci", "rlax_trpo/report/aggregate.py",
      "MIN_SEEDS_FOR_CI = 5", "MIN_SEEDS_FOR_CI = 4",
      ("tests/test_aggregate.py", "tests/test_report.py", "-k",
       "end_to_end or each_cell_shows or too_few or legend_names")),
    M("report-range-column-shows-the-means-bootstrap", "rlax_trpo/report/tables.py",
      '    ranged = cell["interval"] == "range"', "    ranged = False",
      ("tests/test_aggregate.py", "-k", "range_column")),
    M("report-settings-not-split", "rlax_trpo/report/inputs.py",
      "    notes += split_by_settings(runs)\n", "",
      ("tests/test_report_settings.py", "-k", "rows_of_their_own")),
    M("report-settings-always-agree", "rlax_trpo/report/settings.py",
      "    return all(a[k] == b[k] for k in a.keys() & b.keys())", "    return True",
      ("tests/test_report_settings.py", "-k", "rows_of_their_own")),
    M("report-settings-missing-field-differs", "rlax_trpo/report/settings.py",
      "    return all(a[k] == b[k] for k in a.keys() & b.keys())",
      "    return all(a.get(k) == b.get(k) for k in a.keys() | b.keys())",
      ("tests/test_report_settings.py", "-k", "lacks")),
    M("report-settings-label-first-four-only", "rlax_trpo/report/settings.py",
      "    if sum(first(other) == first(settings) for other, _ in groups) > 1:",
      "    if False:",
      ("tests/test_report_settings.py", "-k", "past_the_fourth")),
    M("report-settings-how-fields-split", "rlax_trpo/report/settings.py",
      "if k not in HOW_NOT_WHAT}", "if k}",
      ("tests/test_report_settings.py", "-k", "how_they_compute")),
    M("report-command-overrides-ignored", "rlax_trpo/report/settings.py",
      "            overrides.append(token)", "            pass",
      ("tests/test_report_settings.py", "-k", "resolved")),
    M("report-stored-config-ignored", "rlax_trpo/report/settings.py",
      'published.get("config") or _resolve(', '_resolve(',
      ("tests/test_report_settings.py", "-k", "resolved")),
    M("per-task-figure-calls-every-cell-iqm", "rlax_trpo/report/render.py",
      '    return "range" if cell["seeds"] > 1 else "value"', '    return "iqm"',
      ("tests/test_aggregate.py", "-k", "says_what_each")),
    M("per-task-figure-draws-the-bootstrap-not-the-range", "rlax_trpo/report/render.py",
      '                if kind in ("range", "value"):  # what', '                if False:  # what',
      ("tests/test_aggregate.py", "-k", "says_what_each")),
    M("per-task-figure-four-seeds-bar-the-bootstrap", "rlax_trpo/report/render.py",
      '                elif kind == "iqm_range":', '                elif False:',
      ("tests/test_aggregate.py", "-k", "says_what_each")),
    M("curve-axis-names-the-key", "rlax_trpo/report/run_files.py",
      'ax.set_ylabel(f"{metric_label(ylabel)}{over}{average}")',
      'ax.set_ylabel(f"{ylabel}{over}{average}")',
      ("tests/test_report.py", "-k", "single_seed")),
    # Issue 41's input checks (rlax_trpo/config, experiment/plan.py, the signals before a run).
    M("config-numbers-unchecked", "rlax_trpo/config/checks.py",
      "        problem = _does_not_fit(key, value, host)\n", "        problem = None\n",
      ("tests/test_config.py", "-k", "config_create_refuses and ref_refresh_every")),
    M("config-products-unchecked", "rlax_trpo/config/checks.py",
      "            if product > INT32_MAX:", "            if False:",
      ("tests/test_config.py", "-k", "config_create_refuses and num_envs and total_env_steps")),
    M("iterations-not-counted-in-int32", "rlax_trpo/config/fields.py",
      "        if self.num_iterations > INT32_MAX:", "        if False:",
      ("tests/test_config.py", "-k", "config_create_refuses and num_envs and num_steps")),
    M("read-only-with-never-refuses", "rlax_trpo/config/checks.py",
      "        if not _changed(model, key):", "        if True:",
      ("tests/test_config.py", "-k", "config_create_refuses and n_step")),
    M("read-only-with-ignores-always-read", "rlax_trpo/config/checks.py",
      "            if conditions == ALWAYS_READ or merged.get(key, ()) is None:",
      "            if merged.get(key, ()) is None:",
      ("tests/test_config.py", "-k", "read_in_any_case")),
    M("env-kwargs-unchecked-by-config-create", "rlax_trpo/config/fields.py",
      "            checks.check_env_kwargs(self.env, self.env_kwargs)\n", "            pass\n",
      ("tests/test_config.py", "-k", "config_create_refuses and bogus")),
    M("config-validation-sets-up-the-host", "rlax_trpo/config/fields.py",
      "        envs.check_env_name(self.env)\n",
      "        platform.setup_cpu_for_run()\n        envs.check_env_name(self.env)\n",
      ("tests/test_platform.py", "-k", "building_a_config")),
    M("record-of-a-plan-drops-its-seed", "rlax_trpo/experiment/plan.py",
      "            self.seed,\n            self.sweep,", "            0,\n            self.sweep,",
      ("tests/test_resume.py", "-k", "seed")),
    M("env-kwargs-param-dtype-unchecked", "rlax_trpo/envs/gymnax_suite.py",
      "    if not low <= value <= high:", "    if False:",
      ("tests/test_config.py", "-k", "fit_the_parameter")),
    M("sweep-grid-unlimited", "rlax_trpo/config/sweep.py",
      "    if settings > MAX_SETTINGS:", "    if False:",
      ("tests/test_config.py", "-k", "grid_beyond")),
    M("sweep-and-override-of-one-key", "rlax_trpo/config/sweep.py",
      "        if field in given:", "        if False:",
      ("tests/test_config.py", "-k", "swept_key")),
    M("population-memory-unchecked", "rlax_trpo/experiment/memory_check.py",
      "    if state + rollout > available:", "    if False:",
      ("tests/test_config.py", "-k", "on_a_gpu or host_cannot")),
    M("population-beyond-int32", "rlax_trpo/experiment/plan.py",
      "    if plan.population > INT32_MAX:", "    if False:",
      ("tests/test_config.py", "-k", "bad_input and seeds and 300000")),
    M("run-arguments-unchecked", "rlax_trpo/experiment/plan.py",
      "        if path is not None and not str(path).strip():", "        if False:",
      ("tests/test_config.py", "-k", "run_arguments")),
    M("seed-beyond-32-bits", "rlax_trpo/experiment/plan.py",
      "not 0 <= given.seed <= MAX_SEED:", "not 0 <= given.seed < 2**63:",
      ("tests/test_config.py", "-k", "run_arguments")),
    M("empty-out-is-the-working-directory", "rlax_trpo/cli/parsers.py",
      "        if text.strip():\n            return Path(text)",
      "        if True:\n            return Path(text)",
      ("tests/test_config.py", "-k", "bad_input and empty")),
    M("signal-before-the-run-waits", "rlax_trpo/experiment/progress.py",
      "        if self.immediate:\n            raise Interrupted(signum)\n", "",
      ("tests/test_config.py", "-k", "signal_before")),
    M("registration-without-fields-mro", "rlax_trpo/config/configuration.py",
      "        __base__=model_bases(spec.fields, spec.base),",
      "        __base__=(spec.fields, spec.base),",
      ("tests/test_extending.py", "-k", "documented_registration")),
    M("undeclared-field-is-a-traceback", "rlax_trpo/config/configuration.py",
      '            if name.startswith("_"):\n                raise\n', "            raise\n",
      ("tests/test_extending.py", "-k", "documented_registration")),
    M("registration-parts-unchecked", "rlax_trpo/config/registry.py",
      "    _check_parts(fields=fields, hparams=hparams, base=base)\n", "",
      ("tests/test_extending.py", "-k", "documented_registration")),
    M("bf16-dense-ignores-its-dtype", "rlax_trpo/layers.py",
      "        dtype=dtype,", "        dtype=jnp.float32,",
      ("tests/test_networks.py", "-k", "bfloat16")),
    M("bf16-logits-left-in-bf16", "rlax_trpo/networks.py",
      "return dense(self.num_actions, 0.01, self.dtype)(x).astype(jnp.float32)",
      "return dense(self.num_actions, 0.01, self.dtype)(x)",
      ("tests/test_networks.py", "-k", "bfloat16")),
    M("bf16-values-left-in-bf16", "rlax_trpo/networks.py",
      "return dense(1, 1.0, self.dtype)(x)[..., 0].astype(jnp.float32)",
      "return dense(1, 1.0, self.dtype)(x)[..., 0]",
      ("tests/test_networks.py", "-k", "bfloat16")),
    M("bf16-memory-torso-float32", "rlax_trpo/memory.py",
      "self.hidden_sizes, self.activation, self.cnn, self.dtype, self.layer_norm",
      "self.hidden_sizes, self.activation, self.cnn, layer_norm=self.layer_norm",
      ("tests/test_networks.py", "-k", "bfloat16")),
    M("ppo-ent-coef-anneal-ignored", "rlax_trpo/algorithms/ppo.py",
      "        if config.anneal_ent_coef:", "        if False:",
      ("tests/test_ppo.py", "-k", "annealed_ent_coef")),
    M("ppo-ent-coef-annealed-one-update-late", "rlax_trpo/algorithms/ppo.py",
      "linear_decay(hp.ent_coef, state.updates, config.num_iterations)",
      "linear_decay(hp.ent_coef, state.updates + 1, config.num_iterations)",
      ("tests/test_ppo.py", "-k", "annealed_ent_coef")),
    M("categorical-log-prob-of-the-first-action", "rlax_trpo/networks.py",
      "        return draws, picked[..., 0]", "        return draws, log_probs[..., 0]",
      ("tests/test_networks.py", "-k", "categorical")),
    M("categorical-distrax-sampling", "rlax_trpo/networks.py",
      "        to_dist = lambda logits: Categorical(logits=logits)",
      "        to_dist = lambda logits: distrax.Categorical(logits=logits)",
      ("tests/test_networks.py", "-k", "categorical")),
    M("layer-norm-skipped", "rlax_trpo/layers.py",
      "            if self.layer_norm:", "            if False:",
      ("tests/test_networks.py", "-k", "layer_norm")),
    M("layer-norm-config-ignored", "rlax_trpo/networks.py",
      'ln = bool(getattr(config, "layer_norm", False))', "ln = False",
      ("tests/test_networks.py", "-k", "layer_norm")),
    M("value-layer-norm-ignored", "rlax_trpo/networks.py",
      "value_ln = ln if value_ln is None else bool(value_ln)", "value_ln = ln",
      ("tests/test_networks.py", "-k", "value_layer_norm")),
    M("value-layer-norm-memory-critic-as-policy", "rlax_trpo/networks.py",
      'v_rec, v_ff = part(value_net, v_cell, "value", value_hidden, value_ln)',
      'v_rec, v_ff = part(value_net, v_cell, "value", value_hidden, ln)',
      ("tests/test_networks.py", "-k", "value_layer_norm")),
    M("layer-norm-memory-torso-without", "rlax_trpo/memory.py",
      "self.hidden_sizes, self.activation, self.cnn, self.dtype, self.layer_norm",
      "self.hidden_sizes, self.activation, self.cnn, self.dtype",
      ("tests/test_networks.py", "-k", "layer_norm")),
    M("layer-norm-after-the-nonlinearity", "rlax_trpo/layers.py",
      "            x = dense(size, np.sqrt(2), self.dtype)(x)\n",
      "            x = act(dense(size, np.sqrt(2), self.dtype)(x))\n",
      ("tests/test_networks.py", "-k", "layer_norm")),
    M("bf16-config-ignored", "rlax_trpo/networks.py",
      'dtype = jnp.dtype(getattr(config, "compute_dtype", "float32"))',
      'dtype = jnp.dtype("float32")',
      ("tests/test_networks.py", "-k", "bfloat16")),
    M("flat-step-unclipped", "rlax_trpo/algorithms/common.py",
      "optimizer, flat_params, opt_state, flat_grads, max_grad_norm",
      "optimizer, flat_params, opt_state, flat_grads, jnp.float32(jnp.inf)",
      ("tests/test_common.py", "-k", "flat_optimiser")),
    M("ppo-per-leaf-optimiser", "rlax_trpo/algorithms/ppo.py",
      "            flat=True,", "            flat=False,",
      ("tests/test_ppo.py::test_first_minibatch_ratio_is_one",)),
    M("benchmark-overrides-after-lists", "benchmarks/_publish.py",
      "if not after_option and re.fullmatch(", "if False and re.fullmatch(",
      ("tests/test_benchmarks.py", "-k", "overrides_are_read_anywhere")),
    M("benchmark-option-values-taken-for-overrides", "benchmarks/_publish.py",
      "after_option = i > 0 and words[i - 1] in takes_value", "after_option = False",
      ("tests/test_benchmarks.py", "-k", "overrides_are_read_anywhere")),
    M("memory-checked-after-placement", "rlax_trpo/experiment/driver.py",
      "    check_memory(plan, program)  # before anything is allocated\n"
      "    placement = place(plan, program)\n",
      "    placement = place(plan, program)\n    check_memory(plan, program)\n",
      ("tests/test_config.py", "-k", "cannot_hold")),
    M("gpu-suite-tests-quiet", "benchmarks/gpu_suite.py",
      'base = [PY, "-m", "pytest", "-v",', 'base = [PY, "-m", "pytest", "-q",',
      ("tests/test_gpu_suite.py", "-k", "cut_before_its_report")),
    M("gpu-suite-log-failures-unread", "benchmarks/gpu_suite.py",
      "**_collected(log_text), **_failed_in_log(log_text)}", "**_collected(log_text)}",
      ("tests/test_gpu_suite.py", "-k", "cut_before_its_report")),
    # pretrained language models (rlax_trpo/lm/hf, answers, bank, the pretrained program)
    M("hf-rope-turns-the-other-way", "rlax_trpo/lm/hf/model.py",
      "rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)",
      "rotated = jnp.concatenate([x32[..., half:], -x32[..., :half]], axis=-1)",
      ("tests/test_lm_hf.py", "-k", "rope_turns")),
    M("hf-query-heads-grouped-across", "rlax_trpo/lm/hf/model.py",
      "q = q.reshape(b, s, kv, cfg.group_size, d)",
      "q = q.reshape(b, s, cfg.group_size, kv, d).swapaxes(2, 3)",
      ("tests/test_lm_hf.py", "-k", "grouped_query_heads")),
    M("hf-left-padding-attended", "rlax_trpo/lm/hf/model.py",
      "k_slots[None, None, :] >= pad[:, None, None]", "k_slots[None, None, :] >= 0",
      ("tests/test_lm_hf.py", "-k", "left_padding")),
    M("hf-lora-unscaled", "rlax_trpo/lm/hf/model.py",
      "y = y + (self.alpha / self.rank) * low", "y = y + low",
      ("tests/test_lm_hf.py", "-k", "lora")),
    M("hf-rope-v5-settings-unread", "rlax_trpo/lm/hf/config.py",
      'params = raw.get("rope_parameters")', "params = None",
      ("tests/test_lm_hf.py", "-k", "rope_settings")),
    M("hf-llama3-blend-skipped", "rlax_trpo/lm/hf/config.py",
      "return np.where(medium, blended, scaled).astype(np.float32)",
      "return scaled.astype(np.float32)",
      ("tests/test_lm_hf.py", "-k", "llama3_frequencies")),
    M("hf-unused-tensor-accepted", "rlax_trpo/lm/hf/checkpoint.py",
      "    if unused:\n", "    if False:\n",
      ("tests/test_lm_hf.py", "-k", "misshapen")),
    M("hf-tensor-shape-unchecked", "rlax_trpo/lm/hf/checkpoint.py",
      "if tuple(array.shape) != tuple(shape):", "if False:",
      ("tests/test_lm_hf.py", "-k", "misshapen")),
    M("hf-export-lora-unmerged", "rlax_trpo/lm/hf/checkpoint.py",
      'if path[-1] == "kernel" and path[:-1] + ("lora_a",) in flat:', "if False:",
      ("tests/test_lm_hf.py", "-k", "lora")),
    M("hf-end-ids-of-generation-config-unread", "rlax_trpo/lm/hf/tokenizer.py",
      'eos = _ids(generation.get("eos_token_id"))', "eos = []",
      ("tests/test_lm_answers.py", "-k", "tokenizer_files")),
    M("lm-sampler-one-end-id", "rlax_trpo/lm/sampling.py",
      "ended = carry.done | (alive & jnp.isin(token, eos))",
      "ended = carry.done | (alive & (token == eos[0]))",
      ("tests/test_lm_hf.py", "-k", "several_end_ids")),
    M("lm-chunks-merged-out-of-order", "rlax_trpo/lm/sampling.py",
      "merge = lambda x: jnp.moveaxis(x, 0, 1).reshape(x.shape[1], n * chunk)[:, :length]",
      "merge = lambda x: x.reshape(x.shape[1], n * chunk)[:, :length]",
      ("tests/test_lm_hf.py", "-k", "chunked")),
    M("lm-pi-old-always-the-loss-own", "rlax_trpo/lm/grpo.py",
      "one_pass = cfg.num_epochs == 1 and cfg.num_minibatches == 1", "one_pass = True",
      ("tests/test_lm_grpo.py", "-k", "ratio_is_one")),
    M("answers-special-tokens-break-numbers", "rlax_trpo/lm/answers.py",
      "breaks = (codes > NEUTRAL) & ~digit", "breaks = ~digit",
      ("tests/test_lm_answers.py", "-k", "by_hand")),
    M("answers-format-without-its-hash", "rlax_trpo/lm/answers.py",
      "valid & hashed & clean & ended", "valid & clean & ended",
      ("tests/test_lm_answers.py", "-k", "by_hand")),
    M("answers-anything-after-the-answer", "rlax_trpo/lm/answers.py",
      "clean = ~jnp.any(after & ((codes == OTHER) | (codes == HASH)), axis=1)",
      "clean = jnp.ones_like(last, bool)",
      ("tests/test_lm_answers.py", "-k", "by_hand")),
    M("answers-digits-of-any-length", "rlax_trpo/lm/answers.py",
      "jnp.where(parsed.valid & (got_count == count), frac, 0.0)",
      "jnp.where(parsed.valid, frac, 0.0)",
      ("tests/test_lm_answers.py", "-k", "digits_reward")),
    M("bank-prompts-right-padded", "rlax_trpo/lm/bank.py",
      "tokens[i, width - len(x) :] = x", "tokens[i, : len(x)] = x",
      ("tests/test_lm_answers.py", "-k", "left_padded")),
    M("bank-held-out-problems-also-trained", "rlax_trpo/lm/bank.py",
      "train = [p for p in problems if not held_out(p.question)]", "train = list(problems)",
      ("tests/test_lm_answers.py", "-k", "left_padded")),
    M("lm-lora-run-trains-every-weight", "rlax_trpo/lm/pretrained_program.py",
      "params = init_adapters(model, k_lora) if lora else shared.weights",
      "params = shared.weights",
      ("tests/test_lm_pretrained.py", "-k", "only_its_adapters")),
    M("model-layout-splits-nothing", "rlax_trpo/experiment/parallel.py",
      'return PartitionSpec(*([None] * axis), "model")', "return PartitionSpec()",
      ("tests/test_lm_hf.py", "-k", "model_layout")),
    M("lm-tiny-keys-read-with-a-pretrained-model", "rlax_trpo/lm/config.py",
      "unread = TINY_ONLY if pretrained else PRETRAINED_ONLY", "unread = ()",
      ("tests/test_lm_pretrained.py", "-k", "bad_input")),
]  # fmt: skip


# Each job's forking process imports these once (seconds of every mutant's pytest run on a
# 2-core CPU): third-party libraries only, since a mutant changes this repository's code, which
# every child imports afresh from its copy; none of them starts JAX's backend at import
# (gymnax's does: not here). The only threads they start are OpenBLAS's worker pools (numpy's,
# and scipy's through distrax's tensorflow_probability), which OpenBLAS re-creates in a forked
# child (with OPENBLAS_NUM_THREADS=1 no import here starts a thread).
PRELOAD = (
    "numpy",
    "scipy",
    "jax",
    "jax.numpy",
    "flax.linen",
    "optax",
    "chex",
    "orbax.checkpoint",
    "pydantic",
    "yaml",
    "matplotlib",
    "matplotlib.figure",
    "pytest",
    "distrax",  # about 1 s of every child's import of rlax_trpo.networks
)

# The forking process: reads one job a line (JSON), forks, and in the child runs pytest as
# `python -m pytest` would in a fresh process (working directory, environment, the copy first
# on the path, output to a log file); answers the child's pid, then its exit status.
FORKER = r"""
import importlib, json, os, sys, traceback
for name in sys.argv[1:]:
    importlib.import_module(name)
from jax._src import xla_bridge
assert not xla_bridge.backends_are_initialized(), "a preloaded library started JAX"
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            sys.path.insert(0, job["cwd"])
            importlib.invalidate_caches()
            log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            import pytest
            code = int(pytest.main(job["args"]))
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Forker:
    """One process that imported `PRELOAD` and forks a pytest run per request (one per job)."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKER, *PRELOAD],
            cwd=tempfile.gettempdir(),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def pytest(
        self, cwd: Path, args: list[str], env: dict[str, str], timeout: float
    ) -> tuple[int, str]:
        """pytest `args` in `cwd` with `env` (which must differ from the forker's own only in
        PYTHONPATH, the copy: JAX read the rest when it was imported); (exit status, output)."""
        assert {k: v for k, v in env.items() if k != "PYTHONPATH"} == self.env, "environment"
        fd, name = tempfile.mkstemp(prefix="mutant-pytest-", suffix=".txt")
        os.close(fd)
        log = Path(name)
        job = {"cwd": str(cwd), "env": env, "args": args, "log": name}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self.proc.stdout.readline())["pid"]
        timer = threading.Timer(timeout, lambda: os.kill(pid, signal.SIGKILL))
        timer.start()
        try:
            status = json.loads(self.proc.stdout.readline())["status"]
        finally:
            timer.cancel()
        output = log.read_text(errors="replace")
        log.unlink()
        return status, output

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


FORKERS: queue.Queue[Forker] = queue.Queue()
TIMEOUT = 600  # seconds a mutant's tests may take (the slowest take about 1 minute)


def run(mutant: Mutant, control: bool = False) -> tuple[bool | None, float, str]:
    """(tests failed, seconds, last lines of pytest's output); None when pytest itself did not
    run the tests (exit status other than 0 or 1: an error collecting or importing them), which
    is neither a kill nor a survival."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        copy = Path(tmp)
        for part in ("rlax_trpo", "tests", "configs", "notebooks", "train.py", "pyproject.toml",
                     "README.md", "LICENSE", "CITATION.cff", "CHANGELOG.md", ".ci",
                     "benchmarks"):  # fmt: skip
            src = ROOT / part
            if src.is_dir():  # benchmarks/ without its results (JSON only the docs read)
                ignore = shutil.ignore_patterns("__pycache__", "results")
                shutil.copytree(src, copy / part, ignore=ignore)
            else:
                shutil.copy2(src, copy / part)
        path = copy / mutant.file
        text = path.read_text()
        if text.count(mutant.old) != 1:
            raise SystemExit(
                f"{mutant.name}: the text to change occurs {text.count(mutant.old)} times"
            )
        if not control:
            path.write_text(text.replace(mutant.old, mutant.new))
        env = {**os.environ, "PYTHONPATH": str(copy)}
        args = ["-q", "-x", "-p", "no:cacheprovider", *mutant.tests]
        start = time.perf_counter()
        if FORKERS.empty():  # --no-fork: a fresh process
            proc = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=copy, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
            code, output = proc.returncode, proc.stdout + proc.stderr
        else:
            forker = FORKERS.get()
            try:
                code, output = forker.pytest(copy, args, env, TIMEOUT)
            finally:
                FORKERS.put(forker)
        seconds = time.perf_counter() - start
        lines = output.strip().splitlines()
        tail = "\n".join(lines[-3:])
        if code == 5 or "no tests ran" in output:
            raise SystemExit(f"{mutant.name}: the selected tests do not exist\n{tail}")
        if code not in (0, 1):
            return None, seconds, f"pytest exit status {code}\n" + "\n".join(lines[-12:])
        return code == 1, seconds, tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("words", nargs="*", help="run only mutants whose name contains these")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--control", action="store_true", help="run the selections unchanged")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="mutants tested at once (default: one per CPU core)")  # fmt: skip
    parser.add_argument("--no-fork", action="store_true",
                        help="each mutant's pytest in a fresh process (slower)")  # fmt: skip
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.words or any(w in m.name for w in args.words)]
    if args.list:
        for m in chosen:
            print(f"{m.name:40s} {m.file}  ->  {' '.join(m.tests)}")
        return 0
    # Every mutant's text must occur exactly once, checked before anything runs.
    ambiguous = [
        f"{m.name}: the text to change occurs {n} times in {m.file}"
        for m in chosen
        if (n := (ROOT / m.file).read_text().count(m.old)) != 1
    ]
    if ambiguous:
        print("\n".join(ambiguous), file=sys.stderr)
        return 2
    bad = []
    start = time.perf_counter()
    # The environment every test process gets: the suite's (tests/suite_env.py), set before
    # the forking processes import JAX, and small budgets.
    suite_env.set_defaults(os.environ)
    os.environ["RLAX_TRPO_SMALL"] = "1"
    os.environ.pop("PYTHONPATH", None)
    forkers = [] if args.no_fork else [Forker(dict(os.environ)) for _ in range(max(args.jobs, 1))]
    for forker in forkers:
        FORKERS.put(forker)
    try:
        with ThreadPoolExecutor(max(args.jobs, 1)) as pool:  # each mutant is its own process
            futures = {pool.submit(run, m, args.control): m for m in chosen}
            results = [(futures[f], *f.result()) for f in as_completed(futures)]
    finally:
        for forker in forkers:
            forker.close()
    for m, failed, seconds, tail in sorted(results, key=lambda r: chosen.index(r[0])):
        if failed is None:
            word, ok = "ERROR   ", False
        elif args.control:
            word, ok = ("passes  " if not failed else "FAILS   "), not failed
        else:
            word, ok = ("killed  " if failed else "SURVIVED"), failed
        print(f"{word} {m.name:40s} {seconds:6.1f} s", flush=True)
        if not ok:
            bad.append(m.name)
            print("    " + tail.replace("\n", "\n    "), flush=True)
    what = "selections pass unchanged" if args.control else "mutants killed"
    wall = time.perf_counter() - start
    print(
        f"{len(chosen) - len(bad)} of {len(chosen)} {what} ({wall / 60:.1f} min, {args.jobs} jobs)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
