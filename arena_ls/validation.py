"""Checks of JSON values, shared by every boundary that reads them.

Settings (``settings.py``), request params (``protocol/params.py``) and the
manifest (``manifest/loader.py``) all take plain JSON from outside and turn
it into typed values. They share the checks here: one :class:`Check` knows
whether a value is acceptable, how to say what was expected ("an integer
from 0 to 2147483647") and how to convert it; :class:`Invalid` names the
path of the bad field. Each boundary frames the words its own way (a
settings problem, an ``InvalidParams``, an AR102 diagnostic) so that their
messages stay the ones the contract and ``docs/protocol.md`` show.

A number is never NaN or infinite here: JSON as Python reads it may hold
``NaN`` and ``Infinity``, and no setting, param or manifest field means one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

T = TypeVar("T")
U = TypeVar("U")

JsonPath = tuple[str | int, ...]
"""Where a value sits: object keys and array indexes from the document's top."""


def dotted(path: JsonPath) -> str:
    """``("probe", "maxVramMb")`` -> ``probe.maxVramMb``; an index shows as ``args.2``."""
    return ".".join(str(part) for part in path)


class Invalid(ValueError):
    """A value that fails its check: where it is and what was expected there."""

    def __init__(self, path: JsonPath, expected: str) -> None:
        self.path = path
        self.expected = expected
        super().__init__(self.message)

    @property
    def where(self) -> str:
        return dotted(self.path)

    @property
    def message(self) -> str:
        """The path in backquotes, then the words: "`probe.maxVramMb` must be a positive integer".

        A value at the top (an empty path) gives just "must be ...".
        """
        if not self.path:
            return f"must be {self.expected}"
        return f"`{self.where}` must be {self.expected}"


def _identity(value: Any) -> Any:
    return value


@attrs.frozen
class Check(Generic[T]):
    """One kind of acceptable value: a test, the words for it and a conversion.

    :meth:`accepts` is the test alone. Calling a check is :meth:`parse`: the
    converted value, or :class:`Invalid` (a ``ValueError`` whose text at the
    top level is "must be ..."), the way the settings' check functions worked.
    """

    test: Callable[[Any], bool]
    expected: str
    """What the value must be, as the end of "must be ...": ``a positive number``."""
    convert: Callable[[Any], T] = _identity

    def accepts(self, value: Any) -> bool:
        return self.test(value)

    def parse(self, value: Any, path: JsonPath = ()) -> T:
        """The converted value, or :class:`Invalid` at ``path``."""
        if not self.test(value):
            raise Invalid(path, self.expected)
        return self.convert(value)

    __call__ = parse

    def worded(self, expected: str) -> Check[T]:
        """The same check, described in other words (``a string (a run id)``)."""
        return attrs.evolve(self, expected=expected)

    def map(self, convert: Callable[[T], U]) -> Check[U]:
        """The same test, its value converted further by ``convert``."""
        first = self.convert
        return Check(self.test, self.expected, lambda value: convert(first(value)))

    def or_none(self) -> Check[T | None]:
        """The same check that also takes null (and keeps it as None).

        Its words stay the same: null is the "not set" of a field, not a value to advertise.
        """
        test, convert = self.test, self.convert
        return Check(
            lambda value: value is None or test(value),
            self.expected,
            lambda value: None if value is None else convert(value),
        )


# -- types -------------------------------------------------------------------------------


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_int(value: Any) -> bool:
    """An integer, not a boolean (``True`` is an ``int`` to Python, not to JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite integer or float, not a boolean (nor an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of 309 digits or more
        return False


def finite(value: Any) -> float | None:
    """``value`` when it is a finite number, else None (NaN, infinities, null, anything else)."""
    return value if is_number(value) else None


def json_kind(value: Any) -> str:
    """The JSON name of a value's type, with its article: ``an array``, ``a string``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return type(value).__name__


