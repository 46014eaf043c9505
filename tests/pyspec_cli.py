"""Runs ``python -m pyspec`` as a user does: a fresh process, from the home directory (not the
source tree, whose pyspec/ has no compiled library), the environment as it is."""

import os
import subprocess
import sys


def run_pyspec(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "pyspec", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=os.path.expanduser("~"),
        env=dict(os.environ, **(env or {})),
    )
