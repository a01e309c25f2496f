"""Reading a sectioned TOML config file, with errors that name the file, section and key."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any


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
