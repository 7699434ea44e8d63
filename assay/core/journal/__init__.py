"""Each brief's journal, `refs/assay/journal/<brief>`: `writer` is the only writer of its entries and reads them;
`cache` (a decoded log) and `index` (an SQLite index, the snapshots a journal carries) let a long journal be read
without decoding it whole. The names callers use are here.
"""

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
