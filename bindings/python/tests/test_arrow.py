"""Arrow in and out of the binding (sluice.from_arrow, Batch.__arrow_c_array__;
the checks are in arrow_checks.py).

Debian packages no pyarrow.  The checks run under pytest in this
interpreter when it imports pyarrow; otherwise in the first of
$SLUICE_ARROW_PYTHON and the venv that setup_arrow makes
(${SLUICE_ARROW_VENV:-~/.cache/sluice/arrow-venv}) whose python imports
pyarrow, with this build's sluice on its path; with none, the test is
reported as skipped, naming what is missing."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = os.path.join(HERE, "arrow_checks.py")


def arrow_python():
    venv = os.path.expanduser(os.environ.get(
        "SLUICE_ARROW_VENV", "~/.cache/sluice/arrow-venv"))
    for py in (sys.executable, os.environ.get("SLUICE_ARROW_PYTHON"),
               os.path.join(venv, "bin", "python")):
        if not py or not os.path.exists(py):
            continue
        r = subprocess.run([py, "-c", "import pyarrow, numpy, pytest"],
                           capture_output=True)
        if r.returncode == 0:
            return py
    return None


def test_arrow_checks():
    py = arrow_python()
    if py is None:
        pytest.skip("pyarrow does not import in %s, $SLUICE_ARROW_PYTHON or "
                    "$SLUICE_ARROW_VENV (default ~/.cache/sluice/arrow-venv; "
                    "make it with bindings/python/tests/setup_arrow)"
                    % sys.executable)
    env = dict(os.environ)
    import sluice
    pkg_parent = os.path.dirname(os.path.dirname(sluice.__file__))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([py, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        "-rs", CHECKS], env=env, cwd=HERE,
                       capture_output=True, text=True, timeout=900)
    print(r.stdout[-8000:])
    print(r.stderr[-4000:])
    assert r.returncode == 0, r.stdout[-4000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout
