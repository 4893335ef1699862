"""The base of every settings section (:class:`Settings`): the run's, the results', the fan-out's, a
generator's. Each is declared once, for the engine, the flow's form and the command line."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from shardwise.errors import ConfigError

__all__ = ["Settings"]


class Settings(BaseModel):
    """A section of a run's settings: frozen, unknown keys refused. Made directly, a broken rule raises a
    :class:`ConfigError`; inside the flow's parameters, a validation error naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc) from None

    # Validated inside another model (the flow's parameters), a section is built without this __init__,
    # so its errors keep their location there, which names the field's flag.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


def _config_error(exc: ValidationError) -> ConfigError:
    """A settings class's validation error as the :class:`ConfigError` it holds, else one naming the field."""
    error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    where = ".".join(str(part) for part in error["loc"])
    return ConfigError(f"{where} {error.get('input')!r}: {str(error['msg']).removeprefix('Value error, ')}")
