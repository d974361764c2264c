"""The SGLang wing's mutant bank: a generator sweep per planted bug of SGLang's own code, stock first.

    .venv/bin/python bench/measure/sglang_bank.py --count 300 --out bench/results/sglang_bank.md

Each row runs `python -m harness.sglang sweep --count N [--mutant M]` in the SGLang venv (.venv-sglang, `make
venv-sglang`), one process per row: scenarios with findings, the first seed with one (time to kill, in scenarios),
the signatures and the wall time. Stock must show nothing: a finding there is the wing's until proven SGLang's.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# tried and dropped (unreached or equivalent), kept so no one tries them blind again
DROPPED = """Tried and dropped:
- `mamba.py:602` (`_select_finished_checkpoint` overshoot fallback names the latest ping-pong slot): 0 of 300;
  the overshoot fallback is not reached (or not distinguishable) in these scenarios.
- `unified_radix_cache.py:3645` (a request whose external load failed is not marked `skip_radix_cache_insert`):
  equivalent. SGLang releases the aborted request with `checkpoint=False` either way, and a chunked one through
  `process_pending_chunked_abort` before any stash; the bank's `sglang-linker-failure-read-as-landed` (the failure
  not reported at all) is killed instead.
- `retract` keeping the Mamba slot: equivalent (`free_mamba_cache` already clears it).

Reached since the sweep alternates the Mamba strategy (odd seeds no_buffer): `mamba.py:677-678`, no_buffer's stash
copy, was 0 of 300 when every seed ran extra_buffer; it is the bank's `sglang-no-buffer-stash-args-swapped` now.

The generator's scenarios (the sweep) draw external hits but no failing loads; the campaign's genome draws them
(harness/sglang/sweep.py `decoded`), so `sglang-linker-failure-read-as-landed` is 0 of 300 in the sweep and killed
by the campaign only. External hits entered the sweep with the linker: requests they serve from the store skip the
device copy-on-write, so the two CoW mutants' sweep counts fell from 83 to 49 of 300 (the campaign still kills both
within 8 inputs). Speculation (NGRAM, k=2) entered it too: a speculative decode tracks its state through the verify's
commit, not the decode tracking slot, so `sglang-decode-track-idx-stale` fell from 81 to 38 of 300."""


def sweep(count: int, mutant: str | None, tree_core: str) -> dict:
    from harness.engines import sglang_wing

    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        out = sglang_wing("sweep", "--count", str(count), "--artifacts", tmp, "--tree-core", tree_core,
                          *(["--mutant", mutant] if mutant else []), capture=True, timeout=3600)
        wall = time.monotonic() - started
    kills = [(int(seed), float(at)) for seed, at in re.findall(r"^seed (\d+) \(\+([\d.]+) s\): ", out.stdout, re.MULTILINE)]
    seeds = [seed for seed, _ in kills]
    signatures: dict[str, int] = {}
    for line in re.findall(r"^seed \d+ \(\+[\d.]+ s\): (.*) \(", out.stdout, re.MULTILINE):
        for sig in line.split(", "):
            signatures[sig] = signatures.get(sig, 0) + 1
    return {"exit": out.returncode, "with_findings": len(seeds), "first": min(seeds) if seeds else None,
            "first_s": min(at for _, at in kills) if kills else None,
            "signatures": signatures, "wall": wall, "tail": out.stderr[-300:]}


def campaign(minutes: float, mutant: str | None) -> dict:
    """A coverage-guided campaign (`python -m harness.sglang campaign`, the body of `make fuzz ENGINE=sglang`)."""
    from harness.engines import sglang_wing

    with tempfile.TemporaryDirectory() as tmp:
        out = sglang_wing("campaign", "--minutes", str(minutes), "--artifacts", tmp,
                          *(["--mutant", mutant] if mutant else []), capture=True, timeout=3600)
    kills = re.findall(r"^HH finding after (\d+) inputs \(\+([\d.]+) s\)", out.stdout, re.MULTILINE)
    return {"exit": out.returncode, "kept": len(kills), "first": kills[0] if kills else None}


def _kill(first) -> str:
    return "-" if first is None else f"{first[1]} s ({first[0]} inputs)"


def main() -> int:
    from harness.engines import SGLANG_PYTHON
    from harness.sglang.runtime import MUTANTS, SLIPS
    from harness.stamp import stamp

    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sglang_bank.md")
    ap.add_argument("--campaign-minutes", type=float, default=2.0, help="each row's campaign (0: none)")
    args = ap.parse_args()
    if not SGLANG_PYTHON.exists():
        print(f"no SGLang venv at {SGLANG_PYTHON}: make venv-sglang", file=sys.stderr)
        return 2
    rows = ["| mutant | tree core | bug class | SGLang file:line | exit | scenarios with findings | first seed | "
            "time to kill (s) | signatures | wall (s) | campaign exit | campaign kept | campaign time to kill |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for mutant, core in [(None, "rust"), (None, "python"), *((m, "rust") for m in MUTANTS)]:
        r = sweep(args.count, mutant, core)
        slip = SLIPS.get(mutant)
        where = slip.where if slip else ("srt/mem_cache/unified_cache/components/mamba.py (a wrapper of "
                                         "finalize_match_result_in_cache)" if mutant else "-")
        bug = (MUTANTS[mutant] if mutant else "none (must show nothing)").replace("|", "/")
        sigs = ", ".join(f"`{s}` {n}" for s, n in sorted(r["signatures"].items()))
        first = ("-", "-") if r["first"] is None else (r["first"], f"{r['first_s']:.1f}")
        c = campaign(args.campaign_minutes, mutant) if args.campaign_minutes and core == "rust" else None
        camp = "| - | - | - |" if c is None else f"| {c['exit']} | {c['kept']} | {_kill(c['first'])} |"
        rows.append(f"| `{mutant or 'stock'}` | {core} | {bug} | {where} | {r['exit']} | {r['with_findings']} of "
                    f"{args.count} | {first[0]} | {first[1]} | {sigs or '-'} | {r['wall']:.1f} {camp}")
        print(rows[-1], file=sys.stderr)
    text = "\n".join([
        "# The SGLang wing's mutant bank (SGLang 0.5.23)", "",
        stamp(f"python bench/measure/sglang_bank.py --count {args.count} --campaign-minutes {args.campaign_minutes} "
              f"--out {args.out}"), "",
        f"Each row: `python -m harness.sglang sweep --count {args.count} --tree-core C [--mutant M]` in `.venv-sglang` "
        "(generated seeds from 0, projected onto what the wing expresses: harness/sglang/sweep.py; the Mamba strategy "
        "alternates, even seeds extra_buffer, odd no_buffer; the sweep is the generator half of the campaign below), "
        "the mutant a run-time patch "
        "of SGLang's own code (harness/sglang/runtime.py `MUTANTS`: the slips recompile one SGLang method from its "
        "source with one line, or one call's argument order, changed), undone after each run. Exit 1: findings were "
        "kept. First seed and time to kill: the first scenario with a finding and the seconds from the sweep's start to "
        "it (SGLang's import, 7-20 s, comes before). Campaign: `python -m harness.sglang campaign --minutes "
        f"{args.campaign_minutes} [--mutant M]` (`make fuzz ENGINE=sglang`: coverage-guided, harness/sglang/campaign.py), "
        "its exit, the findings it kept (one per new set of signatures) and the first one's time from the worker's "
        "start (after SGLang's import) and inputs run. **The stock rows must show nothing.**", "",
        *rows, "", DROPPED, ""])
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
