"""Trust-region maths: Fisher-vector products, conjugate gradient, step scaling, line search.

Everything here is pytree-native (parameters stay Flax trees; no flattening to vectors) and
vmap-safe (static shapes, no data-dependent Python control flow), following Schulman et al.
(2015), "Trust Region Policy Optimization", Appendix C:

    g = grad_theta L(theta)                       surrogate gradient at theta_old
    F v = grad_theta (grad_theta KL . v) + d v    damped Fisher-vector product
    s ~= F^-1 g                                   conjugate gradient, <= `cg_iters` iterations
    alpha = sqrt(2 delta / s^T F s)               so that 1/2 (alpha s)^T F (alpha s) = delta
    theta' = theta + beta^j alpha s               first j with KL <= slack * delta and dL > 0

The KL is mean KL(pi_old || pi_theta) with pi_old held fixed (stop-gradient): its value and
gradient vanish at theta = theta_old and its Hessian there is the Fisher information.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

PyTree = Any


# --------------------------------------------------------------------------------------------
# Small pytree helpers (vector-space operations on parameter trees).


def tree_vdot(a: PyTree, b: PyTree) -> jax.Array:
    """sum_i <a_i, b_i> over the leaves of two trees of the same structure (a scalar)."""
    return optax.tree.vdot(a, b)


def tree_axpy(alpha: jax.Array, x: PyTree, y: PyTree) -> PyTree:
    """alpha * x + y, leaf by leaf (alpha a scalar)."""
    return jax.tree.map(lambda xi, yi: alpha * xi + yi, x, y)


def tree_norm(x: PyTree) -> jax.Array:
    """Euclidean norm of all leaves together."""
    return jnp.sqrt(tree_vdot(x, x))


# --------------------------------------------------------------------------------------------
# KL and Fisher-vector product.


def mean_kl_fn(
    policy: Callable[[PyTree, jax.Array], Any], old_params: PyTree, obs: jax.Array
) -> Callable[[PyTree], jax.Array]:
    """theta -> mean_n KL(pi_old(.|s_n) || pi_theta(.|s_n)) with pi_old held fixed.

    Args:
      policy: `policy(params, obs) -> distrax.Distribution` (batch shape `[N]`).
      old_params: the parameters of pi_old; stop-gradiented, so derivatives only flow
        through the second argument of the KL (otherwise KL(pi || pi) = 0 identically and
        so would be its Hessian).
      obs: `[N, *obs_shape]` states at which the KL is averaged.
    """
    old_dist = policy(jax.lax.stop_gradient(old_params), obs)

    def kl(params: PyTree) -> jax.Array:
        return old_dist.kl_divergence(policy(params, obs)).mean()

    return kl


def fisher_vector_product(
    kl_fn: Callable[[PyTree], jax.Array], params: PyTree, vector: PyTree, damping: jax.Array
) -> PyTree:
    """(F + d I) v, with F the Hessian of `kl_fn` at `params` (forward-over-reverse).

    F v = d/de grad KL(theta + e v) |_{e=0}, i.e. `jax.jvp` of `jax.grad(kl_fn)`: one
    reverse pass and one forward pass, never the matrix. At theta = theta_old the Hessian of
    KL(pi_old || pi_theta) is the Fisher information E[grad log pi grad log pi^T]
    (Schulman et al. 2015, App. C; Martens 2014). `damping` d regularises F, which is
    singular for a softmax policy (its rows sum to zero in logit space).

    Args:
      kl_fn: theta -> mean KL(pi_old || pi_theta), e.g. from `mean_kl_fn`.
      params: the point theta at which F is taken (the current policy parameters).
      vector: a tree shaped like `params`.
      damping: scalar d >= 0.
    Returns:
      A tree shaped like `params`: F v + d v.
    """
    chex.assert_trees_all_equal_shapes(params, vector)
    _, fv = jax.jvp(jax.grad(kl_fn), (params,), (vector,))
    return tree_axpy(damping, vector, fv)


# --------------------------------------------------------------------------------------------
# Conjugate gradient and the scaled natural step.


class CGResult(NamedTuple):
    x: PyTree  # the approximate solution after `iters` iterations
    residual: jax.Array  # ||A x - b|| / ||b||, recomputed with one extra product
    residual_path: jax.Array  # `[iters]` recursive ||r_k|| / ||b|| after each iteration


def conjugate_gradient(matvec: Callable[[PyTree], PyTree], b: PyTree, iters: int) -> CGResult:
    """Solve A x = b for symmetric positive-definite A by exactly `iters` CG iterations from 0.

    Hestenes & Stiefel (1952), as TRPO uses it (Schulman et al. 2015, App. C; 10 iterations):

        r0 = p0 = b;  a_k = r_k.r_k / p_k.A p_k;  x += a_k p_k;  r -= a_k A p_k;
        p_{k+1} = r_{k+1} + (r_{k+1}.r_{k+1} / r_k.r_k) p_k

    A `lax.scan` of fixed length over pytrees, with the step sizes guarded so that an exactly
    converged system (r = 0) stays put instead of dividing 0 by 0. It records the residual
    after every iteration (`residual_path`), which `jax_cg` does not; TRPO's default solver is
    `jax_cg` (`cg_solver: jax`), this one is `cg_solver: scan` and the diagnostic of
    notebooks/trpo_anatomy.ipynb. The true residual is computed with one extra product.

    Args:
      matvec: v -> A v on trees shaped like `b`.
      b: the right-hand side (a tree).
      iters: the number of iterations (static).
    """
    b_norm = tree_norm(b)
    zero = jax.tree.map(jnp.zeros_like, b)
    rs0 = tree_vdot(b, b)

    def iteration(carry, _):
        x, r, p, rs = carry
        ap = matvec(p)
        pap = tree_vdot(p, ap)
        alpha = jnp.where(pap > 0, rs / jnp.where(pap > 0, pap, 1.0), 0.0)
        x = tree_axpy(alpha, p, x)
        r = tree_axpy(-alpha, ap, r)
        rs_new = tree_vdot(r, r)
        beta = jnp.where(rs > 0, rs_new / jnp.where(rs > 0, rs, 1.0), 0.0)
        p = tree_axpy(beta, p, r)
        return (x, r, p, rs_new), jnp.sqrt(rs_new)

    (x, _, _, _), r_norms = jax.lax.scan(iteration, (zero, b, b, rs0), None, length=iters)
    scale = 1.0 / jnp.maximum(b_norm, 1e-30)
    residual = tree_norm(tree_axpy(-1.0, b, matvec(x))) * scale
    return CGResult(x, residual, r_norms * scale)


def trust_region_scale(direction: PyTree, f_direction: PyTree, max_kl: jax.Array) -> jax.Array:
    """alpha = sqrt(2 delta / s^T F s): the step alpha s has quadratic KL 1/2 (alpha s)^T F
    (alpha s) = delta (Schulman et al. 2015, App. C; the s^T F s form, not g^T F g).

    Args:
      direction: s (a tree).
      f_direction: F s (the same damped product used in the solve).
      max_kl: delta > 0.
    Returns:
      The scalar alpha (0 when s^T F s is not positive, e.g. g = 0).
    """
    shs = tree_vdot(direction, f_direction)
    return jnp.where(shs > 0, jnp.sqrt(2.0 * max_kl / jnp.where(shs > 0, shs, 1.0)), 0.0)


class NaturalStep(NamedTuple):
    """The full trust-region step and what produced it."""

    step: PyTree  # alpha * s, shaped like the policy parameters
    expected_improvement: jax.Array  # g^T (alpha s) = sqrt(2 delta g^T F^-1 g) at convergence
    cg_residual: jax.Array  # ||F s - g|| / ||g||
    quadratic_kl: jax.Array  # 1/2 (alpha s)^T F (alpha s), equals delta by construction
    grad_norm: jax.Array  # ||g||


def jax_cg(
    matvec: Callable[[PyTree], PyTree], b: PyTree, maxiter: int, tol: jax.Array = 1e-5
) -> PyTree:
    """`jax.scipy.sparse.linalg.cg` from a zero guess that is batched like `b`.

    Stops after `maxiter` iterations or at ||A x - b|| <= tol ||b||. The zero initial guess
    is `0 * b`, not cg's default `zeros_like(b)`: under `vmap` the default is an unbatched
    constant, and on jaxlib 0.10's CPU backend that batched solve returned residuals of
    1e7-1e20 inside the TRPO training program (docs/upstream/cg_unbatched_x0.md).
    """
    x0 = jax.tree.map(lambda leaf: 0.0 * leaf, b)
    x, _ = jax.scipy.sparse.linalg.cg(matvec, b, x0=x0, tol=tol, maxiter=maxiter)
    return x


def natural_step(
    kl_fn: Callable[[PyTree], jax.Array],
    params: PyTree,
    grad: PyTree,
    max_kl: jax.Array,
    damping: jax.Array,
    cg_iters: int,
    cg_tol: jax.Array = 1e-5,
    solver: str = "jax",
    max_scale: jax.Array | float = 0.0,
) -> NaturalStep:
    """The natural-gradient step alpha F^-1 g scaled to the trust region (TRPO / NPG), or
    with `max_scale` > 0 at most `max_scale` F^-1 g: alpha = min(max_scale, sqrt(2 delta /
    s^T F s)), ACKTR's step (Wu et al. 2017), where the region caps the step instead of
    setting it, so a weak gradient (small g^T F^-1 g) takes a small step.

    Args:
      kl_fn: theta -> mean KL(pi_old || pi_theta) (the Fisher is its Hessian at `params`).
      params: current policy parameters theta_old.
      grad: g, the gradient of the surrogate to *maximise* at theta_old.
      max_kl: trust-region radius delta.
      damping: Fisher damping d.
      cg_iters: at most this many conjugate-gradient iterations (static).
      cg_tol: `jax_cg` stops early at ||F s - g|| <= cg_tol ||g|| (ignored by "scan").
      solver: "jax" (`jax_cg`) or "scan" (`conjugate_gradient`: exactly `cg_iters` steps).
      max_scale: the largest multiplier of s = F^-1 g (eta_max); 0: the region's edge.
    """
    fvp = lambda v: fisher_vector_product(kl_fn, params, v, damping)
    if solver == "jax":
        direction = jax_cg(fvp, grad, cg_iters, cg_tol)
    elif solver == "scan":
        direction = conjugate_gradient(fvp, grad, cg_iters).x
    else:
        raise ValueError(f"solver: {solver!r} is not 'jax' or 'scan'")
    f_direction = fvp(direction)  # also gives the true residual for free
    residual = tree_norm(tree_axpy(-1.0, grad, f_direction)) / jnp.maximum(tree_norm(grad), 1e-30)
    alpha = trust_region_scale(direction, f_direction, max_kl)
    alpha = jnp.where(max_scale > 0, jnp.minimum(alpha, max_scale), alpha)
    step = jax.tree.map(lambda s: alpha * s, direction)
    return NaturalStep(
        step=step,
        expected_improvement=alpha * tree_vdot(grad, direction),
        cg_residual=residual,
        quadratic_kl=0.5 * alpha**2 * tree_vdot(direction, f_direction),
        grad_norm=tree_norm(grad),
    )


# --------------------------------------------------------------------------------------------
# Backtracking line search over a fixed candidate set.


class LineSearchResult(NamedTuple):
    params: PyTree  # accepted candidate, or the input parameters bit for bit
    accepted: jax.Array  # bool
    index: jax.Array  # int32 index of the accepted fraction (num candidates if none)
    fraction: jax.Array  # the accepted fraction beta^j (0 if none)
    improvements: jax.Array  # [K] surrogate improvement of every candidate (NaN: not tried)
    kls: jax.Array  # [K] mean KL of every candidate (NaN: not tried)
    improvement: jax.Array  # of the accepted candidate (0 if none: theta_old's own)
    kl: jax.Array  # of the accepted candidate (0 if none)


def line_search_fractions(decay: jax.Array, num_steps: int) -> jax.Array:
    """The fixed candidate fractions decay^j, j = 0 .. num_steps - 1 (static shape `[K]`)."""
    return decay ** jnp.arange(num_steps, dtype=jnp.float32)


def first_passing(passed: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(any(passed), index of the first True, or len(passed) if none). `passed`: `[K]` bool."""
    chex.assert_rank(passed, 1)
    any_pass = passed.any()
    index = jnp.where(any_pass, jnp.argmax(passed), passed.shape[0]).astype(jnp.int32)
    return any_pass, index