def shown(value: Any, limit: int = 60) -> str:
    """A value as JSON, cut to ``limit`` characters (for "found ..." in a message)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text[:limit]


BOOLEAN: Check[bool] = Check(is_bool, "true or false")
STRING: Check[str] = Check(is_str, "a string")
STRING_MAP: Check[dict[str, str]] = Check(
    lambda value: isinstance(value, dict) and all(isinstance(item, str) for item in value.values()),
    "an object of strings",
)


def _is_regex(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


REGEX: Check[str] = Check(_is_regex, "a valid regular expression")


# -- bounded values ----------------------------------------------------------------------


def _bound(value: float) -> str:
    """``604800.0`` -> ``604800``; ``0.5`` stays ``0.5``."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _range_words(noun: str, minimum: float | None, maximum: float | None, *, unit: str | None = None) -> str:
    """``an integer from 0 to 10``, ``a non-negative number``, ``an integer of at least 2``."""
    article = "an" if noun[0] in "aeiou" else "a"
    subject = f"{article} {noun}" + (f" of {unit}" if unit else "")
    if minimum is not None and maximum is not None:
        return f"{subject} from {_bound(minimum)} to {_bound(maximum)}"
    if maximum is not None:
        return f"{subject} of at most {_bound(maximum)}"
    if minimum is None:
        return subject
    if minimum == 0 and not unit:
        return f"a non-negative {noun}"
    if minimum == 1 and noun == "integer" and not unit:
        return "a positive integer"
    return f"{subject} of at least {_bound(minimum)}"


def _within(value: float, minimum: float | None, maximum: float | None) -> bool:
    return (minimum is None or value >= minimum) and (maximum is None or value <= maximum)


def integer(minimum: int | None = None, maximum: int | None = None) -> Check[int]:
    """An integer (not a boolean) within the bounds, both inclusive."""
    return Check(
        lambda value: is_int(value) and _within(value, minimum, maximum),
        _range_words("integer", minimum, maximum),
    )


def number(
    minimum: float | None = None, maximum: float | None = None, *, unit: str | None = None
) -> Check[float]:
    """A finite number within the bounds, both inclusive; converted to float."""
    return Check(
        lambda value: is_number(value) and _within(value, minimum, maximum),
        _range_words("number", minimum, maximum, unit=unit),
        float,
    )


def positive_number() -> Check[float]:
    """A finite number above zero; converted to float."""
    return Check(lambda value: is_number(value) and value > 0, "a positive number", float)


def string(*, min_length: int = 0, max_length: int | None = None) -> Check[str]:
    """A string of ``min_length`` to ``max_length`` characters."""
    if max_length is not None:
        expected = f"a string of {min_length} to {max_length} characters"
    elif min_length == 1:
        expected = "a non-empty string"
    elif min_length:
        expected = f"a string of at least {min_length} characters"
    else:
        expected = "a string"
    return Check(
        lambda value: isinstance(value, str) and _within(len(value), min_length, max_length),
        expected,
    )


def choice(*options: T) -> Check[T]:
    """One of ``options``, of the same JSON type (``1`` is not ``true``)."""

    def test(value: Any) -> bool:
        return any(type(value) is type(option) and value == option for option in options)

    words = [json.dumps(option) for option in options]
    expected = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
    return Check(test, expected)


def list_of(item: Check[T], *, min_length: int = 0, expected: str | None = None) -> Check[list[T]]:
    """A list whose every item passes ``item``, with at least ``min_length`` of them."""
    test = item.test
    if expected is None:
        expected = f"a list{' (not empty)' if min_length else ''} whose items are each {item.expected}"
    return Check(
        lambda value: (
            isinstance(value, list) and len(value) >= min_length and all(test(element) for element in value)
        ),
        expected,
        lambda value: [item.convert(element) for element in value],
    )


def one_of(first: Check[T], second: Check[U], *, expected: str) -> Check[T | U]:
    """A value that passes ``first`` (converted by it) or else ``second``."""

    def convert(value: Any) -> T | U:
        return first.convert(value) if first.test(value) else second.convert(value)

    return Check(lambda value: first.test(value) or second.test(value), expected, convert)


STRING_LIST: Check[list[str]] = list_of(STRING, expected="a list of strings")


# -- objects -----------------------------------------------------------------------------


def unknown_fields(obj: Mapping[str, Any], known: Collection[str]) -> list[str]:
    """The keys of ``obj`` that are not among ``known``, in the object's order."""
    return [key for key in obj if key not in known]


def missing_fields(obj: Mapping[str, Any], required: Sequence[str]) -> list[str]:
    """The required keys that are absent or null, in ``required``'s order."""
    return [name for name in required if obj.get(name) is None]


def read_field(obj: Mapping[str, Any], name: str, check: Check[T], default: U, path: JsonPath = ()) -> T | U:
    """One optional field of an object: null or absent gives ``default``.

    A bad value raises :class:`Invalid` at ``path + (name,)``.
    """
    value = obj.get(name)
    if value is None:
        return default
    return check.parse(value, (*path, name))
