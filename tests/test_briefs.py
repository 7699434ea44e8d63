"""Brief files: parsing, and lint that reports every problem with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.core.briefs import check_brief, lint_folder, parse_brief
from assay.errors import BriefInvalid
from tests.conftest import Forge, assay

GOOD = """---
title: Fix the login redirect
desk: builder
priority: 2
depends_on: [setup-ci]
labels: [code, web]
verify:
  - id: unit
    run: pytest -q tests/test_login.py
  - id: lint
    run: ruff check .
    expect_exit: 0
    timeout_s: 120
---
After login, users land on /home instead of the page they asked for.
"""


def test_a_good_brief_parses_fully() -> None:
    brief = parse_brief(GOOD, "briefs/fix-login.md", "fix-login")
    assert (brief.title, brief.desk, brief.priority) == ("Fix the login redirect", "builder", 2)
    assert brief.depends_on == ("setup-ci",) and brief.labels == ("code", "web")
    assert [(v.id, v.run, v.timeout_s) for v in brief.verify] == [
        ("unit", "pytest -q tests/test_login.py", 600), ("lint", "ruff check .", 120)]
    assert brief.body.startswith("After login")


BAD = """---
title: ""
priority: high
depends_on: fix-login
labels: [Bad Label]
colour: blue
verify:
  - id: unit
    run: true
  - id: unit
    run: "make test"
  - run: "x"
    expect_exit: 300
