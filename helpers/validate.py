"""Argument checks shared by the chapter modules: a wrong argument gets a TypeError or ValueError that
names it and says what was expected, before any process is started (a bad value inside a child would
surface as a hang or a dead worker instead)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["positive_int", "non_negative"]


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """`value` if it is an int (not a bool) >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def non_negative(name: str, value: Any) -> float:
    """`value` as a float if it is a real number >= 0 (not NaN, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return float(value)
