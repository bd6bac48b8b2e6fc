"""Drafters that cannot be had or do not fit their target: a name that resolves nowhere, a
hub that never answers (a firewalled cluster node), and the drafter/target pair check.

Each must fail at once with an error that names the drafter and the way out, not hang or
load a drafter that decodes garbage.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from bastion.models.registry import DrafterMismatchError, check_pair
from bastion.models.target import Target
from dflash import DFlashDraftModel
from dflash.checkpoint import CheckpointError
from tests.support.builders import tiny_drafter, tiny_target


# ---------------------------------------------------------------------------------------
# names that cannot be resolved


@pytest.mark.parametrize("name", ["/nonexistent/dflash-drafter", "./no-such-folder", "~/no/such/drafter",
                                  "owner/name/extra", "just-a-name"])
def test_missing_local_path_is_a_clear_error(name):
    with pytest.raises(CheckpointError, match="neither an existing folder nor a Hugging Face repo id"):
        DFlashDraftModel.from_pretrained(name)


def test_repo_id_without_hub_access(tmp_path):
    start = time.monotonic()
    with pytest.raises(CheckpointError) as err:
        DFlashDraftModel.from_pretrained("z-lab/Qwen3-8B-DFlash-b16", cache_dir=str(tmp_path))
    assert time.monotonic() - start < 30
    msg = str(err.value)
    assert "z-lab/Qwen3-8B-DFlash-b16" in msg
    assert "HF_TOKEN" in msg and "HF_HUB_OFFLINE" in msg


@pytest.fixture
def stalled_network(monkeypatch):
    """Route hub traffic through a proxy that accepts connections and never answers.

    This is what a firewalled cluster node looks like from the hub client's side.
    """
    import huggingface_hub.utils._http as hf_http

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held = []

    def accept_forever():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept_forever, daemon=True).start()
    proxy = f"http://127.0.0.1:{srv.getsockname()[1]}"
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, proxy)
    for var in ("NO_PROXY", "no_proxy", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("BASTION_HUB_TIMEOUT_S", "2")
    hf_http.close_session()  # the shared hub client picks up the proxy when it is re-created
    yield
    srv.close()
    for conn in held:
        conn.close()
    hf_http.close_session()  # later hub calls get a client without the dead proxy


def _run_with_deadline(fn, deadline: float) -> tuple[bool, BaseException | None, float]:
    """Run ``fn`` in a daemon thread; (finished in time, exception raised, seconds)."""
    outcome: dict = {}

    def body():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001
            outcome["exc"] = exc

    start = time.monotonic()
    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(timeout=deadline)
    return not worker.is_alive(), outcome.get("exc"), time.monotonic() - start


def test_stalled_network_probe_is_fast(stalled_network):
    """Control: bastion's own loader probes with BASTION_HUB_TIMEOUT_S=2 and gives up quickly."""
    from bastion.models.registry import ModelUnavailableError, load_drafter

    done, exc, _ = _run_with_deadline(lambda: load_drafter("z-lab/Qwen3-8B-DFlash-b16", torch.float32, "cpu"), 15)
    assert done, "bastion.models.registry.load_drafter hangs although it probes with a timeout"
    assert isinstance(exc, ModelUnavailableError)
    assert "HF_TOKEN" in str(exc) and "HF_HUB_OFFLINE" in str(exc)


def test_repo_id_with_stalled_network_fails_fast(stalled_network, tmp_path):
    """With BASTION_HUB_TIMEOUT_S=2 an unreachable hub must fail within seconds, not hang.

    bastion.hub.probe honours the timeout (the control test above); DFlashDraftModel.from_pretrained
    goes straight to snapshot_download, whose shared client has no timeout (observed: > 5 min).
    """
    done, exc, _ = _run_with_deadline(
        lambda: DFlashDraftModel.from_pretrained("z-lab/Qwen3-8B-DFlash-b16", cache_dir=str(tmp_path)), 15
    )
    assert done, "DFlashDraftModel.from_pretrained(repo id) still hangs after 15 s with BASTION_HUB_TIMEOUT_S=2"
    assert isinstance(exc, CheckpointError)
    assert "HF_TOKEN" in str(exc) and "HF_HUB_OFFLINE" in str(exc)


# ---------------------------------------------------------------------------------------
# check_pair


@pytest.fixture(scope="module")
def target() -> Target:
    return Target(tiny_target(layers=6, hidden=64, vocab=260))


def test_matching_pair_passes(target):
    check_pair(target, tiny_drafter(target.model, layers=2, layer_ids=[0, 5]), "tgt-name", "drf-name")


def _mismatch(target, drafter) -> str:
    with pytest.raises(DrafterMismatchError) as err:
        check_pair(target, drafter, "my-target", "my-drafter")
    msg = str(err.value)
    assert "my-target" in msg and "my-drafter" in msg
    return msg


def test_check_pair_hidden_size(target):
    other = tiny_target(layers=6, hidden=32, vocab=260)
    msg = _mismatch(target, tiny_drafter(other, layers=2))
    assert "hidden size" in msg and "32" in msg and "64" in msg


def test_check_pair_missing_layer(target):
    msg = _mismatch(target, tiny_drafter(target.model, layers=2, layer_ids=[1, 7]))
    assert "[7]" in msg and "6 layers" in msg


def test_check_pair_mask_token_outside_vocab(target):
    msg = _mismatch(target, tiny_drafter(target.model, layers=2, mask_id=300))
    assert "300" in msg and "260" in msg


def test_check_pair_trained_on_other_depth(target):
    deeper = tiny_target(layers=8, hidden=64, vocab=260)
    msg = _mismatch(target, tiny_drafter(deeper, layers=2, layer_ids=[1, 3]))
    assert "8-layer" in msg and "6" in msg
