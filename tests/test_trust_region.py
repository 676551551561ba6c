"""Trust-region maths against closed forms and dense linear algebra (jitted and un-jitted)."""

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from rlax_trpo import Config, make_env, make_networks
from rlax_trpo import trust_region as tr

MODES = ["eager", "jit"]


def maybe_jit(fn, mode):
    return jax.jit(fn) if mode == "jit" else fn


def tiny_policy(discrete=True, hidden=(5,)):
    """A tiny policy network (CartPole: 4 obs, 2 actions; Pendulum: 3 obs, 1 action)."""
    config = Config.create(algorithm="trpo", hidden_sizes=list(hidden))
    env = make_env("CartPole-v1" if discrete else "Pendulum-v1")
    nets = make_networks(config, env.spec)
    params = nets.init(jax.random.key(0)).policy
    # Make the head non-trivial (the 0.01 init gives near-uniform policies).
    params = jax.tree.map(lambda x: x * 30.0 if x.ndim == 2 and x.shape[-1] <= 2 else x, params)
    obs = jax.random.normal(jax.random.key(1), (32, env.spec.obs_shape[0]))
    return nets, params, obs


def dense_kl_hessian(kl_fn, params):
    flat, unravel = ravel_pytree(params)
    # The reference is always compiled (eager jax.hessian dispatches thousands of small ops).
    return jax.jit(jax.hessian(lambda x: kl_fn(unravel(x))))(flat), unravel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("discrete", [True, False])
def test_fvp_equals_explicit_kl_hessian_times_vector(mode, discrete):
    nets, params, obs = tiny_policy(discrete)
    kl_fn = tr.mean_kl_fn(nets.policy, params, obs)
    hess, unravel = dense_kl_hessian(kl_fn, params)
    v = jax.random.normal(jax.random.key(2), hess.shape[:1])
    damping = 0.1
    fvp = maybe_jit(lambda v: tr.fisher_vector_product(kl_fn, params, unravel(v), damping), mode)
    got = ravel_pytree(fvp(v))[0]
    want = hess @ v + damping * v
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # The Hessian is not trivially zero (the old distribution is stop-gradiented).
    assert float(jnp.abs(hess @ v).max()) > 1e-3
    # KL and its gradient vanish at theta_old: F is the Hessian at a minimum (PSD).
    assert float(kl_fn(params)) == pytest.approx(0.0, abs=1e-6)
    assert float(jnp.linalg.eigvalsh(hess).min()) > -1e-5


def random_spd(n, key, cond=50.0):
    q, _ = jnp.linalg.qr(jax.random.normal(key, (n, n)))
    return (q * jnp.linspace(1.0, cond, n)) @ q.T


@pytest.mark.parametrize("mode", MODES)
def test_cg_matches_dense_solve_on_a_pytree(mode):
    a = random_spd(12, jax.random.key(0), cond=10.0)
    b = {"w": jax.random.normal(jax.random.key(1), (3, 2)), "b": jnp.arange(6.0)}
    flat_b, unravel = ravel_pytree(b)
    matvec = lambda v: unravel(a @ ravel_pytree(v)[0])
    res = maybe_jit(lambda b: tr.conjugate_gradient(matvec, b, 12), mode)(b)
    want = jnp.linalg.solve(a, flat_b)
    np.testing.assert_allclose(ravel_pytree(res.x)[0], want, rtol=1e-3, atol=1e-4)
    assert float(res.residual) < 1e-4
    assert res.residual_path.shape == (12,)
    # Fewer iterations: a worse but honest residual, and the path decreases overall.
    few = tr.conjugate_gradient(matvec, b, 3)
    assert float(few.residual) > float(res.residual)
    assert float(res.residual_path[-1]) < float(res.residual_path[0])


def test_cg_under_jit_vmap_matches_single_solves():
    # The fixed-iteration CG (cg_solver: scan) gives each system of a batch its own solution.
    keys = jax.random.split(jax.random.key(3), 4)
    mats = jax.vmap(lambda k: random_spd(8, k, 20.0))(keys)
    rhs = jax.random.normal(jax.random.key(4), (4, 8))
    solve = lambda a, b: tr.conjugate_gradient(lambda v: a @ v, b, 8)
    batched = jax.jit(jax.vmap(solve))(mats, rhs)
    for i in range(4):
        np.testing.assert_allclose(
            batched.x[i], jnp.linalg.solve(mats[i], rhs[i]), rtol=1e-3, atol=1e-4
        )
    assert float(batched.residual.max()) < 1e-3


