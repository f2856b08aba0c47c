"""Declared engine parameters and their resolution to canonical values.

An engine declares every parameter it takes. Resolution fills defaults, coerces
types (so ``1`` and ``1.0`` become the same float) and checks ranges, which is
what makes "explicit default" and "omitted" produce the same key. A parameter
nobody declared is an error: silently ignoring it could serve audio rendered
with other settings than the caller asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidParameter


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared engine parameter."""

    name: str
    type: str
    """One of ``float``, ``int``, ``bool``, ``str``."""
    default: Any
    shapes_waveform: bool = True
    """False for parameters that cannot change the samples (e.g. a timeout)."""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    doc: str = ""

    def coerce(self, value: Any) -> Any:
        """Return ``value`` as this parameter's canonical type, or raise."""
        if value is None:
            return self.default
        try:
            converted = _convert(self.type, value)
        except (TypeError, ValueError):
            raise InvalidParameter(
                f"parameter {self.name!r} must be a {self.type}, got {value!r}"
            ) from None
        self._check_range(converted)
        return converted

    def _check_range(self, value: Any) -> None:
        if self.choices is not None and value not in self.choices:
            raise InvalidParameter(
                f"parameter {self.name!r} must be one of {list(self.choices)}, got {value!r}"
            )
        low_ok = self.minimum is None or value >= self.minimum
        high_ok = self.maximum is None or value <= self.maximum
        if not (low_ok and high_ok):
            raise InvalidParameter(
                f"parameter {self.name!r} must be between {self.minimum} and {self.maximum}, "
                f"got {value!r}"
            )

    def describe(self) -> dict[str, Any]:
        """Return a JSON-friendly description (for errors, docs and the API)."""
        return {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "shapes_waveform": self.shapes_waveform,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "choices": list(self.choices) if self.choices else None,
            "doc": self.doc,
        }


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(value)


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(value)
    return result + 0.0  # folds -0.0 into 0.0 so both spell one key


def _to_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


_CONVERTERS = {"bool": _to_bool, "int": _to_int, "float": _to_float, "str": _to_str}


def _convert(kind: str, value: Any) -> Any:
    return _CONVERTERS[kind](value)


def resolve_params(
    specs: Mapping[str, ParamSpec], given: Mapping[str, Any], engine_id: str
) -> dict[str, Any]:
    """Return every declared parameter resolved, rejecting undeclared ones."""
    unknown = sorted(set(given) - set(specs))
    if unknown:
        accepted = ", ".join(sorted(specs)) or "none"
        raise InvalidParameter(
            f"engine {engine_id!r} does not take parameter(s) {', '.join(unknown)}; "
            f"it accepts: {accepted}"
        )
    return {name: spec.coerce(given.get(name)) for name, spec in specs.items()}


def waveform_params(specs: Mapping[str, ParamSpec], resolved: Mapping[str, Any]) -> dict[str, Any]:
    """Return the subset of resolved parameters that can change the samples."""
    return {name: value for name, value in resolved.items() if specs[name].shapes_waveform}
