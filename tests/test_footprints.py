"""Footprints: briefs whose `touches:` overlap never run at once; the rest of the fleet works on. Real desks, real
git; the forge read with plain git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from assay.core.briefs import check_brief
from assay.core.claims import Claims
from assay.core.footprints import globs_overlap, learned
from assay.errors import Queued
from tests.conftest import Forge, assay, git
from tests.helpers.desks import DESK, desk_env, publish, run_desk


@pytest.fixture(autouse=True)
def _nothing_read_before() -> None:
    """This process's memory of learned footprints read (by commit: another test's may be the same) starts empty."""
    from assay.core import footprints

    footprints._READ.clear()


@pytest.mark.parametrize(("a", "b", "overlaps"), [
    ("src/app.py", "src/app.py", True),
    ("src/app.py", "src/*.py", True),
    ("src/app.py", "src/*.js", False),
    ("src", "src/deep/down/file.txt", True),  # a glob covers everything beneath what it matches
    ("src/", "src/x", True),
    ("docs/**", "docs/guide/intro.md", True),
    ("**/*.md", "docs/guide/intro.md", True),
    ("**/*.md", "src/app.py", True),  # src/app.py could be a folder: a glob covers everything beneath it
    ("docs/**/*.md", "src/app.py", False),
    (".github", ".github/workflows/verify.yml", True),
    ("v1.2", "v1.2/x", True),
    ("src/api*", "src/api/x.py", True),
    ("docs/*", "docs/api/index.md", True),
    ("src/api/**", "src/web/**", False),
    ("src/a*.py", "src/*b.py", True),  # ab.py matches both
    ("src/a*.py", "src/b*.py", False),
    ("src/*.py", "src/*.js", False),
    ("lib/[ab].c", "lib/a.c", True),
    ("lib/[ab].c", "lib/c.h", False),
    ("README.md", "docs/README.md", False),
])
def test_two_globs_overlap_when_some_path_is_covered_by_both(a: str, b: str, overlaps: bool) -> None:
    assert globs_overlap(a, b) is overlaps and globs_overlap(b, a) is overlaps


def test_a_footprint_learned_from_a_diff_names_its_files_exactly() -> None:
    assert learned(["src/app.py", "docs/[draft].md", "src/app.py"]) == ("docs/[[]draft].md", "src/app.py")
    assert globs_overlap("docs/[[]draft].md", "docs/[draft].md") and not globs_overlap("docs/[[]draft].md", "docs/d.md")
    assert learned(["a[b"]) == ("a[[]b",) and globs_overlap("a[[]b", "a[b")  # an unclosed '[' is a plain name
    assert learned(["dir/back\\slash.txt"]) == ("dir",)  # no glob holds a backslash: its folder stands for it
    assert learned(["top\\level.txt"]) == ("**",)  # nor a folder: everything, never a footprint cut short
    many = learned([f"gen/{i}/f.txt" for i in range(600)])
    assert len(many) <= 500 and globs_overlap(many[0], "gen/0/f.txt")
    assert learned([f"f{i}.txt" for i in range(600)]) == ("**",)


def test_bad_touches_are_lint_problems_with_their_lines() -> None:
    text = "---\ntitle: T\ntouches:\n  - src/app.py\n  - /etc/passwd\n  - ../up\n  - 'lib/[ab.c'\n  - 7\n---\nB.\n"
    brief, problems = check_brief(text, "briefs/t.md", "t")
    assert brief is None
    said = [(p.line, p.message) for p in problems]
    assert [line for line, _ in said] == [5, 6, 7, 8], said
    assert "not a path relative" in said[0][1] and "'..'" in said[1][1] and "never closes" in said[2][1]
    good, none = check_brief("---\ntitle: T\ntouches: [src/, 'docs/*.md']\n---\nB.\n", "briefs/t.md", "t")
    assert none == [] and good is not None and good.touches == ("src/", "docs/*.md")


def state_of(forge: Forge, brief: str) -> str | None:
    """The claim's state read with plain git; None for a brief never claimed."""
    shown = subprocess.run(["git", "--git-dir", str(forge.path), "show", f"refs/assay/claims/{brief}:claim.json"],
                           capture_output=True, text=True)
    return str(json.loads(shown.stdout)["state"]) if shown.returncode == 0 else None


