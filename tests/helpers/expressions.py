"""GitHub Actions expressions as GitHub evaluates a job's `if:`: literals, property access, `!`, `==`, `!=`, `&&`,
`||`, parentheses, and `contains`, `startsWith`, `endsWith`, `fromJSON`; strings compare case-insensitively
(docs.github.com, "Evaluate expressions in workflows and actions")."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!(),])"
                   r"|(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*))")


def truthy(value: Any) -> bool:
    """false, 0, '' and null are falsy; every object and array is truthy."""
    return value not in (None, False, 0, "") if not isinstance(value, (dict, list)) else True


def _fold(value: Any) -> Any:
    return "".join(c.upper() for c in value) if isinstance(value, str) else value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return bool(_fold(a) == _fold(b))
    return bool(a == b)


def _starts(a: Any, b: Any) -> bool:
    text, prefix = _text(a), _text(b)
    return len(text) >= len(prefix) and all(x.upper() == y.upper() for x, y in zip(text, prefix, strict=False))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "contains": lambda a, b: any(_same(x, b) for x in a) if isinstance(a, list) else _fold(_text(b)) in _fold(_text(a)),
    "startsWith": _starts,
    "endsWith": lambda a, b: _fold(_text(a)).endswith(_fold(_text(b))),
    "fromJSON": lambda a: json.loads(_text(a)),
}


class _Parser:
    def __init__(self, text: str, contexts: dict[str, Any]) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos, text = 0, text.strip()
        while pos < len(text):
            m = TOKEN.match(text, pos)
            assert m and m.end() > pos, f"an expression this evaluator does not know: {text[pos:]!r}"
            kind = next(k for k, v in m.groupdict().items() if v is not None)
            self.tokens.append((kind, m[kind]))
            pos = m.end()
        self.at, self.contexts = 0, contexts

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        token = self.tokens[self.at]
        assert want is None or token[1] == want, f"expected {want!r}, found {token[1]!r}"
        self.at += 1
        return token

    def either(self) -> Any:
        left = self.both()
        while self.peek() == "||":
            self.take()
            right = self.both()
            left = left if truthy(left) else right
        return left

    def both(self) -> Any:
        left = self.compare()
        while self.peek() == "&&":
            self.take()
            right = self.compare()
            left = right if truthy(left) else left
        return left

    def compare(self) -> Any:
        left = self.unary()
        if self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.unary()
            return _same(left, right) == (op == "==")
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if text == "(":
            inner = self.either()
            self.take(")")
            return inner
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self.peek() == "(":
            assert text in FUNCTIONS, f"a function this evaluator does not know: {text}"
            self.take("(")
            args = [self.either()]
            while self.peek() == ",":
                self.take()
                args.append(self.either())
            self.take(")")
            return FUNCTIONS[text](*args)
        value: Any = self.contexts
        for part in text.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value


def evaluate_expression(text: str, contexts: dict[str, Any]) -> Any:
    """The value of an expression (a job's `if:`, without `${{ }}`) over `contexts` (`github`, `inputs`, ...)."""
    parser = _Parser(text, contexts)
    value = parser.either()
    assert parser.peek() is None, f"left over: {parser.tokens[parser.at:]}"
    return value
