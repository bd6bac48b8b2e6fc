"""EAGLE-3 trees built twice from the same recorded fp32 inputs: the reference release's ``topK_genrate`` and ours.

The EAGLE release is read at run time from a clone given with ``--eagle-src`` (nothing of
it is copied here); only ``eagle/model/cnets.py`` and the three modules it imports load,
under empty package stubs so that the release's package ``__init__`` (its full models)
never runs.

Inputs are recorded from real drafts of a pair (default: the bundled tiny pair): a few
prompts are decoded with the ``eagle3`` method (eager engine, fp32, T = 0); each step's
head context is the target's tapped fp32 features of the committed positions and the
committed tokens, root last.  Both implementations then draft from each recorded step and
receive *identical head outputs*: a path oracle runs the head once per distinct node,
keyed by the node's token path (a node's output depends only on its context and its
ancestors), and answers both.  So any difference is in the tree construction itself:
frontier selection, cumulative scores, the final rerank, the parent links.

A step is counted apart when equal scores meet a cut (a node's top-k children, a round's
frontier, the final keep): there the two orders of ties may keep different, equally
scored nodes, and neither is wrong.

    git clone https://github.com/SafeAILab/EAGLE /tmp/eagle-src
    python -m benchmarks.eagle3_fidelity --eagle-src /tmp/eagle-src --out results/eagle3_fidelity
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bastion.data import registry as datasets
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.methods import Eagle3Policy
from dflash.eagle3.config import eagle3_layer_ids
from dflash.eagle3.model import Eagle3Head
from dflash.eagle3.tree import extend_context, grow_tree


def load_topk_genrate(src: Path):
    """The release's ``Model.topK_genrate``, loaded from ``src/eagle/model/cnets.py`` without its package."""
    model_dir = Path(src) / "eagle" / "model"
    if not (model_dir / "cnets.py").is_file():
        raise SystemExit(f"error: --eagle-src {src} has no eagle/model/cnets.py; give the root of "
                         "`git clone https://github.com/SafeAILab/EAGLE`")
    for name, path in (("eagle", model_dir.parent), ("eagle.model", model_dir)):
        stub = types.ModuleType(name)
        stub.__path__ = [str(path)]  # relative imports resolve here; the package __init__ never runs
        sys.modules[name] = stub
    spec = importlib.util.spec_from_file_location("eagle.model.cnets", model_dir / "cnets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.Model.topK_genrate


class PathOracle:
    """The head's output at every node of one drafting step, computed once per token path."""

    def __init__(self, head: Eagle3Head, features: torch.Tensor, next_tokens: torch.Tensor) -> None:
        self.head, self.cache = head, head.new_cache()
        self.context = int(next_tokens.numel())  # the root's children sit at this position
        self.root = next_tokens.reshape(-1)[-1:].long()
        out = extend_context(head, self.cache, features, next_tokens)  # [1, c, H]
        self.root_hidden = out[0, -1].contiguous()
        self._hidden = {(): self.root_hidden}
        self._path_of = {self._key(self.root_hidden): ()}
        self._logits: dict[tuple[int, ...], torch.Tensor] = {}
        self.rows: list[torch.Tensor] = []  # every log-probability row handed out (for the tie check)

    @staticmethod
    def _key(h: torch.Tensor) -> bytes:
        return h.detach().float().cpu().numpy().tobytes()

    @torch.no_grad()
    def hidden(self, path: tuple[int, ...]) -> torch.Tensor:
        """Output at the node ``path`` below the root: its chain of ancestors, then itself, on the context."""
        if path not in self._hidden:
            self.cache.rollback()
            feat = self.root_hidden
            for j in range(1, len(path) + 1):  # every prefix gets the same computation, whoever asks first
                tok = torch.tensor([[path[j - 1]]])
                h = self.head(feat.view(1, 1, -1), tok, torch.tensor([[self.context + j - 1]]), None, self.cache)
                feat = h[0, 0].contiguous()
                if path[:j] not in self._hidden:
                    self._hidden[path[:j]] = feat
                    self._path_of[self._key(feat)] = path[:j]
            self.cache.rollback()
        return self._hidden[path]

    def child(self, parent_hidden: torch.Tensor, token: int) -> torch.Tensor:
        return self.hidden(self._path_of[self._key(parent_hidden)] + (int(token),))

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft logits [.., Vd] for head outputs [.., H] that this oracle handed out."""
        rows = []
        for h in hidden.reshape(-1, hidden.shape[-1]):
            path = self._path_of[self._key(h)]
            if path not in self._logits:
                self._logits[path] = self.head.logits(self._hidden[path].view(1, -1))[0].float()
                self.rows.append(torch.log_softmax(self._logits[path], dim=-1))
            rows.append(self._logits[path])
        return torch.stack(rows).view(*hidden.shape[:-1], -1)


class ReferenceSelf:
    """The ``self`` that ``topK_genrate`` reads: its tree settings, and a head answered by the oracle."""

    def __init__(self, oracle: PathOracle, head: Eagle3Head, policy: Eagle3Policy) -> None:
        self.oracle = oracle
        self.top_k, self.depth = policy.top_k, policy.depth
        self.total_tokens = policy.total_tokens - 1  # the release's Model keeps total_token - 1 drafts
        self.stable_kv = self.tree_mask = None
        self.config = SimpleNamespace(vocab_size=head.config.vocab_size, draft_vocab_size=head.config.draft_vocab_size)
        self.d2t = head.d2t
        self.embed_tokens = SimpleNamespace(weight=torch.empty(0))  # only its device is read
        self.tree_mask_init = torch.eye(self.top_k)[None, None]  # as the release's init_tree
        self.position_ids = torch.zeros(self.top_k, dtype=torch.long)
        self.logsoftmax = torch.nn.LogSoftmax(dim=-1)
        self.norm = lambda h: h
        self.lm_head = oracle.logits

    def reset(self) -> None:
        self.tree_mask = None

    def __call__(self, hidden_states, input_ids=None, past_key_values=None, position_ids=None, use_cache=True):
        if hidden_states.shape[-1] != self.oracle.root_hidden.shape[0]:  # the context pass: the root's output last
            out = torch.zeros(1, hidden_states.shape[1], self.oracle.root_hidden.shape[0])
            out[0, -1] = self.oracle.root_hidden
            return out, "kv"
        rows = [self.oracle.child(hidden_states[0, r], int(input_ids[0, r])) for r in range(hidden_states.shape[1])]
        return torch.stack(rows)[None], past_key_values


class OracleHead:
    """What :func:`dflash.eagle3.tree.grow_tree` reads of a head, answered by the same oracle."""

    def __init__(self, oracle: PathOracle, head: Eagle3Head) -> None:
        self.oracle, self.to_target_ids = oracle, head.to_target_ids
        self.logits = oracle.logits

    def rotary_emb(self, hidden: torch.Tensor, positions: torch.Tensor):
        zeros = torch.zeros(1, positions.shape[-1], 1)  # unused: the oracle knows each node's position
        return zeros, zeros

    def __call__(self, features, token_ids, positions, mask=None, cache=None, rope=None):
        rows = [self.oracle.child(features[0, r], int(token_ids[0, r])) for r in range(features.shape[1])]
        return torch.stack(rows)[None]


def ours(oracle: PathOracle, head: Eagle3Head, policy: Eagle3Policy, keep_all: bool = False):
    total = 1 << 30 if keep_all else policy.total_tokens
    visible = torch.ones(oracle.context, dtype=torch.bool)
    return grow_tree(OracleHead(oracle, head), None, oracle.root_hidden, oracle.root, visible, oracle.context, total,
                     policy.depth, policy.top_k)


def our_paths(tree) -> set[tuple[int, ...]]:
    paths: list[tuple[int, ...]] = [()]
    for i in range(1, len(tree)):
        paths.append(paths[int(tree.parents[i])] + (int(tree.tokens[i]),))
    return set(paths[1:])


def reference_paths(draft_tokens: torch.Tensor, tree_mask: torch.Tensor, depths: torch.Tensor) -> set[tuple[int, ...]]:
    """Token paths of the release's tree: each node's ancestors (its mask row), shallowest first."""
    tokens, mask = draft_tokens[0].tolist(), tree_mask[0, 0].bool()
    out = set()
    for i in range(1, len(tokens)):
        anc = sorted((int(depths[j]), j) for j in mask[i].nonzero().flatten().tolist() if j != 0)
        out.add(tuple(tokens[j] for _, j in anc))
    return out


def tie_at_a_cut(oracle: PathOracle, everything, policy: Eagle3Policy) -> bool:
    """Equal scores on both sides of any cut: a row's top-k, a round's frontier, or the final keep."""
    k = policy.top_k
    for row in oracle.rows:
        if row.numel() > k:
            top = torch.topk(row, k + 1).values
            if top[k - 1] == top[k]:
                return True
    scores, depths = everything.scores[1:], everything.depths[1:]
    for level in range(2, policy.depth + 1):  # rounds whose best k become the next frontier
        s = torch.sort(scores[depths == level], descending=True).values
        if s.numel() > k and s[k - 1] == s[k]:
            return True
    s = torch.sort(scores, descending=True).values
    keep = policy.total_tokens - 1
    return bool(s.numel() > keep and s[keep - 1] == s[keep])


def parse_tree(text: str) -> Eagle3Policy:
    try:
        depth, top_k, total = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a tree is depth/top-k/total tokens, e.g. 7/10/60, not {text!r}") from None
    return Eagle3Policy(depth, top_k, total)


@torch.no_grad()
def record(target_dir: str, head_dir: str, prompts: list[list[int]], max_new_tokens: int,
           policy: Eagle3Policy) -> tuple[list[dict], Eagle3Head]:
    """Decode ``prompts`` with ``eagle3`` (eager, fp32, T = 0); per prompt: its tokens, fp32 features, step contexts."""
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    target = Target(model)
    head = models.load_eagle3_head(head_dir, target, "target", torch.float32, "cpu")
    decoder = Engine("eager", target, None, 64, eagle3=Eagle3Drafter.bind(head, target, policy)).decoder("eagle3")
    layer_ids = eagle3_layer_ids(head.config, model.config)
    runs = []
    for prompt in prompts:
        res = decoder.generate(prompt, max_new_tokens=max_new_tokens)
        seq = torch.tensor(prompt + res.output_ids)
        hs = model(input_ids=seq[None], output_hidden_states=True).hidden_states
        feats = torch.cat([hs[i + 1][0] for i in layer_ids], dim=-1).float()  # [T, 3H]
        runs.append({"tokens": seq, "features": feats, "contexts": [s.context for s in res.steps]})
    return runs, head


def compare(runs: list[dict], head: Eagle3Head, trees: list[Eagle3Policy], steps: int, topk_genrate) -> list[dict]:
    rows = []
    for policy in trees:
        row = {"tree": f"{policy.depth}/{policy.top_k}/{policy.total_tokens}", "steps": 0, "identical": 0,
               "differ_at_ties": 0, "identical_at_ties": 0, "differ": 0, "nodes": 0}
        for run in runs:
            for c in run["contexts"][:steps]:
                oracle = PathOracle(head, run["features"][:c], run["tokens"][1 : c + 1])
                mine = our_paths(ours(oracle, head, policy))
                draft, _, mask, depths = topk_genrate(ReferenceSelf(oracle, head, policy), run["features"][None, :c],
                                                      run["tokens"][None, : c + 1], None, None)
                same = mine == reference_paths(draft, mask, depths)
                tie = tie_at_a_cut(oracle, ours(oracle, head, policy, keep_all=True), policy)
                row["steps"] += 1
                row["nodes"] += len(mine)
                key = ("identical_at_ties" if same else "differ_at_ties") if tie else ("identical" if same else "differ")
                row[key] += 1
        rows.append(row)
    return rows


def to_markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"EAGLE-3 trees, reference `topK_genrate` ({meta['eagle_commit']}) vs dflash.eagle3.tree, identical head "
             f"outputs; {meta['prompts']} prompts of {meta['dataset']}, recorded with tree {meta['record_tree']}, "
             f"first {meta['steps']} steps each.", "",
             "| tree | steps | identical node sets | differ | steps with equal scores at a cut: identical / differ |"
             " nodes / step |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tree']} | {r['steps']} | {r['identical']} | {r['differ']} | {r['identical_at_ties']} / "
                     f"{r['differ_at_ties']} | {r['nodes'] / max(r['steps'], 1):.1f} |")
    return "\n".join(lines) + "\n"


def _commit(src: Path, given: str | None) -> str:
    if given:
        return given
    res = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    return res.stdout.strip()[:12] if res.returncode == 0 else "commit unknown: no git metadata, pass --eagle-commit"


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.eagle3_fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--eagle-src", required=True, type=Path, help="root of a clone of github.com/SafeAILab/EAGLE")
    ap.add_argument("--eagle-commit", default=None, help="the release's commit, for the record (default: git's)")
    ap.add_argument("--model", default="tiny", help="target (registry key or folder)")
    ap.add_argument("--eagle3-model", default=None, help="head folder (default: the registered head of --model)")
    ap.add_argument("--dataset", default="stdlib-heldout")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8, help="recorded steps compared per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--record-tree", type=parse_tree, default=Eagle3Policy(7, 10, 60))
    ap.add_argument("--trees", default="7/10/60,5/8/32,3/4/12,2/2/6")
    ap.add_argument("--out", default="results/eagle3_fidelity")
    args = ap.parse_args(argv)
    topk_genrate = load_topk_genrate(args.eagle_src)
    trees = [parse_tree(t) for t in args.trees.split(",")]
    target_dir = models.resolve(args.model)[0]
    tok = AutoTokenizer.from_pretrained(target_dir)
    prompts = [tok(r["turns"][0], add_special_tokens=False)["input_ids"]
               for r in datasets.load_prompts(args.dataset, args.prompts)]
    runs, head = record(target_dir, models.resolve_eagle3(args.model, args.eagle3_model), prompts,
                        args.max_new_tokens, args.record_tree)
    rows = compare(runs, head, trees, args.steps, topk_genrate)
    meta = {"eagle_commit": _commit(args.eagle_src, args.eagle_commit), "prompts": len(prompts), "dataset": args.dataset,
            "steps": args.steps, "record_tree": f"{args.record_tree.depth}/{args.record_tree.top_k}/"
                                                 f"{args.record_tree.total_tokens}"}
    text = to_markdown(rows, meta)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eagle3_fidelity.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / "eagle3_fidelity.md").write_text(text)
    return rows


if __name__ == "__main__":
    main()