---
body
"""


def test_lint_reports_every_problem_with_its_line() -> None:
    _, problems = check_brief(BAD, "briefs/x.md", "x")
    found = {(p.line, p.message.split(" ")[0]) for p in problems}
    lines = sorted(p.line or 0 for p in problems)
    assert lines == [2, 3, 4, 5, 6, 9, 10, 12, 13], [str(p) for p in problems]
    assert any("unknown brief key 'colour'" in p.message for p in problems)
    assert any("YAML reads 'true' as a bool" in p.message and 'quote it' in p.hint for p in problems)
    assert any("used twice" in p.message for p in problems)
    assert any("needs `id:`" in p.message for p in problems)
    assert found


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("no front matter\n", 1, "must start with a '---' line"),
    ("---\ntitle: x\n", 1, "never closed"),
    ("---\ntitle: [x\n---\n", 2, "not valid YAML"),
    ("---\n- a list\n---\n", 2, "must be a mapping"),
    ("---\npriority: 1\n---\n", 2, "`title:` is required"),
])
def test_structural_problems(text: str, line: int, problem: str) -> None:
    with pytest.raises(BriefInvalid) as info:
        parse_brief(text, "briefs/x.md", "x")
    assert info.value.line == line and problem in info.value.problem
    assert info.value.message.startswith(f"briefs/x.md:{line}:")


def test_the_file_name_must_be_a_valid_id() -> None:
    _, problems = check_brief("---\ntitle: x\n---\n", "briefs/Bad..Name.md", "Bad..Name")
    assert problems and "invalid brief id" in problems[0].message


def test_folder_lint_finds_unknown_dependencies_and_cycles(tmp_path: Path) -> None:
    folder = tmp_path / "briefs"
    folder.mkdir()
    (folder / "a.md").write_text("---\ntitle: A\ndepends_on: [b]\n---\n")
    (folder / "b.md").write_text("---\ntitle: B\ndepends_on: [a, ghost]\n---\n")
    (folder / "README.md").write_text("not a brief")
    briefs, problems = lint_folder(folder)
    assert sorted(b.id for b in briefs) == ["a", "b"]
    text = " | ".join(str(p) for p in problems)
    assert "'ghost', which is not a brief here" in text and "dependency cycle: a -> b -> a" in text


def test_brief_lint_cli_prints_file_and_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "briefs").mkdir()
    (tmp_path / "briefs" / "x.md").write_text(BAD)
    (tmp_path / "briefs" / "ok.md").write_text(GOOD.replace("[setup-ci]", "[]"))
    (tmp_path / "briefs" / "y.md").write_text(GOOD.replace("[setup-ci]", "[ghost]"))  # reads; names no brief
    run = assay("brief", "lint", cwd=tmp_path)
    assert run.code == 2
    assert "briefs/x.md:6: unknown brief key 'colour'" in run.out and "Traceback" not in run.err
    found = run.out.count("\n") - 1
    assert run.out.splitlines()[-1] == f"{found} problems in 2 of 3 briefs"
    data = assay("brief", "lint", "--json", cwd=tmp_path)
    view = data.json()
    assert data.code == 2 and isinstance(view, dict) and view["checked"] == 3
    assert view["with_problems"] == ["briefs/x.md", "briefs/y.md"] and len(view["problems"]) == found
    assert {"path": "briefs/y.md", "line": None, "message": "depends on 'ghost', which is not a brief here",
            "hint": "add briefs/ghost.md or remove it from depends_on"} in view["problems"]
    (tmp_path / "briefs" / "x.md").unlink()
    one = assay("brief", "lint", cwd=tmp_path)  # a brief that reads is still one brief: counted once
    assert one.code == 2 and one.out.splitlines()[-1] == "1 problem in briefs/y.md; 1 other brief ok"
    (tmp_path / "briefs" / "y.md").unlink()
    ok = assay("brief", "lint", cwd=tmp_path)
    assert ok.code == 0 and ok.out == "1 brief ok\n"


def test_briefs_parsed_once_are_read_back_alike_and_a_damaged_cache_is_only_a_miss(forge: Forge) -> None:
    from assay.core.briefs import _SEEN, PARSED, briefs_on_main
    from assay.core.git import ForgeGit

    forge.add_brief("bad", "---\ntitle: [x\n---\n")
    forge.add_brief("deps", "---\ntitle: Deps\ndepends_on: [alpha]\nlabels: [web]\nverify:\n"
                            "  - id: t\n    run: \"true\"\n---\nBody.\n")
    port = ForgeGit(forge.url)
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    cold = briefs_on_main(port, main)
    parsed = Path(port.cache) / PARSED
    assert parsed.exists()
    kept = parsed.read_text()
    parsed.unlink()  # an unchanged main, in the same process: what it parsed last, no file read or written
    assert briefs_on_main(port, main) == cold and not parsed.exists()
    parsed.write_text(kept)
    _SEEN.clear()  # as a new process: from the cache's file
    assert briefs_on_main(port, main) == cold  # warm: from the cache, the same briefs and problems
    _SEEN.clear()
    cached = json.loads(parsed.read_text())
    key = next(k for k in cached if k.endswith(":deps.md"))
    cached[key]["brief"]["title"] = "read from the cache"
    parsed.write_text(json.dumps(cached))
    assert next(b.title for b in briefs_on_main(port, main)[0] if b.id == "deps") == "read from the cache"
    parsed.write_text('{"junk": 1, "' + next(iter(json.loads(parsed.read_text()))) + '": {"brief": {"id": 3}}}')
    _SEEN.clear()
    assert briefs_on_main(port, main) == cold
    parsed.write_text("not json")
    _SEEN.clear()
    assert briefs_on_main(port, main) == cold
    forge.add_brief("deps", "---\ntitle: Deps, renamed\n---\n")
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    assert next(b.title for b in briefs_on_main(port, main)[0] if b.id == "deps") == "Deps, renamed"
    port.close()


def test_a_briefs_tool_rules_are_checked_with_their_line() -> None:
    text = "---\ntitle: T\ntools:\n  - {kind: execute, match: \"pytest*\", policy: safe}\n---\nbody\n"
    brief, problems = check_brief(text, "briefs/t.md", "t")
    assert not problems and brief is not None and brief.tools == (("execute", "pytest*", "safe"),)
    _, problems = check_brief(text.replace("policy: safe", "policy: maybe"), "briefs/t.md", "t")
    assert problems and problems[0].line == 4 and "`tools` entry" in problems[0].message, problems
