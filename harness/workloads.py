"""Workloads from local files: chat sessions loaded with HF `datasets`, expanded into scenario requests.

File: JSON Lines (``.jsonl``), JSON (``.json``: JSON Lines or an array of records) or Parquet
(``.parquet``), read with ``datasets.load_dataset`` offline into a throw-away cache (nothing is fetched,
nothing is written under ~/.cache). One row per session, columns:

* ``turns`` (required): a non-empty list of non-empty strings; a one-turn row is a plain prompt;
* ``id`` (optional): a unique session name (at most 56 characters), default ``s<row>``.

Turn k of a session becomes request ``<id>.<k>`` whose prompt is BOS + (turn + SEP) for turns 0..k in
ByteTokenizer ids, so it shares turn k-1's whole prompt as a prefix (how chat sessions hit the prefix
cache), arriving at step k * arrival_gap. Sessions whose first turns are equal share that prefix too.

Writing workloads and scenarios that point at them: harness/workload_cli.py (`hybrid-harness workload`).
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import NamedTuple

from harness.errors import BadInput
from models.tokenizer import SEP, ByteTokenizer

FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
COLUMNS = {"id", "turns"}
MAX_ID = 56  # request ids are "<id>.<turn>", at most 64 characters in the scenario format

GEOMETRY_PRESETS = {
    "small": {"hash_block_size": 4, "attn_block_size": 8, "mamba_block_size": 16, "num_blocks": 256,
              "max_model_len": 512, "token_budget": 64},
}

WORDS = ("the a you we it is are was can will not and or but if when how what why which this that cache "
         "block state prefix token model layer page memory fast slow small large new old first last next "
         "please tell me about explain show write short long list more again thanks yes no here there "
         "time day plan idea code test run step file data word text answer question help").split()


class Session(NamedTuple):
    id: str
    turns: list[str]


def _datasets():
    # offline before import: the packaged json/parquet builders need nothing from the Hub
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # our BadInput says it once, naming the file
    return datasets


def _format(path: Path) -> str:
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise BadInput(f"workload {path}: unknown format {path.suffix!r} (use .json, .jsonl or .parquet)") from None


def load_workload(path: str | Path) -> list[Session]:
    """Read a workload file's sessions, in file order. BadInput names the file."""
    path = Path(path)
    fmt = _format(path)
    if not path.is_file():
        raise BadInput(f"cannot read workload {path}: no such file")
    if path.stat().st_size == 0:
        raise BadInput(f"workload {path}: empty file")
    datasets = _datasets()
    with tempfile.TemporaryDirectory(prefix="hh-datasets-") as cache:
        try:
            ds = datasets.load_dataset(fmt, data_files=str(path), split="train", cache_dir=cache,
                                       keep_in_memory=True)
        except Exception as exc:  # pyarrow/datasets errors on a corrupt or empty file: all bad input
            why = exc.__cause__ or exc
            raise BadInput(f"workload {path}: not readable as {fmt}: {type(why).__name__} {why}".rstrip()) from None
        columns = set(ds.column_names)
        rows = ds.to_list()
    if "turns" not in columns or columns - COLUMNS:
        raise BadInput(f"workload {path}: columns {sorted(columns)}; expected 'turns' and optionally 'id'")
    if not rows:
        raise BadInput(f"workload {path}: no rows")
    sessions, seen = [], set()
    for i, row in enumerate(rows):
        sid, turns = row.get("id"), row["turns"]
        sid = f"s{i}" if sid is None else sid
        if not isinstance(sid, str) or not 1 <= len(sid) <= MAX_ID:
            raise BadInput(f"workload {path}: row {i}: 'id' must be a string of 1..{MAX_ID} characters")
        if sid in seen:
            raise BadInput(f"workload {path}: row {i}: 'id' {sid!r} is not unique")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise BadInput(f"workload {path}: row {i}: 'turns' must be a non-empty list of non-empty strings")
        seen.add(sid)
        sessions.append(Session(sid, turns))
    return sessions


def session_prompts(turns: list[str]) -> list[list[int]]:
    """Token prompts of a session's turns: each is the previous one plus this turn and SEP."""
    tok, prompts = ByteTokenizer(), []
    prompt = tok.encode("", bos=True)
    for turn in turns:
        prompt = [*prompt, *tok.encode(turn, bos=False), SEP]
        prompts.append(prompt)
    return prompts


def workload_requests(path: str | Path, *, limit: int | None = None, max_tokens: int = 2,
                      arrival_gap: int = 4) -> list[dict]:
    """Scenario request dicts for the first `limit` sessions (rows) of a workload file."""
    sessions = load_workload(path)[:limit]
    return [{"id": f"{sid}.{k}", "prompt": {"tokens": prompt}, "arrival_step": k * arrival_gap,
             "max_tokens": max_tokens}
            for sid, turns in sessions for k, prompt in enumerate(session_prompts(turns))]


def _text(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + rng.choice(".?")


def synthetic_sessions(*, sessions: int = 4, turns: int = 3, seed: int = 0, system_prompts: int = 2,
                       system_words: tuple[int, int] = (3, 6), turn_words: tuple[int, int] = (2, 5),
                       max_prompt_tokens: int = 120) -> list[dict]:
    """Seeded chat sessions: turn 0 is one of `system_prompts` shared system prompts (a prefix shared
    across sessions), then short English-like turns; a session stops before its prompt would pass
    `max_prompt_tokens` tokens, one per UTF-8 byte (the model tier is slow: keep prompts short)."""
    rng = random.Random(seed)
    systems = [_text(rng, rng.randint(*system_words)) for _ in range(max(1, system_prompts))]
    rows = []
    for s in range(sessions):
        chat = [rng.choice(systems)]
        size = len(chat[0].encode()) + 2  # BOS and SEP
        for _ in range(turns - 1):
            turn = _text(rng, rng.randint(*turn_words))
            if size + len(turn.encode()) + 1 > max_prompt_tokens:
                break
            chat.append(turn)
            size += len(turn.encode()) + 1
        rows.append({"id": f"chat{s}", "turns": chat})
    return rows


def write_workload(path: str | Path, *, sessions: int = 4, turns: int = 3, seed: int = 0, **kwargs) -> Path:
    """Write synthetic_sessions(...) as JSON Lines, a JSON array or Parquet, by suffix."""
    path = Path(path)
    fmt, rows = _format(path), synthetic_sessions(sessions=sessions, turns=turns, seed=seed, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds = _datasets().Dataset.from_list(rows)
    if fmt == "parquet":
        ds.to_parquet(str(path))
    else:
        ds.to_json(str(path), lines=path.suffix.lower() == ".jsonl")
    return path
