"""Scripted model servers on loopback for the real agent CLIs (Claude Code, Codex, aider).

Each server speaks one model API (Anthropic Messages over SSE, OpenAI Responses over SSE, OpenAI chat
completions) and asks a `Brain` what the model says next. A brain decides from the conversation it is
sent (the task and the tool results it holds), never from a request counter, so side requests a CLI makes
(titles, summaries) cannot shift it.
"""