def _policy_problem(key):
    """A CartPole policy (64x64 tanh) at a random init, its Fisher KL on random observations
    and a surrogate-like gradient: the system TRPO solves, one per seed."""
    config = Config.create(algorithm="trpo")
    nets = make_networks(config, make_env("CartPole-v1").spec)
    k_init, k_obs, k_adv = jax.random.split(key, 3)
    params = nets.init(k_init).policy
    params = jax.tree.map(lambda x: x * 30.0 if x.ndim == 2 and x.shape[-1] <= 2 else x, params)
    obs = jax.random.normal(k_obs, (256, 4))
    actions = jax.random.bernoulli(k_adv, 0.5, (256,)).astype(jnp.int32)
    adv = jax.random.normal(jax.random.fold_in(k_adv, 1), (256,))
    kl_fn = tr.mean_kl_fn(nets.policy, params, obs)
    grad = jax.grad(lambda p: jnp.mean(nets.policy(p, obs).log_prob(actions) * adv))(params)
    return kl_fn, params, grad


@pytest.mark.parametrize("batch", [4, 8])
def test_jax_cg_natural_step_under_jit_vmap_equals_per_seed_solves(batch):
    # jax.scipy.sparse.linalg.cg with its default (unbatched) zero guess returned residuals
    # of 1e7-1e20 in vmapped TRPO programs on CPU (docs/upstream/cg_unbatched_x0.md); `jax_cg`
    # passes a batched one. Each seed's step must equal its own un-vmapped solve.
    def step(key):
        kl_fn, params, grad = _policy_problem(key)
        nat = tr.natural_step(kl_fn, params, grad, 0.01, 0.1, 15, 1e-5, "jax")
        return ravel_pytree(nat.step)[0], nat.cg_residual

    keys = jax.random.split(jax.random.key(7), batch)
    steps, residuals = jax.jit(jax.vmap(step))(keys)
    assert float(residuals.max()) < 1e-3
    one = jax.jit(step)
    for i in range(batch):
        alone, residual = one(keys[i])
        assert float(residual) < 1e-3
        np.testing.assert_allclose(steps[i], alone, rtol=1e-3, atol=1e-6)


def test_jax_and_scan_solvers_agree():
    kl_fn, params, grad = _policy_problem(jax.random.key(8))
    solve = lambda solver: tr.natural_step(kl_fn, params, grad, 0.01, 0.1, 15, 1e-5, solver)
    a, b = jax.jit(lambda: solve("jax"))(), jax.jit(lambda: solve("scan"))()
    np.testing.assert_allclose(ravel_pytree(a.step)[0], ravel_pytree(b.step)[0], atol=1e-4)
    assert float(a.cg_residual) < 1e-3 and float(b.cg_residual) < 1e-3
    with pytest.raises(ValueError, match="solver"):
        tr.natural_step(kl_fn, params, grad, 0.01, 0.1, 15, 1e-5, "lu")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("max_kl", [0.01, 0.05])
def test_scaled_step_has_quadratic_kl_equal_to_max_kl(mode, max_kl):
    nets, params, obs = tiny_policy(True)
    kl_fn = tr.mean_kl_fn(nets.policy, params, obs)
    grad = jax.tree.map(lambda x: jax.random.normal(jax.random.key(5), x.shape), params)
    damping = 0.1
    step_fn = maybe_jit(lambda g: tr.natural_step(kl_fn, params, g, max_kl, damping, 40), mode)
    nat = step_fn(grad)
    hess, _ = dense_kl_hessian(kl_fn, params)
    f = hess + damping * jnp.eye(hess.shape[0])
    s = ravel_pytree(nat.step)[0]
    np.testing.assert_allclose(0.5 * s @ f @ s, max_kl, rtol=1e-3)
    np.testing.assert_allclose(nat.quadratic_kl, max_kl, rtol=1e-4)
    # Direction: s is F^-1 g, and g^T step = sqrt(2 delta g^T F^-1 g) (not g^T F g).
    g = ravel_pytree(grad)[0]
    gfg = g @ jnp.linalg.solve(f, g)
    np.testing.assert_allclose(nat.expected_improvement, jnp.sqrt(2 * max_kl * gfg), rtol=1e-3)


