"""The `config.json` (no weights) of hybrid models vLLM serves, shipped so that the engine tier builds their KV
cache groups and block sizes as vLLM does (harness/engine/model_geometry.py). Provenance: README.md here.

A scenario names one by its file stem (`geometry.model`), or carries a config of its own inline (a JSON object:
`--model-config PATH` inlines the file, so the scenario stays self-contained)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from harness.errors import BadInput

HERE = Path(__file__).resolve().parent


# the order the generators draw them in (a fuzz input's model bits index it: harness.genome): append-only, so a
# stored input decodes to the model it was found on; a file not listed comes after, by name
DRAW_ORDER = ("granite-4.0-h-small", "granitemoehybrid-tiny", "nemotron-h-4b", "jamba-v0.1", "lfm2-1.2b",
              "qwen3-next-80b-a3b", "falcon-h1-0.5b")


@functools.cache  # the folder is part of the package: read once per process (scenario validation calls `load`)
def shipped() -> list[str]:
    names = {p.stem for p in HERE.glob("*.json")}
    return [n for n in DRAW_ORDER if n in names] + sorted(names - set(DRAW_ORDER))


@functools.cache
def _shipped_doc(name: str) -> dict:
    return json.loads((HERE / f"{name}.json").read_text())


def load(ref: str | dict) -> tuple[str, dict]:
    """(name, HF config dict) for a shipped name or an inline config. BadInput when neither."""
    if isinstance(ref, dict):
        doc = ref
        name = str(doc.get("_name") or (doc.get("architectures") or ["inline"])[0])
    else:
        if ref not in shipped():
            raise BadInput(f"geometry.model {ref!r}: not a shipped model config (shipped: {', '.join(shipped())}; "
                           "--model-config PATH inlines a config.json of your own)")
        doc, name = dict(_shipped_doc(ref)), ref
    if not isinstance(doc.get("model_type"), str) or not isinstance(doc.get("architectures"), list) \
            or not doc["architectures"]:
        raise BadInput(f"model config {name!r}: needs a model_type and an architectures list, as a config.json has")
    return name, doc


def read_path_or_name(ref: str) -> str | dict:
    """`--model-config NAME|PATH`: a shipped name stays a name; a file is read and inlined."""
    if ref in shipped():
        return ref
    path = Path(ref)
    if not path.is_file():
        raise BadInput(f"--model-config {ref!r}: neither a shipped model config ({', '.join(shipped())}) nor a file")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"--model-config {ref}: not a JSON config: {exc}") from None
    if not isinstance(doc, dict):
        raise BadInput(f"--model-config {ref}: not a JSON object")
    doc.setdefault("_name", path.stem)
    load(doc)
    return doc
