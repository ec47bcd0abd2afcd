"""The config schema, shipped inside the package (config/schema.yaml links to it).

It is the one place where every key's type, choices and default are written: the rules
validate the config against it, and the scripts' flags, the vocabulary and the docs read
their defaults and choices from it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

PATH = Path(__file__).with_name("schema.yaml")


@cache
def load() -> dict:
    import yaml

    return yaml.safe_load(PATH.read_text())


def section(name: str) -> dict:
    """The properties of a top-level section (data, training, analysis ...)."""
    return load()["properties"][name]["properties"]


def default(name: str, key: str):
    return section(name)[key].get("default")


def defaults(name: str) -> dict:
    """{key: default} of a section, for the keys that have one."""
    return {k: v["default"] for k, v in section(name).items() if "default" in v}


def choices(name: str, key: str | None = None) -> tuple:
    """The enum of a key of a section, or of a $defs entry when key is None."""
    spec = load()["$defs"][name] if key is None else section(name)[key]
    return tuple(spec["enum"])
