"""docs/configuration.md from config/schema.yaml: every key with its type, default and
meaning, so the reference cannot fall behind the schema (a test compares them).

  python -m dlscale.core.schema_docs config/schema.yaml > docs/configuration.md
"""

from __future__ import annotations

import json
import sys

import yaml

from dlscale.core import models
from dlscale.core.schema import with_models

INTRO = """# Configuration

Every key of a dlscale config, generated from `config/schema.yaml` (which validates
configs before anything runs) by `make docs`. `config/config.yaml` is the study;
`--configfile=my.yaml` overrides its keys. Keys left out take the default shown.
"""


def type_of(spec: dict, schema: dict) -> str:
    if "$ref" in spec:
        spec = {**schema["$defs"][spec["$ref"].split("/")[-1]], **spec}
    if "enum" in spec:
        return " \\| ".join(f"`{v}`" for v in spec["enum"][:6]) + (
            " ..." if len(spec["enum"]) > 6 else "")
    for choice in ("oneOf", "anyOf"):
        if choice in spec:
            return " or ".join(type_of(s, schema) for s in spec[choice])
    if "const" in spec:
        return f"`{spec['const']}`"
    kind = spec.get("type", "object")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and isinstance(spec.get("items"), dict):
        return f"list of {type_of(spec['items'], schema)}"
    return kind


def description(spec: dict, schema: dict) -> str:
    if "description" in spec:
        return spec["description"]
    if "$ref" in spec:
        return schema["$defs"][spec["$ref"].split("/")[-1]].get("description", "")
    return ""


def rows(props: dict, schema: dict, prefix: str = ""):
    for key, spec in props.items():
        name = f"{prefix}{key}"
        default = json.dumps(spec["default"]) if "default" in spec else ""
        yield name, type_of(spec, schema), default, description(spec, schema)
        if spec.get("type") == "object" and "properties" in spec:
            yield from rows(spec["properties"], schema, f"{name}.")
        items = spec.get("items")
        if spec.get("type") == "array" and isinstance(items, dict) and "properties" in items:
            yield from rows(items["properties"], schema, f"{name}[].")


MODELS = """
## Models

The names a `model` takes, from `scripts/dlscale/core/models.csv` (`dlscale.core.models`):
its builder, the smallest image it accepts and its float32 gradient at 10 classes and
128 px (what an outside log's prediction all-reduces).

"""


def render(schema: dict) -> str:
    """The reference of every key, then the models table (`schema` as schema.load()
    gives it: the model choices are the models table's)."""
    lines = [INTRO, "| key | type | default | meaning |", "|---|---|---|---|"]
    for name, kind, default, meaning in rows(schema["properties"], schema):
        lines.append(f"| `{name}` | {kind} | {f'`{default}`' if default else ''} | {meaning} |")
    return "\n".join(lines) + "\n" + MODELS + models.render()


def undocumented(schema: dict) -> list[str]:
    return [name for name, _, _, meaning in rows(schema["properties"], schema) if not meaning]


def main(argv=None) -> int:
    path = (argv or sys.argv[1:] or ["config/schema.yaml"])[0]
    with open(path) as handle:
        sys.stdout.write(render(with_models(yaml.safe_load(handle))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
