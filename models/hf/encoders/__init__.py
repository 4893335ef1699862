"""Encoders, sequence classifiers and cross-encoders from a local directory, and the built-ins ``tiny``
and ``minilm``: one row in, a vector or class scores out."""

__all__: list[str] = []
