"""pytest against the source tree's pyspec even where another copy of pyspec is installed in
editable mode (its import redirect would otherwise win over PYTHONPATH)."""

import sys

sys.meta_path[:] = [f for f in sys.meta_path if "Redirecting" not in type(f).__name__]
import pytest  # noqa: E402

sys.exit(pytest.main(sys.argv[1:]))
