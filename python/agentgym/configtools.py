"""Build frozen config dataclasses from plain dicts (parsed YAML), strictly.

The dataclass tree is the schema; a YAML file only overrides it. Every key must name a field:
an unknown key, or a value of the wrong type, is a ``ConfigError`` that names the key path and
the file it came from.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config override that does not fit the schema."""


def from_dict(cls: type[T], data: Mapping[str, Any] | None, source: str = "<dict>") -> T:
    """An instance of dataclass ``cls`` with defaults overridden by ``data``.

    Nested dataclass fields take nested mappings; lists become tuples where the field is a
    tuple. ``source`` (a file name) appears in every error message.
    """
    return _build(cls, data or {}, source, prefix="")


def merge(base: T, data: Mapping[str, Any] | None, source: str = "<dict>") -> T:
    """A copy of dataclass instance ``base`` with the fields in ``data`` overridden."""
    return _build(type(base), data or {}, source, prefix="", base=base)


def load_yaml(cls: type[T], path: str | Path) -> T:
    """``from_dict(cls, <YAML file at path>, path)``."""
    with open(path) as f:
        data = yaml.safe_load(f)
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return from_dict(cls, data, str(path))


def _build(cls: type, data: Any, source: str, prefix: str, base: Any = None) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: {prefix or 'config'} must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        known = ", ".join(sorted(fields))
        raise ConfigError(f"{source}: unknown key {prefix + str(unknown[0])!r} (known: {known})")
    kwargs = {}
    for name, value in data.items():
        key = prefix + name
        current = getattr(base, name) if base is not None else None
        kwargs[name] = _convert(hints[name], value, source, key, current)
    try:
        if base is not None:
            return dataclasses.replace(base, **kwargs)
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        where = f"in {prefix.rstrip('.')}" if prefix else "config"
        raise ConfigError(f"{source}: {where}: {e}") from None


def _convert(hint: Any, value: Any, source: str, key: str, current: Any = None) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        base = current if dataclasses.is_dataclass(current) else None
        return _build(hint, value, source, key + ".", base)
    if origin in (typing.Union, types.UnionType):
        return _convert_union(args, value, source, key)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{source}: {key} must be one of {list(args)}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{source}: {key} must be a list, got {value!r}")
        item = args[0] if args else Any
        return tuple(_convert(item, v, source, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{source}: {key} must be a mapping, got {value!r}")
        return dict(value)
    return _convert_scalar(hint, value, source, key)


def _convert_union(args: tuple, value: Any, source: str, key: str) -> Any:
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(f"{source}: {key} may not be null")
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(arg, value, source, key)
        except ConfigError as e:
            errors.append(str(e))
    raise ConfigError(errors[0] if len(errors) == 1 else f"{source}: {key}: bad value {value!r}")


def _convert_scalar(hint: Any, value: Any, source: str, key: str) -> Any:
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{source}: {key} must be {hint.__name__}, got {value!r}")
    if isinstance(hint, type) and not isinstance(value, hint):
        raise ConfigError(f"{source}: {key} must be {hint.__name__}, got {value!r}")
    return value
