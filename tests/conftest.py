from typing import Any

import pytest
import torch

from bastion import defaults

# The modules that share one pipeline run (tests/workflow/conftest.py) or the SLURM cluster.
# Under pytest-xdist one worker runs them, in their order, so the run is made once and the
# cluster's queue holds one test's jobs at a time; every other module runs whole on one worker.
SHARED_MODULES = ("tests/workflow/test_pipeline.py", "tests/workflow/test_slurm.py",
                  "tests/workflow/test_slurm_smoke.py")

# Tiny models gain nothing from intra-op threads, and OpenMP spin-waiting makes them
# many times slower when the two CI cores are shared with another process.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _process_settings():
    """Each test starts from the process-wide settings a run may change: one CPU thread (a
    run's --threads) and the tree maths' fastest paths (an engine's kernels.rank)."""
    yield
    torch.set_num_threads(1)
    defaults.use_torch_references(False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The shared modules first: they are the suite's longest part, and the other workers take
    every other module meanwhile.  A module that shares the run or the cluster without being
    listed in :data:`SHARED_MODULES` is an error (its worker would make the run again)."""
    sharing = {_module(item.nodeid) for item in items if _shares_run(item)}
    unlisted = sorted(sharing - set(SHARED_MODULES))
    if unlisted:
        raise pytest.UsageError(f"{', '.join(unlisted)} use the shared pipeline run or the SLURM cluster: "
                                "add them to SHARED_MODULES in tests/conftest.py")
    items.sort(key=lambda item: _module(item.nodeid) not in SHARED_MODULES)  # stable: order kept within each part


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Work units for the workers under ``--dist=loadfile`` (the configured default; another
    ``--dist`` keeps xdist's own): each module whole (its module fixtures are made once), the
    shared modules as one unit, in collection order (``--no-loadscope-reorder``).  xdist's own
    ``loadgroup`` would do this through marks, but it does not group on pytest 9.2."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ModuleUnits(config, log)


def work_unit(nodeid: str) -> str:
    """The unit of work a test goes to a worker in: its module, or the shared modules' one unit."""
    module = _module(nodeid)
    return "shared pipeline run and cluster" if module in SHARED_MODULES else module


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _shares_run(item: pytest.Item) -> bool:
    """Whether the test uses the shared pipeline run or the SLURM cluster (its fixture or its mark)."""
    names = getattr(item, "fixturenames", ())
    return "tiny_run" in names or "slurm" in names or item.get_closest_marker("slurm") is not None
