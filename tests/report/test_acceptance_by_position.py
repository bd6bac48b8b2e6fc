"""Acceptance by position: the fraction of steps whose accepted path reaches depth k."""

from __future__ import annotations

import numpy as np
import pytest

from bastion.report import plots_steps, tables
from tests.report.test_figures import TITLE, pdf_text, write_rows


def test_reach_fractions_count_the_steps_at_or_past_each_depth():
    # committed 1, 2, 3, 5 -> depths 0, 1, 2, 4: depth 1 reached by 3 of 4 steps, 2 by 2, 3 and 4 by 1
    np.testing.assert_array_equal(plots_steps.reach_fractions(np.array([1, 2, 3, 5])), [0.75, 0.5, 0.25, 0.25])
    np.testing.assert_array_equal(plots_steps.reach_fractions(np.array([4, 4])), [1.0, 1.0, 1.0])
    assert plots_steps.reach_fractions(np.array([1, 1, 1])).size == 0  # nothing accepted past the root
    assert plots_steps.reach_fractions(np.array([], dtype=int)).size == 0


def steps(tmp_path, spec, name="steps.csv"):
    """spec: (model, temperature, method) -> committed per step."""
    rows = [{"hardware": "hw-test", "model": m, "dataset": "gsm8k", "temperature": t, "method": meth,
             "prompt_index": 0, "turn": 0, "step": s, "committed": a, "tree_size": 16, "context": 10 + s}
            for (m, t, meth), committed in spec.items() for s, a in enumerate(committed)]
    return write_rows(rows, tmp_path / name)


def test_one_panel_per_model_and_temperature(tmp_path):
    spec = {("m1", 0.0, "ar"): [1, 1, 1], ("m1", 0.0, "dflash"): [1, 2, 3, 5], ("m1", 0.0, "bastion"): [4, 4],
            ("m1", 1.0, "dflash"): [1, 1, 2], ("m1", 1.0, "bastion"): [2, 3, 1, 1],
            ("m1", 1.0, "bastion_lossy"): [6, 2]}
    out = tmp_path / "acc_pos.pdf"
    plots_steps.acceptance_by_position(steps(tmp_path, spec), out, TITLE)
    text = pdf_text(out)
    assert tables.title_text(TITLE, "Acceptance by position") in text
    for part in ("m1, T=0", "m1, T=1", "DFlash (4 steps)", "BASTION (2 steps)", "DFlash (3 steps)",
                 "BASTION (4 steps)", "BASTION (lossy) (2 steps)", "Lossy: BASTION (lossy)",
                 "Depth k of the accepted path", "Fraction of steps reaching depth k"):
        assert part in text, part
    assert "AR (" not in text  # AR drafts nothing


def test_no_drafting_steps_is_an_error_naming_what_was_found(tmp_path):
    with pytest.raises(ValueError, match=r"acceptance_by_position: no steps of a drafting method \(eagle3, dflash.*; found: \['ar'\]\)"):
        plots_steps.acceptance_by_position(steps(tmp_path, {("m1", 0.0, "ar"): [1, 1]}), tmp_path / "x.pdf", TITLE)
