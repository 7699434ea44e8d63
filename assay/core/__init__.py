"""The state core: the records on the forge and the one writer of each.

Claims, journals, the retired index, the sweepers' observations and work branches are git refs, each
written through `chain.py`'s compare-and-swap push; pull requests are written through the forge ports
(`forge/`). Everything else in Assay reads through these modules, and writes only by calling them.
"""
