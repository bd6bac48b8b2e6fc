"""The EAGLE-3 fidelity bench's machinery: real node outputs, and a comparison that can fail.

The reference release is not available offline, so its ``topK_genrate`` is played by
stand-ins that return a tree in the release's format: our own tree (must count as
identical) and the same tree with one node changed (must count as a difference).
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import eagle3_fidelity as fid
from bastion.models import registry as models
from bastion.speculative.methods import Eagle3Policy
from dflash.eagle3.tree import extend_context


@pytest.fixture(scope="module")
def recorded():
    prompt = list(range(40, 72))
    runs, head = fid.record(str(models.tiny_dir("target")), str(models.tiny_dir("eagle3")), [prompt], 10,
                            Eagle3Policy(3, 4, 12))
    return runs, head


def _release_format(tree):
    """(draft_tokens, retrieve_indices, tree_mask, tree_position_ids) of a tree, as topK_genrate returns them."""
    n = len(tree)
    mask = torch.eye(n)
    for i in range(1, n):
        mask[i] += mask[int(tree.parents[i])]
    return tree.tokens[None], None, mask.clamp(max=1)[None, None], tree.depths


def test_oracle_outputs_are_the_heads_own(recorded):
    runs, head = recorded
    run, c = runs[0], runs[0]["contexts"][1]
    oracle = fid.PathOracle(head, run["features"][:c], run["tokens"][1 : c + 1])
    cache = head.new_cache()
    root = extend_context(head, cache, run["features"][:c], run["tokens"][1 : c + 1])[0, -1]
    torch.testing.assert_close(oracle.root_hidden, root, rtol=0, atol=0)
    tok = int(torch.argmax(head.logits(root)))  # the root's best child, then the head on it directly
    direct = head(root.view(1, 1, -1), torch.tensor([[tok]]), torch.tensor([[c]]), None, cache)[0, 0]
    torch.testing.assert_close(oracle.hidden((tok,)), direct, rtol=1e-5, atol=1e-5)


def test_the_comparison_counts_identical_and_different_trees(recorded):
    runs, head = recorded
    policy = Eagle3Policy(3, 4, 12)

    def same(ref_self, features, ids, _head, _processor):
        return _release_format(fid.ours(ref_self.oracle, head, policy))

    def one_node_off(ref_self, features, ids, _head, _processor):
        tree = fid.ours(ref_self.oracle, head, policy)
        tree.tokens[-1] = (tree.tokens[-1] + 1) % head.config.vocab_size
        return _release_format(tree)

    good = fid.compare(runs, head, [policy], 3, same)[0]
    assert good["steps"] == min(3, len(runs[0]["contexts"])) > 0
    assert good["identical"] + good["identical_at_ties"] == good["steps"] and good["nodes"] == 11 * good["steps"]
    bad = fid.compare(runs, head, [policy], 3, one_node_off)[0]
    assert bad["differ"] + bad["differ_at_ties"] == bad["steps"]


def test_a_missing_release_is_named_with_the_fix(tmp_path):
    with pytest.raises(SystemExit, match="git clone https://github.com/SafeAILab/EAGLE"):
        fid.load_topk_genrate(tmp_path)
