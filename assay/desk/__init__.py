"""The desk: its loop (`loop.py`), the step pipeline of one brief (`work.py`), the agent it runs, the step
server and client the agent's journaled steps go through, effects, verify rows and the queue of briefs."""
