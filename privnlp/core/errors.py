"""Error types shared by every part of privnlp.

Every error names the offending argument and, where it applies, the allowed range, so
that a user can fix the call without reading the source.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "PrivnlpError",
    "InvalidArgument",
    "InvalidPrivacyParameter",
    "PrivacyBudgetExceeded",
    "MalformedInput",
    "MissingDependency",
    "RegistryImportError",
    "ProtocolError",
    "check_range",
    "check_positive",
    "check_probability",
]


class PrivnlpError(Exception):
    """Base class of every error raised by privnlp."""


class InvalidArgument(PrivnlpError, ValueError):
    """An argument is outside its allowed range or of the wrong kind."""


class InvalidPrivacyParameter(InvalidArgument):
    """A privacy parameter (epsilon, delta, noise multiplier, clip norm, ...) is invalid."""


class PrivacyBudgetExceeded(PrivnlpError, RuntimeError):
    """The operation would spend more privacy budget than the target allows.

    Raised *before* the step is taken: the refused step leaves no trace in the ledger.

    Args:
        message: the error message (names the step refused and the budget).
        spent: the epsilon spent so far (kept as the ``spent`` attribute).
        target: the target epsilon (kept as the ``target`` attribute).
    """

    def __init__(self, message: str, *, spent: float | None = None, target: float | None = None):
        super().__init__(message)
        self.spent = spent
        self.target = target


class MalformedInput(InvalidArgument):
    """An input file or record cannot be parsed (wrong format, bad encoding, ...)."""


class MissingDependency(PrivnlpError, ImportError):
    """An optional dependency is not installed.

    Args:
        package: the distribution name of the missing package (kept as ``package``).
        extra: the privnlp extra that installs it, quoted in the message as ``pip install 'privnlp[extra]'``.
        hint: one more sentence for the message (what the package is needed for).
    """

    def __init__(self, package: str, extra: str | None = None, hint: str | None = None):
        msg = f"this feature needs the optional package {package!r}"
        if extra:
            msg += f"; install it with `pip install 'privnlp[{extra}]'`"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)
        self.package = package
        self.extra = extra


class RegistryImportError(PrivnlpError, ImportError):
    """A registry entry was asked for whose module failed to import; the ``ImportError`` is the cause.

    Args:
        message: names the entry, the module and the original error.
        module: the dotted module that failed to import (kept as ``module``).
        name: the registry name asked for (kept as ``entry``).
    """

    def __init__(self, message: str, *, module: str, name: str) -> None:
        super().__init__(message, name=module)
        self.module = module
        self.entry = name


class ProtocolError(PrivnlpError, RuntimeError):
    """A distributed protocol could not complete safely and failed closed."""


def _fmt_interval(lo: float, hi: float, lo_inclusive: bool, hi_inclusive: bool) -> str:
    left = "[" if lo_inclusive else "("
    right = "]" if hi_inclusive else ")"
    lo_s = "-inf" if lo == -math.inf else repr(lo)
    hi_s = "inf" if hi == math.inf else repr(hi)
    return f"{left}{lo_s}, {hi_s}{right}"


def check_range(
    name: str,
    value: Any,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    lo_inclusive: bool = True,
    hi_inclusive: bool = True,
    error: type[InvalidArgument] = InvalidArgument,
    integer: bool = False,
) -> Any:
    """Check that ``value`` lies in the interval and return it.

    >>> check_range("t", 0.5, 0, 1)
    0.5

    Args:
        name: the argument's name, used in the error message.
        value: the value to check (bools and ``None`` are rejected).
        lo, hi: the interval's bounds.
        lo_inclusive, hi_inclusive: whether each bound is allowed.
        error: the exception class to raise (``InvalidPrivacyParameter`` for epsilon, delta, ...).
        integer: also require an integral value.

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidArgument: (or ``error``) naming the argument and the allowed interval, for a value outside it,
            NaN, a non-number, or a non-integer when ``integer``.
    """
    if isinstance(value, bool) or value is None:
        raise error(
            f"{name} must be a number in {_fmt_interval(lo, hi, lo_inclusive, hi_inclusive)}; got {value!r}"
        )
    if integer and not float(value).is_integer():
        raise error(
            f"{name} must be an integer in {_fmt_interval(lo, hi, lo_inclusive, hi_inclusive)}; got {value!r}"
        )
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise error(
            f"{name} must be a number in {_fmt_interval(lo, hi, lo_inclusive, hi_inclusive)}; got {value!r}"
        ) from None
    ok = not math.isnan(v)
    ok = ok and (v >= lo if lo_inclusive else v > lo)
    ok = ok and (v <= hi if hi_inclusive else v < hi)
    if not ok:
        raise error(
            f"{name} must be in {_fmt_interval(lo, hi, lo_inclusive, hi_inclusive)}; got {value!r}"
        )
    return value


def check_positive(
    name: str,
    value: Any,
    *,
    error: type[InvalidArgument] = InvalidArgument,
    allow_inf: bool = False,
) -> Any:
    """``value`` must be > 0 (and finite unless ``allow_inf``).

    Args:
        name: the argument's name, used in the error message.
        value: the value to check.
        error: the exception class to raise.
        allow_inf: also accept ``math.inf``.

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidArgument: (or ``error``) ``value`` is not a number > 0 (or is infinite without ``allow_inf``).
    """
    return check_range(
        name, value, 0.0, math.inf, lo_inclusive=False, hi_inclusive=allow_inf, error=error
    )


def check_probability(
    name: str,
    value: Any,
    *,
    open_low: bool = False,
    open_high: bool = False,
    error: type[InvalidArgument] = InvalidArgument,
) -> Any:
    """``value`` must be a probability in [0, 1] (bounds optionally open).

    Args:
        name: the argument's name, used in the error message.
        value: the value to check.
        open_low: exclude 0.
        open_high: exclude 1.
        error: the exception class to raise.

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidArgument: (or ``error``) ``value`` is not a number in the interval.
    """
    return check_range(
        name, value, 0.0, 1.0, lo_inclusive=not open_low, hi_inclusive=not open_high, error=error
    )
