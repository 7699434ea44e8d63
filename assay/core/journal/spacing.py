"""How far apart a journal's snapshots are, and how deep a cold reader's first fetch goes: read by the journal's
writer and reader, and by a command that starts a new cache's first fetch before they load (`lean.fetch_ahead`)."""

from __future__ import annotations

import os

SNAPSHOT_EVERY = 1000  # a tail of at most this many entries (and one group) is decoded by a cold reader
FIRST_DEPTH = 16  # commits a cold reader fetches first: the tip and the few below it, which hold the snapshot's tip
# where the tip made the snapshot (a writer crossing the interval) or a few commits followed it; a few small commits
# more are little beside the snapshot's segments, a second fetch (a process and a round trip) is much. At most a
# tenth of the interval (tests cross it every few entries): never most of the chain below the snapshot


def snapshot_every() -> int:
    """Entries between snapshots: `SNAPSHOT_EVERY`, or `ASSAY_SNAPSHOT_EVERY` (tests cross it with a few)."""
    raw = os.environ.get("ASSAY_SNAPSHOT_EVERY", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else SNAPSHOT_EVERY


def first_depth() -> int:
    return max(2, min(FIRST_DEPTH, snapshot_every() // 10))
