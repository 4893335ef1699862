"""Keep secrets out of logs, artifacts, the ledger and error messages."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["redact", "redact_mapping"]

_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://[^/\s:@]*):[^@\s/]*@")
_AWS_ACCESS_KEY = re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b")
_SECRET_PARAM = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|secret|token|aws_secret_access_key|aws_session_token|"
    r"X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token)=)[^&\s'\"]+",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with URL passwords, secret query parameters and AWS access key ids masked."""
    text = _URL_PASSWORD.sub(r"\g<head>:***@", text)
    text = _SECRET_PARAM.sub(r"\g<head>***", text)
    return _AWS_ACCESS_KEY.sub("AKIA****************", text)


def redact_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``values`` with every string (nested too) passed through :func:`redact`."""
    return {k: _redact_value(v) for k, v in values.items()}


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return redact_mapping(value)
    if isinstance(value, (list, tuple)):
        return [_redact_value(v) for v in value]
    return value
