"""One settings loader for both services: a sectioned TOML file, then ``PREFIX_*`` environment
overrides, each value type-checked, with errors that name the file/section/key or the variable.

The agent (``edge_agent/agent/config.py``, ``EDGE_AGENT_*``) and the hub
(``cloud_hub/hub/config.py``, ``CLOUD_HUB_*``) describe their settings with a ``SettingsSpec``
and validate ranges with ``check_ranges`` / ``check_finite``; this module is the only one that
turns text into typed settings. Kinds of setting (``SettingsSpec.kinds``):

- ``str``, ``Path`` (an empty path: the dataclass default), ``bool``, ``int``, ``float``;
- ``tuple``: a list of non-empty strings (env: ``a,b``);
- ``Mapping``: ``{label = "value"}`` strings (env: ``k=v,k=v``);
- ``dict``: ``{name = weight > 0}`` (env: ``name=1.5,name=2``);
- ``object``: any TOML value, checked by the setting's ``finish`` hook (env: JSON).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.errors import InvalidInput


class ConfigError(InvalidInput):
    """The configuration file or an environment variable is invalid; names which."""


#: An empty ``Path`` setting stands for its default; the loader leaves it out.
_DEFAULT = object()
_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class SettingsSpec:
    """How one service's settings are laid out in TOML and named in the environment."""

    env_prefix: str  # "EDGE_AGENT_": setting ``port`` is $EDGE_AGENT_PORT
    sections: Mapping[str, Sequence[str]]  # TOML section -> its keys
    kinds: Mapping[str, type]  # setting -> its kind (see the module docstring)
    # sections whose keys are the settings' names without "<section>_": [hub] url is hub_url
    prefixed: frozenset[str] = frozenset()
    # sections whose tables of any names are one ``object`` setting of the section's name
    tables: frozenset[str] = frozenset()
    # setting -> hook(value, where) run after the kind check (e.g. "" -> None, parse a table)
    finish: Mapping[str, Callable[[Any, str], Any]] = field(default_factory=dict)

    def config_file(self, env: Mapping[str, str]) -> Path | None:
        """Return ``$<PREFIX>CONFIG`` as a path, or None when it is unset."""
        given = env.get(f"{self.env_prefix}CONFIG")
        return Path(given).expanduser() if given else None

    def load(self, file: Path | None, env: Mapping[str, str]) -> dict[str, Any]:
        """Return the settings of ``file`` (None: no file) overridden by ``env``, type-checked."""
        values = self.read_file(file) if file is not None else {}
        for name in self.kinds:
            variable = self.env_prefix + name.upper()
            raw = env.get(variable)
            if raw is not None:
                values[name] = self.coerce(name, self._from_env(name, raw), f"${variable}")
        return {name: value for name, value in values.items() if value is not _DEFAULT}

    def read_file(self, file: Path) -> dict[str, Any]:
        """Return the settings of a TOML file, flattened and type-checked."""
        values: dict[str, Any] = {}
        tables: dict[str, dict[str, Any]] = {}
        layout = {s: _AnyKey() if s in self.tables else keys for s, keys in self.sections.items()}
        for section, key, value in toml_settings(file, layout, ConfigError):
            if section in self.tables:
                tables.setdefault(section, {})[key] = value
                continue
            name = f"{section}_{key}" if section in self.prefixed else key
            values[name] = self.coerce(name, value, f"{file}: [{section}] {key}")
        for section, table in tables.items():
            values[section] = self.coerce(section, table, f"{file}: [{section}]")
        return values

    def coerce(self, name: str, value: Any, where: str) -> Any:
        """Return ``value`` as the setting's kind; ConfigError naming ``where`` when it is not."""
        value = _checked(self.kinds[name], value, where)
        hook = self.finish.get(name)
        return value if hook is None or value is _DEFAULT else hook(value, where)

    def _from_env(self, name: str, raw: str) -> Any:
        """Return an environment string as the TOML value it stands for (as is when it is not
        one, so that ``coerce`` reports it with the variable's name)."""
        kind = self.kinds[name]
        if kind is object:  # JSON, e.g. {"vision": {"cpu_cores": 4}}
            try:
                return json.loads(raw)
            except ValueError:
                return raw
        if kind is bool:
            return _FLAGS.get(raw.strip().lower(), raw)
        if kind is tuple:
            return [item.strip() for item in raw.split(",") if item.strip()]
        if kind is Mapping:  # "label=value,label=value"
            items = [item.partition("=") for item in raw.split(",") if item.strip()]
            if all(sep for _, sep, _ in items):
                return {k.strip(): v.strip() for k, _, v in items}
            return raw
        if kind is dict:  # "name=weight,name=weight"
            pairs = [item.partition("=") for item in raw.split(",") if item.strip()]
            try:
                return {k.strip(): float(v) for k, sep, v in pairs if sep}
            except ValueError:
                return raw
        if kind in (int, float):
            try:
                return kind(raw)
            except ValueError:
                return raw
        return raw


