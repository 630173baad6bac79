"""scalinfer: Bayesian scaling-law inference for LLM pre-training.

    >>> import scalinfer
    >>> runs = scalinfer.load_runs("../shared/datasets/chinchilla_epoch2024/points.csv")   # doctest: +SKIP
    >>> fit = scalinfer.fit(runs, model="chinchilla")                                     # doctest: +SKIP
    >>> fit.predict(N=7e10, D=1.4e12).to_dict()                                          # doctest: +SKIP
"""

__version__ = "0.1.0"

__all__ = ["load_runs", "fit", "load_fit", "simulate", "Fit", "RunTable", "Prediction", "__version__"]


def __getattr__(name):
    # lazy: `import scalinfer` must not start JAX (the fit asks for CPU devices before JAX starts)
    if name in ("load_runs", "RunTable"):
        from scalinfer import runs
        return getattr(runs, name)
    if name in ("fit", "load_fit", "Fit"):
        from scalinfer import inference
        return getattr(inference, name)
    if name == "simulate":
        from scalinfer.simulation import simulate
        return simulate
    if name == "Prediction":
        from scalinfer.predict import Prediction
        return Prediction
    raise AttributeError(f"module 'scalinfer' has no attribute {name!r}")
