"""Per-prompt result records: resumable writing and the summary table.

A decode run appends every finished prompt's records (all turns, all methods) to
``<output>.partial`` as soon as the prompt is done, so an interrupted run loses at most
the prompt in flight.  A rerun with the same settings reads the partial file, skips the
prompts it holds, and the final ``<output>`` appears only once every prompt is there.
Records carry a ``run_key`` (a hash of the settings that shape the outputs, the software
and the device included) and those settings, so a partial file from other settings is
never mixed in: :func:`resume` sets it aside under another name, says which settings
differ, and the run starts over.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from bastion.defaults import method_label
from bastion.results.generation import GenerationResult


class ResumeMismatchError(RuntimeError):
    """A partial output file was written with different settings (``record``: its first such record)."""

    def __init__(self, message: str, record: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.record = record


def run_key(settings: dict[str, Any]) -> str:
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def make_record(
    result: GenerationResult,
    *,
    prompt_index: int,
    turn: int,
    method: str,
    base: dict[str, Any],
) -> dict[str, Any]:
    steps = result.steps
    timed = any(s.t_verify for s in steps)
    rec = {
        **base,
        "prompt_index": prompt_index,
        "turn": turn,
        "method": method,
        "output_ids": result.output_ids,
        "num_output_tokens": len(result.output_ids),
        "num_prompt_tokens": result.num_prompt_tokens,
        "prefill_seconds": result.prefill_seconds,
        "decode_seconds": result.decode_seconds,
        "stop_reason": result.stop_reason,
        "num_steps": len(steps),
        "acceptance_lengths": [s.committed for s in steps],
        "tree_sizes": [s.tree_size for s in steps],
        "contexts": [s.context for s in steps],
        "drafted": [int(s.drafted) for s in steps],  # 0: no drafter ran (AR, or BASTION+ falling back to AR steps)
    }
    if result.prefill_reused:  # prefill_seconds is then the time to restore a copy, not a forward
        rec["prefill_reused"] = True
    if timed:
        for name in ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit"):
            rec[name] = [getattr(s, name) for s in steps]
    return rec


def partial_path(output: str | os.PathLike) -> Path:
    return Path(f"{output}.partial")


class RecordWriteError(RuntimeError):
    """Records could not be written (unwritable path, full disk); what was written before is kept."""


def check_writable(part: Path) -> None:
    """Create (or open for appending) the partial file now, so an unwritable output fails before any work."""
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
        with open(part, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise RecordWriteError(
            f"cannot write {part} ({exc.strerror}); pass an --output in a writable folder"
        ) from None


def _parsed(path: Path) -> tuple[list[dict[str, Any]], int, int]:
    """The records of every complete line, the bytes they take, and the file's size."""
    with open(path, "rb") as fh:
        data = fh.read()
    out: list[dict[str, Any]] = []
    good = 0  # bytes of complete lines
    for raw in data.splitlines(keepends=True):
        if not raw.endswith(b"\n"):
            break  # torn write of the prompt in flight
        try:
            out.append(json.loads(raw))
        except ValueError:
            raise ResumeMismatchError(
                f"{path} has an unreadable line after {len(out)} records; delete it (or that line) to resume"
            ) from None
        good += len(raw)
    return out, good, len(data)


def check_readable(path: Path) -> None:
    """Refuse a partial file with an unreadable line now, before any weights load."""
    if path.exists():
        _parsed(path)


def read_partial(path: Path, key: str) -> list[dict[str, Any]]:
    """Complete records of an interrupted run.

    A torn last line (a write cut by a kill or a full disk) is removed from the file, so
    the next append starts on a line of its own.
    """
    if not path.exists():
        return []
    out, good, size = _parsed(path)
    for rec in out:
        if rec.get("run_key") != key:
            raise ResumeMismatchError(
                f"{path} was written by a run with different settings (run_key {rec.get('run_key')} != {key}); "
                "delete it to start over, or rerun with the original settings to resume", rec
            )
    if good < size:
        with open(path, "r+b") as fh:
            fh.truncate(good)
    return out


