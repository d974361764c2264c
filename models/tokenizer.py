"""A built-in byte-level tokenizer: nothing to download, every string encodes, ids fit the tiny model.

Ids 0..255 are the UTF-8 bytes themselves; a few specials sit just above (BOS, EOS, turn separator), so
every id is below the tiny model's vocabulary (512) and the scenario format's (32,000).
"""

from __future__ import annotations

from collections.abc import Iterable

BOS = 256
EOS = 257
SEP = 258  # ends a chat turn: turn k's prompt is then an exact prefix of turn k+1's
VOCAB_SIZE = 259


class ByteTokenizer:
    bos_id = BOS
    eos_id = EOS
    sep_id = SEP
    vocab_size = VOCAB_SIZE

    def encode(self, text: str, bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [BOS, *ids] if bos else ids

    def decode(self, ids: Iterable[int]) -> str:
        # specials (and anything out of byte range) carry no text; broken UTF-8 decodes to U+FFFD
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")
