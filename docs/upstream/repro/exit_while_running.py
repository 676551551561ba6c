"""Ends while its training run is still computed: jax dispatched it asynchronously, and the
script only prints the shape of the result. With `RLAX_TRPO_EXIT_WAIT=off` (the state before
`rlax_trpo.platform.finish_computations_at_exit`), some runs die of SIGSEGV after printing.

    for i in $(seq 30); do python docs/upstream/repro/exit_while_running.py; echo $?; done
"""

import os

import jax

import rlax_trpo.platform
from rlax_trpo import Config, make_train

if os.environ.get("RLAX_TRPO_EXIT_WAIT") == "off":  # what a script got before the fix
    rlax_trpo.platform._EXIT_WAIT_REGISTERED = True

config = Config.create(algorithm="ppo", env="CartPole-v1", total_env_steps=50_000)
train = make_train(config)
keys = jax.random.split(jax.random.key(0), 8)
state, metrics = jax.jit(jax.vmap(train, in_axes=(0, None)))(keys, config.hp)
print(metrics["episode/return"].shape)
