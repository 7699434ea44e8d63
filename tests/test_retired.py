"""Retiring done briefs: their refs leave the forge's advertisement, their history stays readable, and a
retired brief stays done (never claimed again at epoch 1). Everything is checked with plain git."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from assay.core import custody
from assay.core.claims import Claims
from assay.core.forge.plain import PlainReviews
from assay.core.git import ForgeGit
from assay.core.retired import KEEP_REF, RETIRED_REF, entry_path
from tests.conftest import Forge, assay, brief_md, git

PERSON = "ana"


def brief_refs(brief: str) -> list[str]:
    return [f"refs/assay/claims/{brief}", f"refs/assay/journal/{brief}", f"refs/assay/reviews/{brief}",
            f"refs/heads/assay/{brief}", f"refs/assay/learned/{brief}"]


def finish(forge: Forge, claims: Claims, brief: str) -> None:
    """Claim `brief`, keep a footprint learned from its diff, journal a step, push a work branch, open and merge its
    review, release it done."""
    claims.claim(brief, "d")
    assert claims.learn_footprint(brief, "d", 1, [f"{brief}.txt"])
    env = {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": brief, "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": "r1"}
    done = assay("step", "run", "--name", "build", "--policy", "safe", "--", "true", env=env)
    assert done.code == 0, done.err
    seed = forge.seed
    git("checkout", "-q", "-B", f"work-{brief}", "main", cwd=seed)
    git("pull", "-q", "--no-rebase", forge.url, "main", cwd=seed)
    (seed / f"{brief}.txt").write_text(f"the work of {brief}\n")
    git("add", "-A", cwd=seed)
    git("commit", "-q", "-m", f"work on {brief}", cwd=seed)
    git("push", "-q", forge.url, f"HEAD:refs/heads/assay/{brief}", cwd=seed)
    head = git("rev-parse", "HEAD", cwd=seed).strip()
    reviews = PlainReviews(claims.git)
    reviews.open(brief, f"assay/{brief}", brief.title(), head)
    reviews.mark_ready(brief, head)
    reviews.merge(brief, PERSON)
    custody.release(claims, brief, "d", outcome="done", reason="merged")
    git("checkout", "-q", "main", cwd=seed)
    git("pull", "-q", "--ff-only", forge.url, "main", cwd=seed)


def ageless(text: str) -> object:
    """A JSON answer without the ages, which change as the test runs."""
    data = json.loads(text)
    for row in data.get("history", []):
        row.pop("age_s", None)
    return data


def run(forge: Forge, *args: str) -> tuple[int, str, str]:
    done = assay(*args, env={"ASSAY_FORGE": forge.url, "ASSAY_PERSON": PERSON})
    return done.code, done.out, done.err


def all_refs(forge: Forge) -> dict[str, str]:
    out = git("ls-remote", forge.url)
    return {ref: sha for sha, ref in (line.split("\t") for line in out.splitlines())}


@pytest.fixture
def finished(forge: Forge, claims: Claims) -> dict[str, dict[str, str]]:
    """alpha and beta done (claim, journal, merged review, branch each); gamma held. The refs each had."""
    for brief in ("alpha", "beta"):
        finish(forge, claims, brief)
    claims.claim("gamma", "d")
    refs = all_refs(forge)
    return {b: {r: refs[r] for r in brief_refs(b)} for b in ("alpha", "beta")}


def test_retire_folds_refs_and_keeps_history_readable(forge: Forge, finished: dict[str, dict[str, str]]) -> None:
    before = {b: {what: ageless(run(forge, *what.split(), b, "--json")[1])
                  for what in ("claim history", "journal", "review show")} for b in finished}

    code, out, err = run(forge, "retire", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["retired"] == ["alpha", "beta"]
    assert all(all_refs(forge).get(r) == sha for refs in finished.values() for r, sha in refs.items())

    code, out, err = run(forge, "retire", "--json")
    assert code == 0, err
    assert json.loads(out) == {"retired": ["alpha", "beta"], "kept": {}, "pushes": 1, "packed_refs": True,
                               "cleared": [], "dry_run": False}
    refs = all_refs(forge)
    assert not [r for b in finished for r in brief_refs(b) if r in refs]
    assert "refs/assay/claims/gamma" in refs and RETIRED_REF in refs and KEEP_REF in refs
    for brief, tips in finished.items():  # the index records every tip, read with plain git
        record = json.loads(git("--git-dir", str(forge.path), "show", f"{RETIRED_REF}:{entry_path(brief)}"))
        assert record["refs"] == tips and record["brief"] == brief and record["epoch"] == 1
    # packed: no loose ref files left under refs/assay, and the packed file lists the index
    assert not [p for p in (forge.path / "refs" / "assay").rglob("*") if p.is_file()]
    assert RETIRED_REF in (forge.path / "packed-refs").read_text()
    # the objects survive a collection that drops everything unreachable
    git("--git-dir", str(forge.path), "gc", "-q", "--prune=now")
    for tips in finished.values():
        for sha in tips.values():
            git("--git-dir", str(forge.path), "cat-file", "-e", sha)

    after = {b: {what: ageless(run(forge, *what.split(), b, "--json")[1])
                 for what in ("claim history", "journal", "review show")} for b in finished}
    for views in (before, after):  # the claim as `assay claims` lists it: a retired brief has no live claim left
        for b in views:
            shown = views[b]["review show"]
            assert isinstance(shown, dict)
            shown.pop("claim")
    assert after == before  # custody, journal and review read as before, from a fresh cache too
    assert after["alpha"]["review show"]["state"] == "merged"  # type: ignore[index]
    assert len(after["alpha"]["claim history"]["history"]) >= 2  # type: ignore[index]


def test_the_keep_chain_holds_each_retirements_tips_under_one_commit_as_old_as_they_are(
        forge: Forge, finished: dict[str, dict[str, str]], claims: Claims) -> None:
    """Each keep commit has two parents, the chain's last and a commit whose parents are the tips it retired, dated as
    the oldest of them: a push's check of what it brings, which walks the forge's newest commits and parses each
    one's parents, meets the chain, not the tips (10,000 retired briefs: a raw push 1.12× an empty forge's, was
    2.1×)."""
    def parents(sha: str) -> list[str]:
        return git("--git-dir", str(forge.path), "rev-list", "--parents", "-n", "1", sha).split()[1:]

    def stamp(sha: str) -> int:
        return int(git("--git-dir", str(forge.path), "log", "-1", "--format=%ct", sha))

    assert run(forge, "retire", "alpha")[0] == 0
    first = forge.tip(KEEP_REF)
    assert first and len(parents(first)) == 1  # the chain's first: no chain before it
    [bundle] = parents(first)
    assert set(parents(bundle)) == set(finished["alpha"].values())
    assert stamp(bundle) == min(stamp(sha) for sha in finished["alpha"].values()) <= stamp(first)
    assert run(forge, "retire", "beta")[0] == 0
    second = forge.tip(KEEP_REF)
    assert second and parents(second)[0] == first and set(parents(parents(second)[1])) == set(finished["beta"].values())


def test_a_retired_brief_stays_done(forge: Forge, finished: dict[str, dict[str, str]]) -> None:
    forge.add_brief("delta", brief_md("Needs alpha", depends_on="[alpha]"))
    assert run(forge, "retire")[0] == 0
    retired_tip = forge.tip(RETIRED_REF)

    code, out, err = run(forge, "briefs", "--json")
    assert code == 0, err
    rows = {r["brief"]: r for r in json.loads(out)["briefs"]}
    assert rows["alpha"]["state"] == "done" and rows["alpha"]["retired"] is True
    assert rows["gamma"]["state"] == "held" and rows["gamma"]["retired"] is False
    assert rows["delta"]["state"] == "ready"  # its dependency, retired, is done

    for argv in (("claim", "alpha", "--desk", "x"), ("steer", "alpha", "go on"),
                 ("release", "alpha", "--force", "--reason", "x"), ("wake", "alpha")):
        code, _, err = run(forge, *argv)
        assert code == 3, (argv, code, err)
        assert "retired" in err, err
    code, _, err = run(forge, "retire", "gamma")
    assert code == 3 and "gamma" in err and "held" in err, err
    # nothing was written by any of them: no ref of alpha came back, the index did not move
    refs = all_refs(forge)
    assert not [r for r in brief_refs("alpha") if r in refs]
    assert refs[RETIRED_REF] == retired_tip

    code, out, err = run(forge, "retire", "--json")  # nothing more to retire
    assert code == 0 and json.loads(out)["retired"] == [], err
    assert forge.tip(RETIRED_REF) == retired_tip


def test_retire_older_than_leaves_recent_ones(forge: Forge, finished: dict[str, dict[str, str]]) -> None:
    code, out, err = run(forge, "retire", "--older-than", "1d", "--json")
    assert code == 0, err
    assert json.loads(out)["retired"] == [] and sorted(json.loads(out)["kept"]) == ["alpha", "beta"]
    assert forge.tip(RETIRED_REF) is None
    code, _, err = run(forge, "retire", "--older-than", "soon")
    assert code == 2 and "not an age" in err, err


def test_a_learned_footprint_an_older_retire_left_goes_with_the_next_retirement(
        forge: Forge, claims: Claims, finished: dict[str, dict[str, str]]) -> None:
    """An older Assay retired briefs without their learned footprints (it knew no such ref): the next retirement
    deletes those of retired briefs, under a lease each, and leaves a live brief's and an unknown brief's alone."""
    assert run(forge, "retire", "alpha")[0] == 0
    learned = "refs/assay/learned/alpha"
    assert learned not in all_refs(forge)
    git("--git-dir", str(forge.path), "update-ref", learned, finished["alpha"][learned])  # as an older retire left it
    assert claims.learn_footprint("gamma", "d", 1, ["gamma.txt"])  # held: stays
    git("--git-dir", str(forge.path), "update-ref", "refs/assay/learned/nosuch", finished["alpha"][learned])
    code, out, err = run(forge, "retire", "--dry-run")
    assert code == 0 and "would delete 1 learned footprints of briefs retired before" in out, (out, err)
    assert learned in all_refs(forge)
    code, out, err = run(forge, "retire", "--json")
    assert code == 0 and json.loads(out)["retired"] == ["beta"] and json.loads(out)["cleared"] == [learned], err
    refs = all_refs(forge)
    assert learned not in refs and "refs/assay/learned/beta" not in refs
    assert "refs/assay/learned/gamma" in refs and "refs/assay/learned/nosuch" in refs  # not retired: not touched


def test_concurrent_retirers_and_a_writer_lose_nothing(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    """Three retirers and a person steering a done brief, all at once: every done brief is retired once, and
    the steering either landed before (then the index has the journal tip with it) or was refused."""
    briefs = ("alpha", "beta", "gamma", "delta")
    for brief in briefs:
        claims.claim(brief, "d")
        custody.release(claims, brief, "d", outcome="done")
    env = {**dict(__import__("os").environ), "ASSAY_FORGE": forge.url, "ASSAY_PERSON": PERSON}
    cmds = [[sys.executable, "-m", "assay", "retire"]] * 3 + [[sys.executable, "-m", "assay", "steer", "alpha", "x"]]
    procs = [subprocess.Popen(c, env={**env, "ASSAY_CACHE_DIR": str(tmp_path / f"c{i}")}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for i, c in enumerate(cmds)]
    codes = [p.wait(timeout=60) for p in procs]
    assert codes[:3] == [0, 0, 0], [p.stderr.read() for p in procs if p.stderr]
    assert codes[3] in (0, 3)
    refs = all_refs(forge)
    assert not [r for b in briefs for r in brief_refs(b) if r in refs]
    index = git("--git-dir", str(forge.path), "ls-tree", "-r", "--name-only", RETIRED_REF).split()
    assert sorted(Path(p).stem for p in index) == sorted(briefs)
    alpha = json.loads(git("--git-dir", str(forge.path), "show", f"{RETIRED_REF}:{entry_path('alpha')}"))
    kinds = [json.loads(line)["kind"] for sha in git("--git-dir", str(forge.path), "rev-list", "--reverse",
                                                      alpha["refs"]["refs/assay/journal/alpha"]).split()
             for line in git("--git-dir", str(forge.path), "show", f"{sha}:entries.jsonl").splitlines()]
    assert ("steer" in kinds) == (codes[3] == 0)


def test_retire_on_an_empty_forge_and_a_junk_index(forge: Forge) -> None:
    code, out, err = run(forge, "retire", "--json")
    assert code == 0 and json.loads(out)["retired"] == [], err
    forge.write_record(RETIRED_REF, "briefs", b"not a folder")
    code, _, err = run(forge, "claim", "alpha", "--desk", "d")
    assert code == 2 and RETIRED_REF in err, err  # an unreadable index stops a first claim: it might be retired
    assert forge.tip("refs/assay/claims/alpha") is None
    code, out, err = run(forge, "briefs", "--json")
    assert code == 0 and any(RETIRED_REF in p for p in json.loads(out)["problems"]), (out, err)


def test_port_reads_the_retired_index(forge: Forge, finished: dict[str, dict[str, str]]) -> None:
    assert run(forge, "retire")[0] == 0
    port = ForgeGit(forge.url)
    try:
        from assay.core.retired import read_index, tip_of
        index = read_index(port)
        assert index.names() == {"alpha", "beta"}
        record = index.get("alpha")
        assert record is not None and record.refs == finished["alpha"]
        assert index.get("gamma") is None
        assert tip_of(port, "refs/assay/journal/alpha") == finished["alpha"]["refs/assay/journal/alpha"]
        assert tip_of(port, "refs/assay/claims/gamma") == forge.tip("refs/assay/claims/gamma")
        assert tip_of(port, "refs/assay/claims/zeta") is None
    finally:
        port.close()


def test_racing_retirers_report_only_what_each_retired(forge: Forge, finished: dict[str, dict[str, str]]) -> None:
    """Three `assay retire` released together: one commit of the index, and the briefs are reported retired once in
    all, whoever won (each retirer's commits are its own, so none takes another's push for its own)."""
    go = forge.path.parent / "go"
    script = ("import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.001)\n"
              "from assay.cli import main\nmain(['retire', '--json'])\n")
    env = {**os.environ, "ASSAY_FORGE": forge.url, "ASSAY_PERSON": PERSON}
    racers = [subprocess.Popen([sys.executable, "-c", script, str(go)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(3)]
    go.write_text("go")
    said = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        said += json.loads(out)["retired"]
    assert sorted(said) == ["alpha", "beta"]  # each brief reported retired exactly once
    index_commits = git("--git-dir", str(forge.path), "rev-list", RETIRED_REF).split()
    assert len(index_commits) == 1
