"""The config schema, shipped inside the package (config/schema.yaml links to it).

It is the one place where every key's type, choices and default are written: the rules
validate the config against it, and the scripts' flags, the vocabulary and the docs read
their defaults and choices from it. `check_raw_config` says, before validation, what
validation cannot say well.
"""

from __future__ import annotations

import copy
import math
import re
from functools import cache
from pathlib import Path

from dlscale.core import models
from dlscale.core.errors import PlanError

LABEL_MAX = 100  # characters: a label names a folder of every point (runs/LABEL/gpusN/repK)

PATH = Path(__file__).with_name("schema.yaml")


@cache
def load() -> dict:
    import yaml

    # libyaml's loader where PyYAML has it, ten times faster than the pure-Python one, in
    # every Snakemake start (planning and each SLURM job step) and every train.py
    return with_models(yaml.load(PATH.read_text(),
                                 Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def with_models(schema: dict) -> dict:
    """`schema` with the model choices of the models table (dlscale.core.models), which
    schema.yaml does not repeat."""
    schema["$defs"]["model"]["enum"] = list(models.names())
    return schema


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
    Snakemake's `snakemake.utils.validate` does, but on the schema read once by libyaml
    (Snakemake's reads it again with its pure-Python loader at every start).
    A violation is one PlanError line naming the key's path, the value and what was
    expected."""
    refuse_nonfinite(config, [])
    validator = _validator()
    error = next(validator.iter_errors(config), None)  # what Snakemake's would raise
    while error is not None and exponent_number(error):  # 1e-3: YAML 1.1 read it as text
        holder = config
        for part in list(error.absolute_path)[:-1]:
            holder = holder[part]
        holder[error.absolute_path[-1]] = float(error.instance)
        error = next(validator.iter_errors(config), None)
    if error is not None:
        path, message = explain(error)
        raise PlanError(f"config: {key_path(path)}: {message}")
    return config


def key_path(parts) -> str:
    """A key's path as errors name it: training.base_lr, sweep.models[0].label."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                   for part in parts).lstrip(".") or "the config"


def explain(error) -> tuple[list, str]:
    """(key path, message) of a validation error. For a value that fits none of an anyOf's
    forms, the form of the value's own type (a command as a mapping, not as a string) and
    its deepest failures: the key that broke it and its rule, not "is not valid under any
    of the given schemas". A plain value (a string, a number) keeps that message: its
    forms differ in type, and naming one would hide the others."""
    while (error.validator in ("anyOf", "oneOf") and error.context
           and isinstance(error.instance, (dict, list))):
        forms: dict = {}
        for sub in error.context:
            forms.setdefault(sub.relative_schema_path[0], []).append(sub)
        fitting = [subs for subs in forms.values()  # forms of another type say nothing
                   if not any(e.validator == "type" and not e.relative_path for e in subs)]
        if not fitting:
            break
        subs = max(fitting, key=lambda errs: max(len(e.relative_path) for e in errs))
        deepest = max(len(e.relative_path) for e in subs)
        subs = [e for e in subs if len(e.relative_path) == deepest]
        if len(subs) > 1:
            return list(subs[0].absolute_path), "; ".join(e.message for e in subs)
        error = subs[0]
    if error.validator in ("anyOf", "oneOf"):  # a plain value: what each form expects
        forms = [describe(spec) for spec in error.validator_value]
        return list(error.absolute_path), (f"{error.instance!r}: expected "
                                           f"{', or '.join(dict.fromkeys(forms))}")
    return list(error.absolute_path), error.message


ARTICLE = {"integer": "an integer", "number": "a number", "string": "a string",
           "boolean": "true or false",
           "object": "a mapping", "array": "a list", "null": "null"}


def describe(spec: dict) -> str:
    """What one form of a schema expects, in a few words: "an integer of at least 1",
    "auto", "a mapping"."""
    if "$ref" in spec:
        spec = {**load()["$defs"][spec["$ref"].split("/")[-1]], **spec}
        spec.pop("$ref")
    if "const" in spec:
        return str(spec["const"])
    if "pattern" in spec and "description" in spec:  # its own words: the form it wants
        return re.split(r" \(|; ", spec["description"])[0]
    if "enum" in spec:
        names = list(map(str, spec["enum"]))
        return "one of " + (", ".join(names) if len(names) <= 6 else
                            f"{len(names)} names ({', '.join(names[:3])} ...)")
    for choice in ("oneOf", "anyOf"):
        if choice in spec:
            return ", or ".join(describe(s) for s in spec[choice])
    kinds = spec.get("type", "object")
    words = " or ".join(ARTICLE.get(k, k) for k in (kinds if isinstance(kinds, list) else [kinds]))
    bounds = [f"{'at least' if k == 'minimum' else 'over'} {spec[k]:g}"
              for k in ("minimum", "exclusiveMinimum") if k in spec]
    bounds += [f"{'at most' if k == 'maximum' else 'under'} {spec[k]:g}"
               for k in ("maximum", "exclusiveMaximum") if k in spec]
    if spec.get("minLength"):
        bounds.append("not empty")
    return words + (f" ({', '.join(bounds)})" if bounds else "")


# a number in exponent form without a dot (1e-3, 5E4): YAML 1.2 and JSON read it as a
# number, PyYAML (YAML 1.1) as a string
EXPONENT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def exponent_number(error) -> bool:
    """Whether a validation error is a number that YAML 1.1 read as text."""
    expected = error.schema.get("type") if isinstance(error.schema, dict) else None
    return (error.validator == "type" and expected in ("number", ["number", "null"])
            and isinstance(error.instance, str) and EXPONENT.fullmatch(error.instance.strip())
            is not None and bool(error.absolute_path))


def refuse_nonfinite(value, path: list) -> None:
    """.nan, .inf and -.inf (numbers to YAML and to the schema) as one line naming the key."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PlanError(f"config: {key_path(path)}: {value} is not a finite number: "
                        "expected a number such as 0.1 or 1e-3")
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        refuse_nonfinite(item, [*path, key])


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
    entries = (config.get("sweep") or {}).get("models") or []
    commands = (config.get("sweep") or {}).get("commands") or {}
    labels = [(e.get("label"), "sweep.models") for e in entries if isinstance(e, dict)] + [
        (k, "sweep.commands") for k in (commands if isinstance(commands, dict) else [])]
    for label, where in labels:
        if isinstance(label, str) and len(label) > LABEL_MAX:
            raise PlanError(f"{where}: the label '{label[:40]}...' has {len(label)} "
                            f"characters: expected at most {LABEL_MAX} (it names "
                            "the points' folders)")
    known = load()["$defs"]["model"]["enum"]
    for name in entries if isinstance(entries, list) else []:
        if isinstance(name, str) and ":" not in name and name not in known:
            close = models.closest(name, known)
            raise PlanError(f"sweep.models: unknown model '{name}'"
                            + (f" (did you mean {close}?)" if close else "")
                            + ": expected a keras.applications name such as ResNet50V2, "
                            f"{', '.join(models.own())}, or your own as path/to/file.py:function")
