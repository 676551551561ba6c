"""jax.scipy.sparse.linalg.cg with its default x0 inside a vmapped TRPO program on CPU
(docs/upstream/cg_unbatched_x0.md).

    python docs/upstream/repro/cg_unbatched_x0.py default   # cg's own x0 = zeros_like(b)
    python docs/upstream/repro/cg_unbatched_x0.py batched   # x0 = 0 * b (what rlax_trpo passes)

Trains TRPO on CartPole-v1 (configs/trpo_cartpole.yaml, 20 iterations) for 8 seeds in one
`jit(vmap(.))` and prints the largest relative CG residual ||F s - g|| / ||g|| and the mean
final return. Run it several times: the default-x0 result changes between processes.
"""

import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rlax_trpo import run  # noqa: E402
from rlax_trpo import trust_region as tr  # noqa: E402
from rlax_trpo.config import config_from_dict, read_yaml  # noqa: E402

if sys.argv[1:] == ["default"]:

    def default_x0_cg(matvec, b, maxiter, tol=1e-5):
        return jax.scipy.sparse.linalg.cg(matvec, b, tol=tol, maxiter=maxiter)[0]

    tr.jax_cg = default_x0_cg
elif sys.argv[1:] != ["batched"]:
    sys.exit("usage: cg_unbatched_x0.py default|batched")

raw = read_yaml(ROOT / "configs" / "trpo_cartpole.yaml")
raw["total_env_steps"] = 20 * 1024
result = run(config_from_dict(raw), seeds=8, out=Path(tempfile.mkdtemp()) / "run", progress=False)
residual = np.asarray(result.metrics["trpo/cg_residual"])
final = np.mean(result.summary["members"][0]["final_return_per_seed"])
print(f"{sys.argv[1]}: max cg residual {np.nanmax(residual):.1e}, mean final return {final:.0f}")
