"""An example (or three) for every command's help, as gh and sqlite-utils show them (tests/test_cli_help.py
fails if a command lacks one), and the words Assay uses, in the top-level help and the README's table."""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("assay init --local-forge ../forge.git    # start: a forge on disk", "assay briefs    # what there is to do",
         "assay board build -o site    # the fleet at a glance"),
    "report": ("assay report", "assay report --desk alpha --json | jq .briefs"),
    "audit": ("assay audit fix-login", "assay audit --all --json > audit.json"),
    "board": ("assay board build -o site && assay board serve -d site",),
    "board build": ("assay board build -o site", "assay board build -o site --json    # what it cost"),
    "board serve": ("assay board serve -d site --port 8000",),
    "brief": ("assay brief new fix-login --title 'Fix the login redirect'", "assay brief lint"),
    "brief lint": ("assay brief lint", "assay brief lint path/to/briefs"),
    "brief show": ("assay brief show fix-login", "assay brief show fix-login --json | jq .behind"),
    "brief new": ("assay brief new fix-login --title 'Fix the login redirect' --priority 1",),
    "briefs": ("assay briefs", "assay briefs --state ready --limit 20", "assay briefs --json | jq '.briefs[].brief'"),
    "claim": ("assay claim take fix-login --desk builder", "assay claim history fix-login"),
    "claim history": ("assay claim history fix-login", "assay claim history fix-login --json"),
    "claim take": ("assay claim take fix-login --desk builder",
                   "assay claim take fix-login --desk builder --lease 900"),
    "claims": ("assay claims --state held", "assay claims --desk builder --limit 10",
               "assay claims --json | jq '.claims[] | select(.liveness == \"overdue\")'"),
    "help": ("assay help exit-codes", "assay help claim history    # as assay claim history --help"),
    "completion": ("assay completion bash > ~/.assay-complete.bash    # then in ~/.bashrc: . ~/.assay-complete.bash",
                   "assay completion fish > ~/.config/fish/completions/assay.fish"),
    "demo": ("assay demo", "assay demo --crash-at step.after-intent && assay demo    # crash, then recover"),
    "desk": ("assay desk list", "assay desk run claude --once"),
    "desk list": ("assay desk list", "assay desk list --json"),
    "desk run": ("assay desk run claude", "assay desk run scripted --once --max-briefs 1",
                 "assay desk run claude --once --singleton", "assay desk run claude codex --count 10",
                 "assay desk run claude --count 20 --push-window 10", "assay desk run claude --count 20 --threads"),
    "init": ("assay init --local-forge ../forge.git", "assay init --github --assay-from OWNER/REPO@COMMIT"),
    "land": ("assay land    # every ready review, one at a time", "assay land fix-login fix-auth --json"),
    "journal": ("assay journal fix-login", "assay journal fix-login --json | jq '.entries[-1]'"),
    "release": ("assay release fix-login --desk builder", "assay release fix-login --force --reason 'desk stopped'"),
    "renew": ("assay renew fix-login --desk builder",),
    "retire": ("assay retire --older-than 7d --dry-run", "assay retire fix-login"),
    "review": ("assay review list", "assay review merge fix-login"),
    "review approve": ("assay review approve fix-login",),
    "review close": ("assay review close fix-login --reason 'superseded by fix-auth'",),
    "review comment": ("assay review comment fix-login 'name the helper for what it checks'",),
    "review note": ("assay review note fix-login 'this drops the session cookie' --on src/login.py:42",
                    "assay review note fix-login 'still dropped on logout' --reply 3"),
    "review list": ("assay review list", "assay review list --json"),
    "review merge": ("assay review merge fix-login",),
    "review show": ("assay review show fix-login", "assay review show fix-login --json | jq .files"),
    "review diff": ("assay review diff fix-login", "assay review diff fix-login > fix-login.patch"),
    "steer": ("assay steer fix-login 'keep the old endpoint working until v3'",),
    "step": ("assay step run --name deploy --policy unsafe -- ./deploy.sh",
             "assay step settle deploy --brief fix-login --did-not"),
    "step run": ("assay step run --name build -- make build",
                 "assay step run --name deploy --policy unsafe --probe './is-deployed.sh' -- ./deploy.sh"),
    "brief spawn": ("assay step run --name spawn-tests -- assay brief spawn 'Add tests for the cache'",
                    "assay brief spawn 'Split the parser' --parent refactor --label code"),
    "brief fork": ("assay brief fork try-redis --from add-cache",
                   "assay brief fork try-redis --from add-cache --at 42"),
    "step progress": ("assay step progress 'migrated 40 of 120 tables'",),
    "step answer": ("assay step answer 3 --fixed 'the cookie is kept across the redirect'",
                    "assay step answer 5 --reason 'logout clears it on purpose (RFC 6265 section 3)'"),
    "step settle": ("assay step settle deploy --brief fix-login --happened",
                    "assay step settle deploy --brief fix-login -- ./is-deployed.sh    # inspect: exit 0/1 decides"),
    "step value": ("assay step value now", "assay step value random --bytes 8"),
    "step turn": ("assay step turn Stop    # from a CLI hook, inside an agent's run",),
    "sweep": ("assay sweep", "assay sweep --dry-run --json"),
    "verify": ("assay verify briefs/fix-login.md",),
    "wait": ("assay wait fix-login --on review", "assay wait fix-login --on time:2027-01-01T09:00:00Z"),
    "wake": ("assay wake fix-login",),
    "mcp": ("assay mcp",),
    "event": ('assay event pull_request_review "$GITHUB_EVENT_PATH"', "assay event schedule --json"),
}


