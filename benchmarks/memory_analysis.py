#!/usr/bin/env python
"""What one training iteration of a population holds in memory, by XLA's own account.

Compiles (never runs) `run` of a bundled config's program for one iteration, vmapped over
`--seeds` members as `rlax_trpo.run` vmaps them, and prints `compiled.memory_analysis()`:
arguments (the population's state), outputs, the bytes they share (the run donates its
input state, as the library's chunks do), the temporaries XLA's buffer assignment
allocates and the total the program holds, beside the state's largest leaves. With
`--largest N` also the N largest temporary values (XLA's buffer-assignment dump, read back
from a scratch folder), which say where the memory goes.

    python benchmarks/memory_analysis.py trpo_memory_craftax --seeds 4 \
        --json benchmarks/results/memory_analysis_trpo_memory_craftax_2core.json
    python benchmarks/memory_analysis.py trpo_memory_craftax --seeds 4 line_search_batch=0

On the CPU the XLA:CPU fast-compile flags (`rlax_trpo.platform.FAST_COMPILE_XLA_FLAGS`) are
used unless XLA_FLAGS is set: buffer sizes are those of the program, not of the code
generation. Published: docs/performance.md (memory of recurrent TRPO on Craftax).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _publish import publish

from rlax_trpo.platform import FAST_COMPILE_XLA_FLAGS

GIB = 2**30


def largest_temporaries(dump: Path, count: int) -> list[tuple[str, float]]:
    """The `count` largest values of the run program's temporary allocation."""
    files = sorted(dump.glob("*jit_run*buffer-assignment.txt"))
    if not files:
        return []
    text = files[-1].read_text()
    temp = re.search(r"^allocation \d+: size \d+, preallocated-temp:\n(.*?)(?=^allocation |\Z)",
                     text, re.S | re.M)  # fmt: skip
    values = re.findall(r"value: <\d+ (\S+) [^>]*> \(size=(\d+),offset=\d+\): (\S+)",
                        temp.group(1) if temp else "")  # fmt: skip
    seen, out = set(), []
    for name, size, shape in sorted(values, key=lambda v: -int(v[1])):
        if shape not in seen:  # one line per shape: a buffer's aliases share it
            seen.add(shape)
            out.append((f"{shape} ({name})", int(size) / GIB))
        if len(out) == count:
            break
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a bundled config's name")
    parser.add_argument("overrides", nargs="*", help="key=value overrides")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--largest", type=int, default=10, help="temporaries listed (0: none)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_intermixed_args()
    dump = Path(tempfile.mkdtemp(prefix="memory-analysis-"))
    if "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = FAST_COMPILE_XLA_FLAGS
    if args.largest:
        os.environ["XLA_FLAGS"] += f" --xla_dump_to={dump} --xla_dump_hlo_module_re=.*jit_run.*"
    from rlax_trpo.platform import setup_cpu

    setup_cpu()
    import jax
    import jax.numpy as jnp

    from rlax_trpo.config import load_config
    from rlax_trpo.experiment.program import make_program

    program = make_program(load_config(args.config, args.overrides))
    keys = jax.random.split(jax.random.key(0), args.seeds)
    hps = jax.tree.map(lambda x: jnp.broadcast_to(x, (args.seeds, *jnp.shape(x))), program.hparams)
    state = jax.eval_shape(jax.vmap(program.init), keys, hps)
    t0 = time.perf_counter()
    # As the library compiles a run's chunks: the state a chunk reads is donated.
    run = jax.jit(jax.vmap(program.run, in_axes=(0, 0, None)), static_argnums=2, donate_argnums=0)
    memory = run.lower(state, hps, 1).compile().memory_analysis()
    leaves = jax.tree_util.tree_leaves_with_path(state)
    biggest = sorted(leaves, key=lambda kv: -kv[1].size * kv[1].dtype.itemsize)[:5]
    figures = {
        "config": args.config,
        "overrides": args.overrides,
        "seeds": args.seeds,
        "platform": jax.devices()[0].platform,
        "compile_seconds": round(time.perf_counter() - t0, 1),
        "argument_gib": memory.argument_size_in_bytes / GIB,
        "output_gib": memory.output_size_in_bytes / GIB,
        "alias_gib": memory.alias_size_in_bytes / GIB,
        "temp_gib": memory.temp_size_in_bytes / GIB,
        "total_gib": (
            memory.argument_size_in_bytes
            + memory.output_size_in_bytes
            - memory.alias_size_in_bytes
            + memory.temp_size_in_bytes
        )
        / GIB,
        "temp_gib_per_seed": memory.temp_size_in_bytes / GIB / args.seeds,
        "largest_state_leaves_gib": [
            (jax.tree_util.keystr(k), v.size * v.dtype.itemsize / GIB) for k, v in biggest
        ],
        "largest_temporaries_gib": largest_temporaries(dump, args.largest),
    }
    shutil.rmtree(dump, ignore_errors=True)
    publish("memory_analysis", figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
