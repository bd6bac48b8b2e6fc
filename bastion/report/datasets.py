"""Dataset names as the report shows them, and their order (the paper's first).

Apart from :mod:`bastion.report.tables` so that every report module, the averages
included, orders datasets the same way without importing the table.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Iterable

from bastion.defaults import LONGBENCH_SUBSETS, OFFLINE_DATASETS, SHORT_DATASETS

# The paper's order; datasets it does not name follow alphabetically.
PAPER_ORDER: tuple[str, ...] = (*SHORT_DATASETS, *LONGBENCH_SUBSETS, *OFFLINE_DATASETS)


def dataset_name(value: Any) -> str:
    """The plain dataset name: ``results/datasets/humaneval-pkg.jsonl`` -> ``humaneval-pkg``."""
    text = str(value)
    if text.endswith(".jsonl"):
        return PurePosixPath(text.replace("\\", "/")).name[: -len(".jsonl")]
    return text


def order_datasets(names: Iterable[str]) -> list[str]:
    """Unique names in the paper's order, the others alphabetically after them."""
    unique = list(dict.fromkeys(names))
    rank = {n: i for i, n in enumerate(PAPER_ORDER)}
    return sorted(unique, key=lambda n: (0, rank[n], "") if n in rank else (1, 0, n))
