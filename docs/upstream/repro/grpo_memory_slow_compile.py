"""Compile time of a GRPO run with a GRU policy on XLA:CPU, at two sizes.

    timeout 900 python docs/upstream/repro/grpo_memory_slow_compile.py 2 8   # groups of 2, GRU of 8
    timeout 900 python docs/upstream/repro/grpo_memory_slow_compile.py 4 16  # groups of 4, GRU 16

Prints the seconds to lower and to compile `jit(train)` of a 3-iteration run on
velocity-free CartPole (4 or 8 environments of 16 steps).
"""

import sys
import time

from rlax_trpo.platform import setup_cpu

setup_cpu()

import jax  # noqa: E402

from rlax_trpo import Config, make_trainer  # noqa: E402

group, size = int(sys.argv[1]), int(sys.argv[2])
config = Config.create(
    algorithm="grpo", env="pomdp/CartPole-v1", memory="gru", memory_size=size,
    hidden_sizes=(16,), num_envs=2 * group, num_steps=16, total_env_steps=6 * 16 * group,
    group_size=group, num_minibatches=2 if group == 2 else 1,
)  # fmt: skip
trainer = make_trainer(config)
t0 = time.time()
lowered = jax.jit(trainer.train).lower(jax.random.key(0), config.hp)
print(f"lowered in {time.time() - t0:.1f} s", flush=True)
t0 = time.time()
lowered.compile()
print(f"compiled in {time.time() - t0:.1f} s", flush=True)
