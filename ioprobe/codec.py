"""Typed JSON for plain dataclasses: the record's codec.

``to_plain`` turns dataclasses, lists and dicts into JSON-ready values. ``Codec.load`` reads
parsed JSON back as the type a dataclass annotates, checked all the way down: every field's
type, every number finite, within ``MAX_FIGURE`` and (but for the fields the codec is told are
signed) not negative, every string's URL credentials masked; a ``RecordError`` names the first
path that does not fit (``stages.storage.sweep[2].concurrency``). The ground floor: it knows no
record type, only what the ``record`` package tells it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from ioprobe.errors import RecordError
from ioprobe.redact import redact_url

# Far beyond any figure a machine measures or a flag accepts (the CLI's limits keep what it
# derives from them below this): a larger one is a damaged file, and small enough that the
# model's products of a few figures stay finite
MAX_FIGURE = 1e30

# a check of one dataclass's loaded fields (its type, the fields, its path), before it is built
Check = Callable[[type, dict[str, Any], str], None]


def to_plain(value: Any) -> Any:
    """Dataclasses, lists and dicts to JSON-ready values; non-finite floats become null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no inf/nan; an unbounded capacity reads as "not limiting"
    return value


class Codec:
    """Loads parsed JSON as annotated dataclasses. ``signed`` names the fields
    (``"Class.field"``) whose numbers may be negative; ``check`` sees each dataclass's fields
    before it is built (tables whose columns must have one length)."""

    def __init__(self, signed: frozenset[str], check: Check) -> None:
        self.signed = signed
        self.check = check
        self._hints: dict[type, dict[str, Any]] = {}

    def load(self, tp: type, data: Any) -> Any:
        return self._value(tp, data, "", signed=False)

    def _value(self, tp: Any, data: Any, path: str, *, signed: bool) -> Any:
        """``data`` as the type ``tp`` annotates; numbers must be finite and, unless
        ``signed``, not negative."""
        origin = get_origin(tp)
        if origin is Union or origin is types.UnionType:
            return self._union(get_args(tp), data, path, signed=signed)
        if origin is Literal:
            return _literal(get_args(tp), data, path)
        if origin is list:
            if not isinstance(data, list):
                raise RecordError(f"{path}: expected a list, got {_json_type(data)}")
            item = get_args(tp)[0]
            return [self._value(item, v, f"{path}[{i}]", signed=signed) for i, v in enumerate(data)]
        if origin is dict:
            if not isinstance(data, dict):
                raise RecordError(f"{path}: expected an object, got {_json_type(data)}")
            value_tp = get_args(tp)[1]
            return {
                k: self._value(value_tp, v, join(path, k), signed=signed) for k, v in data.items()
            }
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            return self._dataclass(tp, data, path)
        return _scalar(tp, data, path, signed=signed)

    def _union(self, args: tuple[Any, ...], data: Any, path: str, *, signed: bool) -> Any:
        if data is None:
            if type(None) in args:
                return None
            raise RecordError(f"{path}: must not be null")
        last: RecordError | None = None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return self._value(arg, data, path, signed=signed)
            except RecordError as exc:
                last = exc
        assert last is not None
        raise last

    def _dataclass(self, tp: type, data: Any, path: str) -> Any:
        if not isinstance(data, dict):
            raise RecordError(f"{path or 'the record'}: expected an object, got {_json_type(data)}")
        if tp not in self._hints:
            self._hints[tp] = get_type_hints(tp)
        hints = self._hints[tp]
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(tp):
            sub = join(path, f.name)
            if f.name in data:
                signed = f"{tp.__name__}.{f.name}" in self.signed
                kwargs[f.name] = self._value(hints[f.name], data[f.name], sub, signed=signed)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{sub}: required key is missing")
        self.check(tp, kwargs, path)
        return tp(**kwargs)


def check_columns(columns: dict[str, list[Any]], path: str) -> None:
    """A table held column by column: a row per index, so every column has one length."""
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} {n}" for name, n in lengths.items())
        raise RecordError(f"{path}: columns of unequal length ({shown})")


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _literal(allowed: tuple[Any, ...], data: Any, path: str) -> Any:
    if data not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise RecordError(f"{path}: {_shown(data)} is not one of {choices}")
    return data


def _scalar(tp: Any, data: Any, path: str, *, signed: bool) -> Any:
    if tp is Any:
        return data
    if tp is float or tp is int:
        return _number(tp, data, path, signed=signed)
    if tp is bool or tp is str:
        if not isinstance(data, tp):
            raise RecordError(f"{path}: expected {tp.__name__}, got {_json_type(data)}")
        # a record written before targets were redacted may still hold a URL's credentials
        return redact_url(data) if isinstance(data, str) else data
    raise TypeError(f"unsupported field type {tp!r} at {path}")  # a bug in the record's types


def _number(tp: type, data: Any, path: str, *, signed: bool) -> float | int:
    # JSON's true and false are not numbers, though Python's bool is an int
    if isinstance(data, bool) or not isinstance(data, int | float):
        expected = "a number" if tp is float else "an integer"
        raise RecordError(f"{path}: expected {expected}, got {_json_type(data)}")
    if tp is int and not isinstance(data, int):
        raise RecordError(f"{path}: expected an integer, got {_json_type(data)}")
    if isinstance(data, float) and not math.isfinite(data):
        raise RecordError(f"{path}: not a finite number: {_shown(data)}")
    if not -MAX_FIGURE <= data <= MAX_FIGURE:
        raise RecordError(
            f"{path}: out of range: {_shown(data)} (a record's figures are at most {MAX_FIGURE:.0e})"
        )
    if data < 0 and not signed:
        raise RecordError(f"{path}: must not be negative, got {_shown(data)}")
    return float(data) if tp is float else data


def _json_type(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    """A JSON value as the file writes it (NaN, Infinity), cut short if long."""
    if isinstance(value, int) and value.bit_length() > 128:
        # str() of an integer past 4,300 digits raises; its size says enough
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = json.dumps(value) if isinstance(value, int | float) else repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


__all__ = ["MAX_FIGURE", "Codec", "check_columns", "join", "to_plain"]
