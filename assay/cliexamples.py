"""An example (or three) for every command's help, as gh and sqlite-utils show them; tests/test_cli_help.py
fails if a command lacks one."""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("assay init --local-forge ../forge.git    # start: a forge on disk", "assay briefs    # what there is to do",
         "assay board build -o site    # the fleet at a glance"),
    "audit": ("assay audit fix-login", "assay audit --all --json > audit.json"),
    "board": ("assay board build -o site && assay board serve -d site",),
    "board build": ("assay board build -o site", "assay board build -o site --json    # what it cost"),
    "board serve": ("assay board serve -d site --port 8000",),
    "brief": ("assay brief new fix-login --title 'Fix the login redirect'", "assay brief lint"),
    "brief lint": ("assay brief lint", "assay brief lint path/to/briefs"),
    "brief new": ("assay brief new fix-login --title 'Fix the login redirect' --priority 1",),
    "briefs": ("assay briefs", "assay briefs --state ready --limit 20", "assay briefs --json | jq '.briefs[].brief'"),
    "claim": ("assay claim take fix-login --desk builder", "assay claim history fix-login"),
    "claim history": ("assay claim history fix-login", "assay claim history fix-login --json"),
    "claim take": ("assay claim take fix-login --desk builder",
                   "assay claim take fix-login --desk builder --lease 900"),
    "claims": ("assay claims --state held", "assay claims --desk builder --limit 10",
               "assay claims --json | jq '.claims[] | select(.liveness == \"overdue\")'"),
    "completion": ("assay completion bash > ~/.assay-complete.bash    # then in ~/.bashrc: . ~/.assay-complete.bash",
                   "assay completion fish > ~/.config/fish/completions/assay.fish"),
    "demo": ("assay demo", "assay demo --crash-at step.after-intent && assay demo    # crash, then recover"),
    "desk": ("assay desk list", "assay desk run claude --once"),
    "desk list": ("assay desk list", "assay desk list --json"),
    "desk run": ("assay desk run claude", "assay desk run scripted --once --max-briefs 1"),
    "init": ("assay init --local-forge ../forge.git", "assay init --github --assay-from OWNER/REPO@COMMIT"),
    "journal": ("assay journal fix-login", "assay journal fix-login --json | jq '.entries[-1]'"),
    "release": ("assay release fix-login --desk builder", "assay release fix-login --force --reason 'desk stopped'"),
    "renew": ("assay renew fix-login --desk builder",),
    "retire": ("assay retire --older-than 7d --dry-run", "assay retire fix-login"),
    "review": ("assay review list", "assay review merge fix-login"),
    "review approve": ("assay review approve fix-login",),
    "review close": ("assay review close fix-login --reason 'superseded by fix-auth'",),
    "review comment": ("assay review comment fix-login 'name the helper for what it checks'",),
    "review list": ("assay review list", "assay review list --json"),
    "review merge": ("assay review merge fix-login",),
    "review show": ("assay review show fix-login",),
    "steer": ("assay steer fix-login 'keep the old endpoint working until v3'",),
    "step": ("assay step run --name deploy --policy unsafe -- ./deploy.sh",
             "assay step settle deploy --brief fix-login --did-not"),
    "step run": ("assay step run --name build -- make build",
                 "assay step run --name deploy --policy unsafe --probe './is-deployed.sh' -- ./deploy.sh"),
    "step settle": ("assay step settle deploy --brief fix-login --happened",
                    "assay step settle deploy --brief fix-login -- ./is-deployed.sh    # inspect: exit 0/1 decides"),
    "step value": ("assay step value now", "assay step value random --bytes 8"),
    "sweep": ("assay sweep", "assay sweep --dry-run --json"),
    "verify": ("assay verify briefs/fix-login.md",),
    "wait": ("assay wait fix-login --on review", "assay wait fix-login --on time:2027-01-01T09:00:00Z"),
    "wake": ("assay wake fix-login",),
}


def epilog(path: str) -> str:
    """The examples of the command at `path` (`""` for the top), as click prints them unwrapped."""
    return "\b\nExamples:\n" + "\n".join(f"  $ {line}" for line in EXAMPLES[path])
