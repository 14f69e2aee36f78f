"""The PyTorch side: torch.from_dlpack without a copy and the
sluice.torch.IterableDataset adapter (torch_checks.py).

Debian's python3 has no torch.  The checks run in this interpreter when it
has torch; otherwise in the first of $SLUICE_TORCH_PYTHON and the peers'
venv (bench/peers/setup) whose python imports torch, with this build's
sluice on its path; with none, the test is reported as skipped, naming
what is missing."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = os.path.join(HERE, "torch_checks.py")


def torch_python():
    cands = [sys.executable, os.environ.get("SLUICE_TORCH_PYTHON"),
             os.path.expanduser(os.environ.get(
                 "SLUICE_PEERS_VENV", "~/.cache/sluice/peers-venv")) +
             "/bin/python"]
    tried = []
    for py in cands:
        if not py or not os.path.exists(py):
            continue
        r = subprocess.run([py, "-c", "import torch"], capture_output=True)
        if r.returncode == 0:
            return py
        tried.append(py)
    return None


def torch_env():
    """(python with torch, environment with this build's sluice), or a
    skip naming what is missing."""
    py = torch_python()
    if py is None:
        pytest.skip("torch does not import in %s, $SLUICE_TORCH_PYTHON or "
                    "the peers' venv (pip install torch, or "
                    "bench/peers/setup)" % sys.executable)
    env = dict(os.environ)
    import sluice
    pkg_parent = os.path.dirname(os.path.dirname(sluice.__file__))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    return py, env


def test_torch_dlpack_and_iterable_dataset(t10k):
    py, env = torch_env()
    r = subprocess.run([py, CHECKS, t10k], env=env, capture_output=True,
                       text=True, timeout=300)
    print(r.stdout)
    print(r.stderr[-4000:])
    assert r.returncode == 0, r.stderr[-4000:]
    assert "torch checks passed: 5" in r.stdout


def test_example_trains_to_082_in_3_epochs(tmp_path):
    """examples/python/train_fmnist_torch.py: 3 epochs, test accuracy at
    least 0.82 (it packs the data with the built CLI)."""
    py, env = torch_env()
    from conftest import SOURCE_DIR
    example = os.path.join(SOURCE_DIR, "examples", "python",
                           "train_fmnist_torch.py")
    r = subprocess.run([py, example, "--epochs", "3", "--data",
                        str(tmp_path / "data"), "--sluice",
                        os.environ["SLUICE_CLI"], "--threads", "2"],
                       env=env, capture_output=True, text=True, timeout=900)
    print(r.stdout)
    assert r.returncode == 0, r.stderr[-4000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("epoch=")]
    assert len(lines) == 3, r.stdout
    fields = dict(kv.split("=") for kv in lines[-1].split())
    assert set(fields) == {"epoch", "loss", "test_acc", "wait"}
    assert float(fields["test_acc"]) >= 0.82, lines