def overlapping(title: str, path: str, text: str) -> str:
    return (f"---\ntitle: {title}\nlabels: [work]\ntouches: [{path}]\n"
            f"verify:\n  - id: check\n    run: \"test -f {path}\"\n---\n"
            f"{title}.\n\n```assay-script\nwrite {path} {text}\n```\n")


def test_a_claim_is_refused_while_an_overlapping_brief_is_live_and_taken_once_it_is_not(forge: Forge,
                                                                                        claims: Claims) -> None:
    forge.add_brief("one", "---\ntitle: One\ntouches: [src/]\n---\nB.\n")
    forge.add_brief("two", "---\ntitle: Two\ntouches: ['src/app.py']\n---\nB.\n")
    forge.add_brief("far", "---\ntitle: Far\ntouches: ['docs/**']\n---\nB.\n")
    claims.claim("one", "a")
    with pytest.raises(Queued) as info:
        claims.claim("two", "b")
    assert info.value.behind == ["one"] and info.value.code == 3 and "src/app.py ~ src/" in info.value.message
    said = assay("claim", "two", "--desk", "b", "--forge", forge.url)
    assert said.code == 3 and "queued behind one" in said.err and "Traceback" not in said.err, said.err
    assert claims.claim("far", "c").record.epoch == 1  # apart: taken at once
    claims.release("one", "a", outcome="done", epoch=1)
    assert claims.claim("two", "b").record.epoch == 1
    chain = forge.chain("two")
    assert len(chain) == 1 and chain[0]["state"] == "held"
    message = git("--git-dir", str(forge.path), "log", "-1", "--format=%B", "refs/assay/claims/two")
    assert "Footprint (declared): src/app.py" in message  # the decision, on the claim chain
    kept = json.loads(git("--git-dir", str(forge.path), "show", "refs/assay/footprints:footprints.json"))
    assert set(kept["briefs"]) == {"two", "far"}  # one's entry, no longer live, was dropped by the claim that met it


def test_a_released_brief_keeps_its_learned_footprint_and_a_takeover_is_never_queued(forge: Forge,
                                                                                       claims: Claims) -> None:
    """A footprint learned from a diff outlives its brief's release or expiry (the brief is taken again later): a
    brief claimed meanwhile prunes it not, and the first, claimed again, is queued behind that one. Two briefs live
    at once (a footprint learned late) never keep a desk from taking over its own orphaned claim."""
    forge.add_brief("x", "---\ntitle: X\n---\nB.\n")
    forge.add_brief("b", "---\ntitle: B\ntouches: [src/]\n---\nB.\n")
    claims.claim("x", "d1")
    assert claims.learn_footprint("x", "d1", 1, ["src/app.py"])
    claims.release("x", "d1", epoch=1)
    claims.claim("b", "d2")
    learned_x = json.loads(git("--git-dir", str(forge.path), "show", "refs/assay/learned/x:footprints.json"))
    assert learned_x == {"v": 1, "briefs": {"x": {"touches": ["src/app.py"], "source": "diff", "epoch": 1}}}
    kept = json.loads(git("--git-dir", str(forge.path), "show", "refs/assay/footprints:footprints.json"))
    assert set(kept["briefs"]) == {"b"}  # a first round's footprint is on its brief's own ref, not the shared one
    with pytest.raises(Queued) as info:
        claims.claim("x", "d1")
    assert info.value.behind == ["b"]
    claims.release("b", "d2", epoch=1)
    claims.claim("x", "d1")  # taken again, under its learned footprint, copied to the shared ref with its claim
    kept = json.loads(git("--git-dir", str(forge.path), "show", "refs/assay/footprints:footprints.json"))
    assert kept["briefs"]["x"] == {"touches": ["src/app.py"], "source": "diff", "epoch": 2}
    forge.add_brief("c", "---\ntitle: C\ntouches: [src/app.py]\n---\nB.\n")
    with pytest.raises(Queued):
        claims.claim("c", "d3")
    taken = claims.claim("x", "d1", singleton=True)  # its own claim, taken over: never queued
    assert taken.record.epoch == 3


