"""Arrow in and out of the binding (sluice.from_arrow, Batch.__arrow_c_array__;
the checks are in arrow_checks.py).

Debian packages no pyarrow.  The checks run under pytest in this
interpreter when it imports pyarrow; otherwise in the first of
$SLUICE_ARROW_PYTHON and the venv that setup_arrow makes
(${SLUICE_ARROW_VENV:-~/.cache/sluice/arrow-venv}) whose python imports
pyarrow, with this build's sluice on its path; with none, the test is
reported as skipped, naming what is missing."""
import sys

import pytest

from venv_tests import find_python, run_checks


def arrow_python():
    return find_python("pyarrow, numpy, pytest", "SLUICE_ARROW_PYTHON",
                       "SLUICE_ARROW_VENV", "~/.cache/sluice/arrow-venv")


def test_arrow_checks():
    py = arrow_python()
    if py is None:
        pytest.skip("pyarrow does not import in %s, $SLUICE_ARROW_PYTHON or "
                    "$SLUICE_ARROW_VENV (default ~/.cache/sluice/arrow-venv; "
                    "make it with bindings/python/tests/setup_arrow)"
                    % sys.executable)
    r = run_checks(py, "arrow_checks.py", ["-rs"])
    assert r.returncode == 0, r.stdout[-4000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout
