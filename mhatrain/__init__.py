"""mhatrain: train, evaluate and study multi-head attention in Transformer translation models."""

__version__ = "0.1.0"
