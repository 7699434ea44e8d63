"""The records on the forge and how they are kept: `codec` encodes, decodes and validates them (format v1,
docs/data-model.md), `chain` reads and compare-and-swap-writes the refs that carry them, `recordtype` makes their
classes. The names callers use of `codec` are here; `chain` (above git) and `recordtype` (below everything) sit in
rows of their own (`assay.layers`) and are imported by their own names. Each name is loaded from
`codec` as a caller first names it (PEP 562): `recordtype` loads alone.
"""

from assay.core.lazy import names

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from assay.core.records.codec import (
        CLAIMS_PREFIX,
        FORMAT_VERSION,
        JOURNAL_PREFIX,
        LANDING_CLAIM,
        LEARNED_PREFIX,
        LIVE_STATES,
        MAIN_REF,
        NOT_JSON,
        POLICIES,
        REVIEWS_PREFIX,
        STATES,
        TOMBSTONES,
        WIP_PREFIX,
        WORK_BRANCH_PREFIX,
        WORK_BRANCH_REF_PREFIX,
        ClaimRecord,
        JournalEntry,
        ReviewComment,
        ReviewRecord,
        brief_id_problem,
        brief_of_ref,
        check_tip,
        claim_ref,
        condition_problem,
        decode_claim,
        decode_entry,
        decode_review,
        human_age,
        iso_seconds,
        journal_ref,
        load_record,
        parse_iso,
        review_ref,
        utc_now_iso,
        validate_brief_id,
        wip_ref,
    )


__all__ = [
    "CLAIMS_PREFIX", "ClaimRecord", "FORMAT_VERSION", "JOURNAL_PREFIX", "JournalEntry", "LANDING_CLAIM",
    "LEARNED_PREFIX", "LIVE_STATES", "MAIN_REF", "NOT_JSON", "POLICIES", "REVIEWS_PREFIX", "ReviewComment",
    "ReviewRecord", "STATES", "TOMBSTONES", "WIP_PREFIX", "WORK_BRANCH_PREFIX", "WORK_BRANCH_REF_PREFIX",
    "brief_id_problem", "brief_of_ref", "check_tip", "claim_ref", "condition_problem", "decode_claim", "decode_entry",
    "decode_review", "human_age", "iso_seconds", "journal_ref", "load_record", "parse_iso", "review_ref", "utc_now_iso",
    "validate_brief_id", "wip_ref",
]
__getattr__ = names(__name__, dict.fromkeys(__all__, "codec"))
