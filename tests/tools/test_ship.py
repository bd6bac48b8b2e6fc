"""tools.tiny_pair.ship: a new drafter ships without losing the EAGLE-3 head or the target."""

from __future__ import annotations

import shutil

from bastion.models import registry
from tools.tiny_pair import ship


def test_shipping_a_drafter_keeps_target_and_eagle3_head(tmp_path, capsys):
    dest = tmp_path / "tiny"
    shutil.copytree(registry.tiny_dir("target").parent, dest)
    before = {p.relative_to(dest): p.read_bytes() for p in (dest / "eagle3").rglob("*") if p.is_file()}
    target_bytes = (dest / "target" / "model.safetensors").read_bytes()
    assert ship.main(["--target", str(dest / "target"), "--drafter", str(dest / "drafter"), "--dest", str(dest)]) == 0
    after = {p.relative_to(dest): p.read_bytes() for p in (dest / "eagle3").rglob("*") if p.is_file()}
    assert before and after == before
    assert (dest / "target" / "model.safetensors").read_bytes() == target_bytes
    assert (dest / "drafter" / "model.safetensors").stat().st_size > 0
    assert "pair " in capsys.readouterr().out


def test_a_pair_over_the_limit_is_refused(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "tiny"
    shutil.copytree(registry.tiny_dir("target").parent, dest)
    monkeypatch.setattr(ship, "LIMIT", 1000)
    assert ship.main(["--target", str(dest / "target"), "--drafter", str(dest / "drafter"), "--dest", str(dest)]) == 1
    assert "over the 1000-byte limit" in capsys.readouterr().err
