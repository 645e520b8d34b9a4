"""Build frozen config dataclasses from plain dicts (parsed YAML), strictly.

The dataclass tree is the schema; a YAML file only overrides it. Every key must name a field:
an unknown key, a value of the wrong type, or a value a dataclass refuses (its ``__post_init__``
calls ``check``) is a line of one ``ConfigError`` that names the key's dotted path and the file
it came from; every problem is reported at once.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """Config problems, one line each: the field's dotted path, what is wrong and (where known)
    the file or ``--set`` item the value came from. ``problems`` holds the lines; ``partial``
    (internal) the refused dataclass built without its checks, so that the dataclass holding
    it can still check its own fields and every problem is found in one pass."""

    def __init__(self, problems: str | Sequence[str], partial: Any = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.partial = partial
        super().__init__("\n".join(self.problems))


class FieldProblems(ValueError):
    """What a config dataclass's ``__post_init__`` raises: ``(field, message)`` pairs, the
    field a dotted path relative to that dataclass. ``from_dict`` turns them into
    ``ConfigError`` lines with the full path."""

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.problems))


def check(obj: Any, *rules: tuple[str, bool, str]) -> None:
    """Raise ``FieldProblems`` for every rule ``(field, ok, requirement)`` of ``obj`` that
    fails, all at once. A plain value of the field is appended (``must be >= 1, got -5``)."""
    problems = [(name, _with_value(obj, name, req)) for name, ok, req in rules if not ok]
    if problems:
        raise FieldProblems(problems)


def none_or(value: Any, ok: Callable[[Any], bool]) -> bool:
    """True when ``value`` is None (the field's "off") or passes ``ok``."""
    return value is None or ok(value)


def _with_value(obj: Any, name: str, requirement: str) -> str:
    value: Any = obj
    for part in name.split("."):
        value = getattr(value, part)
    if value is None or isinstance(value, bool | int | float | str | tuple):
        return f"{requirement}, got {value!r}"
    return requirement


@dataclasses.dataclass(frozen=True)
class _Where:
    """Where values came from, for error lines: ``origins`` maps dotted keys to a file or
    ``--set`` item; without it every line names ``source``."""

    source: str
    origins: Mapping[str, str] | None = None

    def line(self, path: str, message: str) -> str:
        origin = self.source if self.origins is None else self._origin(path)
        return f"{path}: {message}" + (f" ({origin})" if origin else "")

    def _origin(self, path: str) -> str | None:
        assert self.origins is not None
        parts = re.sub(r"\[\d+\]", "", path).split(".")  # a list item's origin is the list's
        for n in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:n]))
            if found is not None:
                return found
        below = [o for key, o in self.origins.items() if key.startswith(path + ".")]
        return below[-1] if below else None


def from_dict(
    cls: type[T],
    data: Mapping[str, Any] | None,
    source: str = "<dict>",
    origins: Mapping[str, str] | None = None,
) -> T:
    """An instance of dataclass ``cls`` with defaults overridden by ``data``.

    Nested dataclass fields take nested mappings; lists become tuples where the field is a
    tuple. Every problem (unknown key, wrong type, a value a dataclass refuses) is collected
    and raised together as one ``ConfigError``; each line names ``source`` (a file name), or,
    given ``origins`` (dotted key -> where it was set), the origin of that key or its parent.
    """
    return _build(cls, data or {}, _Where(source, origins), prefix="")


def merge(base: T, data: Mapping[str, Any] | None, source: str = "<dict>") -> T:
    """A copy of dataclass instance ``base`` with the fields in ``data`` overridden."""
    return _build(type(base), data or {}, _Where(source), prefix="", base=base)


def load_yaml(cls: type[T], path: str | Path) -> T:
    """``from_dict(cls, <YAML file at path>, path)``."""
    with open(path) as f:
        data = yaml.safe_load(f)
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return from_dict(cls, data, str(path))