def test_six_briefs_writing_one_file_run_one_at_a_time_and_the_fleet_works_on(forge: Forge, tmp_path: Path) -> None:
    """The issue's scenario: six briefs that write the same file, three desks. One is worked to its review; the
    other five are queued behind it (the listing and the desks say so), and a brief apart is worked meanwhile."""
    files = {f"desks/d{i}.yaml": DESK.format(name=f"d{i}", attempts=1) for i in range(3)}
    files.update({f"briefs/s{i}.md": overlapping(f"S{i}", "shared.txt", f"v{i}") for i in range(6)})
    files["briefs/apart.md"] = overlapping("Apart", "other.txt", "v1")
    publish(forge, files)
    outs = [run_desk(forge, f"d{i}", tmp_path / f"d{i}") for i in range(3)]
    assert all(o.code == 0 for o in outs), [o.err for o in outs]
    states = {b: state_of(forge, b) for b in [*(f"s{i}" for i in range(6)), "apart"]}
    assert states["apart"] == "waiting"
    live = [b for b, s in states.items() if b != "apart" and s is not None]
    assert live == ["s0"] and states["s0"] == "waiting", states
    assert any("s1 queued behind s0 (shared.txt)" in o.out for o in outs), [o.out for o in outs]
    listed = assay("briefs", "--json", "--forge", forge.url, env=desk_env(tmp_path))
    rows = {r["brief"]: r for r in json.loads(listed.out)["briefs"]}
    assert [b for b, r in rows.items() if r["state"] == "queued"] == [f"s{i}" for i in range(1, 6)]
    assert rows["s3"]["behind"] == {"s0": "shared.txt"}
    shown = assay("briefs", "--forge", forge.url, env=desk_env(tmp_path))
    assert "s2 queued behind s0 (shared.txt)" in shown.out, shown.out
    one = assay("brief", "show", "s3", "--forge", forge.url, env=desk_env(tmp_path))
    assert one.code == 0 and "queued behind s0 (shared.txt)" in one.out and "touches: shared.txt" in one.out, one.out
    held = json.loads(assay("brief", "show", "s0", "--json", "--forge", forge.url, env=desk_env(tmp_path)).out)
    assert held["state"] == "waiting" and held["footprint"] == {"touches": ["shared.txt"], "source": "declared",
                                                                "epoch": 1}
    missing = assay("brief", "show", "nosuch", "--forge", forge.url, env=desk_env(tmp_path))
    assert missing.code == 2 and "nosuch" in missing.err and "Traceback" not in missing.err
    merged = assay("review", "merge", "s0", "--forge", forge.url, env=desk_env(tmp_path))
    assert merged.code == 0, merged.err
    for i in range(3):  # s0's desk settles the merge; the next brief of the six is taken, and only it
        again = run_desk(forge, f"d{i}", tmp_path / f"d{i}")
        assert again.code == 0, again.err
    after = {b: state_of(forge, b) for b in (f"s{i}" for i in range(6))}
    assert after["s0"] == "done" and after["s1"] == "waiting" and [s for s in after.values() if s] == ["done",
                                                                                                      "waiting"]


