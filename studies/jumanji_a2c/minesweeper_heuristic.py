"""Does our Jumanji adapter's Minesweeper observation carry what a good policy needs?

A fixed rule through `rlax_trpo.envs.make_env("jumanji/Minesweeper-v0")`: reveal a hidden
square next to a revealed 0 when there is one (it cannot be a mine), else a hidden square at
random; beside it, a hidden square at random. Prints the mean episode return of each over 256
episodes. Run: `python studies/jumanji_a2c/minesweeper_heuristic.py`.
"""

import jax
import jax.numpy as jnp

from rlax_trpo.envs import make_env

ENV = make_env("jumanji/Minesweeper-v0")  # board [100] (-1 hidden, 0-8), mask [100], 2 counts


def act(key, obs, rule):
    board = obs[:100].reshape(10, 10)
    hidden = board == -1
    zeros = jnp.pad((board == 0).astype(jnp.float32), 1)
    by_a_zero = sum(zeros[1 + i : 11 + i, 1 + j : 11 + j] for i in (-1, 0, 1) for j in (-1, 0, 1))
    safe = hidden & (by_a_zero > 0) & rule
    pick = jnp.where(safe.any(), safe, hidden)
    return jax.random.categorical(key, jnp.where(pick, 0.0, -jnp.inf).reshape(-1))


def episode_return(key, rule):
    obs, state = ENV.reset(key)

    def step(carry, k):
        obs, state, ret, done = carry
        res = ENV.step(k, state, act(k, obs, rule))
        ret = ret + jnp.where(done, 0.0, res.reward)
        return (res.obs, res.state, ret, done | res.terminated | res.truncated), None

    keys = jax.random.split(jax.random.fold_in(key, 1), 100)  # an episode has <= 90 steps
    return jax.lax.scan(step, (obs, state, 0.0, False), keys)[0][2]


if __name__ == "__main__":
    keys = jax.random.split(jax.random.key(0), 256)
    for name, rule in (("uniform over the hidden squares", False), ("next to a revealed 0", True)):
        returns = jax.jit(jax.vmap(lambda k, r=rule: episode_return(k, r)))(keys)
        print(f"{name}: mean return {float(returns.mean()):.2f} over {returns.shape[0]} episodes")
