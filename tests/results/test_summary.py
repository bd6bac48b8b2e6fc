"""The decode log's summary table: speedups only where the run holds AR's records."""

from __future__ import annotations

from bastion.results.records import format_summary, summarise


def _record(method: str, seconds: float, tokens: int = 10) -> dict:
    return {"method": method, "num_output_tokens": tokens, "decode_seconds": seconds,
            "acceptance_lengths": [2] * (tokens // 2), "tree_sizes": [8] * (tokens // 2)}


def test_speedup_against_ar_when_ar_ran():
    rows = summarise([_record("ar", 2.0), _record("dflash", 1.0)], ["ar", "dflash"])
    assert [round(r["speedup"], 6) for r in rows] == [1.0, 2.0]
    assert "2.00x" in format_summary(rows, 16)


def test_a_method_alone_shows_no_speedup_instead_of_nan():
    # a cell job decodes and summarises each method on its own
    text = format_summary(summarise([_record("dflash", 1.0)], ["dflash"]), 16)
    line = next(l for l in text.splitlines() if l.startswith("DFlash"))
    assert "nan" not in text and line.split()[4] == "-", line


def test_the_log_summary_uses_the_reports_speedup_definition():
    """The decode log's table agrees with bastion.report.aggregate: ratio of mean times per token, pooled tau."""
    rows = summarise([_record("ar", 1.0, 10), _record("ar", 20.0, 100),
                      _record("dflash", 0.25, 10), _record("dflash", 10.0, 100)], ["ar", "dflash"])
    dflash = next(r for r in rows if r["method"] == "dflash")
    assert round(dflash["speedup"], 9) == 2.4  # not 2.049 (totals) nor 3.0 (mean of per-response ratios)
    assert dflash["tau"] == 2.0
