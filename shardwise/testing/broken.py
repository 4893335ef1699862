"""The one failure every contract check raises: which guarantee broke, and how."""

from __future__ import annotations

__all__ = ["ContractBroken", "expect"]


class ContractBroken(AssertionError):
    """A kind broke a guarantee of its seam's contract. An :class:`AssertionError`, so pytest shows it as a
    failed test; ``str()`` is one line: ``GUARANTEE broken: WHAT HAPPENED``."""

    def __init__(self, guarantee: str, detail: str) -> None:
        super().__init__(f"{guarantee} broken: {detail}")
        self.guarantee = guarantee
        self.detail = detail


def expect(holds: bool, guarantee: str, detail: str) -> None:
    """Raise :class:`ContractBroken` for ``guarantee``, saying ``detail``, unless ``holds``."""
    if not holds:
        raise ContractBroken(guarantee, detail)
