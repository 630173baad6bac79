r"""NumPyro's distributions as scalinfer's models use them: unvalidated, with their log densities written out.

NumPyro validates arguments at trace time, one JAX operation at a time, each compiled on its own; the models
build every argument valid and the data are checked where they are read, so these skip it. Their log densities
are NumPyro's, written out so that a model's program stays small:

- `Beta` and `Gamma` of constant parameters (Python floats) take their normalizers by `math.lgamma` when the
  model is traced, `StudentT` the one term of nu that needs a log-gamma by `log_gamma_half_step`, which is
  elementary operations only. None of them puts ``lgamma`` or ``digamma`` into a program. JAX lowers those two
  in a program it exports (``jax.export``, which `scalinfer.inference.compiled` stores so that the next process
  does not trace again) to a long software implementation kept for forward compatibility, where a jitted program
  calls a compiled kernel; compiling that implementation made a fit's first programs slower to compile
  (benchmarks/README.md, "fit_speed.py").
- `Beta`'s density is direct, where NumPyro's goes through a Dirichlet; `StudentT` squares its standardized value
  by a product, where NumPyro's raises it to a float power (a log and an exp per run).
- `Normal` standardizes by a product with 1/sigma taken once (see it), and `log_gamma_half_step` evaluates its
  terms as arrays (its ten shifts, its two Stirling tails) rather than one by one: XLA:CPU compiles each division
  or log that several operations read as a kernel of its own, and kernels are most of what a program costs to
  compile (benchmarks/README.md, "fit_speed.py").
- `HalfNormal` keeps NumPyro's log density, without the support check of the Normal it comes from.

``tests/test_distributions.py`` checks each against NumPyro's log density (Gamma's, StudentT's and HalfNormal's
gradients too).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

__all__ = ["Beta", "Gamma", "HalfNormal", "Normal", "StudentT", "log_gamma_half_step"]

#: log sqrt(2 pi), the normal density's constant
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
#: the shift of `log_gamma_half_step`: Stirling's series is evaluated at x + SHIFT >= SHIFT
SHIFT = 10
#: Stirling's series of log Gamma(z) beyond its leading terms, B_2k / (2k (2k - 1) z^(2k - 1)) for k = 1..7
#: (B_2k the Bernoulli numbers): the next, k = 8, is -3.0e-17 at z = SHIFT and smaller beyond
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)


def _stirling_tail(z):
    """sum_k B_2k / (2k (2k - 1) z^(2k - 1)), by Horner's rule in 1/z^2."""
    w = 1.0 / (z * z)
    acc = _STIRLING[-1]
    for c in _STIRLING[-2::-1]:
        acc = acc * w + c
    return acc / z


def log_gamma_half_step(x):
    r"""log Gamma(x + 1/2) - log Gamma(x) for x > 0, elementwise, by elementary operations only.

    With a = x + K (K = `SHIFT`), Gamma's recurrence moves both arguments to a and a + 1/2, where Stirling's series
    log Gamma(z) = (z - 1/2) log z - z + log(2 pi)/2 + S(z) (S: `_STIRLING`) converges to float64's rounding:

    .. math::

        \log\frac{\Gamma(x + \frac12)}{\Gamma(x)} = a \log\Big(1 + \frac{1}{2a}\Big) + \frac12 \log a - \frac12
            + S\big(a + \tfrac12\big) - S(a) - \sum_{j=0}^{K-1} \log\Big(1 + \frac{1}{2 (x + j)}\Big).

    Branch-free, so its gradient (digamma's difference) is JAX's derivative of the same expression. Its error is
    within a few float64 roundings of the value (`tests/test_distributions.py`). The K terms of the sum, and the two
    tails S, are each one array operation along a trailing axis (one kernel in a compiled program, not one each)."""
    a = x + SHIFT
    main = a * jnp.log1p(0.5 / a) + 0.5 * jnp.log(a) - 0.5
    ft = jnp.result_type(x)
    shift = jnp.sum(jnp.log1p(0.5 / (jnp.expand_dims(x, -1) + np.arange(SHIFT, dtype=ft))), axis=-1)
    tail = _stirling_tail(jnp.expand_dims(a, -1) + np.array([0.5, 0.0], ft))
    return main + (tail[..., 0] - tail[..., 1]) - shift


class Beta(dist.Beta):
    """NumPyro's Beta of constant concentrations (Python floats), unvalidated, with its log density written out:
    (a - 1) log x + (b - 1) log(1 - x) - log B(a, b). NumPyro's goes through a Dirichlet and corrects its value
    at the interval's ends: 138 operations per site against 11 (157 against 18 in its gradient)."""

    pytree_aux_fields = ("_a", "_b", "_log_norm")  # kept by JAX's tree maps (NumPyro's pytree of a distribution)

    def __init__(self, concentration1: float, concentration0: float):
        a, b = float(concentration1), float(concentration0)
        self._log_norm = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
        self._a, self._b = a, b
        super().__init__(a, b, validate_args=False)

    def log_prob(self, value):
        return (self._a - 1.0) * jnp.log(value) + (self._b - 1.0) * jnp.log1p(-value) - self._log_norm


