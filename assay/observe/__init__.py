"""Observers of the whole forge: the sweep (liveness from forge evidence), the board and the audit. They read
everything and write only through `assay.core`."""