def _build(cls: type, data: Any, where: _Where, prefix: str, base: Any = None) -> Any:
    here = prefix.rstrip(".") or "config"
    if not isinstance(data, Mapping):
        raise ConfigError(where.line(here, f"must be a mapping, got {data!r}"))
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    problems = []
    kwargs = {}
    for name, value in data.items():
        key = prefix + str(name)
        if name not in fields:
            known = ", ".join(sorted(fields))
            problems.append(where.line(key, f"unknown key (known: {known})"))
            continue
        current = getattr(base, name) if base is not None else None
        try:
            kwargs[name] = _convert(hints[name], value, where, key, current)
        except ConfigError as e:
            problems.extend(e.problems)
            if e.partial is not None:
                kwargs[name] = e.partial
    try:
        built = dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
    except FieldProblems as e:
        problems.extend(where.line(prefix + f, m) for f, m in e.problems)
        built = _unchecked(cls, base, kwargs)
    except (TypeError, ValueError) as e:
        problems.append(where.line(here, str(e)))
        built = _unchecked(cls, base, kwargs)
    if problems:
        raise ConfigError(problems, partial=built)
    return built


def unchecked_defaults(cls: type[T]) -> T:
    """An instance of dataclass ``cls`` holding its defaults, without its checks (a schema whose
    defaults alone are no valid value, such as a curriculum without stages, still has them)."""
    return _unchecked(cls, None, {})


def _unchecked(cls: type, base: Any, kwargs: dict[str, Any]) -> Any:
    """An instance of dataclass ``cls`` holding ``kwargs`` (else ``base``'s values, else the
    defaults) without running its ``__post_init__`` checks."""
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.name in kwargs:
            value = kwargs[f.name]
        elif base is not None:
            value = getattr(base, f.name)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        object.__setattr__(obj, f.name, value)
    return obj


def _convert(hint: Any, value: Any, where: _Where, key: str, current: Any = None) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        base = current if dataclasses.is_dataclass(current) else None
        return _build(hint, value, where, key + ".", base)
    if origin in (typing.Union, types.UnionType):
        return _convert_union(args, value, where, key)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(where.line(key, f"must be one of {list(args)}, got {value!r}"))
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(where.line(key, f"must be a list, got {value!r}"))
        return _convert_items(args[0] if args else Any, value, where, key)
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(where.line(key, f"must be a mapping, got {value!r}"))
        return dict(value)
    return _convert_scalar(hint, value, where, key)


def _convert_items(item: Any, values: Sequence[Any], where: _Where, key: str) -> tuple:
    """Each of ``values`` as ``item``; the problems of every item at once (the partial tuple
    holds the refused items' unchecked values, so the holder can still check itself)."""
    out, problems = [], []
    for i, v in enumerate(values):
        try:
            out.append(_convert(item, v, where, f"{key}[{i}]"))
        except ConfigError as e:
            problems.extend(e.problems)
            if e.partial is None:
                raise ConfigError(problems) from None
            out.append(e.partial)
    if problems:
        raise ConfigError(problems, partial=tuple(out))
    return tuple(out)


def _convert_union(args: tuple, value: Any, where: _Where, key: str) -> Any:
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(where.line(key, "may not be null"))
    errors: list[str] = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(arg, value, where, key)
        except ConfigError as e:
            errors.extend(e.problems)
    if len(errors) == 1:
        raise ConfigError(errors)
    names = " or ".join(getattr(a, "__name__", str(a)) for a in args)
    raise ConfigError(where.line(key, f"must be {names}, got {value!r}"))


def _convert_scalar(hint: Any, value: Any, where: _Where, key: str) -> Any:
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float) and isinstance(value, bool):
        raise ConfigError(where.line(key, f"must be {hint.__name__}, got {value!r}"))
    if isinstance(hint, type) and not isinstance(value, hint):
        raise ConfigError(where.line(key, f"must be {hint.__name__}, got {value!r}"))
    return value
