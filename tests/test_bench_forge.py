"""The benchmarks' forge over HTTP (`benchmarks/fleet.py` Backend) keeps its repository as forges do: `git
maintenance run` after every so many pushes."""

from __future__ import annotations

import threading
from pathlib import Path

from benchmarks.fleet import Backend
from tests.conftest import git


def test_the_forge_runs_its_upkeep_after_every_so_many_pushes(tmp_path: Path) -> None:
    served = tmp_path / "http"
    forge = served / "forge.git"
    git("init", "-q", "--bare", str(forge))
    git("--git-dir", str(forge), "config", "http.receivepack", "true")
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", str(work))
    backend = Backend(served, upkeep_every=2)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{backend.server_address[1]}/forge.git"
    try:
        for n in range(3):
            (work / "f.txt").write_text(f"{n}\n")
            git("-C", str(work), "add", "f.txt")
            git("-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q",
                "-m", str(n))
            git("-C", str(work), "push", "-q", url, f"HEAD:refs/heads/b{n}")
            if n == 1:  # the second push's upkeep, started before the push was answered
                assert len(backend.upkeeping) == 1
                backend.upkeeping[0].join()
        assert len(backend.upkeeping) == 1  # the third push is one of the next two
    finally:
        backend.close()
    assert len(backend.upkeeps) == 1
    packed = (forge / "packed-refs").read_text()
    assert "refs/heads/b0" in packed and "refs/heads/b1" in packed and "refs/heads/b2" not in packed
    assert not (forge / "refs" / "heads" / "b0").exists() and (forge / "refs" / "heads" / "b2").exists()
    assert (forge / "objects" / "info" / "commit-graph").exists() or \
        (forge / "objects" / "info" / "commit-graphs").is_dir()