def test_a_learned_footprint_is_kept_on_its_briefs_own_ref_whatever_the_fleet_moves_meanwhile(
        forge: Forge, claims: Claims, monkeypatch: pytest.MonkeyPatch) -> None:
    """A footprint learned from a diff goes to `refs/assay/learned/<brief>`, which only its brief's holder writes:
    other claims moving the shared footprints ref between its read and its push (with plain git, here) cost it
    nothing, one push. A writer that moves that very ref each time (junk, say) meets `LEARN_TRIES` spaced pushes
    and Busy, rather than 30 pushes on top of an overloaded forge; junk found there is replaced, not built on."""
    from assay.core.claims import LEARN_TRIES
    from assay.core.footprints import FOOTPRINTS_REF
    from assay.errors import Busy

    forge.add_brief("x", "---\ntitle: X\n---\nB.\n")
    forge.add_brief("y", "---\ntitle: Y\n---\nB.\n")
    forge.add_brief("d", "---\ntitle: D\ntouches: [lib/]\n---\nB.\n")
    claims.claim("d", "d3")  # a shared footprints ref to move
    claims.claim("x", "d1")
    claims.claim("y", "d2")
    listed = claims.git.ls_remote
    moving = [FOOTPRINTS_REF]

    def read_then_move(*refs: str) -> dict[str, str]:
        tips = listed(*refs)
        ref = moving[0]
        tip = git("--git-dir", str(forge.path), "rev-parse", "-q", "--verify", ref, check=False).strip()
        tree = f"{tip}^{{tree}}" if tip else git("--git-dir", str(forge.path), "mktree", input="").strip()
        moved = git("--git-dir", str(forge.path), "-c", "user.name=o", "-c", "user.email=o@x", "commit-tree",
                    tree, *(["-p", tip] if tip else []), "-m", "another writer").strip()
        git("--git-dir", str(forge.path), "update-ref", ref, moved, *([tip] if tip else []))
        return tips

    monkeypatch.setattr(claims.git, "ls_remote", read_then_move)
    pushed = claims.git.round_trips["push"]
    assert claims.learn_footprint("x", "d1", 1, ["src/x.py"])
    assert claims.git.round_trips["push"] - pushed == 1  # the shared ref moved meanwhile: no matter
    kept = json.loads(git("--git-dir", str(forge.path), "show", "refs/assay/learned/x:footprints.json"))
    assert kept["briefs"] == {"x": {"touches": ["src/x.py"], "source": "diff", "epoch": 1}}

    moving[0] = "refs/assay/learned/y"
    pushed = claims.git.round_trips["push"]
    with pytest.raises(Busy):
        claims.learn_footprint("y", "d2", 1, ["src/y.py"])
    assert claims.git.round_trips["push"] - pushed == LEARN_TRIES
    shown = git("--git-dir", str(forge.path), "ls-tree", "refs/assay/learned/y")
    assert shown == ""  # the junk writer's empty commits: nothing written by the pushes that lost
    monkeypatch.setattr(claims.git, "ls_remote", listed)
    assert claims.learn_footprint("y", "d2", 1, ["src/y.py"])  # the junk left standing is replaced
    kept = json.loads(git("--git-dir", str(forge.path), "show", "refs/assay/learned/y:footprints.json"))
    assert kept["briefs"] == {"y": {"touches": ["src/y.py"], "source": "diff", "epoch": 1}}
    parents = git("--git-dir", str(forge.path), "log", "-1", "--format=%P", "refs/assay/learned/y").strip()
    assert parents == ""  # not built on the junk


def test_a_brief_never_claimed_that_declares_nothing_is_claimed_without_reading_the_footprints(
        forge: Forge, claims: Claims, tmp_path: Path) -> None:
    """A footprint is declared on main, or learned under a claim: a brief never claimed that declares none has none,
    so its claim reads no footprint (each host's cache would fetch each one the fleet writes) and writes none. A
    brief claimed before is checked against what it learned then."""
    from assay.core.footprints import FOOTPRINTS_REF

    for brief in ("x", "y"):
        forge.add_brief(brief, f"---\ntitle: {brief}\n---\nB.\n")
    tip = _learned_at_another_host(forge, tmp_path, "y", release=True)

    assert claims.claim("x", "d1").record.epoch == 1
    assert not _cached(claims, tip)  # not fetched: not read
    assert not git("--git-dir", str(forge.path), "rev-parse", "-q", "--verify", FOOTPRINTS_REF, check=False).strip()
    assert claims.claim("y", "d1").record.epoch == 2  # claimed before: its learned footprint read, and kept
    assert _cached(claims, tip)
    message = git("--git-dir", str(forge.path), "log", "-1", "--format=%B", "refs/assay/claims/y")
    assert "Footprint (diff): docs/y.md" in message


