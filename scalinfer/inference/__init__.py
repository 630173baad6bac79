"""Running inference (NUTS, MAP, Laplace) and the `Fit` object."""

from scalinfer.inference.fit import Fit, fit, load_fit, read_summary

__all__ = ["Fit", "fit", "load_fit", "read_summary"]
