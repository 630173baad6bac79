"""`scalinfer.models.distributions`: each distribution written out gives NumPyro's log density and gradient, and
the models' programs hold no lgamma or digamma (the reason they are written out)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from scipy import special

from scalinfer.models.distributions import Beta, Gamma, HalfNormal, Normal, StudentT, log_gamma_half_step


def test_log_gamma_half_step_is_scipys():
    """log Gamma(x + 1/2) - log Gamma(x) and its derivative digamma(x + 1/2) - digamma(x), against SciPy's
    gammaln and digamma, from x = 1e-3 (nu = 0.002, a Student t far heavier than any fit reaches) to 1e4.
    Tolerance: SciPy's difference of two log-gammas carries their rounding, eps |log Gamma(x)| (2e-12 at
    x = 1e4, where log Gamma is 8e4), so the values are compared to 3 eps |log Gamma(x)| + 1e-15; likewise the
    derivatives to 1e-12 relative plus 4 eps (|digamma(x)| + 1), the rounding of SciPy's difference of digammas
    (a difference ~1/(2x) of two values ~log x). Against a 40-digit reference (mpmath, when it was written) ours
    was within 3e-15 in value and 7e-16 relative in derivative."""
    x = np.geomspace(1e-3, 1e4, 400)
    with jax.enable_x64(True):
        ours = np.asarray(log_gamma_half_step(jnp.asarray(x)))
        grad = np.asarray(jax.vmap(jax.grad(log_gamma_half_step))(jnp.asarray(x)))
    ref = special.gammaln(x + 0.5) - special.gammaln(x)
    tol = 3 * np.finfo(float).eps * np.abs(special.gammaln(x)) + 1e-15
    assert np.all(np.abs(ours - ref) <= tol), np.max(np.abs(ours - ref) / tol)
    gref = special.digamma(x + 0.5) - special.digamma(x)
    gtol = 1e-12 * np.abs(gref) + 4 * np.finfo(float).eps * (np.abs(special.digamma(x)) + 1)
    assert np.all(np.abs(grad - gref) <= gtol), np.max(np.abs(grad - gref) / gtol)


def test_log_gamma_half_step_in_float32():
    """In float32 (a fit's ``potential_dtype``) it keeps float32's accuracy: within 8 float32 roundings (eps
    1.2e-7) of the float64 value, relative to max(1, |value|), over the same range. It sums 13 rounded terms of
    up to ~3 (the ten log1p of its shift among them); the worst case seen is 4.4 roundings, at x = 0.26."""
    x = np.geomspace(1e-3, 1e4, 400)
    with jax.enable_x64(True):
        ref = np.asarray(log_gamma_half_step(jnp.asarray(x)))
    ours = np.asarray(log_gamma_half_step(jnp.asarray(x, dtype=jnp.float32)))
    assert ours.dtype == np.float32
    assert np.all(np.abs(ours - ref) <= 8 * np.finfo(np.float32).eps * np.maximum(1.0, np.abs(ref)))


def test_beta_is_numpyros():
    """`Beta` (its log density written out for constant concentrations) gives NumPyro's log density, to float64
    rounding, inside the interval and for concentrations below and above 1."""
    x = np.array([1e-9, 0.01, 0.3, 0.5, 0.99, 1 - 1e-9])
    with jax.enable_x64(True):
        for a, b in [(3.0, 3.0), (0.5, 2.0), (1.0, 1.0), (2.5, 0.7)]:
            np.testing.assert_allclose(Beta(a, b).log_prob(x), dist.Beta(a, b).log_prob(x), rtol=1e-12, atol=1e-12)


def test_gamma_is_numpyros():
    """`Gamma` (its normalizer taken by `math.lgamma` for constant parameters) gives NumPyro's log density and
    gradient in the value, to float64 rounding (rtol 1e-12: the two differ in the rounding of that constant), for
    shapes below and above 1 (nu's Gamma(2, 0.1), size scatter's Gamma(alpha + k/2, 1))."""
    x = np.array([1e-6, 0.05, 1.0, 3.7, 40.0, 800.0])
    with jax.enable_x64(True):
        for a, b in [(2.0, 0.1), (0.6, 1.0), (3.5, 1.0), (12.0, 4.0)]:
            np.testing.assert_allclose(Gamma(a, b).log_prob(x), dist.Gamma(a, b).log_prob(x), rtol=1e-12, atol=1e-12)
            ours = jax.grad(lambda v: jnp.sum(Gamma(a, b).log_prob(v)))(jnp.asarray(x))
            theirs = jax.grad(lambda v: jnp.sum(dist.Gamma(a, b).log_prob(v)))(jnp.asarray(x))
            np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_student_t_is_numpyros():
    """`StudentT` (y squared by a product, not NumPyro's float power; the log-gamma difference by
    `log_gamma_half_step`) gives NumPyro's log density and gradient, to float64 rounding (rtol 1e-12: the two
    differ in the rounding of y^2, of log(nu pi) and of the log-gammas), for heavy and light tails, runs far in
    the tails, and the run-shaped arrays the model passes."""
    rng = np.random.default_rng(0)
    loc, scale = rng.normal(size=7), np.exp(rng.normal(size=7))
    x = loc + scale * np.array([-40.0, -3.0, -0.5, 0.0, 1e-6, 2.0, 25.0])
    with jax.enable_x64(True):
        for nu in (0.7, 2.0, 5.5, 300.0):
            np.testing.assert_allclose(StudentT(nu, loc, scale).log_prob(x), dist.StudentT(nu, loc, scale).log_prob(x),
                                       rtol=1e-12, atol=1e-12)

            def total(kind, args):
                return jnp.sum(kind(*args).log_prob(x))

            at = (jnp.float64(nu), jnp.asarray(loc), jnp.asarray(scale))
            ours = jax.grad(lambda a: total(StudentT, a))(at)
            theirs = jax.grad(lambda a: total(dist.StudentT, a))(at)
            for o, t in zip(ours, theirs):
                np.testing.assert_allclose(o, t, rtol=1e-11, atol=1e-12)


def test_normal_is_numpyros():
    """`Normal` (standardized by a product with 1/sigma, and with ``scale_factor`` sigma = scale * h) gives NumPyro's
    Normal(loc, scale * h) log density and its gradient in the value, loc, scale and h, to float64 rounding (rtol
    1e-12: the two differ in the rounding of 1/sigma and of log(sqrt(2 pi) sigma)), for constant and traced scales;
    and keeps a float32 value in float32 where its parameters are Python floats (a fit's float32 potential)."""
    rng = np.random.default_rng(1)
    loc, scale = rng.normal(size=6), np.exp(rng.normal(size=6))
    x = loc + scale * np.array([-30.0, -2.0, 0.0, 1e-7, 0.7, 12.0])
    with jax.enable_x64(True):
        for c in (0.05, 1.0, 7.5):  # a Python float scale, as the priors give it
            np.testing.assert_allclose(Normal(0.3, c).log_prob(x), dist.Normal(0.3, c).log_prob(x), rtol=1e-12)
        for h in (None, 0.37, 2.9):
            def total(kind, a, h=h):
                v, m, s, f = a
                d = kind(m, s) if f is None else (kind(m, s, scale_factor=f) if kind is Normal else kind(m, s * f))
                return jnp.sum(d.log_prob(v))

            at = (jnp.asarray(x), jnp.asarray(loc), jnp.asarray(scale), None if h is None else jnp.float64(h))
            np.testing.assert_allclose(total(Normal, at), total(dist.Normal, at), rtol=1e-12)
            for o, t in zip(jax.grad(lambda a: total(Normal, a))(at), jax.grad(lambda a: total(dist.Normal, a))(at)):
                if o is not None:
                    np.testing.assert_allclose(o, t, rtol=1e-11, atol=1e-12)
    v32 = jnp.asarray(x, dtype=jnp.float32)
    assert Normal(0.3, 2.0).log_prob(v32).dtype == jnp.float32
    assert Normal(0.3, 2.0, scale_factor=jnp.float32(0.5)).log_prob(v32).dtype == jnp.float32


def test_half_normal_is_numpyros_without_its_support_check():
    """`HalfNormal` gives NumPyro's log density and gradient exactly (the same terms), and its traced log density
    holds no select: NumPyro's, validated by default (0.22) through the Normal inside it, masks every value by a
    support check (x > 0: at 0 NumPyro's is -inf and this one the density's limit)."""
    x = jnp.asarray([1e-300, 1e-6, 0.02, 0.3, 2.5])

    def selects(d) -> int:
        return sum(p == "select_n" for p in _primitives(jax.make_jaxpr(lambda v: jnp.sum(d.log_prob(v)))(x).jaxpr))

    with jax.enable_x64(True):
        for c in (0.005, 0.3, 4.0):
            np.testing.assert_array_equal(HalfNormal(c).log_prob(x), dist.HalfNormal(c).log_prob(x))
            np.testing.assert_array_equal(jax.grad(lambda v: jnp.sum(HalfNormal(c).log_prob(v)))(x),
                                          jax.grad(lambda v: jnp.sum(dist.HalfNormal(c).log_prob(v)))(x))
        assert selects(dist.HalfNormal(0.3)) > 0 and selects(HalfNormal(0.3)) == 0


def test_normal_scale_factor_is_shared():
    """Priors given one `scale_factor` h compile log h once between them (what the factor is for): the optimized
    program of four such sites' log density and its gradient holds one log, where the same priors with scales
    c * h hold one per site."""
    def logs(factor: bool) -> int:
        def total(v, h):
            return sum(jnp.sum((Normal(0.0, c, scale_factor=h) if factor else Normal(0.0, c * h)).log_prob(v[i]))
                       for i, c in enumerate((0.5, 1.0, 2.0, 3.0)))

        with jax.enable_x64(True):
            program = jax.jit(jax.value_and_grad(total, argnums=(0, 1))).lower(jnp.zeros(4), jnp.float64(0.7))
        return sum(" log(" in line for line in program.compile().as_text().splitlines())

    assert (logs(True), logs(False)) == (1, 4)


def test_written_out_distributions_survive_jaxs_tree_maps():
    """NumPyro's distributions are pytrees, rebuilt field by field (not by their constructors) when JAX maps over
    them (``jax.tree.map``, ``jax.vmap`` of a function returning one): the fields the written-out log densities read
    (`Normal`'s scale and factor, `Beta`'s and `Gamma`'s constants) come back, and so does the log density."""
    x = jnp.asarray([0.2, 0.7])
    for d in (Normal(0.3, 2.0), Normal(0.3, 2.0, scale_factor=jnp.asarray(0.5)), Beta(2.0, 3.0), Gamma(2.0, 0.5),
              StudentT(3.0, 0.0, 1.0), HalfNormal(0.3)):
        rebuilt = jax.tree.map(lambda leaf: leaf, d)
        np.testing.assert_array_equal(rebuilt.log_prob(x), d.log_prob(x))


def _primitives(jaxpr):
    """The names of the primitives in a jaxpr, those of the jaxprs inside its equations (loops, conds) included."""
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name
        for v in eqn.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns"):
                    yield from _primitives(inner)


def _numpyro_models():
    from scalinfer.models import MODEL_NAMES, get_model

    out = []
    for name in MODEL_NAMES:
        m = get_model(name)
        if m.default_method != "bootstrap":  # a NumPyro model
            out += [(name, {"size_scatter": ss}) for ss in (False, True)] if name == "surface" else [(name, {})]
    return out


@pytest.mark.parametrize("name, options", _numpyro_models())
def test_the_models_programs_hold_no_lgamma(name, options):
    """The potential and its gradient of every registered NumPyro model, as a fit traces them on the model's own
    simulated table, hold no ``lgamma`` or ``digamma`` (the module's docstring says why): a model that took
    NumPyro's Beta, Gamma or Student t back would fail here."""
    from numpyro import handlers
    from numpyro.infer.util import potential_energy

    import scalinfer
    from scalinfer.models import get_model

    # the check itself finds them where they are: NumPyro's Student t takes two lgammas, their gradient digammas
    nu_grad = jax.make_jaxpr(jax.grad(lambda nu: dist.StudentT(nu, 0.0, 1.0).log_prob(0.5)))(3.0)
    assert {"lgamma", "digamma"} <= set(_primitives(nu_grad.jaxpr))

    model = get_model(name).with_options(**options)
    runs = scalinfer.load_runs(model.simulate(model.true_params(), model.default_design(), seed=0))
    kw = model.model_kwargs(*model.prepare(runs))
    with jax.enable_x64(True):
        tr = handlers.trace(handlers.seed(model.model, 0)).get_trace(**kw)
        z = {k: jnp.zeros(np.shape(v["value"])) for k, v in tr.items() if v["type"] == "sample" and not v["is_observed"]}
        jaxpr = jax.make_jaxpr(jax.value_and_grad(lambda z: potential_energy(model.model, (), kw, z)))(z)
    used = set(_primitives(jaxpr.jaxpr))
    assert not used & {"lgamma", "digamma"}, sorted(used & {"lgamma", "digamma"})
