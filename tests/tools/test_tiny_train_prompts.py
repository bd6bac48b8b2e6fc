"""tools/tiny_pair/train_prompts.py: drafter-training headers come from the training split only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.tiny_pair import corpus, heldout, train_prompts

FUNC = 'def {name}(a, b=1):\n    """{doc}"""\n    return a + b\n'
SHARED = 'def shared(x):\n    """Copied between modules."""\n    y = x\n    return y\n'


def _fake_stdlib(root: Path) -> list[str]:
    """Held-out modules, training files and a validation file, each with headers."""
    for name in heldout.HELDOUT_MODULES:
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        tag = name.replace(".", "_")
        path.write_text(FUNC.format(name=f"held_{tag}", doc=f"held out {tag}") + SHARED)
    valid = next(f"v{i}.py" for i in range(10_000) if corpus.is_valid_split(f"v{i}.py"))
    (root / valid).write_text(FUNC.format(name="in_valid", doc="validation only"))
    trains = [f"t{i}.py" for i in range(60) if not corpus.is_valid_split(f"t{i}.py")][:3]
    for i, rel in enumerate(trains):
        body = FUNC.format(name=f"train_{i}", doc=f"training {i}")
        body += "class K:\n    " + FUNC.format(name=f"_private_{i}", doc="method").replace("\n", "\n    ").rstrip() + "\n"
        (root / rel).write_text(body + (SHARED if i == 0 else ""))
    (root / "tests").mkdir()
    (root / "tests" / "t_x.py").write_text(FUNC.format(name="in_tests", doc="test folder"))
    return trains


def test_train_headers_come_from_training_files_only(tmp_path):
    root = tmp_path / "lib"
    trains = _fake_stdlib(root)
    recs = train_prompts.build_records(root, "train")
    text = "".join(r["turns"][0] for r in recs)
    assert {r["file"] for r in recs} == set(trains)
    assert "held" not in text and "validation only" not in text and "test folder" not in text
    assert "Copied between modules" not in text  # a held-out header copied into a training file
    assert sorted(r["function"] for r in recs) == sorted(
        [f"train_{i}" for i in range(3)] + [f"K._private_{i}" for i in range(3)])
    for r in recs:
        assert r["turns"][0].startswith("def ") and r["turns"][0].endswith('"""\n')


def test_valid_headers_are_the_validation_files(tmp_path):
    root = tmp_path / "lib"
    _fake_stdlib(root)
    recs = train_prompts.build_records(root, "valid")
    assert [r["function"] for r in recs] == ["in_valid"]
    with pytest.raises(ValueError):
        train_prompts.build_records(root, "heldout")


def test_real_stdlib_never_emits_heldout_modules():
    root = corpus.stdlib_dir()
    recs = train_prompts.build_records(root, "train")
    assert len(recs) > 3000
    held_files = set(corpus.heldout_rel_paths(root))
    valid_files = {f.rel for f in corpus.collect(root, read=False).valid}
    files = {r["file"] for r in recs}
    assert not files & held_files and not files & valid_files
    banned = train_prompts.heldout_header_texts(root)
    assert not any(r["turns"][0] in banned for r in recs)


def test_package_prompts_are_headers_from_third_party_code_only():
    from tools.tiny_pair import package_prompts

    recs = package_prompts.build_records(["click"], cap=20)
    assert len(recs) == 20
    for r in recs:
        (prompt,) = r["turns"]
        assert prompt.lstrip().startswith(("def ", "async def ", "@")) and prompt.endswith("\n")
        assert r["module"].startswith("click:")
    with pytest.raises(SystemExit, match="not in site-packages"):
        package_prompts.package_dir("json")
    with pytest.raises(SystemExit, match="not installed"):
        package_prompts.package_dir("no_such_package_here")