def test_a_desks_look_reads_the_footprints_only_for_a_brief_that_could_have_one(
        forge: Forge, claims: Claims, tmp_path: Path) -> None:
    """A desk's look (`read_snapshot(lazy_footprints=True)`) fetches the footprints only when a brief it weighs
    declares a footprint or was claimed before; junk there then reads as none, and is a problem it reports."""
    from assay.core.footprints import FOOTPRINTS_REF, learned_ref
    from assay.desk.queue import read_snapshot

    for brief in ("x", "y"):
        forge.add_brief(brief, f"---\ntitle: {brief}\n---\nB.\n")
    forge.add_brief("d", "---\ntitle: D\ntouches: ['docs/']\n---\nB.\n")
    tip = _learned_at_another_host(forge, tmp_path, "y", release=False)  # y is live, and learned docs/y.md

    look = read_snapshot(claims, lazy_footprints=True)
    assert look.behind(look.briefs["x"]) == {} and not _cached(claims, tip)  # never claimed, declares none: not read
    assert set(look.behind(look.briefs["d"])) == {"y"} and _cached(claims, tip)  # declared: behind y's learned one
    assert set(read_snapshot(claims).footprints) == {"y"}  # a listing's read: whole, at once

    _plant_junk(forge, FOOTPRINTS_REF)
    assert [p for p in read_snapshot(claims).problems if p.path == FOOTPRINTS_REF]  # a listing: at once
    look = read_snapshot(claims, lazy_footprints=True)
    assert look.behind(look.briefs["x"]) == {} and not [p for p in look.problems if p.path == FOOTPRINTS_REF]
    assert set(look.behind(look.briefs["d"])) == {"y"}  # junk there reads as none; y's own ref still counts
    assert [p for p in look.problems if p.path == FOOTPRINTS_REF]  # … and is a problem the desk reports:
    _plant_junk(forge, learned_ref("y"))
    look = read_snapshot(claims, lazy_footprints=True)
    assert look.behind(look.briefs["d"]) == {}  # junk reads as none (the claim refuses a declared brief, saying why)
    assert [p for p in look.problems if p.path == learned_ref("y")]

    from assay.core.deskspec import load_desk
    from assay.core.forge.plain import PlainReviews
    from assay.desk.loop import Desk

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/d.md": "---\ntitle: D\nlabels: [work]\ntouches: ['docs/']\n---\nB.\n"})
    for brief in ("x", "y"):  # the declared brief alone is this desk's to weigh
        git("rm", "-q", f"briefs/{brief}.md", cwd=forge.seed)
    git("commit", "-q", "-m", "only d", cwd=forge.seed)
    git("push", "-q", forge.url, "HEAD:refs/heads/main", cwd=forge.seed)
    said: list[str] = []
    desk = Desk(claims.git, claims, PlainReviews(claims.git), load_desk(claims.git, claims.read_view().main,
                                                                           "builder"), tmp_path / "state",
                echo=said.append)
    desk.run(once=True)
    assert f"builder: finding: {FOOTPRINTS_REF}: " in "\n".join(said), said  # told, once it was read
    assert not git("--git-dir", str(forge.path), "rev-parse", "-q", "--verify", "refs/assay/claims/d",
                   check=False).strip()  # and the declared brief left alone


def _plant_junk(forge: Forge, ref: str) -> None:
    """A commit whose footprints.json is not JSON, at `ref`, with plain git."""
    junk = git("--git-dir", str(forge.path), "hash-object", "-w", "--stdin", input="junk").strip()
    tree = git("--git-dir", str(forge.path), "mktree", input=f"100644 blob {junk}\tfootprints.json\n").strip()
    commit = git("--git-dir", str(forge.path), "-c", "user.name=o", "-c", "user.email=o@x", "commit-tree", tree,
                 "-m", "junk").strip()
    git("--git-dir", str(forge.path), "update-ref", ref, commit)


def _learned_at_another_host(forge: Forge, tmp_path: Path, brief: str, release: bool) -> str:
    """Another host (a cache of its own) claims `brief` and keeps the footprint docs/<brief>.md learned from its
    diff, on the brief's own ref (then releases it, if `release`); the ref's tip."""
    from assay.core.footprints import learned_ref
    from assay.core.git import ForgeGit

    another = ForgeGit(forge.url, cache_root=tmp_path / "another-host")
    try:
        other = Claims(another)
        other.claim(brief, "d2")
        assert other.learn_footprint(brief, "d2", 1, [f"docs/{brief}.md"])
        if release:
            other.release(brief, "d2", epoch=1)
    finally:
        another.close()
    return git("--git-dir", str(forge.path), "rev-parse", learned_ref(brief)).strip()


def _cached(claims: Claims, sha: str) -> bool:
    """Whether `sha` is in the claimer's cache (fetched: read, or about to be)."""
    return subprocess.run(["git", "--git-dir", claims.git.cache, "cat-file", "-e", sha],
                          capture_output=True).returncode == 0
