"""Tasks with verifiable rewards: generators and reward functions on hand-written completions."""

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.lm import tasks
from rlax_trpo.lm.tasks import EOS, PAD


def tok(text: str, width: int | None = None) -> list[int]:
    """Tokens of a string of digits, '+', '=', '$' (EOS), padded with PAD to `width`."""
    table = {"+": tasks.PLUS, "=": tasks.EQUALS, "$": EOS}
    out = [table[c] if c in table else tasks.DIGIT0 + int(c) for c in text]
    return out + [PAD] * ((width or len(out)) - len(out))


def test_max_digit_reward_hand_written():
    targets = jnp.array([tok("7$")] * 4)
    completions = jnp.array([tok("7$", 3), tok("6$", 3), tok("77$"), tok("7", 3)])
    reward, exact = tasks.score(completions, targets)
    np.testing.assert_array_equal(exact, [True, False, False, False])
    np.testing.assert_allclose(reward, [1, 0, 0, 0])
    # partial credit: 0.5 x fraction of correct positions (answer digit and EOS)
    reward, _ = tasks.score(completions, targets, 0.5)
    np.testing.assert_allclose(reward, [1.0, 0.25, 0.25, 0.25])


def test_sort_reward_hand_written():
    targets = jnp.array([tok("1349$")] * 3)
    completions = jnp.array([tok("1349$"), tok("1394$"), tok("9431$")])
    reward, exact = tasks.score(completions, targets, 1.0)
    np.testing.assert_array_equal(exact, [True, False, False])
    np.testing.assert_allclose(reward, [1.0, 3 / 5, 1 / 5])


def test_add_reward_hand_written_variable_length():
    # 42 + 913 = 955 -> reversed "559"; 500 + 500 = 1000 -> "0001"
    targets = jnp.array([tok("559$", 5), tok("0001$")])
    completions = jnp.array([tok("559$", 6), tok("0001$", 6)])
    reward, exact = tasks.score(completions, targets)
    np.testing.assert_array_equal(exact, [True, True])
    wrong = jnp.array([tok("5590$", 6), tok("000$", 6)])  # too long / too short
    reward, exact = tasks.score(wrong, targets, 1.0)
    np.testing.assert_array_equal(exact, [False, False])
    np.testing.assert_allclose(reward, [3 / 4, 3 / 5])  # PAD positions of the target not counted


def test_generators_answer_correctly():
    key = jax.random.key(0)
    p, t = jax.jit(tasks.max_digit_task(5).generate, static_argnums=1)(key, 64)
    for prompt, target in zip(np.asarray(p), np.asarray(t), strict=True):
        s = tasks.detokenize(prompt)
        assert s.endswith("=") and tasks.detokenize(target) == f"{max(s[:-1])}$"
    p, t = jax.jit(tasks.sort_task(4).generate, static_argnums=1)(key, 64)
    for prompt, target in zip(np.asarray(p), np.asarray(t), strict=True):
        s = tasks.detokenize(prompt)
        assert tasks.detokenize(target) == "".join(sorted(s[:-1])) + "$"
    for reverse in (True, False):
        p, t = jax.jit(tasks.add_task(3, reverse).generate, static_argnums=1)(key, 256)
        for prompt, target in zip(np.asarray(p), np.asarray(t), strict=True):
            a, b = tasks.detokenize(prompt)[:-1].split("+")
            answer = str(int(a) + int(b))
            expected = (answer[::-1] if reverse else answer) + "$"
            assert tasks.detokenize(target) == expected, (a, b, tasks.detokenize(target))


def test_train_prompts_avoid_the_held_out_split():
    task = tasks.sort_task(4)
    prompts, _ = jax.jit(lambda k: tasks.sample_train(task, k, 4096))(jax.random.key(1))
    assert not bool(tasks.in_eval_split(prompts).any())
    eval_prompts, _ = tasks.eval_set(task, 200)
    assert eval_prompts.shape == (200, task.prompt_len)
    assert bool(tasks.in_eval_split(eval_prompts).all())
    # the held-out split is about 1/EVAL_MODULUS of all prompts
    all_p, _ = jax.jit(task.generate, static_argnums=1)(jax.random.key(2), 20000)
    frac = float(tasks.in_eval_split(all_p).mean())
    assert 0.06 < frac < 0.14