def test_package_dir_is_the_folder_when_init_is_compiled(tmp_path, monkeypatch):
    """mypyc-built packages (black, mypy, isort) have __init__.<abi>.so beside their .py files."""
    import importlib
    import importlib.machinery

    from tools.tiny_pair import package_prompts
    from tools.tiny_pair import package_train_prompts as ptp

    pkg = tmp_path / "site-packages" / "compiledpkg"
    pkg.mkdir(parents=True)
    (pkg / f"__init__{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"not loaded: only found")
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(FUNC.format(name="compiled_pkg_fn", doc="beside a compiled init"))
    (tmp_path / "site-packages" / "single_mod.py").write_text(FUNC.format(name="single", doc="one module"))
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    importlib.invalidate_caches()
    assert package_prompts.package_dir("compiledpkg") == pkg
    assert package_prompts.package_dir("single_mod") == tmp_path / "site-packages" / "single_mod.py"
    assert [r["function"] for r in ptp.package_headers("compiledpkg")] == ["compiled_pkg_fn"]


def test_package_prompts_alternate_packages_so_a_prefix_holds_all():
    """A big package must not fill the cap alone (networkx once took all 80 places)."""
    from tools.tiny_pair import package_prompts

    recs = package_prompts.build_records(["networkx", "click", "jinja2"], cap=12)
    names = [r["module"].split(":")[0] for r in recs]
    assert len(recs) == 12 and names[:3] == ["networkx", "click", "jinja2"]
    assert {n: names.count(n) for n in set(names)} == {"networkx": 4, "click": 4, "jinja2": 4}


def _fake_site(root: Path, monkeypatch) -> None:
    """Two fake installed packages: one with a header copied from an excluded package."""
    from tools.tiny_pair import package_train_prompts as ptp

    for name in ("alpha", "beta"):
        pkg = root / "site-packages" / name
        (pkg / "tests").mkdir(parents=True)
        (pkg / "_vendor").mkdir()
        (pkg / "__init__.py").write_text("".join(FUNC.format(name=f"{name}_{i}", doc=f"{name} {i}") for i in range(5)))
        (pkg / "tests" / "test_x.py").write_text(FUNC.format(name="in_tests", doc="test folder"))
        (pkg / "_vendor" / "v.py").write_text(FUNC.format(name="vendored", doc="vendored copy"))
    (root / "site-packages" / "beta" / "copied.py").write_text(SHARED)
    monkeypatch.setattr(ptp, "package_dir", lambda name: root / "site-packages" / name)
    monkeypatch.setattr(ptp, "excluded_header_texts", lambda *a, **k: {SHARED.rsplit("    y = x", 1)[0]})


def test_package_training_headers_skip_tests_vendored_and_excluded_copies(tmp_path, monkeypatch):
    from tools.tiny_pair import package_train_prompts as ptp

    _fake_site(tmp_path, monkeypatch)
    recs = ptp.build_records(["alpha", "beta"], per_package=10, seed=1)
    text = "".join(r["turns"][0] for r in recs)
    assert [r["file"].split(":")[0] for r in recs] == ["alpha"] * 5 + ["beta"] * 5
    assert "test folder" not in text and "vendored copy" not in text
    assert "Copied between modules" not in text  # its header text belongs to an excluded package
    capped = ptp.build_records(["alpha", "beta"], per_package=3, seed=1)
    assert [r["file"].split(":")[0] for r in capped] == ["alpha"] * 3 + ["beta"] * 3
    assert len({r["turns"][0] for r in capped}) == 6
    assert ptp.build_records(["alpha", "beta"], per_package=3, seed=1) == capped  # seeded


def test_package_training_headers_refuse_the_packages_we_measure_on():
    from tools.tiny_pair import package_train_prompts as ptp

    for name in ("yaml", "pygments", "rich", "pip"):
        with pytest.raises(SystemExit, match=rf"{name} must stay out of the drafter's training data"):
            ptp.build_records(["numpy", name], per_package=1)
    assert not set(ptp.TRAINING_PACKAGES + ptp.EXTRA_TRAINING_PACKAGES) & ptp.EXCLUDED
