"""The configuration reference in config/README.md, generated from config/schema.yaml so the two cannot drift."""

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
    if kind == "object":
        return "file name: SHA-256" if "additionalProperties" in schema else "mapping"
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if key in schema
    ]
    return ", ".join([kind, *bounds]) if kind else ""


def rows(schema: dict, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, default, allowed values, description) of every leaf key, in schema order."""
    found = []
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        if "properties" in sub:
            found += rows(sub, f"{path}.")
        else:
            default = json.dumps(sub.get("default")) if "default" in sub else ""
            description = " ".join(sub.get("description", "").split())
            found.append((path, default, _allowed(sub), description))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and "properties" in extra:  # entries by any name: models.<name>
        found += rows(extra, f"{prefix}<name>.")
    return found


def markdown(schema_path: str | Path) -> str:
    schema = yaml.safe_load(Path(schema_path).read_text())
    lines = ["| key | default | allowed | description |", "| --- | --- | --- | --- |"]
    for key, default, allowed, description in rows(schema):
        cells = (f"`{key}`", f"`{default}`" if default else "", allowed, description.replace("|", "\\|"))
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