def resume(path: Path, key: str, settings: dict[str, Any], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Complete records of an interrupted run of these ``settings`` (whose hash is ``key``).

    A partial file written under other settings (another engine, dtype, device, software,
    prompts, history...) is set aside, renamed ``<path>.set-aside`` (``-2``, ``-3``... if
    taken), and the log names the settings that differ; the run then starts over.  Nothing
    of the two runs mixes and nothing is lost.  An unreadable line still stops the run.
    """
    try:
        return read_partial(path, key)
    except ResumeMismatchError as exc:
        if exc.record is None:
            raise
        aside = set_aside(path)
        log(f"[resume] {path} was written with other settings ({setting_differences(exc.record.get('run_settings'), settings)}); "
            f"set aside as {aside.name}, starting over")
        return []


def set_aside(path: Path) -> Path:
    """Rename ``path`` to the first free ``<path>.set-aside[-N]``; returns the new path."""
    n = 1
    while (aside := Path(f"{path}.set-aside" + (f"-{n}" if n > 1 else ""))).exists():
        n += 1
    os.replace(path, aside)
    return aside


def setting_differences(old: Any, new: dict[str, Any]) -> str:
    """``field: old -> new`` for every setting that differs (one level into nested ones)."""
    if not isinstance(old, dict):
        return "its records do not say which"
    diffs = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += [f"{k}.{j}: {a.get(j)!r} -> {b.get(j)!r}" for j in sorted(set(a) | set(b)) if a.get(j) != b.get(j)]
        elif a != b:
            diffs.append(f"{k}: {a!r} -> {b!r}")
    return ", ".join(diffs) or "the same settings under another run key"


def completed_prompts(records: Iterable[dict[str, Any]], turns_per_prompt: dict[int, int], methods: Sequence[str]) -> set[int]:
    """Prompt indices whose every (turn, method) record is present."""
    have: dict[int, set[tuple[int, str]]] = {}
    for r in records:
        have.setdefault(r["prompt_index"], set()).add((r["turn"], r["method"]))
    return {
        i for i, got in have.items()
        if i in turns_per_prompt and got >= {(t, m) for t in range(turns_per_prompt[i]) for m in methods}
    }


def append_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append one prompt's records in a single write, then fsync (they survive a kill)."""
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    size = path.stat().st_size if path.exists() else 0
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        try:  # drop the torn part: the records written before stay readable
            with open(path, "r+b") as fh:
                fh.truncate(size)
        except OSError:
            pass
        raise RecordWriteError(
            f"cannot append to {path} ({exc.strerror}); free space (or fix the folder) and rerun to resume from "
            "the prompts already saved there"
        ) from None


def finalise(output: str | os.PathLike, records: list[dict[str, Any]], keep_partial: bool = False) -> None:
    """Write the sorted, de-duplicated records atomically and drop the partial file (unless ``keep_partial``)."""
    out = Path(output)
    uniq = {(r["prompt_index"], r["turn"], r["method"]): r for r in records}
    order = sorted(uniq)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            for k in order:
                fh.write(json.dumps(uniq[k], sort_keys=True) + "\n")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RecordWriteError(
            f"cannot write {out} ({exc.strerror}); its records are kept in {partial_path(out)}: "
            "free space (or fix the folder) and rerun to finish"
        ) from None
    if not keep_partial:
        partial_path(out).unlink(missing_ok=True)


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def merge(inputs: Sequence[str | os.PathLike], output: str | os.PathLike) -> int:
    """Join shard files; a (prompt, turn, method) found twice must be the same record."""
    seen: dict[tuple[int, int, str], dict[str, Any]] = {}
    for path in inputs:
        for r in read_records(path):
            key = (r["prompt_index"], r["turn"], r["method"])
            if key in seen and seen[key]["output_ids"] != r["output_ids"]:
                raise ValueError(f"prompt {key} appears in two shards with different outputs ({path})")
            seen[key] = r
    finalise(output, list(seen.values()))
    return len(seen)


def summarise(records: Sequence[dict[str, Any]], methods: Sequence[str]) -> list[dict[str, Any]]:
    """Per-method throughput, speedup over AR and mean acceptance (tau).

    Time per output token is averaged over responses, as in the original harness;
    tau is tokens committed per target forward over all decode steps.
    """
    rows = []
    tpot: dict[str, float] = {}
    for m in methods:
        rs = [r for r in records if r["method"] == m and r["num_output_tokens"] > 1]
        if not rs:
            continue
        tpot[m] = float(np.mean([r["decode_seconds"] / r["num_output_tokens"] for r in rs]))
        steps = [a for r in rs for a in r["acceptance_lengths"]]
        rows.append({
            "method": m,
            "responses": len(rs),
            "tokens": int(sum(r["num_output_tokens"] for r in rs)),
            "tok_per_s": 1.0 / tpot[m] if tpot[m] > 0 else float("inf"),
            "tau": float(np.mean(steps)) if steps else float("nan"),
            "mean_tree": float(np.mean([t for r in rs for t in r["tree_sizes"]])) if steps else float("nan"),
        })
    for row in rows:
        row["speedup"] = tpot["ar"] / tpot[row["method"]] if "ar" in tpot and tpot[row["method"]] > 0 else float("nan")
    return rows


def format_summary(rows: Sequence[dict[str, Any]], block_size: int) -> str:
    head = f"{'Method':<22} {'Throughput':>14} {'Speedup':>8} {'Avg accept':>11} {'Avg tree':>9} {'Resp':>5}"
    lines = ["=" * len(head), head, "-" * len(head)]
    for r in rows:
        label = method_label(r["method"])
        if r["method"] == "dflash":
            label += f" (bs={block_size})"
        acc = "-" if r["method"] == "ar" else f"{r['tau']:.2f}"
        # no AR records in this run (a cell job summarises each method alone): no speedup to show
        speedup = "-" if math.isnan(r["speedup"]) else f"{r['speedup']:.2f}x"
        lines.append(
            f"{label:<22} {r['tok_per_s']:>10.2f} tok/s {speedup:>8} {acc:>11} {r['mean_tree']:>9.1f} {r['responses']:>5}"
        )
    lines.append("=" * len(head))
    return "\n".join(lines)
