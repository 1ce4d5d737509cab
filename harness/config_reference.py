"""The configuration reference in config/README.md, generated from config/schema.yaml (what each key
takes) and config/config.yaml (its default) so that neither can drift from the README."""

import json
import re
from pathlib import Path

import yaml

START, END = "<!-- config-reference: start -->", "<!-- config-reference: end -->"


def _allowed(schema: dict) -> str:
    if "enum" in schema:
        return " or ".join(f"`{v}`" for v in schema["enum"])
    if "oneOf" in schema:
        return " or ".join(filter(None, (_allowed(s) for s in schema["oneOf"])))
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "")
    kind = " or ".join(kind) if isinstance(kind, list) else kind  # e.g. integer or null
    if kind == "object" and "properties" in schema:
        return "mapping: " + "; ".join(f"{key}: {_allowed(sub)}" for key, sub in schema["properties"].items())
    if kind == "object":
        return "file name: SHA-256"
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if key in schema
    ]
    return ", ".join([kind, *bounds]) if kind else ""


def _default(defaults, path: list[str], schema: dict) -> str:
    """The default at `path` in config.yaml; at a `<name>` step, each entry's there (esm's, dnabert's)."""
    if not path:
        return f"`{json.dumps(defaults)}`"
    if path[0] == "<name>":
        named = schema.get("properties", {})
        entries = {name: value for name, value in defaults.items() if isinstance(value, dict) and name not in named}
        return ", ".join(f"{_default(value, path[1:], {})} ({name})" for name, value in entries.items())
    if path[0] not in defaults:
        return ""
    return _default(defaults[path[0]], path[1:], schema.get("properties", {}).get(path[0], {}))


def rows(schema: dict, defaults: dict, root: dict | None = None, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, default, allowed values, description) of every described key, in schema order."""
    root = root or schema
    found = []
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        if "description" not in sub:  # a section
            found += rows(sub, defaults, root, f"{path}.")
        else:
            description = " ".join(sub["description"].split())
            found.append((path, _default(defaults, path.split("."), root), _allowed(sub), description))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and "properties" in extra:  # entries by any name: models.<name>
        found += rows(extra, defaults, root, f"{prefix}<name>.")
    return found


def markdown(schema_path: str | Path) -> str:
    """The reference of the schema at `schema_path`, with the defaults of config.yaml beside it."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    defaults = yaml.safe_load(Path(schema_path).with_name("config.yaml").read_text())
    lines = ["| key | default | allowed | description |", "| --- | --- | --- | --- |"]
    for key, default, allowed, description in rows(schema, defaults):
        cells = (f"`{key}`", default, allowed, description.replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def update_readme(readme: str | Path, schema_path: str | Path) -> bool:
    """Write the reference between the markers of `readme` (config/README.md); True when it changed."""
    text = Path(readme).read_text()
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{readme}: no {START} ... {END} markers")
    new = pattern.sub(lambda _: f"{START}\n{markdown(schema_path)}{END}", text)
    Path(readme).write_text(new)
    return new != text
