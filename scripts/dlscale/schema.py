"""The config schema, shipped inside the package (config/schema.yaml links to it).

It is the one place where every key's type, choices and default are written: the rules
validate the config against it, and the scripts' flags, the vocabulary and the docs read
their defaults and choices from it. `check_raw_config` says, before validation, what
validation cannot say well.
"""

from __future__ import annotations

import copy
import difflib
from functools import cache
from pathlib import Path

from dlscale import usermodel
from dlscale.errors import PlanError

PATH = Path(__file__).with_name("schema.yaml")


@cache
def load() -> dict:
    import yaml

    # libyaml's loader where PyYAML has it: 0.03 s against 0.3 s for the pure-Python one,
    # in every Snakemake start (planning and each SLURM job step) and every train.py
    return yaml.load(PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@cache
def _validator():
    """The schema's validator, filling in defaults as it goes (the jsonschema FAQ's
    default-setting extension, as Snakemake's `snakemake.utils.validate` uses)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def with_defaults(validator, properties, instance, subschema):
        if isinstance(instance, dict):
            for key, spec in properties.items():
                if "default" in spec:  # a copy: the schema is shared, a config is not
                    instance.setdefault(key, copy.deepcopy(spec["default"]))
        yield from check_properties(validator, properties, instance, subschema)

    return jsonschema.validators.extend(base, {"properties": with_defaults})(load())


def validate(config: dict) -> dict:
    """Check the config against the schema and fill in its defaults, in place, as
    Snakemake's `snakemake.utils.validate` does, but on the schema read once by libyaml:
    Snakemake's reads it again with its pure-Python loader, 0.2 s of every Snakemake start.
    A violation is one PlanError line naming the key's path, the value and what was
    expected."""
    error = next(_validator().iter_errors(config), None)  # what Snakemake's would raise
    if error is not None:
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                        for part in error.absolute_path).lstrip(".") or "the config"
        raise PlanError(f"config: {where}: {error.message}")
    return config


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


def check_raw_config(config: dict) -> None:
    """What validation cannot say well: an all-digit md5 that YAML read as a number; a
    model name that is none of the known ones nor a builder (validation would only say
    that it matches none of the forms)."""
    md5 = (config.get("data") or {}).get("md5")
    if isinstance(md5, (int, float)) and not isinstance(md5, bool):
        raise PlanError(f"data.md5 was read as the number {md5!r}: put the checksum in quotes, "
                        'e.g. md5: "c58f30108f718f92721af3b95e74349a"')
    models = (config.get("sweep") or {}).get("models") or []
    commands = (config.get("sweep") or {}).get("commands") or {}
    labels = [(e.get("label"), "sweep.models") for e in models if isinstance(e, dict)] + [
        (k, "sweep.commands") for k in (commands if isinstance(commands, dict) else [])]
    for label, where in labels:
        if isinstance(label, str) and len(label) > usermodel.LABEL_MAX:
            raise PlanError(f"{where}: the label '{label[:40]}...' has {len(label)} "
                            f"characters: expected at most {usermodel.LABEL_MAX} (it names "
                            "the points' folders)")
    known = load()["$defs"]["model"]["enum"]
    for name in models if isinstance(models, list) else []:
        if isinstance(name, str) and ":" not in name and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise PlanError(f"sweep.models: unknown model '{name}'"
                            + (f" (did you mean {close[0]}?)" if close else "")
                            + ": expected a keras.applications name such as ResNet50V2, "
                            "SimpleCNN, MLP, or your own as path/to/file.py:function")
