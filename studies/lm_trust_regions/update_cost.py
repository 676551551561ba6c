"""What one TRPO update of `grpo_lm` costs, piece by piece, on a pretrained model's LoRA tree.

    python train.py tiny-lm --out runs/lm_trust_regions/tiny_lm --steps 1500
    python studies/lm_trust_regions/update_cost.py runs/lm_trust_regions/tiny_lm

Times (seconds, mean of 3 calls after one compiling call) one sampling of the batch, the
log-probs of its completion tokens, their gradient over the LoRA adapters, one Fisher-vector
product, and the whole `update: trpo` step, at grpo_tiny_word_problems' batch (16 prompts x 8).
"""

import sys
import time

import jax

from rlax_trpo import trust_region
from rlax_trpo.config import load_config
from rlax_trpo.lm.grpo import make_grpo
from rlax_trpo.lm.natural import mean_token_kl
from rlax_trpo.lm.policy import decoder_policy, init_adapters
from rlax_trpo.lm.pretrained_program import load_model, make_text_task
from rlax_trpo.lm.types import LMShared

OVERRIDES = ["update=trpo", "hp.learning_rate=0.001", "num_prompts=16", "group_size=8"]


def timed(name, fn, *args):
    fn = jax.jit(fn)
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    print(f"{name:10s} {(time.perf_counter() - start) / 3:.2f} s")


def main(folder: str) -> None:
    cfg = load_config("grpo_tiny_word_problems", [f"model_path={folder}", *OVERRIDES])
    pretrained = load_model(cfg)
    task = make_text_task(cfg, pretrained)
    tok = pretrained.tokenizer
    length = task.prompt_len + cfg.max_new_tokens
    policy = decoder_policy(
        pretrained.config, tok.eos_ids, tok.pad_id, length, cfg.logprob_chunk, frozen=True
    )
    grpo = make_grpo(policy, task, cfg.grpo_cfg())
    shared, hp = LMShared(pretrained.params, task.data), cfg.hp
    params = init_adapters(pretrained.config, jax.random.key(0))
    rollout = jax.jit(grpo.collect)(params, jax.random.key(1), hp, shared)
    batch, _ = jax.jit(grpo.make_batch)(params, params, rollout, hp, shared)

    def logp(q, b, s):
        variables = policy.combine(s.weights, q)
        return policy.logprobs(variables, b.prompts, b.pad, b.tokens, hp.temperature)[0]

    def fvp(q, b, s):
        kl = mean_token_kl(lambda x: logp(x, b, s), logp(q, b, s), b.mask)
        return trust_region.fisher_vector_product(kl, q, q, 0.01)

    timed("sampling", grpo.collect, params, jax.random.key(1), hp, shared)
    timed("log-probs", logp, params, batch, shared)
    timed(
        "gradient",
        lambda q, b, s: jax.grad(lambda x: logp(x, b, s).sum())(q),
        params,
        batch,
        shared,
    )
    timed("F v", fvp, params, batch, shared)
    timed("update", lambda q, b, s: grpo.update(q, None, b, hp, None, s), params, batch, shared)


if __name__ == "__main__":
    main(sys.argv[1])