def backtracking_line_search(
    evaluate: Callable[[PyTree], tuple[jax.Array, jax.Array]],
    params: PyTree,
    step: PyTree,
    fractions: jax.Array,
    max_kl: jax.Array,
    kl_slack: jax.Array,
    batch: int = 0,
) -> LineSearchResult:
    """Accept the first theta + f_j step with KL <= slack * delta and improvement > 0.

    With `batch` = 0 all K candidates are evaluated at once (`jax.vmap`). With `batch` > 0
    they are evaluated `batch` at a time, largest first, in a `jax.lax.while_loop` that stops
    after the first batch holding a passing candidate: it holds one batch's intermediates
    instead of K's (a recurrent policy re-runs its memory over the whole batch for each
    candidate), and where the full step is accepted, as it mostly is, it evaluates one
    candidate in place of K. Candidates it did not reach have NaN improvement and KL.
    The first one that passes is selected with `argmax`, and the output is built with
    `jnp.where` on every leaf, so when no candidate passes the parameters returned are the
    input ones bit for bit (Schulman et al. 2015, App. C; OpenAI baselines trpo_mpi;
    sb3-contrib TRPO).

    Args:
      evaluate: theta -> (surrogate improvement L(theta) - L(theta_old), mean KL(old||theta)).
      params: theta_old.
      step: the full step (alpha s).
      fractions: `[K]` candidate fractions, largest first (`line_search_fractions`).
      max_kl: delta.
      kl_slack: acceptance factor on delta (1.0 = strict; baselines uses 1.5).
      batch: candidates evaluated at once (0: all K; > 0: batch by batch until one passes).
    """
    chex.assert_rank(fractions, 1)
    candidate = lambda f: tree_axpy(f, step, params)
    tried = jax.vmap(lambda f: evaluate(candidate(f)))
    passes = lambda imp, kl: (kl <= kl_slack * max_kl) & (imp > 0) & jnp.isfinite(imp)
    if batch > 0:
        improvements, kls = _until_first_pass(tried, passes, fractions, batch)
    else:
        improvements, kls = tried(fractions)
    accepted, index = first_passing(passes(improvements, kls))
    pick = lambda x: jnp.where(accepted, x[jnp.minimum(index, fractions.shape[0] - 1)], 0.0)
    fraction = pick(fractions)
    chosen = candidate(fraction)
    new_params = jax.tree.map(lambda n, o: jnp.where(accepted, n, o), chosen, params)
    realised = (pick(improvements), pick(kls))
    return LineSearchResult(new_params, accepted, index, fraction, improvements, kls, *realised)


