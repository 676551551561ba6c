"""XLA:CPU of jaxlib 0.11.0-0.11.2 does not finish compiling jax's straight-line threefry
hash (the lowering jax uses on GPU) once it is vmapped over 3 or more keys.

    python threefry_straight_line_hang.py straight 4   # jaxlib 0.11.x: no end (> 60 s)
    python threefry_straight_line_hang.py straight 2   # 0.2 s
    python threefry_straight_line_hang.py rolled 4     # jax's own CPU lowering: 0.8 s

Needs only jax. `straight` registers jax's straight-line lowering for the CPU, as
rlax_trpo.platform.unroll_threefry_on_cpu does on jaxlib 0.10.
"""

import sys
import time

import jax
import jax.numpy as jnp

mode, width = sys.argv[1], int(sys.argv[2])
if mode == "straight":
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32 as threefry

    mlir.register_lowering(
        threefry.threefry2x32_p, threefry._threefry2x32_lowering_rule, platform="cpu"
    )


def reset(key):  # gymnax CartPole's reset: four uniform numbers
    s = jax.random.uniform(key, minval=-0.05, maxval=0.05, shape=(4,))
    return s[0], s[1], s[2], s[3]


def body(carry, _):
    key, state = carry
    key, sub = jax.random.split(key)
    state = jax.vmap(reset)(jax.random.split(sub, width))
    return (key, state), state[0].sum()


def run(key):
    z = jnp.zeros(width)
    return jax.lax.scan(body, (key, (z, z, z, z)), None, length=1)[1]


start = time.time()
jax.jit(run).lower(jax.random.key(0)).compile()
print(f"jax {jax.__version__}, {mode}, {width} keys: compiled in {time.time() - start:.2f} s")
