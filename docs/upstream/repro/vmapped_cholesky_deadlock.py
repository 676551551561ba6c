"""jaxlib CPU: a batched Cholesky or triangular solve sharded over 2 host devices deadlocks
(docs/upstream/cpu_lapack_deadlock.md).

    export XLA_FLAGS=--xla_force_host_platform_device_count=2
    timeout 30 python vmapped_cholesky_deadlock.py
    timeout 30 python vmapped_cholesky_deadlock.py trsm 1024 16
    timeout 30 python vmapped_cholesky_deadlock.py cholesky 1024 16 hlo  # XLA's expander: finishes

Arguments: op (cholesky | trsm), batch, matrix size, lowering (lapack | hlo). Needs only jax.
Prints "ok ..." when it finishes; a hang leaves the process at 0% CPU.
"""

import sys
import time

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

op = sys.argv[1] if len(sys.argv) > 1 else "cholesky"
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
n = int(sys.argv[3]) if len(sys.argv) > 3 else 16
if len(sys.argv) > 4 and sys.argv[4] == "hlo":  # the platform-independent lowering, on CPU
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg

    for p in (linalg.cholesky_p, linalg.triangular_solve_p):
        mlir.register_lowering(p, mlir._lowerings[p].rule, platform="cpu")


def one(k):
    a = jax.random.normal(k, (n, n)) / n**0.5 + 2 * jnp.eye(n)
    if op == "cholesky":
        return jnp.linalg.cholesky(a @ a.T)
    return jax.scipy.linalg.solve_triangular(jnp.tril(a), jnp.ones((n, n)), lower=True)


f = jax.jit(jax.vmap(one))
keys = jax.random.split(jax.random.key(0), batch)
if jax.device_count() > 1:
    keys = jax.device_put(keys, NamedSharding(Mesh(jax.devices(), ("b",)), P("b")))
calls = sorted({ln.split("@")[1].split("(")[0] for ln in f.lower(keys).as_text().splitlines()
                if "custom_call @lapack" in ln})  # fmt: skip
t = time.time()
for _i in range(20):
    jax.block_until_ready(f(keys))
print("ok", op, jax.device_count(), batch, n, calls, round(time.time() - t, 2), flush=True)