@pytest.mark.parametrize("mode", MODES)
def test_max_scale_caps_the_step_at_max_scale_times_the_natural_gradient(mode):
    """ACKTR's rule: alpha = min(max_scale, sqrt(2 delta / g^T F^-1 g)), the direction F^-1 g
    either way; 0 leaves TRPO's step bit for bit."""
    nets, params, obs = tiny_policy(True)
    kl_fn = tr.mean_kl_fn(nets.policy, params, obs)
    grad = jax.tree.map(lambda x: jax.random.normal(jax.random.key(5), x.shape), params)
    max_kl, damping = 0.01, 0.1
    hess, _ = dense_kl_hessian(kl_fn, params)
    f = hess + damping * jnp.eye(hess.shape[0])
    g = ravel_pytree(grad)[0]
    natural = jnp.linalg.solve(f, g)
    edge = float(jnp.sqrt(2 * max_kl / (g @ natural)))
    step = maybe_jit(
        lambda g, cap: tr.natural_step(kl_fn, params, g, max_kl, damping, 40, max_scale=cap), mode
    )
    for cap in (0.25 * edge, 4.0 * edge):  # the cap binds, then the region does
        s = ravel_pytree(step(grad, jnp.float32(cap)).step)[0]
        np.testing.assert_allclose(s, min(cap, edge) * natural, rtol=2e-3, atol=1e-7)
    plain = maybe_jit(lambda g: tr.natural_step(kl_fn, params, g, max_kl, damping, 40), mode)
    np.testing.assert_array_equal(
        ravel_pytree(step(grad, jnp.float32(0.0)).step)[0], ravel_pytree(plain(grad).step)[0]
    )


@pytest.mark.parametrize("mode", MODES)
def test_categorical_fisher_in_logit_space(mode):
    logits = jnp.array([0.3, -1.2, 2.0, 0.1])
    policy = lambda params, obs: distrax.Categorical(logits=params)
    kl_fn = tr.mean_kl_fn(policy, logits, jnp.zeros(()))
    basis = jnp.eye(4)
    fisher = maybe_jit(jax.vmap(lambda v: tr.fisher_vector_product(kl_fn, logits, v, 0.0)), mode)(
        basis
    )
    p = jax.nn.softmax(logits)
    np.testing.assert_allclose(fisher, jnp.diag(p) - jnp.outer(p, p), rtol=1e-5, atol=1e-6)
    # Singular (rows sum to 0): damping is what makes CG well posed.
    np.testing.assert_allclose(fisher.sum(axis=1), 0.0, atol=1e-6)


def test_gaussian_fisher_in_mean_log_std_space():
    sigma = 0.7
    policy = lambda params, obs: distrax.Normal(params[0], jnp.exp(params[1]))
    theta = jnp.array([0.4, jnp.log(sigma)])
    kl_fn = tr.mean_kl_fn(policy, theta, jnp.zeros(()))
    fisher = jax.vmap(lambda v: tr.fisher_vector_product(kl_fn, theta, v, 0.0))(jnp.eye(2))
    np.testing.assert_allclose(fisher, jnp.diag(jnp.array([1 / sigma**2, 2.0])), rtol=1e-5)


def _line_search_setup():
    params = {"w": jnp.array([[0.1, -0.3], [0.7, 0.2]]), "b": jnp.array([1e-8, -2.5])}
    step = {"w": jnp.ones((2, 2)), "b": jnp.array([0.5, -0.5])}
    fractions = tr.line_search_fractions(jnp.float32(0.5), 6)
    return params, step, fractions


