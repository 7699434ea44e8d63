"""The promise suite's harness: a small fleet driven through random faults, judged from evidence outside Assay.

`agent.py` is the fleet's agent (it logs what it was sent, as a scripted model server's request log would, and
looks for the desk's token where an agent can look); `fleet.py` sets up the forge and runs the desks and their
faults; `junk.py` plants junk with plain git; `reader.py` reads refs with plain git only; `judge.py` checks the
invariants; `trial.py` runs one seeded trial. None of them imports `assay` to judge.
"""
