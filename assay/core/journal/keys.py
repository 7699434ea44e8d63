"""What a journal snapshot's segment may hold, so that a reader opens only the segments a lookup needs.

A snapshot's segment `<first>-<last>.jsonl` may come with `<first>-<last>.keys`: a Bloom filter of the lookup keys
of its entries (`keys_of`). A lookup (`Snapshot.calls_of`, `resolution`, `refused`, `nondet`, `run_counts`) reads
a segment whose filter says its key is absent from it as holding nothing for it: a filter never says absent for a
key it was built with, and says present for an absent one about once in a thousand (`FALSE_RATE`), which only costs
the read of that segment (and a cold reader its check: a thousand lines decoded). `tests/journal_check.py` checks
every filter against its segment's entries.

The file is one line, keys sorted, compact: `{"bits":"<base64>","k":10,"m":<bits>,"v":1}`. A key's bit positions
are `(h1 + i * h2) mod m` for `i` in `0..k-1` (exact integers, no wraparound), `h1` and `h2` the two halves
(big-endian) of the key's BLAKE2b digest with an output length of 16 bytes (`h2` with its lowest bit set); bit `n`
is bit `n mod 8` (the lowest first) of byte `n // 8`. A filter is trusted as its segment is: both are written once,
by the journal's writer under its claim.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable

from assay.core.digests import blake2b_digest
from assay.core.records import JournalEntry

VERSION = 1
HASHES = 10  # the best for FALSE_RATE: log2(1 / FALSE_RATE)
FALSE_RATE = 0.001  # 14.4 bits a key (older filters: 7 and 0.01, 9.6 bits a key; read alike)
CALLS = ("intent", "refused", "outcome_unknown")  # the entries a step identity is looked up by


def _key(*parts: object) -> str:
    return json.dumps(parts, ensure_ascii=False, separators=(",", ":"))


def call_key(identity: tuple[str, str]) -> str:
    return _key("call", *identity)


def intent_key(intent: int) -> str:
    return _key("intent", intent)


def run_key(run: str) -> str:
    return _key("run", run)


NONDET_KEY = _key("nondeterminism")


def keys_of(entry: JournalEntry) -> list[str]:
    """The keys a lookup finds `entry` by."""
    keys = []
    if entry.kind in CALLS and entry.step is not None:
        keys.append(call_key(entry.identity))
    if entry.intent is not None:
        keys.append(intent_key(entry.intent))
    if entry.kind == "nondeterminism":
        keys.append(NONDET_KEY)
    if entry.run is not None:
        keys.append(run_key(entry.run))
    return keys


class Keys:
    """A segment's Bloom filter of lookup keys."""

    def __init__(self, bits: bytearray, hashes: int) -> None:
        self.bits = bits
        self.hashes = hashes
        self.size = len(bits) * 8

    @classmethod
    def of(cls, entries: Iterable[JournalEntry]) -> Keys:
        keys = {k for e in entries for k in keys_of(e)}
        size = max(64, math.ceil(-len(keys) * math.log(FALSE_RATE) / math.log(2) ** 2))
        made = cls(bytearray((size + 7) // 8), HASHES)
        for key in keys:
            for n in made._positions(key):
                made.bits[n // 8] |= 1 << (n % 8)
        return made

    def may_hold(self, key: str) -> bool:
        return all(self.bits[n // 8] >> (n % 8) & 1 for n in self._positions(key))

    def encode(self) -> bytes:
        body = {"bits": base64.b64encode(bytes(self.bits)).decode("ascii"), "k": self.hashes, "m": self.size,
                "v": VERSION}
        return (json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n").encode("ascii")

    @classmethod
    def decode(cls, data: bytes | None) -> Keys | None:
        """The filter in `data`, or None (junk, another version): its segment is then read for every lookup."""
        try:
            raw = json.loads(data or b"")
            if not isinstance(raw, dict) or set(raw) != {"bits", "k", "m", "v"} or raw["v"] != VERSION:
                return None
            bits = bytearray(base64.b64decode(raw["bits"], validate=True))
            if type(raw["k"]) is not int or not 1 <= raw["k"] <= 32 or raw["m"] != len(bits) * 8 or not bits:
                return None
            return cls(bits, raw["k"])
        except (ValueError, TypeError, RecursionError):
            return None

    def _positions(self, key: str) -> list[int]:
        digest = blake2b_digest(key.encode("utf-8"), 16)
        first, step = int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big") | 1
        return [(first + i * step) % self.size for i in range(self.hashes)]