@pytest.mark.parametrize("batch", [0, 4])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("failure", ["kl_too_large", "no_improvement"])
def test_failed_line_search_leaves_parameters_bit_identical(mode, failure, batch):
    params, step, fractions = _line_search_setup()

    def evaluate(p):
        size = ravel_pytree(jax.tree.map(lambda a, b: a - b, p, params))[0]
        size = jnp.sum(size**2)
        if failure == "kl_too_large":
            return size + 1.0, 1.0 + size  # always improves, KL always > max_kl
        return -size - 1e-3, 0.0 * size  # KL fine, never improves

    search = maybe_jit(
        lambda p: tr.backtracking_line_search(evaluate, p, step, fractions, 0.01, 1.0, batch),
        mode,
    )
    res = search(params)
    assert np.isfinite(res.improvements).all()  # every candidate tried, in batches or not
    assert not bool(res.accepted)
    assert int(res.index) == fractions.shape[0]
    for got, want in zip(jax.tree.leaves(res.params), jax.tree.leaves(params), strict=True):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("mode", MODES)
def test_line_search_accepts_the_first_passing_candidate(mode):
    params, step, fractions = _line_search_setup()

    def evaluate(p):
        # KL grows with the fraction f (0.02 f^2); improvement positive: with max_kl 0.01
        # and slack 1 the first passing fraction is 0.5 (f = 1 gives 0.02, f = .5 -> .005).
        f = (p["b"][0] - params["b"][0]) / step["b"][0]
        return f, 0.02 * f**2

    res = maybe_jit(
        lambda p: tr.backtracking_line_search(evaluate, p, step, fractions, 0.01, 1.0), mode
    )(params)
    assert bool(res.accepted) and int(res.index) == 1
    np.testing.assert_allclose(res.fraction, 0.5)
    np.testing.assert_allclose(res.params["w"], params["w"] + 0.5, rtol=1e-6)
    # With slack 2 the full step (KL 0.02 <= 2 x 0.01) is accepted.
    res2 = tr.backtracking_line_search(evaluate, params, step, fractions, 0.01, 2.0)
    assert int(res2.index) == 0


def test_advantage_scale_leaves_natural_step_unchanged():
    nets, params, obs = tiny_policy(True)
    kl_fn = tr.mean_kl_fn(nets.policy, params, obs)
    grad = jax.tree.map(lambda x: jax.random.normal(jax.random.key(6), x.shape), params)
    step = lambda g: ravel_pytree(tr.natural_step(kl_fn, params, g, 0.01, 0.1, 20).step)[0]
    base = step(grad)
    for c in (0.01, 7.5, 300.0):
        scaled = step(jax.tree.map(lambda x: c * x, grad))
        np.testing.assert_allclose(scaled, base, rtol=2e-4, atol=1e-7)


def test_jax_cg_gives_cg_a_zero_guess_shaped_like_b(monkeypatch):
    """jax_cg hands cg an explicit zero initial guess made from `b` (so batched like it under
    vmap), never cg's default: that default's failure inside the vmapped training program is
    nondeterministic (docs/upstream/cg_unbatched_x0.md), so this checks the call itself."""
    seen = []
    real = jax.scipy.sparse.linalg.cg

    def spy(matvec, b, x0=None, **kwargs):
        seen.append((x0, b))
        return real(matvec, b, x0=x0, **kwargs)

    monkeypatch.setattr(jax.scipy.sparse.linalg, "cg", spy)
    b = jnp.arange(1.0, 7.0).reshape(3, 2)
    x = jax.vmap(lambda bi: tr.jax_cg(lambda v: 2.0 * v, bi, 5, 1e-6))(b)
    np.testing.assert_allclose(x, 0.5 * b, rtol=1e-5)
    assert seen
    for x0, bi in seen:
        assert x0 is not None and jax.tree.structure(x0) == jax.tree.structure(bi)
        pairs = zip(jax.tree.leaves(x0), jax.tree.leaves(bi), strict=True)
        assert all(a.shape == c.shape for a, c in pairs)


