"""Pipeline parameters: declared by the pipeline function's signature, parsed from text.

>>> parse_value("n", "3", int)
3
>>> parse_value("flag", "yes", bool)
True
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path, PurePath
from typing import Any

from ..errors import ParameterError

__all__ = ["Param", "params_of", "describe", "parse_value", "parse_assignments", "parse_texts", "bind_params",
           "mismatch"]

_MISSING = inspect.Parameter.empty
_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}


@dataclass(frozen=True)
class Param:
    name: str
    annotation: Any
    default: Any

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    @property
    def type_name(self) -> str:
        if self.annotation is _MISSING:
            return "any" if self.required else type(self.default).__name__
        return _type_name(self.annotation)


def _type_name(annotation: Any) -> str:
    """``list[int]`` for generics (their ``__name__`` is only ``list``), else the class name."""
    if typing.get_origin(annotation) is not None:
        return str(annotation).replace("typing.", "")
    return getattr(annotation, "__name__", None) or str(annotation)


def describe(declared: dict[str, Param]) -> list[dict[str, Any]]:
    """Each parameter as JSON: name, type, required, default (as JSON writes it; text where it cannot).

    >>> describe({"n": Param("n", int, 3), "day": Param("day", date, _MISSING)})
    [{'name': 'n', 'type': 'int', 'required': False, 'default': 3}, \
{'name': 'day', 'type': 'date', 'required': True, 'default': None}]
    """
    return [{"name": p.name, "type": p.type_name, "required": p.required,
             "default": None if p.required else _as_json(p.default)} for p in declared.values()]


def _as_json(value: Any) -> Any:
    """``value`` as strict JSON reads it back (text for what JSON cannot hold: a path, a date, NaN)."""
    try:
        return json.loads(json.dumps(value, default=str, allow_nan=False))
    except ValueError:
        return str(value)


def params_of(fn: Any) -> dict[str, Param]:
    """The parameters a pipeline function declares, with their types and defaults."""
    hints: dict[str, Any] = {}
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    found: dict[str, Param] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ParameterError(
                f"pipeline {fn.__name__!r} takes *{p.name}; declare each parameter by name so "
                "it can be set with --param name=value"
            )
        found[p.name] = Param(p.name, hints.get(p.name, p.annotation), p.default)
    return found


def _parse(text: str, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if annotation in (_MISSING, Any, str):
        return text
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if text.lower() in {"none", "null"} and len(options) < len(typing.get_args(annotation)):
            return None
        errors = []
        for option in options:
            try:
                return _parse(text, option)
            except (ValueError, TypeError) as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors))
    if origin is typing.Literal:
        for choice in typing.get_args(annotation):
            if str(choice) == text:
                return choice
        raise ValueError(f"expected one of {list(typing.get_args(annotation))}")
    if annotation is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError("expected true/false, yes/no, 1/0")
    if annotation in (int, float):
        return annotation(text)
    if annotation is Path:
        return Path(text)
    if annotation in (datetime, date):  # ISO 8601, as schedules and partition folders write them
        return annotation.fromisoformat(text)
    if annotation in (list, dict, tuple) or origin in (list, dict, tuple):
        value = json.loads(text)
        kind = origin or annotation
        if not isinstance(value, list if kind is tuple else kind):
            raise ValueError(f"expected a JSON {kind.__name__}")
        value = tuple(value) if kind is tuple else value
        problem = mismatch(value, annotation)
        if problem:
            raise ValueError(problem)
        return value
    if isinstance(annotation, type):
        return annotation(text)
    return text


def mismatch(value: Any, annotation: Any) -> str | None:
    """Why ``value`` is not a ``annotation`` (``None`` when it is, or when the type cannot be checked).

    >>> mismatch(["a"], list[int])
    "item 0: 'a' is not int"
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (_MISSING, Any) or isinstance(annotation, typing.TypeVar):
        return None
    if origin in (typing.Union, types.UnionType):
        problems = [mismatch(value, option) for option in args]
        return None if any(p is None for p in problems) else f"{value!r} is not {_type_name(annotation)}"
    if origin is typing.Literal:
        return None if value in args else f"{value!r} is not one of {list(args)}"
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"{value!r} is not float"
    if annotation is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else f"{value!r} is not int"
    if annotation is Path:
        return None if isinstance(value, (str, PurePath)) else f"{value!r} is not a path"
    if origin in (list, tuple, dict) or annotation in (list, tuple, dict):
        return _container_mismatch(value, origin or annotation, args)
    if isinstance(annotation, type):
        return None if isinstance(value, annotation) else f"{value!r} is not {annotation.__name__}"
    return None


