"""A fetch from a forge over HTTP made from this process: protocol v2's `fetch` command in one POST to its
`git-upload-pack` (on the connection the port's listings keep, `smarthttp.py`), its pack indexed into the cache
by `git index-pack`. `git fetch` starts its transport (`git remote-http`) and asks the forge twice (its
capabilities, then the command), and sends no `have` from a cache without refs: the forge packs the whole
history of every tip asked for. This one says the tips it holds of the refs asked for, and main's, so the forge
packs what is new since."""

from __future__ import annotations

from collections.abc import Sequence

from assay.core.git.refs import pkt_line

FLUSH, DELIM = b"0000", b"0001"
_SHALLOW_INFO = pkt_line("shallow-info\n") + DELIM  # the section's header and end, with no line between


def request(wants: Sequence[str], haves: Sequence[str], shallow: Sequence[str] = ()) -> bytes:
    """A protocol v2 `fetch` of `wants` by object id, saying `haves` are held, done in one round (a thin pack:
    its deltas may be on objects the haves reach). `shallow`: the commits the cache holds without their parents
    (git's `shallow` file), as `git fetch` says them: the forge takes them for the ends of what the cache holds,
    and answers with a `shallow-info` section."""
    args = ["thin-pack", "no-progress", "ofs-delta", *(f"want {sha}" for sha in wants),
            *(f"shallow {sha}" for sha in shallow), *(f"have {sha}" for sha in haves), "done"]
    return pkt_line("command=fetch\n") + DELIM + b"".join(pkt_line(f"{arg}\n") for arg in args) + FLUSH


def packfile(answer: bytes, shallow_said: bool = False) -> bytes | None:
    """The pack in a `fetch` answer (its `packfile` section, side band 1); None for anything else: an `ERR`, a
    section this fetch did not ask for, a side band 3 error, an answer cut short. Where the request said the cache's
    shallow commits, a `shallow-info` section may come first, and only empty: a commit the forge names shallow or
    no longer shallow would change the cache's `shallow` file, which `git fetch` keeps."""
    at, data = 0, bytearray()
    in_pack = False
    if shallow_said and answer.startswith(_SHALLOW_INFO):
        at = len(_SHALLOW_INFO)
    while at + 4 <= len(answer):
        try:
            size = int(answer[at:at + 4], 16)
        except ValueError:
            return None
        if size == 0:
            return bytes(data) if in_pack and at + 4 == len(answer) and data.startswith(b"PACK") else None
        if size < 4 or at + size > len(answer):
            return None
        payload = answer[at + 4:at + size]
        at += size
        if not in_pack:
            if payload != b"packfile\n":
                return None
            in_pack = True
        elif payload[:1] == b"\x01":
            data += payload[1:]
        elif payload[:1] != b"\x02":
            return None
    return None
