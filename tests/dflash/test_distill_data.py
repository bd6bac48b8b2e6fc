"""dflash/distill_data.py: a time-boxed run keeps what it generated."""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_target():
    from transformers import AutoModelForCausalLM

    from bastion.models.registry import tiny_dir

    return AutoModelForCausalLM.from_pretrained(tiny_dir("target"), dtype=torch.float32).eval()


def test_ragged_continuations_stop_at_the_deadline(tiny_target):
    from dflash.distill_data import continue_ragged

    prompts = [np.arange(2, 2 + n, dtype=np.int64) for n in (3, 5, 4)]
    full = continue_ragged(tiny_target, prompts, [False, False, True], 2, 2, 0, 0, seed=0)
    assert all(d is not None and len(d) <= len(p) + 2 for d, p in zip(full, prompts))
    assert all((d[: len(p)] == p).all() for d, p in zip(full, prompts))
    none = continue_ragged(tiny_target, prompts, [False, False, True], 2, 2, 0, 0, seed=0,
                           deadline=time.monotonic() - 1)
    assert none == [None, None, None]


def test_window_continuations_stop_at_the_deadline(tiny_target):
    from dflash.distill_data import continue_prompts

    prompts = np.arange(2, 14, dtype=np.int64).reshape(3, 4)
    assert len(continue_prompts(tiny_target, prompts, 2, 1, 0.0, 0, seed=0)) == 3
    assert continue_prompts(tiny_target, prompts, 2, 1, 0.0, 0, seed=0, deadline=time.monotonic() - 1) == []