class Gamma(dist.Gamma):
    """NumPyro's Gamma of a constant shape a and rate b (Python floats), unvalidated, with its log density written
    out: (a - 1) log x - b x + a log b - log Gamma(a), the constant taken when the model is traced."""

    pytree_aux_fields = ("_a", "_b", "_log_norm")  # kept by JAX's tree maps (NumPyro's pytree of a distribution)

    def __init__(self, concentration: float, rate: float = 1.0):
        a, b = float(concentration), float(rate)
        self._a, self._b = a, b
        self._log_norm = a * math.log(b) - math.lgamma(a)
        super().__init__(a, b, validate_args=False)

    def log_prob(self, value):
        return (self._a - 1.0) * jnp.log(value) - self._b * value + self._log_norm


class StudentT(dist.StudentT):
    r"""NumPyro's Student t, unvalidated, with its log density written out:

    .. math::

        \log p(x) = -\tfrac{\nu + 1}{2} \log\big(1 + y^2 / \nu\big) - \log \sigma - \tfrac12 \log(\nu \pi)
            + \log\Gamma\big((\nu + 1) / 2\big) - \log\Gamma(\nu / 2), \qquad y = (x - \mu) / \sigma,

    the log-gamma difference by `log_gamma_half_step` (at nu / 2). NumPyro's squares y as ``y ** 2.0``, a power of
    a float exponent: a log and an exp per run, and a second power in the gradient. Here y is squared by a product;
    the terms of nu are computed at nu's own shape."""

    def __init__(self, df, loc, scale):
        super().__init__(df, loc, scale, validate_args=False)

    def log_prob(self, value):
        df = self.df
        y = (value - self.loc) / self.scale
        norm = 0.5 * jnp.log(df * math.pi) - log_gamma_half_step(0.5 * df)
        return -0.5 * (df + 1.0) * jnp.log1p(y * y / df) - jnp.log(self.scale) - norm


class HalfNormal(dist.HalfNormal):
    """NumPyro's half-normal, unvalidated through and through: NumPyro (0.22) validates a distribution unless it is
    told not to, and its HalfNormal takes its log density from a Normal it builds without passing the flag on, so
    that Normal checked every value's support and selected its log density by the result (a select per site,
    traced in every program that evaluates the potential). The log density here is NumPyro's, the same operations
    (log N(x; 0, sigma) + log 2) through an unvalidated Normal, on the support x > 0 (a model's site reaches it
    through NumPyro's exp transform); outside it, this one gives the formula where NumPyro's gives -inf."""

    def __init__(self, scale):
        super().__init__(scale, validate_args=False)

    def log_prob(self, value):
        return dist.Normal(0.0, self.scale, validate_args=False).log_prob(value) + jnp.log(2)


class Normal(dist.Normal):
    r"""NumPyro's Normal, unvalidated, with its log density written out by a product:

    .. math:: \log p(x) = -\tfrac12 y^2 - \log \sigma - \tfrac12 \log 2\pi, \qquad y = (x - \mu) \cdot (1 / \sigma),

    1/sigma and log sigma taken once per distribution (when the model is traced, for a Python float sigma), not at
    every point. `scale_factor` h (a traced scalar: the data's scale of log N or log D): sigma = scale * h, with
    1/h and log h the same operations for every distribution given h, so that a compiled program computes them
    once, where each 1/(scale h) would be an operation of its own.

    Why: NumPyro's (x - mu) / sigma, whose result both the density and its gradient read, and log(sigma) of a traced
    sigma, are each compiled by XLA:CPU as a kernel of its own (a division or a log that several operations read
    is not recomputed inside each), one or two per site; a product is recomputed where it is read, inside the
    kernels that read it (benchmarks/README.md, "fit_speed.py")."""

    pytree_data_fields = ("_scale", "_factor")  # kept by JAX's tree maps (NumPyro's pytree of a distribution)

    def __init__(self, loc, scale, scale_factor=None):
        super().__init__(loc, scale if scale_factor is None else scale * scale_factor, validate_args=False)
        self._scale, self._factor = scale, scale_factor

    def log_prob(self, value):
        s = self._scale
        inv, log_s = (1.0 / s, math.log(s)) if isinstance(s, (int, float)) else (1.0 / s, jnp.log(s))
        if self._factor is not None:
            inv, log_s = inv * (1.0 / self._factor), log_s + jnp.log(self._factor)
        y = (value - self.loc) * inv
        return -0.5 * (y * y) - log_s - HALF_LOG_2PI