def _container_mismatch(value: Any, kind: type, args: tuple[Any, ...]) -> str | None:
    accepted: tuple[type, ...] = (list, tuple) if kind is tuple else (kind,)
    if not isinstance(value, accepted):
        return f"{value!r} is not a {kind.__name__}"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = (mismatch(key, args[0]) or mismatch(item, args[1])) if len(args) == 2 else None
            if problem:
                return f"item {key!r}: {problem}"
        return None
    items = list(typing.cast("list[Any]", value))  # a list or tuple here
    if kind is tuple and args and args[-1] is not Ellipsis:
        if len(items) != len(args):
            return f"{value!r} has {len(items)} items, expected {len(args)}"
        item_types = list(args)
    else:
        item_types = [args[0] if args else Any] * len(items)
    for index, (item, item_type) in enumerate(zip(items, item_types, strict=True)):
        problem = mismatch(item, item_type)
        if problem:
            return f"item {index}: {problem}"
    return None


def parse_value(name: str, text: str, annotation: Any) -> Any:
    """``text`` parsed to ``annotation``; :class:`ParameterError` naming the parameter if it can't be."""
    try:
        return _parse(text, annotation)
    except (ValueError, TypeError, json.JSONDecodeError) as exc:
        type_name = _type_name(annotation)
        raise ParameterError(
            f"parameter {name!r} expects {type_name}, got {text!r} ({exc}); "
            f"pass e.g. --param {name}=<{type_name}>"
        ) from None


def parse_assignments(pairs: list[str], declared: dict[str, Param]) -> dict[str, Any]:
    """``["k=v", ...]`` parsed to each parameter's declared type (or its default's type)."""
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ParameterError(f"a parameter is set as name=value, got {pair!r}")
        if name in given:
            raise ParameterError(
                f"parameter {name!r} is set once per run, got it twice ({given[name]!r} and {pair!r}); "
                "keep one --param for it"
            )
        given[name] = pair
        if name not in declared:
            raise ParameterError(
                f"unknown parameter {name!r}; this pipeline takes {sorted(declared) or 'no parameters'}"
            )
        param = declared[name]
        annotation = param.annotation
        if annotation is _MISSING and not param.required and param.default is not None:
            annotation = type(param.default)
        values[name] = parse_value(name, text, annotation)
    return values


def parse_texts(declared: dict[str, Param], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with each text value of a parameter that takes something else parsed as ``--param`` parses
    it (a form's "3" for an int, "1" for ``Literal[1, 2]``), where the result is JSON (a date stays text:
    the record keeps JSON); other values as they are.

    >>> parse_texts({"n": Param("n", int, 3), "tag": Param("tag", str, "")}, {"n": "4", "tag": "4"})
    {'n': 4, 'tag': '4'}
    """
    parsed = dict(given)
    for name, value in given.items():
        param = declared.get(name)
        if param is None or not isinstance(value, str):
            continue
        annotation = param.annotation
        if annotation is _MISSING and not param.required and param.default is not None:
            annotation = type(param.default)
        if mismatch(value, annotation) is None:
            continue
        try:
            value = _parse(value, annotation)
            json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, json.JSONDecodeError):
            continue  # left as it was: the check that follows names the parameter and what it expects
        parsed[name] = value
    return parsed


def bind_params(pipeline: str, declared: dict[str, Param], given: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in; unknown or missing parameters are one clear error."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ParameterError(
            f"pipeline {pipeline!r} has no parameter(s) {unknown}; it takes {sorted(declared) or 'none'}"
        )
    missing = sorted(n for n, p in declared.items() if p.required and n not in given)
    if missing:
        raise ParameterError(
            f"pipeline {pipeline!r} needs parameter(s) {missing}; pass them, e.g. "
            + " ".join(f"--param {m}=..." for m in missing)
        )
    for name, value in given.items():
        problem = mismatch(value, declared[name].annotation)
        if problem:
            type_name = declared[name].type_name
            raise ParameterError(
                f"parameter {name!r} of pipeline {pipeline!r} expects {type_name}, got {value!r} ({problem}); "
                f"pass a {type_name}"
            )
    return {name: given.get(name, p.default) for name, p in declared.items()}
