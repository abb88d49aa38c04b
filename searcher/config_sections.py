"""The building blocks of configuration sections that modules below ``searcher.config``
need: the section base class and field types, and what every backend instance has
(``InstanceSettings``, its breaker). Backend adapters declare their config models over
these; ``searcher.config`` composes the whole tree from them and the registry, so no
adapter imports the module that imports it.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from searcher.auth.rates import Rate
from searcher.errors import InvalidRequest


def _http_url(value: str) -> str:
    # Checked at load time: a typo here would otherwise fail every call, with the HTTP
    # client's own words. Empty is unset (SEARXNG_BASE_URL= in an environment file).
    if not value:
        return value
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]


def _numbers_only(annotation: Any) -> bool:
    """Whether a field of this type takes numbers and no booleans."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType, Annotated):
        return False  # a list, a dict, a literal...: pydantic refuses a boolean itself
    args = typing.get_args(annotation)
    return any(_numbers_only(a) for a in args) and not any(a is bool for a in args)


class ConfigSection(BaseModel):
    """A section of the configuration: unknown keys are errors, and so is a boolean given
    for a number (YAML reads yes/no/on/off as booleans, which pydantic would take as 1/0:
    ``timeout_s: yes`` was a one-second timeout)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _numbers_only(field.annotation):
            return _refuse_boolean(value)
        return value


def _refuse_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


class BreakerSettings(ConfigSection):
    failure_threshold: int = Field(
        default=5,
        ge=1,
        description=(
            "Consecutive failed attempts that open the breaker (a rejected key opens it "
            "at once, a 429 with `Retry-After` for that long; an empty answer is no "
            "failure)"
        ),
    )
    recovery_timeout: float = Field(
        default=60.0, gt=0, description="Seconds open before trial calls (half-open)"
    )
    half_open_max_calls: int = Field(
        default=3, ge=1, description="Trial calls admitted, and successes needed to close"
    )


# A weight in fusion: NaN, an infinity or a negative one would turn the order upside down.
FusionWeight = Annotated[float, BeforeValidator(_refuse_boolean), Field(ge=0, allow_inf_nan=False)]


# Keys every instance has that change what searching it gives: which adapter, whether it
# is used, its weight in fusion. An adapter adds its own (``BackendSpec.answer_settings``).
ANSWER_SETTINGS = frozenset({"adapter", "enabled", "weight"})
# Keys every instance has that change how it is called, never what it answers.
CALL_SETTINGS = frozenset({"timeout_s", "breaker", "rate"})


class InstanceSettings(ConfigSection):
    """What every backend instance has; an adapter's config model (declared in its
    module, ``searcher/backends/<adapter>.py``) adds its own keys."""

    adapter: str = Field(
        description="`searxng`, `brave`, `duckduckgo`, `local`, or a plugin's adapter"
    )
    enabled: bool = Field(
        default=True,
        description=(
            "Switch a backend off (`<name>`: `searxng`, `duckduckgo`, `brave`, or "
            "`instances.<name>`; every key below works for both)"
        ),
    )
    timeout_s: float = Field(
        default=8.0,
        gt=0,
        description=(
            "Upper bound on one call, also capped by the request's "
            "`per_request_timeout_ms.search` (DuckDuckGo's default: 10)"
        ),
    )
    weight: FusionWeight = Field(
        default=1.0,
        description=(
            "The weight of the instance's lists in fusion (an intent's `weights` multiply it)"
        ),
    )
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    rate: str | None = Field(
        default=None,
        description=(
            "searcher's own pace for the instance (`1/s`, `60/min`, …), shared by all "
            "workers through the state store; over it a search waits its turn within its "
            "deadline, else falls back without calling"
        ),
    )

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Rate.parse(value)
            except InvalidRequest as exc:
                raise ValueError(exc.message) from exc
        return value
