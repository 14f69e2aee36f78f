"""sluice.ray on a two-node local Ray cluster (the checks are in
ray_checks.py: exactly-once over two trainers, SLR and WebDataset shards,
the same order for the same seed, Lua errors with their traceback, a read
task's worker killed mid-epoch).

Debian packages no Ray.  The checks run under pytest in the first of this
interpreter, $SLUICE_RAY_PYTHON and the venv that setup_ray makes
(${SLUICE_RAY_VENV:-~/.cache/sluice/ray-venv}) whose python imports
ray.data, with this build's sluice on its path; with none, the test is
reported as skipped, naming what is missing - unless $SLUICE_REQUIRE_RAY
is set (.ci/run sets it): then a missing Ray fails.  Under a sanitizer
build (the sanitizer runtime in LD_PRELOAD) it is skipped too: Ray's own
binaries would start with that runtime preloaded; make test and
make ray-test run it."""
import os
import sys

import pytest

from venv_tests import find_python, run_checks


def ray_python():
    return find_python("ray.data, pyarrow, numpy, pytest", "SLUICE_RAY_PYTHON",
                       "SLUICE_RAY_VENV", "~/.cache/sluice/ray-venv")


def test_ray_checks():
    preload = os.environ.get("LD_PRELOAD", "")
    if "libasan" in preload or "libtsan" in preload:
        pytest.skip("a sanitizer build (LD_PRELOAD=%s): Ray's processes "
                    "are not run under a preloaded sanitizer runtime; "
                    "make test / make ray-test run this test" % preload)
    py = ray_python()
    if py is None and os.environ.get("SLUICE_REQUIRE_RAY"):
        pytest.fail("SLUICE_REQUIRE_RAY is set but ray.data does not import "
                    "in %s, $SLUICE_RAY_PYTHON or $SLUICE_RAY_VENV (run "
                    "bindings/python/tests/setup_ray)" % sys.executable)
    if py is None:
        pytest.skip("ray.data does not import in %s, $SLUICE_RAY_PYTHON or "
                    "$SLUICE_RAY_VENV (default ~/.cache/sluice/ray-venv; "
                    "make it with bindings/python/tests/setup_ray)"
                    % sys.executable)
    r = run_checks(py, "ray_checks.py",
                   ["-rfEs", "-s", "-p", "no:logging", "--tb=short"],
                   tail=12000)
    assert r.returncode == 0, r.stdout[-6000:]
    assert " passed" in r.stdout
