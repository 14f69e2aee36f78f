"""Running a checks file under another interpreter (no pytest fixtures
here): test_arrow.py and test_ray.py run arrow_checks.py / ray_checks.py in
the venv that setup_arrow / setup_ray make, since Debian packages neither
pyarrow nor Ray."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def find_python(imports, python_var, venv_var, default_venv):
    """The first of this interpreter, $python_var and the venv at
    $venv_var (default `default_venv`) whose python runs `import
    <imports>`, or None."""
    venv = os.path.expanduser(os.environ.get(venv_var, default_venv))
    for py in (sys.executable, os.environ.get(python_var),
               os.path.join(venv, "bin", "python")):
        if not py or not os.path.exists(py):
            continue
        r = subprocess.run([py, "-c", "import " + imports],
                           capture_output=True)
        if r.returncode == 0:
            return py
    return None


def run_checks(py, checks, pytest_args, timeout=900, tail=8000):
    """pytest over HERE/`checks` under `py`, with this build's sluice first
    on PYTHONPATH; prints the output's tail and returns the
    CompletedProcess."""
    env = dict(os.environ)
    import sluice
    pkg_parent = os.path.dirname(os.path.dirname(sluice.__file__))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([py, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
                       + list(pytest_args) + [os.path.join(HERE, checks)],
                       env=env, cwd=HERE, capture_output=True, text=True,
                       timeout=timeout)
    print(r.stdout[-tail:])
    print(r.stderr[-4000:])
    return r
