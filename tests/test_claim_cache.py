"""The cache of decoded claim records (`claims.DECODED`): a shortcut for listings, never the truth.

Each test compares a listing that used the cache with one read afresh from the forge
(a new cache directory), on a real bare forge with real git.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assay.core.claims import _TIPS_SEEN, DECODED, Claim, Claims, InvalidClaim
from assay.core.git import ForgeGit
from assay.core.records import CLAIMS_PREFIX
from tests.conftest import Forge, git


def fresh_listing(forge: Forge, tmp_path: Path, name: str) -> tuple[list[Claim], list[InvalidClaim]]:
    """Every claim as read with an empty cache directory: no decoded records to take."""
    port = ForgeGit(forge.url, cache_root=tmp_path / name)
    try:
        assert not (Path(port.cache) / DECODED).exists()
        return Claims(port).list_all()
    finally:
        port.close()


def new_process() -> None:
    """Forget what this process read (`_TIPS_SEEN`): its next listing goes to the cache's file, as a new one's."""
    _TIPS_SEEN.clear()


def cached(claims: Claims) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((Path(claims.git.cache) / DECODED).read_text())
    return loaded


def test_a_listing_from_the_cache_equals_a_fresh_read_and_junk_is_still_reported(
        claims: Claims, forge: Forge, tmp_path: Path) -> None:
    claims.claim("alpha", "d1")
    claims.claim("beta", "d2")
    claims.release("beta", "d2", reason="done with it")
    forge.write_record(CLAIMS_PREFIX + "gamma", "claim.json", b"not json")
    first = claims.list_all()
    memo = cached(claims)["claims"]
    assert set(memo) == {c.sha for c in first[0]}  # the good tips only; junk is read again each time
    second = claims.list_all()
    assert second == first == fresh_listing(forge, tmp_path, "fresh")
    assert [c.record.brief for c in second[0]] == ["alpha", "beta"]
    assert [b.ref for b in second[1]] == [CLAIMS_PREFIX + "gamma"]


def test_a_tip_in_the_cache_is_not_read_again(claims: Claims) -> None:
    """Keyed by commit id, an entry is taken as it is: changing it shows it was used (and why no one should)."""
    alpha = claims.claim("alpha", "d1")
    claims.list_all()
    data = cached(claims)
    data["claims"][alpha.sha][4] = "someone/else/1/beef"  # the holder
    (Path(claims.git.cache) / DECODED).write_text(json.dumps(data))
    (listed,), _ = claims.list_all()  # this process read it already: from its memory
    assert listed == alpha
    new_process()
    (listed,), _ = claims.list_all()
    assert listed.sha == alpha.sha and listed.record.holder == "someone/else/1/beef"


def test_a_listing_that_finds_no_claim_moved_reads_no_file(claims: Claims) -> None:
    claims.claim("alpha", "d1")
    first = claims.list_all()
    (Path(claims.git.cache) / DECODED).unlink()
    assert claims.list_all() == first and not (Path(claims.git.cache) / DECODED).exists()
    claims.claim("beta", "d1")  # one moved: the file is read and written again, whole
    assert [c.record.brief for c in claims.list_all()[0]] == ["alpha", "beta"]
    assert len(cached(claims)["claims"]) == 2


def test_a_moved_tip_is_read_afresh_and_the_old_entry_dropped(claims: Claims, forge: Forge, tmp_path: Path) -> None:
    old = claims.claim("alpha", "d1")
    claims.list_all()
    assert old.sha in cached(claims)["claims"]
    other = Claims(ForgeGit(forge.url, cache_root=tmp_path / "other-desk"))
    moved = other.release("alpha", "d1", outcome="done", reason="merged")
    other.git.close()
    (listed,), _ = claims.list_all()
    assert listed == moved and listed.record.state == "done"
    assert set(cached(claims)["claims"]) == {moved.sha}
    assert claims.list_all() == fresh_listing(forge, tmp_path, "fresh")


def test_a_damaged_or_foreign_cache_is_only_a_miss(claims: Claims, forge: Forge, tmp_path: Path) -> None:
    alpha = claims.claim("alpha", "d1")
    beta = claims.claim("beta", "d1")
    expected = fresh_listing(forge, tmp_path, "fresh")
    claims.list_all()
    good = cached(claims)
    path = Path(claims.git.cache) / DECODED
    entry = good["claims"][alpha.sha]
    damaged: list[str] = [
        "not json",
        json.dumps(good)[:-7],  # cut short
        json.dumps([1, 2, 3]),
        json.dumps({**good, "v": 2}),  # another version's layout
        json.dumps({"v": 1, "claims": "none"}),
        json.dumps({"v": 1, "claims": {alpha.sha: entry[:-1], beta.sha: "x"}}),  # too short, not a list
        json.dumps({"v": 1, "claims": {alpha.sha: [*entry[:2], "1", *entry[3:]]}}),  # epoch of the wrong type
        json.dumps({"v": 1, "claims": {alpha.sha: [*entry[:2], True, *entry[3:]]}}),  # a boolean is no epoch
        json.dumps({"v": 1, "claims": {alpha.sha: [entry[0], "lost", *entry[2:]]}}),  # an unknown state
        json.dumps({"v": 1, "claims": {alpha.sha: [entry[0], entry[1], 0, *entry[3:]]}}),  # epoch below 1
        json.dumps({"v": 1, "claims": {alpha.sha: [*entry[:9], "wait"]}}),  # wait neither an object nor null
        json.dumps({"v": 1, "claims": {alpha.sha: ["beta", *entry[1:]], beta.sha: ["alpha", *entry[1:]]}}),
    ]
    for text in damaged:
        path.write_text(text)
        new_process()
        assert claims.list_all() == expected, text
        assert cached(claims) == good, text  # written again whole, from what was read


def test_another_briefs_commit_on_a_ref_is_junk_whether_or_not_it_was_cached(
        claims: Claims, forge: Forge, tmp_path: Path) -> None:
    alpha = claims.claim("alpha", "d1")
    claims.list_all()
    git("--git-dir", str(forge.path), "update-ref", CLAIMS_PREFIX + "beta", alpha.sha)
    listing = claims.list_all()
    assert listing == fresh_listing(forge, tmp_path, "fresh")
    assert [c.record.brief for c in listing[0]] == ["alpha"]
    assert [(b.ref, b.sha) for b in listing[1]] == [(CLAIMS_PREFIX + "beta", alpha.sha)]
    assert "names brief 'alpha'" in listing[1][0].problem


def test_a_kept_view_serves_the_next_read_once(claims: Claims, forge: Forge, tmp_path: Path) -> None:
    kept = claims.read_view(keep=True)
    other = Claims(ForgeGit(forge.url, cache_root=tmp_path / "other-desk"))
    taken = other.claim("alpha", "d2")
    other.git.close()
    assert claims.read_view() is kept and CLAIMS_PREFIX + "alpha" not in kept.tips  # read before the claim
    assert claims.read_view().tips[CLAIMS_PREFIX + "alpha"] == taken.sha  # the next read is the forge's


def test_reading_some_claims_forgets_none_of_the_others(claims: Claims, forge: Forge, tmp_path: Path) -> None:
    """A reading of a few claims (the supersede check's, of the briefs with ready reviews) keeps what is known of
    the rest: the next reading of every claim takes them from memory, and equals a fresh one."""
    claims.claim("alpha", "d1")
    claims.claim("beta", "d2")
    tips = claims.git.ls_remote(CLAIMS_PREFIX + "*")
    claims.load_tips(tips)
    elsewhere = Claims(ForgeGit(forge.url, cache_root=tmp_path / "elsewhere"))
    elsewhere.release("beta", "d2", reason="done")  # moved by another host
    elsewhere.git.close()
    beta = CLAIMS_PREFIX + "beta"
    moved = claims.git.ls_remote(beta)
    [read], _ = claims.load_tips(moved, every=False)
    assert read.record.state == "released"
    assert set(cached(claims)["claims"]) == {tips[CLAIMS_PREFIX + "alpha"], tips[beta], moved[beta]}
    for forget in (False, True):  # from this process's memory, then from the cache's file
        if forget:
            new_process()
        listing = claims.list_all()
        assert listing == fresh_listing(forge, tmp_path, f"fresh{forget}")
        assert [c.record.state for c in listing[0]] == ["held", "released"]
    assert set(cached(claims)["claims"]) == {tips[CLAIMS_PREFIX + "alpha"], moved[beta]}  # only what is there now
