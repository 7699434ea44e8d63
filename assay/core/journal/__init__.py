"""Each brief's journal, `refs/assay/journal/<brief>`: `writer` is the only writer of its entries and reads them;
`cache` (a decoded log) and `index` (an SQLite index, the snapshots a journal carries) let a long journal be read
without decoding it whole; `spacing` says how far apart its snapshots are. The names callers use are here, each
loaded as a caller first names it (PEP 562): `spacing` loads alone.
"""

from assay.core.lazy import names

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from assay.core.journal.writer import (
        INLINE_LIMIT,
        KEEP_AFTER,
        MAX_PENDING_S,
        Draft,
        Journal,
        JournalLog,
        append_as_person,
        append_built_as_person,
        entry_view,
        fork_as_person,
        read_indexed,
        read_kept,
        read_log,
        read_logs,
        transition_as,
    )


__all__ = [
    "INLINE_LIMIT", "KEEP_AFTER", "MAX_PENDING_S", "Draft", "Journal", "JournalLog", "append_as_person",
    "append_built_as_person", "entry_view", "fork_as_person", "read_indexed", "read_kept", "read_log", "read_logs",
    "transition_as",
]
__getattr__ = names(__name__, dict.fromkeys(__all__, "writer"))
