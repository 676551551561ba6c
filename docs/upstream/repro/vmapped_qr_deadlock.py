"""jaxlib CPU: a batched QR sharded over 2 host devices deadlocks
(docs/upstream/cpu_qr_deadlock.md).

    XLA_FLAGS=--xla_force_host_platform_device_count=2 timeout 30 python vmapped_qr_deadlock.py

Needs only jax. Prints "ok ..." when it finishes; a hang leaves the process at 0% CPU.
"""

import sys
import time

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

n_dev = jax.device_count()
batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8


@jax.jit
def f(keys):
    return jax.vmap(lambda k: jax.random.orthogonal(k, 64))(keys)


keys = jax.random.split(jax.random.key(0), batch)
if n_dev > 1:
    keys = jax.device_put(keys, NamedSharding(Mesh(jax.devices(), ("b",)), P("b")))
t = time.time()
for _i in range(20):
    jax.block_until_ready(f(keys))
print("ok", n_dev, batch, round(time.time() - t, 2), flush=True)