GLOSSARY: tuple[tuple[str, str], ...] = (
    ('brief',
     'A unit of work: `briefs/<id>.md` on `main`, YAML front matter (title, priority, dependencies, '
     "labels, verify rows) over a Markdown body that becomes the agent's prompt."),
    ('desk',
     'A worker: `assay desk run NAME`, defined by `desks/<name>.yaml` on `main`. It claims ready briefs '
     'and runs an agent CLI on each.'),
    ('claim',
     'Who holds a brief: a commit chain at `refs/assay/claims/<brief>`, moved only by compare-and-swap '
     'pushes, so of any number of racing desks exactly one wins.'),
    ('epoch',
     "The claim's custody number. It rises by one each time the brief changes hands. A desk whose epoch is "
     "no longer the claim's is *fenced*: its writes fail (exit 3)."),
    ('lease',
     'How long (`lease_s`) a held claim may stand still. Each renewal is a new commit; a sweep expires a '
     'claim whose tip stood still for its lease plus a grace.'),
    ('round',
     'The work toward one review marked ready (agent attempts, pushes, verify runs), across any crash or '
     'takeover. Releasing a blocked brief starts a new round.'),
    ('waiting',
     'A claim parked on a condition (`review`, `merge`, `manual`, `time:…`); no process runs. It is '
     'settled when the forge shows the condition met, or by `assay wake`.'),
    ('blocked',
     'A claim that needs a person (attempts failed, the review was closed, a replay did not match). It '
     'stays until a person releases it.'),
    ('outcome unknown',
     'An unsafe step journaled as begun, never as ended: its process died. Assay never repeats it on its '
     'own.'),
    ('retire',
     "Fold a done brief's refs into the index `refs/assay/retired`, so pushes stay fast. Its history stays "
     'readable; it is never claimed again.'),
)


def glossary_table() -> str:
    """The README's table of words."""
    return "\n".join(["| word | meaning |", "|---|---|", *(f"| {w} | {m} |" for w, m in GLOSSARY)])


def epilog(path: str) -> str:
    """The examples of the command at `path` (`""` for the top), as click prints them unwrapped."""
    return "\b\nExamples:\n" + "\n".join(f"  $ {line}" for line in EXAMPLES[path])
