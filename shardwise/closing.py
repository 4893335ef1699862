"""One way to be a context manager that releases what it holds on exit."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

__all__ = ["Closing"]

_C = TypeVar("_C", bound="Closing")


class Closing(ABC):
    """Leaving the ``with`` block calls :meth:`close`, whether or not the block raised."""

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None:
        """Release what this object holds (connections, threads, files). Safe to call twice."""