@pytest.mark.parametrize("batch", [1, 4, 10])
def test_line_search_in_batches_evaluates_the_candidates_as_all_at_once(batch):
    """`batch` candidates at a time gives the improvement and KL of every candidate up to the
    end of the first batch holding a passing one, and the step chosen from them, as
    evaluating all K at once (jax.vmap) does; the candidates after that batch are never
    evaluated (NaN)."""
    params, step, fractions = _line_search_setup()

    def evaluate(p):
        f = (p["b"][0] - params["b"][0]) / step["b"][0]
        return f - 0.3 * f**2 + jnp.sum(p["w"]) * 1e-3, 0.02 * f**2

    at_once = tr.backtracking_line_search(evaluate, params, step, fractions, 0.01, 1.0)
    batched = jax.jit(
        lambda p: tr.backtracking_line_search(evaluate, p, step, fractions, 0.01, 1.0, batch)
    )(params)
    reached = {1: 2, 4: 4, 10: 6}[batch]  # the batches up to the one holding index 1, of K = 6
    for got, want in ((batched.improvements, at_once.improvements), (batched.kls, at_once.kls)):
        np.testing.assert_allclose(got[:reached], want[:reached], rtol=1e-6)
        assert np.isnan(got[reached:]).all()
    assert np.isfinite(at_once.improvements).all()
    assert int(batched.index) == int(at_once.index) == 1 and bool(batched.accepted)
    chosen = zip(jax.tree.leaves(batched.params), jax.tree.leaves(at_once.params), strict=True)
    for got, want in chosen:
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_line_search_in_batches_holds_one_batchs_intermediates():
    """Each candidate's evaluation makes [4096, 256] activations (4 MiB each; a few live at
    once). All candidates at once hold every candidate's (XLA's temporary buffers grow with
    their number: 123 MiB for 10 on the CPU, 84 MB on an H200); one at a time holds one
    candidate's, however many there are (12 MiB on the CPU, 38 MB on an H200, where XLA keeps
    more of one evaluation's intermediates). The ratio of the two is the backend's; that the
    one grows with the candidates and the other does not holds on every backend."""
    x = jax.random.normal(jax.random.key(0), (4096, 64))
    params = {"w": jax.random.normal(jax.random.key(1), (64, 256)) * 0.1}
    step = {"w": jnp.ones((64, 256)) * 0.01}

    def evaluate(p):
        h = jnp.tanh(x @ p["w"])
        return jnp.mean(h * jnp.cumsum(h, axis=0)), jnp.mean(h**2) * 1e-3

    def temp_bytes(batch, candidates):
        fractions = tr.line_search_fractions(jnp.float32(0.8), candidates)
        search = lambda p: tr.backtracking_line_search(
            evaluate, p, step, fractions, 0.01, 1.0, batch
        )
        return jax.jit(search).lower(params).compile().memory_analysis().temp_size_in_bytes

    activation = 4096 * 256 * 4
    at_once = {n: temp_bytes(0, n) for n in (10, 20)}
    one = {n: temp_bytes(1, n) for n in (10, 20)}
    assert at_once[10] >= 10 * activation, at_once
    assert at_once[20] >= 1.5 * at_once[10], at_once  # grows with the candidates
    assert one[20] <= one[10] + activation, one  # does not
    assert 2 * one[10] <= at_once[10], (one, at_once)


def test_line_search_in_batches_under_vmap_stops_each_member_at_its_own_candidate():
    """Vmapped over members whose first passing candidates differ (max KL 0.05, 0.01, 1e-9:
    index 0, 1, none), the loop in batches gives each member what it gives alone."""
    params, step, fractions = _line_search_setup()

    def evaluate(p):
        f = (p["b"][0] - params["b"][0]) / step["b"][0]
        return f, 0.02 * f**2

    search = lambda max_kl: tr.backtracking_line_search(
        evaluate, params, step, fractions, max_kl, 1.0, 1
    )
    max_kls = jnp.array([0.05, 0.01, 1e-9])
    together = jax.jit(jax.vmap(search))(max_kls)
    np.testing.assert_array_equal(together.index, [0, 1, fractions.shape[0]])
    for member, max_kl in enumerate(max_kls):
        alone = search(max_kl)
        np.testing.assert_array_equal(together.improvements[member], alone.improvements)
        np.testing.assert_array_equal(together.fraction[member], alone.fraction)
