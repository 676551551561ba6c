"""The population's functions: a Program's `init`, `run` and `evaluate` vmapped over its
members, with `Program.shared` (the arrays every member reads) given to each as it is."""

from __future__ import annotations

import weakref
from typing import Any

import jax

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


def population_evaluator(program: Program):
    """`evaluate_population(state [population], key_data [population], shared) -> scores`."""

    def evaluate_population(state, key_data, shared=None):
        evaluate = _bound(program.evaluate, program, shared)
        return jax.vmap(evaluate)(state, jax.random.wrap_key_data(key_data))

    return evaluate_population
