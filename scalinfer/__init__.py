"""scalinfer: Bayesian scaling-law inference for LLM pre-training."""

__version__ = "0.1.0"
