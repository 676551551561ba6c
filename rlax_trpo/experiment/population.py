"""The population's functions: a Program's `init`, `run` and `evaluate` vmapped over its
members, with `Program.shared` (the arrays every member reads) given to each as it is."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp

from rlax_trpo.schedules import traced_horizon
from rlax_trpo.types import Program

_INITIALIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _bound(fn, program: Program, shared: Any):  # `fn` given `shared` where it takes it
    return fn if program.shared is None else (lambda *args: fn(*args, shared))


def population_initializer(program: Program):
    """`init_population(key_data [population, ...], hp [population], shared) -> state`:
    `init` vmapped (the compiled program keeps that name), `shared` (`Program.shared`, None
    where there is none) given to every member as it is. One function per `program.init`, so
    that jax traces it once for the memory check, the state's shardings and the compilation."""
    found = _INITIALIZERS.get(program.init)
    if found is None:

        def init_population(key_data, hp, shared=None):
            init = _bound(program.init, program, shared)
            return jax.vmap(init)(jax.random.wrap_key_data(key_data), hp)

        found = _INITIALIZERS[program.init] = init_population
    return found


def population_runner(program: Program):
    """`run(state, hp, num_iterations, shared)`: `program.population_run`, or `program.run`
    vmapped over the members. Named `run`, the name its compiled program and the XLA dumps
    have (benchmarks/memory_analysis.py picks `jit_run` out of a dump)."""

    def run(state, hp, num_iterations, shared=None):
        if program.population_run is not None:
            return program.population_run(state, hp, num_iterations)
        member_run = _bound(program.run, program, shared)
        return jax.vmap(lambda s, h: member_run(s, h, num_iterations))(state, hp)

    return run


def population_segment(program: Program, capacity: int):
    """`segment(state, hp, n, horizon, shared) -> (state, metrics [population, capacity])`:
    `n` iterations (a traced int32, 1 to `capacity`) of the population, the first `n`
    columns of each metric filled (the rest zero), schedules decaying over the traced
    `horizon` (`rlax_trpo.schedules`). Neither the budget nor the number of iterations a
    call runs is in the program, so one compilation serves every budget, every chunk length
    and every resumed run. An iteration is `run(state, hp, 1)`, the same steps a whole run's
    `lax.scan` takes, so any split into calls gives the same numbers."""
    runner = population_runner(program)

    def run(state, hp, n, horizon, shared=None):  # named as the single call's (`jit_run`)
        step = lambda s: runner(s, hp, 1, shared)
        schedules = traced_horizon(horizon) if program.horizon else contextlib.nullcontext()
        with schedules:  # one iteration traced once (for its shapes too), replayed in the loop
            traced, shapes = jax.make_jaxpr(step, return_shape=True)(state)
        one = jax.extend.core.jaxpr_as_fun(traced)
        rows = jax.tree.map(
            lambda m: jnp.zeros((m.shape[0], capacity, *m.shape[2:]), m.dtype), shapes[1]
        )

        def body(i, carry):
            state, rows = carry
            state, metrics = jax.tree.unflatten(
                jax.tree.structure(shapes), one(*jax.tree.leaves(state))
            )
            put = lambda r, m: jax.lax.dynamic_update_slice_in_dim(r, m, i, axis=1)
            return state, jax.tree.map(put, rows, metrics)

        return jax.lax.fori_loop(0, n, body, (state, rows))

    return run


def population_evaluator(program: Program):
    """`evaluate_population(state [population], key_data [population], shared) -> scores`."""

    def evaluate_population(state, key_data, shared=None):
        evaluate = _bound(program.evaluate, program, shared)
        return jax.vmap(evaluate)(state, jax.random.wrap_key_data(key_data))

    return evaluate_population