def _until_first_pass(
    tried: Callable[[jax.Array], tuple[jax.Array, jax.Array]],
    passes: Callable[[jax.Array, jax.Array], jax.Array],
    fractions: jax.Array,
    batch: int,
) -> tuple[jax.Array, jax.Array]:
    """(improvements, kls) `[K]` of the candidates evaluated `batch` at a time, largest first,
    until a batch holds one that `passes`; NaN for those not reached. The last batch is
    padded to `batch` candidates whose results are discarded (NaN)."""
    k = fractions.shape[0]
    batch = min(batch, k)
    rounds = -(-k // batch)
    padded = jnp.pad(fractions, (0, rounds * batch - k)).reshape(rounds, batch)
    real = (jnp.arange(rounds * batch) < k).reshape(rounds, batch)
    unknown = jnp.full((rounds, batch), jnp.nan, dtype=fractions.dtype)

    def searching(carry):
        i, improvements, kls = carry
        return (i < rounds) & ~passes(improvements, kls).any()

    def one_round(carry):
        i, improvements, kls = carry
        imp, kl = tried(padded[i])
        imp, kl = (jnp.where(real[i], x, jnp.nan).astype(fractions.dtype) for x in (imp, kl))
        return i + 1, improvements.at[i].set(imp), kls.at[i].set(kl)

    _, improvements, kls = jax.lax.while_loop(searching, one_round, (0, unknown, unknown))
    return improvements.reshape(-1)[:k], kls.reshape(-1)[:k]
