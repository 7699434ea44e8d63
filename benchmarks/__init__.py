"""Benchmarks: each prints its figures beside a floor measured in the same run."""

from __future__ import annotations

import compileall
from pathlib import Path


def compiled() -> None:
    """Byte-compile Assay's source first, as an install is (pip compiles it): where `PYTHONDONTWRITEBYTECODE` is set,
    or a source is newer than its .pyc, every `python -m assay` a benchmark times would compile it again."""
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "assay"), quiet=1)
