"""Tests for the tiny pair's data tools (tools/tiny_pair).

They pin the properties the experiment depends on: the held-out modules never
reach the training corpus, the shipped prompt set is well formed, and the
tokenizer round-trips source text exactly with fixed special-token ids.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROMPTS = REPO / "bastion" / "data" / "stdlib-heldout.jsonl"

from tools.tiny_pair import corpus, heldout, heldout_prompts
from tools.tiny_pair import tokenizer as tiny_tokenizer


@pytest.fixture(scope="module")
def stdlib() -> Path:
    return corpus.stdlib_dir()


@pytest.fixture(scope="module")
def records() -> list[dict]:
    with PROMPTS.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# --- held-out modules -------------------------------------------------------


def test_heldout_list_is_sorted_unique_and_sized():
    mods = heldout.HELDOUT_MODULES
    assert list(mods) == sorted(set(mods))
    assert 15 <= len(mods) <= 25


def test_heldout_modules_exist_in_running_stdlib(stdlib):
    for name in heldout.HELDOUT_MODULES:
        path = heldout.module_path(name, stdlib)
        assert path.is_file() and path.suffix == ".py"
        assert path.is_relative_to(stdlib)


def test_module_path_package_and_missing(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("")
    assert heldout.module_path("pkg", tmp_path) == tmp_path / "pkg" / "__init__.py"
    assert heldout.module_path("pkg.mod", tmp_path) == tmp_path / "pkg" / "mod.py"
    with pytest.raises(FileNotFoundError):
        heldout.module_path("nope", tmp_path)


# --- corpus -----------------------------------------------------------------


def test_corpus_file_lists_exclude_heldout_and_tests(stdlib):
    coll = corpus.collect(stdlib, read=False)
    train = [f.rel for f in coll.train]
    valid = [f.rel for f in coll.valid]
    held = {f.rel for f in coll.heldout}
    assert train == sorted(train) and valid == sorted(valid)
    assert not set(train) & set(valid)
    assert len(held) == len(heldout.HELDOUT_MODULES)
    assert not held & (set(train) | set(valid))
    for rel in train + valid:
        parts = rel.split("/")
        assert not {"test", "tests", "site-packages", "dist-packages"} & set(parts[:-1]), rel
        assert not rel.startswith(("idlelib/idle_test/", "lib2to3/tests/")), rel
        assert rel.endswith(".py")
    # Sanity: the scan finds the bulk of the stdlib, and ~2% is validation.
    assert len(train) > 300
    assert 0.005 < len(valid) / (len(train) + len(valid)) < 0.05


def test_write_corpus_on_fake_stdlib(tmp_path):
    root = tmp_path / "lib"
    for name in heldout.HELDOUT_MODULES:
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# held out {name}\n")
    (root / "keep.py").write_text("x = 'é'\n", encoding="utf-8")
    (root / "also.py").write_text("y = 2\n")
    (root / "latin.py").write_bytes("z = 'é'\n".encode("latin-1"))
    (root / "big.py").write_text("#" * (corpus.MAX_FILE_BYTES + 1))
    for skipped_dir in ("test", "site-packages", "idlelib/idle_test"):
        (root / skipped_dir).mkdir(parents=True, exist_ok=True)
        (root / skipped_dir / "t.py").write_text("secret = 1\n")

    out = tmp_path / "out"
    manifest = corpus.write_corpus(out, corpus.collect(root), root)
    text = (out / "train.txt").read_text(encoding="utf-8") + (out / "valid.txt").read_text(encoding="utf-8")
    assert "secret" not in text and "held out" not in text
    assert sorted(manifest["skipped"]) == ["big.py", "latin.py"]
    docs = [d for d in text.split(corpus.EOS) if d]
    assert sorted(docs) == sorted(["x = 'é'\n", "y = 2\n"])
    held_text = (out / "heldout.txt").read_text(encoding="utf-8")
    assert held_text.count(corpus.EOS) == len(heldout.HELDOUT_MODULES) - 1
    assert json.loads((out / "manifest.json").read_text())["total_bytes"] == manifest["total_bytes"]


# --- held-out prompt set ----------------------------------------------------


def _compiles_with_pass(prompt: str) -> bool:
    """True if some indentation used in the prompt completes it with ``pass``.

    The parsed result must be exactly one function whose body is the
    docstring followed by the ``pass``: the prompt ends right after the
    docstring, with the signature complete.
    """
    indents = {line[: len(line) - len(line.lstrip(" \t"))] for line in prompt.splitlines()}
    for indent in sorted(i for i in indents if i):
        try:
            tree = ast.parse(prompt + indent + "pass\n")
        except SyntaxError:
            continue
        if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = tree.body[0].body
        if len(body) == 2 and ast.get_docstring(tree.body[0]) is not None and isinstance(body[1], ast.Pass):
            return True
    return False


def test_prompt_file_is_small_and_sized(records):
    assert PROMPTS.stat().st_size < 100_000
    assert 60 <= len(records) <= 80


def test_prompt_records_well_formed(records):
    order = {name: i for i, name in enumerate(heldout.HELDOUT_MODULES)}
    seen = set()
    keys = []
    for rec in records:
        assert set(rec) == {"turns", "module", "function", "lineno"}
        assert rec["module"] in order
        assert isinstance(rec["lineno"], int) and rec["lineno"] > 0
        assert len(rec["turns"]) == 1
        prompt = rec["turns"][0]
        assert prompt.startswith(("def ", "async def ", "@")), prompt[:40]
        assert prompt.endswith("\n")
        assert _compiles_with_pass(prompt), rec["function"]
        key = (rec["module"], rec["function"])
        assert key not in seen and prompt not in seen
        seen.update({key, prompt})
        keys.append((order[rec["module"]], rec["lineno"]))
    assert keys == sorted(keys)
    assert len({r["module"] for r in records}) >= 15


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the shipped set was generated with CPython 3.11")
def test_prompt_file_matches_generator(records, stdlib):
    assert heldout_prompts.build_records(stdlib) == records


def test_prompt_extraction_handles_decorators_and_methods():
    src = (
        "import functools\n"
        "class K:\n"
        "    @functools.cache\n"
        "    def meth(self,\n"
        "             a):\n"
        '        """Doc.\n'
        "\n"
        '        more."""\n'
        "        x = 1\n"
        "        y = 2\n"
        "        return x + y\n"
        "    @property\n"
        "    def prop(self):\n"
        '        """Doc."""\n'
        "        a = 1\n"
        "        b = 2\n"
        "        return a\n"
        "def short():\n"
        '    """Doc."""\n'
        "    return 1\n"
    )
    cands = heldout_prompts.module_candidates("m", src)
    assert [c.function for c in cands] == ["K.meth"]
    assert cands[0].lineno == 3
    assert cands[0].prompt == '@functools.cache\ndef meth(self,\n         a):\n    """Doc.\n\n    more."""\n'


# --- tokenizer --------------------------------------------------------------


def test_tokenizer_roundtrip_and_special_ids(tmp_path):
    docs = [
        "def f(x):\n    return x + 1\n",
        "class A:\n\tdef g(self):\n\t\treturn 'héllo ☃'\n",
        "# comment with trailing spaces   \n\n\nimport os\n",
    ] * 5
    tok = tiny_tokenizer.train_bpe(docs, vocab_size=300, min_frequency=2)
    assert tok.token_to_id("<|endoftext|>") == 0
    assert tok.token_to_id("<|mask|>") == 1
    hf = tiny_tokenizer.to_hf(tok)
    hf.save_pretrained(str(tmp_path))

    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert loaded.eos_token_id == 0 and loaded.pad_token_id == 0 and loaded.mask_token_id == 1
    assert getattr(loaded, "chat_template", None) is None
    samples = docs[:3] + ["  odd\r\nline endings\t\x0b and 😀 emoji\n", "unseen: ΩΨ € {}[]<>"]
    assert tiny_tokenizer.roundtrip_failures(loaded, samples) == []
    ids = loaded("x<|endoftext|>y", add_special_tokens=False)["input_ids"]
    assert 0 in ids
