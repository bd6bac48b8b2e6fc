"""How the suite is split between pytest-xdist's workers (tests/conftest.py)."""

from pathlib import Path

from tests.conftest import SHARED_MODULES, work_unit

REPO = Path(__file__).resolve().parents[1]


def test_the_shared_modules_are_one_unit_and_every_other_module_its_own():
    units = {work_unit(f"{m}::test_a[1]") for m in SHARED_MODULES}
    assert len(units) == 1
    assert work_unit("tests/report/test_lossy.py::test_a") == work_unit("tests/report/test_lossy.py::test_b[x]")
    assert work_unit("tests/report/test_lossy.py::test_a") == "tests/report/test_lossy.py"
    assert work_unit("tests/report/test_lossy.py::test_a") not in units


def test_every_shared_module_exists():
    """A renamed module left in the list would run apart from the run it shares."""
    assert [m for m in SHARED_MODULES if not (REPO / m).is_file()] == []
