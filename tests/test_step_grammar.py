"""The agent's fast path (`desk/stepclient.py`, before click is imported) reads each command as the full command
line does: for every form it takes, click's own parse of the same words (`cli.py`'s declaration) gives the same
values, and each word it does not take goes to click, which says what is wrong. With `lean.py` checked the same
way (tests/test_lean.py), every fast parser answers to the one declaration in `cli.py`."""

from __future__ import annotations

import json
from typing import Any

import click
import pytest

from assay.cli import cli
from assay.desk import stepclient

ALL_FORMS = ("run", "settle", "turn", "answer", "progress", "value")


def command(path: str) -> click.Command:
    found: click.Command = cli
    for word in path.split():
        assert isinstance(found, click.Group)
        found = found.commands[word]
    return found


def click_params(path: str, args: list[str]) -> dict[str, Any]:
    """What click makes of `args` for the command `path` (context options from the environment left out)."""
    top = click.Context(cli, **cli.context_settings)
    return dict(command(path).make_context(path.split()[-1], list(args), parent=top).params)


# (the command, its words, what the fast path asks the desk)
TAKEN = [
    ("step run", ["--name", "deploy", "--", "sh", "-c", "exit 3"],
     {"name": "deploy", "policy": "unsafe", "input_json": None, "fresh": False, "probe": None,
      "command": ("sh", "-c", "exit 3")}),
    ("step run", ["--name=lint", "--policy", "safe", "--fresh", "make", "lint", "--fast"],
     {"name": "lint", "policy": "safe", "input_json": None, "fresh": True, "probe": None,
      "command": ("make", "lint", "--fast")}),
    ("step run", ["--policy=idempotent", "--input", '{"v": 1}', "--probe", "test -f x", "--name", "d", "--", "true"],
     {"name": "d", "policy": "idempotent", "input_json": '{"v": 1}', "fresh": False, "probe": "test -f x",
      "command": ("true",)}),
    ("step settle", ["deploy", "--happened"], {"name": "deploy", "verdict": "happened", "command": ()}),
    ("step settle", ["deploy", "--did-not", "--evidence", "no pods", "--input", "{}"],
     {"name": "deploy", "verdict": "did-not", "evidence": "no pods", "input_json": "{}", "command": ()}),
    ("step settle", ["deploy", "--", "kubectl", "get", "pods"],
     {"name": "deploy", "verdict": None, "command": ("kubectl", "get", "pods")}),
    ("step answer", ["t1", "--fixed", "renamed it"], {"thread": "t1", "fixed": "renamed it", "reason": None}),
    ("step answer", ["t2", "--reason=as designed"], {"thread": "t2", "fixed": None, "reason": "as designed"}),
    ("step progress", ["3", "of", "5"], {"text": ("3", "of", "5")}),
    ("step turn", ["Stop"], {"event": "Stop"}),
    ("step turn", [], {"event": None}),
    ("step value", ["uuid"], {"kind": "uuid", "n_bytes": 16}),
    ("step value", ["random", "--bytes", "32"], {"kind": "random", "n_bytes": 32}),
    ("step value", ["random", "--bytes=8"], {"kind": "random", "n_bytes": 8}),
]


def fast(path: str, args: list[str]) -> dict[str, Any] | None:
    parse = {"run": stepclient._parse_run, "settle": stepclient._parse_settle, "answer": stepclient._parse_answer,
             "progress": stepclient._parse_progress, "turn": stepclient._parse_turn,
             "value": stepclient._parse_value}[path.split()[-1]]
    return parse(list(args))


def as_click(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """The fast path's request in the names click's parameters have."""
    form = path.split()[-1]
    if form == "run":
        given = json.loads(request["input"]) if request["input"] else None
        explicit = None if given == {"argv": request["argv"]} else request["input"]  # the command stands for it
        return {"name": request["name"], "policy": request["policy"], "input_json": explicit, "fresh": request["fresh"],
                "probe": request["probe"], "command": tuple(request["argv"])}
    if form == "settle":
        out = {"name": request["name"], "verdict": request["verdict"], "command": tuple(request["argv"])}
        if request.get("input") is not None:
            out["input_json"] = request["input"]
        if request["evidence"]:
            out["evidence"] = request["evidence"]["said"]
        return out
    if form == "answer":
        return {"thread": request["thread"], "fixed": request.get("fixed"), "reason": request.get("reason")}
    if form == "progress":
        return {"text": tuple(request["text"].split(" "))}
    if form == "turn":
        return {"event": None if request["event"] == "turn" else request["event"]}
    return {"kind": request["kind"], "n_bytes": request["bytes"]}


@pytest.mark.parametrize(("path", "args", "expected"), TAKEN, ids=[f"{p}:{' '.join(a)}" for p, a, _ in TAKEN])
def test_the_fast_path_reads_a_step_command_as_click_does(path: str, args: list[str], expected: dict[str, Any]) -> None:
    request = fast(path, args)
    assert request is not None, (path, args)
    ours = as_click(path, request)
    theirs = {k: v for k, v in click_params(path, args).items() if k in ours}
    assert ours == theirs == {k: expected.get(k) for k in ours}


# words the fast path leaves to click: each is wrong, or a form it does not take (click then says what is wrong)
LEFT = [
    ("step run", ["--name", "d", "--brief", "b", "--", "true"]), ("step run", ["--help"]),
    ("step run", ["--name", "d", "--bogus", "true"]),
    ("step settle", ["deploy"]), ("step settle", ["--happened"]), ("step settle", ["deploy", "--json"]),
    ("step answer", ["t1", "--json"]), ("step answer", ["--fixed", "x"]), ("step progress", ["--help"]),
    ("step turn", ["--help"]), ("step value", ["soon"]), ("step value", ["random", "--bytes", "0"]),
    ("step value", ["random", "--bytes", "5000"]), ("step value", ["now", "--json"]),
]


@pytest.mark.parametrize(("path", "args"), LEFT, ids=[f"{p}:{' '.join(a)}" for p, a in LEFT])
def test_what_the_fast_path_does_not_take_goes_to_click(path: str, args: list[str]) -> None:
    assert fast(path, args) is None


def test_every_form_the_fast_path_takes_is_checked_and_declared() -> None:
    checked = {p.split()[-1] for p, _, _ in TAKEN}
    assert checked == set(ALL_FORMS)
    for form in ALL_FORMS:
        assert form in command("step").commands  # type: ignore[attr-defined]