def _checked(kind: type, value: Any, where: str) -> Any:
    """Return ``value`` as ``kind`` (``_DEFAULT`` for an empty path); ConfigError if it is not."""
    if kind is object:
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind is Path or kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        if kind is Path:
            return Path(value).expanduser() if value else _DEFAULT
        return value
    if kind is dict:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and _is_number(v) and 0 < v < math.inf
            for k, v in value.items()
        ):
            raise ConfigError(f"{where}: expected {{tenant = weight > 0}}, got {value!r}")
        return {k: float(v) for k, v in value.items()}
    if kind is Mapping:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and len(k) + len(v) <= 200
            for k, v in value.items()
        ):
            raise ConfigError(f'{where}: expected {{label = "value"}} strings, got {value!r}')
        return dict(value)
    if kind is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: expected a list of non-empty strings, got {value!r}")
        return tuple(value)
    if not _is_number(value) or (kind is int and not isinstance(value, int)):
        raise ConfigError(f"{where}: expected {'an integer' if kind is int else 'a number'}")
    return kind(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _AnyKey(tuple[str, ...]):
    """The keys of a ``tables`` section: any names."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)


def check_ranges(config: object, where: str, checks: Iterable[tuple[str, bool, str]]) -> None:
    """Raise ConfigError ``<where>: <name> <problem>, got <value>`` for the first failed check."""
    for name, ok, problem in checks:
        if not ok:
            raise ConfigError(f"{where}: {name} {problem}, got {getattr(config, name)!r}")


def check_finite(
    config: object, where: str, names: Iterable[str], *, zero_ok: bool = False, section: str = ""
) -> None:
    """Raise ConfigError unless each setting is a finite number > 0 (>= 0 with ``zero_ok``).

    With ``section`` the message names the TOML key: ``[mesh] lease_grace_s`` for
    ``mesh_lease_grace_s``.
    """
    for name in names:
        value = getattr(config, name)
        if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
            bound = ">= 0" if zero_ok else "> 0"
            shown = f"[{section}] {name.removeprefix(section + '_')}" if section else name
            raise ConfigError(f"{where}: {shown} must be a finite number {bound}, got {value!r}")


def toml_settings(
    file: Path, sections: Mapping[str, Sequence[str]], error: type[Exception]
) -> Iterator[tuple[str, str, Any]]:
    """Yield (section, key, value) of ``file``; ``error`` for unreadable TOML or unknown names."""
    try:
        doc = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"config file not found: {file}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"cannot read config file {file}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise error(f"{file}: not valid TOML: {err}") from None
    for section, table in doc.items():
        if section not in sections or not isinstance(table, dict):
            raise error(f"{file}: unknown section [{section}]; known: {', '.join(sections)}")
        for key, value in table.items():
            if key not in sections[section]:
                known = ", ".join(sections[section])
                raise error(f"{file}: [{section}] unknown key {key!r}; known: {known}")
            yield section, key, value
