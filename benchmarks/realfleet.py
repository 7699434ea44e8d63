"""Real desks over HTTP: `assay desk run` processes, in hosts of K desks under their supervisors, working briefs on
one forge behind `git http-backend` on loopback. What the forge answers them, and what they cost their machine.

    python benchmarks/realfleet.py [--desks 100,500,1000] [--per-host 20] [--push-window 2] [--brief-min 30]
                                   [--minutes 6] [--ramp-s 60] [--threads] [--acct] [--upkeep-every 100] [--keep DIR]

For each fleet size N: a forge made by `assay init` holding a desk preset `bench` and briefs enough for the run;
N / K supervisors (`assay desk run bench --count K --push-window W`), each a host of its own (its own state and
cache folders, so its own push group), started one after another over the ramp (`--threads`: each host's desks are
threads of its supervisor, `--count K --threads`). Every desk is a real desk: it
claims, journals, runs its agent in its isolation, pushes its work, runs the verify row and marks its review
ready, as it would on GitHub's side of the network. The agent is a shell script (an agent's own cost is not
Assay's): it sleeps, runs two safe steps and an unsafe one through `assay step run`, sleeps again and writes a
file of its own. A brief lasts BRIEF_MIN minutes; the first brief of each desk a random part of that, so the
fleet's briefs end and begin at a steady rate from the start, as a fleet's that has run for a while. Nobody merges
the reviews. The forge keeps its repository as forges keep theirs: `git maintenance run` (loose objects, refs and
packs combined, the commit graph written) after every 100 pushes (`--upkeep-every`; 0 leaves it to `gc --auto`,
which waits for 6,700 loose objects or 50 packs, each push's connectivity check slower meanwhile).

Measured after the ramp and a settling minute, for MINUTES: every `git` process a desk starts, timed by a `git`
first on PATH (bash, `$EPOCHREALTIME`; the CPU it used, with what it started, from bash's `times`), by command;
every push a desk makes (from its own process, or through `git push` where it must), timed around
`Pushing._push_direct` by a `sitecustomize` on the desks' PYTHONPATH, with what was refused; pushes a busy
desk-minute, p50/p95, by what they wrote and by 10-s span, and the forge's time for each; how many desks'
journals a landed push carried;
what git said of each refused claim creation, and for which briefs; ref listings a busy desk-minute as the forge
answered them (a desk lists from its own process: no `git` is started for them); the briefs made ready against
those the brief length promises; the machine's CPU (the forge's share: the backend's CGI processes and its
server), and the memory (PSS) of the desks' processes by kind. A fleet starting all at once takes minutes to
absorb its first claims: give it a ramp of about a minute per 100 desks to measure it working. The agent is
silent while it sleeps: the preset gives it an hour before it is ended as idle. With `--acct` (root, and Debian's
`acct` for `accton`), the kernel's process accounting is on for the measured minutes: the CPU of every process
that ended meanwhile, by its command's name (short-lived ones too, which no reading of /proc sees).

The floor: one raw `git push` of a new commit to a small repository behind the same backend (median of 9).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import compiled  # noqa: E402
from benchmarks.fleet import Backend, git  # noqa: E402

DESK = """name: bench
takes:
  labels: [bench]
agent:
  command: [sh, -c, {script}]
  prompt: env
  idle_s: 3600
lease_s: 1200
heartbeat_s: 300
attempts: 3
env_allow: [PATH, HOME, LANG, LC_ALL, TZ]
"""
AGENT = ('set -- $(sed -n "s/^Sleep: //p" "$ASSAY_PROMPT_FILE"); sleep "$1"; '
         '"$ASSAY_BIN" step run --name lint --policy safe -- true && '
         '"$ASSAY_BIN" step run --name test --policy safe -- true && '
         '"$ASSAY_BIN" step run --name deploy --policy unsafe -- true && sleep "$2" && echo done > "$3"')
BRIEF = """---
title: B{i}
priority: {priority}
labels: [bench]
verify:
  - id: check
    run: "test -f b{i}.txt"
---
Sleep: {first:.0f} {second:.0f} b{i}.txt
"""
SHIM = """#!/bin/bash
start=$EPOCHREALTIME
used="{times}/$$"  # the CPU git and what it started used (bash's `times`: no process of its own to read it)
if [[ " $* " == *" push "* ]]; then  # what git said of a refused push, and which desk of which host pushed
  said="{log}.$$"
  "{real}" "$@" >"$said.out" 2>"$said"
  code=$? end=$EPOCHREALTIME  # git's own time: not the handing on of its answer below
  times >"$used"
  cat "$said.out"
  cat "$said" >&2
  [ $code -ne 0 ] && echo "$start ${{ASSAY_DESK_SLOT:-?}} ${{ASSAY_STATE_DIR##*/hosts/}} $(cat "$said.out" "$said" | \
    tr '\\n\\t' '  ')" >> "{log}.said"
  rm -f "$said" "$said.out"
else
  "{real}" "$@"
  code=$? end=$EPOCHREALTIME
  times >"$used"
fi
{{ read -r _; read -r user system; }} <"$used"
echo "$start $end $code $user/$system $*" >> "{log}"
exit $code
"""
_CPU = re.compile(r"(\d+)m([\d.]+)s")


def cpu_of(field: str) -> float:
    """Seconds of CPU from the shim's `user/system` (bash's `times`: `0m0.012s/0m0.004s`)."""
    return sum(int(m) * 60 + float(sec) for m, sec in _CPU.findall(field))
KINDS = {"assay-push": "push", "ls-remote": "listing", "remote-http": "listing", "fetch": "fetch"}  # a call's kind
# by its command (`assay-push`: a desk's push as `TIMED` logs it; a `git push` it made is within one)
TIMED = """import sys
if any(word == "desk" for word in sys.argv):  # a host's supervisor or desk: its pushes timed, as the shim times git
    import os
    import time

    from assay.core.git import push

    _push = push.Pushing._push_direct

    def _write(path, text):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def _timed(self, updates, atomic):
        start, said = time.time(), None
        try:
            out = _push(self, updates, atomic)
            said = next((r for r in out.values() if not r.ok), None)
            return out
        finally:
            code = 0 if said is None and "out" in locals() else 1
            line = ("assay-push " + " ".join(f"--force-with-lease={{u.ref}}:{{u.expected}}" for u in updates) +
                    f" {{self.remote}} " + " ".join(f"{{u.new}}:{{u.ref}}" for u in updates))
            _write({log!r}, f"{{start:.6f}} {{time.time():.6f}} {{code}} 0m0.000s/0m0.000s {{line}}\\n")
            if code:
                why = f"[rejected] ({{said.detail}})" if said is not None else "fatal: no outcome"
                _write({log!r} + ".said", f"{{start:.6f}} {{os.environ.get('ASSAY_DESK_SLOT', '?')}} "
                       f"{{os.environ.get('ASSAY_STATE_DIR', '').split('/hosts/')[-1]}} {{why}}\\n")

    push.Pushing._push_direct = _timed
"""


def make_forge(root: Path, briefs: int, first_wave: int, brief_s: float, rng: random.Random) -> Path:
    """The forge, a bare repository in `root`: `assay init`'s, with the preset and `briefs` briefs on main (the
    first `first_wave` most urgent, each a random part of a brief's length)."""
    forge, seed = root / "forge.git", root / "seed"
    seed.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "assay", "init", "--local-forge", str(forge)], cwd=seed, check=True,
                   capture_output=True)
    for sample in (seed / "briefs").glob("*.md"):
        sample.unlink()
    (seed / "desks" / "bench.yaml").write_text(DESK.format(script='"' + AGENT.replace('"', '\\"') + '"'))
    for i in range(briefs):
        length = rng.uniform(0, brief_s) if i < first_wave else brief_s
        (seed / "briefs" / f"b{i:05d}.md").write_text(
            BRIEF.format(i=i, priority=1 if i < first_wave else 5, first=length / 2, second=length / 2))
    git("add", "-A", cwd=seed)
    git("-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "briefs", cwd=seed)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=seed)
    shutil.rmtree(seed)
    return forge


@dataclass
class Host:
    proc: subprocess.Popen[str]
    ready: list[float] = field(default_factory=list)  # when each "review ready" line came
    errors: list[str] = field(default_factory=list)

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if "review ready" in line:
                self.ready.append(time.time())
            elif re.search(r"error|Traceback|cannot", line, re.I):
                self.errors.append(line.strip())


def cpu_now() -> tuple[float, float]:
    """(seconds the machine's cores were busy in all, seconds this process and its reaped children used)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy, own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def front_now() -> float:
    """Seconds this process used (the forge's front end, one interpreter serving every request, spawning the
    backend for each; and the benchmark's own reading of the log)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def pressure_now() -> dict[str, float]:
    """The kernel's pressure stall counters (seconds), where it keeps them: how long some task, and every task
    (`full`), waited for a core (`cpu`) or for the disk (`io`)."""
    found: dict[str, float] = {}
    for what in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{what}") as counters:
                for line in counters:
                    kind, *fields = line.split()
                    total = dict(f.split("=") for f in fields).get("total")
                    if total is not None:
                        found[f"{what} {kind}"] = int(total) / 1e6
        except OSError:
            continue
    return found


def descendants(pids: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def process_kind(pid: int) -> str | None:
    """What process `pid` is to the fleet (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    line = " ".join(argv)
    return ("supervisor" if "--count" in line else "desk" if line.startswith("assay desk run") else
            "isolation" if "nsinit.py" in line or argv[0].endswith("unshare") else
            "git" if "git" in os.path.basename(argv[0]) else "agent")


def memory(pids: list[int]) -> dict[str, tuple[int, float]]:
    """Per kind of process: (how many, their PSS in MB)."""
    kinds: dict[str, tuple[int, float]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss = next(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024
        except (OSError, StopIteration, ValueError):
            continue
        if (kind := process_kind(pid)) is None:
            continue
        count, total = kinds.get(kind, (0, 0.0))
        kinds[kind] = (count + 1, total + pss)
    return kinds


def cpu_times(pids: list[int]) -> dict[tuple[int, int], tuple[str, float, float]]:
    """Per process (its id and its start): (its kind, the CPU seconds it used itself, those of its children it has
    reaped)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[tuple[int, int], tuple[str, float, float]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if (kind := process_kind(pid)) is not None:
            found[(pid, int(fields[19]))] = (kind, (int(fields[11]) + int(fields[12])) / tick,
                                              (int(fields[13]) + int(fields[14])) / tick)
    return found


def cpu_by_kind(before: dict[tuple[int, int], tuple[str, float, float]],
                after: dict[tuple[int, int], tuple[str, float, float]],
                seconds: float) -> dict[str, float]:
    """Cores each kind of process used between two readings (processes there at both), its own and its reaped
    children's (`<kind>'s children`: the git and step processes that came and went)."""
    cores: dict[str, float] = {}
    for pid, (kind, own, reaped) in after.items():
        if pid in before:  # the same process: its id and its start (ids come round again within minutes here)
            cores[kind] = cores.get(kind, 0.0) + (own - before[pid][1]) / seconds
            cores[f"{kind}'s children"] = cores.get(f"{kind}'s children", 0.0) + (reaped - before[pid][2]) / seconds
    return {kind: used for kind, used in cores.items() if used >= 0.005}


def accounted(path: Path) -> list[tuple[str, tuple[int, float]]]:
    """The kernel's accounting file (struct acct_v3, 64 bytes a process): per command name, how many processes
    ended and their CPU seconds, most first."""
    import struct

    def comp(value: int) -> int:  # comp_t: a 13-bit mantissa, a base-8 exponent above it
        return (value & 0x1FFF) << (3 * (value >> 13))

    found: dict[str, tuple[int, float]] = {}
    data = path.read_bytes() if path.exists() else b""
    for at in range(0, len(data) - 63, 64):
        utime, stime = struct.unpack_from("<HH", data, at + 32)
        name = data[at + 48:at + 64].split(b"\0", 1)[0].decode(errors="replace")
        count, cpu = found.get(name, (0, 0.0))
        found[name] = (count + 1, cpu + (comp(utime) + comp(stime)) / 100)  # in AHZ ticks (100 a second)
    return sorted(found.items(), key=lambda kv: -kv[1][1])


def available_mb() -> float:
    with open("/proc/meminfo") as info:
        return next(int(line.split()[1]) for line in info if line.startswith("MemAvailable:")) / 1024


def guard(hosts: list[Host], stop: threading.Event, floor_mb: float = 1024.0) -> None:
    """Kill every host when the machine's available memory falls under `floor_mb` (before the kernel's OOM killer
    picks a process of its own), and say so."""
    while not stop.wait(1.0):
        if available_mb() < floor_mb:
            print(f"  memory: under {floor_mb:.0f} MB available; every host stopped", flush=True)
            for host in hosts:
                if host.proc.poll() is None:
                    os.killpg(host.proc.pid, signal.SIGKILL)
            return


def floor_push(backend: Backend, tmp: Path) -> float:
    """One raw `git push` of a new commit to a small repository behind the backend (median of 9)."""
    repo = Path(backend.root) / "floor.git"
    git("init", "-q", "--bare", str(repo))
    git("--git-dir", str(repo), "config", "http.receivepack", "true")
    url = f"http://127.0.0.1:{backend.server_address[1]}/floor.git"
    work = tmp / "floor-work"
    git("init", "-q", str(work))
    times = []
    for i in range(9):
        (work / "f.txt").write_text(f"floor {i} {random.random()}")
        git("add", "-A", cwd=work)
        git("-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "f", cwd=work)
        started = time.perf_counter()
        git("push", "-q", url, f"HEAD:refs/heads/f{i}", cwd=work)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def command_of(args: str) -> str:
    """The git command of a call's arguments (after its global options)."""
    words = args.split()
    while words and words[0].startswith("-"):
        words = words[2:] if words[0] in ("-c", "-C", "--git-dir", "--work-tree") else words[1:]
    return words[0] if words else "?"


def kind_of(args: str) -> str:
    return next((KINDS[word] for word in args.split() if word in KINDS), "other")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def refusals(path: Path) -> dict[str, tuple[str, str]]:
    """The shim's record of refused pushes: when each began -> (the desk that pushed, as host/slot; git's reason)."""
    out: dict[str, tuple[str, str]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        start, slot, host, text = (line.split(" ", 3) + ["", "", ""])[:4]
        reason = re.search(r"\[(?:remote )?rejected\] \(([^)]*)\)|(fatal: .*|error: RPC .*)", text)
        out[start] = (f"{host.split('/')[0]}/{slot.split('/')[0]}",
                      (reason.group(1) or reason.group(2) or "?")[:60] if reason else "?")
    return out


def named_claim(args: str) -> str:
    found = re.search(r":refs/assay/claims/(\S+)", args)
    return found.group(1) if found else "?"


def races(creations: list[tuple[str, str, str]]) -> str:
    """What the refused claim creations were: git's reasons, how many briefs they were for, and how often one desk
    was refused twice for one brief."""
    reasons: dict[str, int] = {}
    per_brief: dict[str, list[str]] = {}
    for brief, desk, reason in creations:
        reasons[reason] = reasons.get(reason, 0) + 1
        per_brief.setdefault(brief, []).append(desk)
    again = sum(len(desks) - len(set(desks)) for desks in per_brief.values())
    most = max(len(d) for d in per_brief.values())
    return (f"refused claim creations: {len(creations)} for {len(per_brief)} briefs (at most {most} for one; "
            f"{again} by a desk refused for it before); git said: "
            + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))


def _pushes(text: str) -> int:
    """`--upkeep-every`: a number of pushes, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of pushes (0 or more)")
    return int(text)


def run(tmp: Path, n: int, args: argparse.Namespace, floor: float) -> None:
    """Long: one fleet size, from the forge's making to the desks' end, and its report."""
    brief_s = args.brief_min * 60
    rng = random.Random(args.seed + n)
    root = tmp / f"n{n}"
    (root / "http").mkdir(parents=True)
    briefs = int(n * (1 + 1.5 * (args.minutes + 3 + args.ramp_s / 60) / args.brief_min)) + 20
    forge = make_forge(root / "http", briefs, n, brief_s, rng)
    git("--git-dir", str(forge), "config", "http.receivepack", "true")
    backend = Backend(root / "http", upkeep_every=args.upkeep_every)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{backend.server_address[1]}/forge.git"
    shim, log, acct = root / "bin", root / "git.log", root / "pacct"
    shim.mkdir()
    where = f"127.0.0.1:{backend.server_address[1]}"
    times = Path(tempfile.mkdtemp(prefix="realfleet-times-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    (shim / "git").write_text(SHIM.format(real=shutil.which("git"), log=log, times=times))
    (shim / "git").chmod(0o755)
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(TIMED.format(log=str(log)))
    hosts: list[Host] = []
    count = (n + args.per_host - 1) // args.per_host
    started = time.time()
    stop = threading.Event()
    threading.Thread(target=guard, args=(hosts, stop), daemon=True).start()
    lowest = [available_mb()]
    try:
        for h in range(count):
            desks = min(args.per_host, n - h * args.per_host)
            env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(root / "site"),
                   "ASSAY_STATE_DIR": str(root / "hosts" / f"h{h}" / "state"),
                   "ASSAY_CACHE_DIR": str(root / "hosts" / f"h{h}" / "cache")}
            env.pop("ASSAY_PUSH_WINDOW_S", None)
            argv = [sys.executable, "-m", "assay", "desk", "run", "bench", "--forge", url,
                    "--push-window", f"{args.push_window:g}"]
            if desks > 1:
                argv += ["--count", str(desks), *(["--threads"] if args.threads else [])]
            host = Host(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True, start_new_session=True))
            threading.Thread(target=host.read, daemon=True).start()
            hosts.append(host)
            time.sleep(max(0.0, started + (h + 1) * args.ramp_s / count - time.time()))  # the ramp's pace
        settle = started + args.ramp_s + 60
        time.sleep(max(0.0, settle - time.time()))
        if args.acct:
            acct.touch()
            subprocess.run(["accton", str(acct)], check=True, capture_output=True)
        busy0, forge0 = cpu_now()
        front0 = front_now()
        stalls0 = pressure_now()
        times0 = cpu_times(descendants([h.proc.pid for h in hosts]))
        end = time.time() + args.minutes * 60
        while (left := end - time.time()) > 0:  # the measured minutes; the lowest memory available meanwhile
            lowest[0] = min(lowest[0], available_mb())
            time.sleep(min(5.0, left))
        busy1, forge1 = cpu_now()
        front1 = front_now()
        stalls1 = pressure_now()
        if args.acct:
            subprocess.run(["accton", "off"], check=False, capture_output=True)
        by_kind = cpu_by_kind(times0, cpu_times(descendants([h.proc.pid for h in hosts])), args.minutes * 60)
        ended = time.time()
        mem = memory(descendants([h.proc.pid for h in hosts]))
        gone = [h.proc.returncode for h in hosts if h.proc.poll() is not None]
    finally:
        stop.set()
        for host in hosts:
            if host.proc.poll() is None:
                os.killpg(host.proc.pid, signal.SIGKILL)  # the desks die with their supervisor
        for host in hosts:
            host.proc.wait()
        backend.close()  # an upkeep under way ends before the forge's folder may be removed
        shutil.rmtree(times, ignore_errors=True)
    calls = []
    refused: dict[str, int] = {}  # the kinds of ref that refused pushes named (claims, journal, footprints, ...)
    said = refusals(Path(f"{log}.said"))
    creations: list[tuple[str, str, str]] = []  # refused claim creations: (brief, desk, what git said)
    local: dict[str, int] = {}  # every git process the desks started, by its command
    cpu: dict[str, float] = {}  # ... and the CPU seconds it used, with what it started (`git push`'s transport)
    by_refs: dict[str, list[float]] = {}  # landed pushes' times by the kinds of ref they wrote
    carried: list[int] = []  # the journals each landed push wrote: the desks whose pushes it carried
    spans: dict[int, list[float]] = {}  # landed pushes' times by the 10 s of the measured minutes they began in
    garbled = 0  # lines two git processes' appends interleaved (a long push's line is over PIPE_BUF)
    for line in log.read_text(errors="replace").splitlines():
        parts = line.split(" ", 4)
        try:
            [float(part) for part in parts[:3]]
        except ValueError:
            garbled += 1
            continue
        if len(parts) == 5 and settle <= float(parts[0]) < ended:
            used = parts.pop(3)
            command = command_of(parts[3])
            if command != "assay-push":  # a push a desk made: not a git process
                local[command] = local.get(command, 0) + 1
                cpu[command] = cpu.get(command, 0.0) + cpu_of(used)
            if where not in parts[3]:
                continue
            calls.append((kind_of(parts[3]), float(parts[1]) - float(parts[0]), int(parts[2])))
            named = re.findall(r":refs/(?:assay/|heads/)?([a-z-]+)", parts[3])
            if calls[-1][0] == "push" and calls[-1][2] == 0:  # landed: its time by what it wrote, and when
                group = "+".join(sorted(set(named))) or "?"
                by_refs.setdefault(group, []).append(calls[-1][1])
                carried.append(parts[3].count(":refs/assay/journal/"))
                spans.setdefault(int((float(parts[0]) - settle) // 10), []).append(calls[-1][1])
            if calls[-1][0] == "push" and calls[-1][2] != 0:
                for kind in set(named):
                    refused[kind] = refused.get(kind, 0) + 1
                if set(named) == {"claims"}:  # a claim alone (a race to claim), or several (a host's heartbeat)
                    new = re.search(r"--force-with-lease=refs/assay/claims/\S+:0{40}(?:\s|$)", parts[3])
                    alone = ("claims alone: several" if len(named) > 1 else
                             "claims alone: one, to create" if new else "claims alone: one, to update")
                    refused[alone] = refused.get(alone, 0) + 1
                    if new and parts[0] in said:
                        creations.append((named_claim(parts[3]), *said[parts[0]]))
    desk_min = n * args.minutes
    pushes = [d for k, d, c in calls if k == "push" and c == 0]
    failed = sum(1 for k, _, c in calls if k == "push" and c != 0)
    served = [(k, d) for k, at, d in backend.served if settle <= at < ended]  # the forge's side of each request
    posts = [d for k, d in served if k == "push"]
    listings = [d for k, d in served if k == "listing"]  # from the desks' processes or through git's transport
    adverts = sum(1 for k, _ in served if k == "advertisement")
    fetches = [d for k, d, _ in calls if k == "fetch"]
    ready = sum(1 for h in hosts for t in h.ready if settle <= t < ended)
    machine = (busy1 - busy0) / (ended - settle - 0) / (os.cpu_count() or 1)
    forge_cores = (forge1 - forge0) / (ended - settle)
    print(f"\n{n} real desks in {count} hosts of {args.per_host}{' (threads)' if args.threads else ''}, "
          f"push window {args.push_window:g} s, "
          f"{args.brief_min:g}-minute briefs, {args.minutes:g} minutes measured")
    print(f"  pushes: {len(pushes) / desk_min:.3f} a busy desk-minute ({len(pushes)} landed, {failed} refused); "
          f"p50 {pct(pushes, 0.5) * 1000:.0f} ms, p95 {pct(pushes, 0.95) * 1000:.0f} ms "
          f"({pct(pushes, 0.95) / floor:.1f}x the floor push); the forge's receive-pack answered "
          f"{len(posts)} posts in p50 {pct(posts, 0.5) * 1000:.0f} ms, p95 {pct(posts, 0.95) * 1000:.0f} ms")
    print(f"  journals a landed push wrote: {statistics.mean(carried or [0]):.2f} on average; by count: "
          + ", ".join(f"{k}: {carried.count(k)}" for k in sorted(set(carried))))
    print("  landed pushes by what they wrote (count p50/p95 ms): " + ", ".join(
        f"{k} {len(v)} {pct(v, 0.5) * 1000:.0f}/{pct(v, 0.95) * 1000:.0f}"
        for k, v in sorted(by_refs.items(), key=lambda kv: -len(kv[1]))[:8]))
    print("  push p95 by 10 s span (ms): " + " ".join(f"{pct(spans[k], 0.95) * 1000:.0f}" for k in sorted(spans)))
    print("  refused pushes named: " + (", ".join(f"{k} {v}" for k, v in sorted(refused.items(), key=lambda kv: -kv[1]))
                                         or "nothing"))
    if creations:
        print("  " + races(creations))
    print(f"  ref listings: {len(listings) / desk_min:.3f} a busy desk-minute, answered by the forge in p50 "
          f"{pct(listings, 0.5) * 1000:.0f} ms, p95 {pct(listings, 0.95) * 1000:.0f} ms; ref advertisements "
          f"(a push's, a fetch's, git's transport's) {adverts / desk_min:.3f} a desk-minute; fetches "
          f"{len(fetches) / desk_min:.3f} a desk-minute, p95 {pct(fetches, 0.95) * 1000:.0f} ms")
    asked: dict[str, int] = {}  # listings by the refs they asked for, a brief's name left out
    for at, prefixes in backend.listed:
        if settle <= at < ended:
            shape = re.sub(r"b\d{5}", "<brief>", prefixes)
            asked[shape] = asked.get(shape, 0) + 1
    print("  listings by what they asked for (a desk-minute): " + "; ".join(
        f"{k} {v / desk_min:.3f}" for k, v in sorted(asked.items(), key=lambda kv: -kv[1])[:10]))
    promised = n * args.minutes / args.brief_min
    print(f"  briefs ready: {ready} ({ready / promised:.2f}x the {promised:.0f} the brief length promises)")
    spawned = sum(local.values())
    print(f"  git processes: {spawned / max(ready, 1):.0f} a brief made ready ({spawned / desk_min:.1f} a "
          "desk-minute); by command: " + ", ".join(f"{k} {v / max(ready, 1):.1f}" for k, v in
                                     sorted(local.items(), key=lambda kv: -kv[1])[:12])
          + (f"; {garbled} lines of the git log garbled (appends interleaved), left out" if garbled else ""))
    print(f"  their CPU: {sum(cpu.values()) / (ended - settle):.2f} cores; by command (cores, ms each): " + ", ".join(
        f"{k} {v / (ended - settle):.3f} {v / local[k] * 1000:.0f}" for k, v in
        sorted(cpu.items(), key=lambda kv: -kv[1])[:12]))
    front = (front1 - front0) / (ended - settle)
    print(f"  CPU: the machine {machine * 100:.0f}% busy, the forge {forge_cores:.2f} cores of it (its front end's one "
          f"interpreter {front:.2f}); by kind (cores): "
          + ", ".join(f"{kind} {used:.2f}" for kind, used in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    kept = [took for at, took in backend.upkeeps if settle <= at < ended]
    print(f"  the forge's upkeep (`git maintenance run` after every {args.upkeep_every} pushes): {len(kept)} runs "
          f"while measured, p50 {pct(kept, 0.5) * 1000:.0f} ms" if args.upkeep_every else
          "  the forge's upkeep: none (`gc --auto` alone)")
    stalled = [f"{kind} {(stalls1[kind] - stalls0[kind]) / (ended - settle) * 100:.0f}%" for kind in stalls1
               if kind in stalls0 and kind != "cpu full"]
    if stalled:
        print("  waiting (the share of the measured time some task, or every task, waited): " + ", ".join(stalled))
    if args.acct:
        print("  processes that ended while measured, by command (count, cores): " + ", ".join(
            f"{name} {count} {cpu / (ended - settle):.2f}" for name, (count, cpu) in accounted(acct)[:12]))
    desks_pss = sum(total for kind, (_, total) in mem.items())
    print("  memory (PSS): " + ", ".join(f"{kind} {c} x {total / max(c, 1):.1f} MB" for kind, (c, total) in
                                         sorted(mem.items())) + f"; {desks_pss / n:.1f} MB a desk in all; "
          f"the machine's available memory at its lowest {lowest[0] / 1024:.1f} GB")
    if gone or any(h.errors for h in hosts):
        print(f"  hosts ended early: {gone}; errors: {[e for h in hosts for e in h.errors][:5]}")


def main() -> None:
    compiled()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--desks", default="100,500,1000", help="the fleet sizes to run")
    parser.add_argument("--per-host", type=int, default=20)
    parser.add_argument("--push-window", type=float, default=2.0)
    parser.add_argument("--brief-min", type=float, default=30.0)
    parser.add_argument("--minutes", type=float, default=6.0, help="measured, after the ramp and a minute")
    parser.add_argument("--ramp-s", type=float, default=60.0, help="the hosts start one after another over this")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--upkeep-every", type=_pushes, default=100, metavar="PUSHES",
                        help="the forge's `git maintenance run` after this many pushes, as forges keep their "
                             "repositories (0: never; `gc --auto` alone, after 6,700 loose objects or 50 packs)")
    parser.add_argument("--threads", action="store_true", help="each host's desks are threads of its supervisor")
    parser.add_argument("--acct", action="store_true", help="the CPU of every process that ended while measured, "
                        "by command (process accounting: root, and `accton`)")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR (new) and keep it: each size's forge, git log "
                        "(`n<N>/git.log`: when, how long, which command) and hosts' folders, to read after")
    args = parser.parse_args()
    if args.keep:
        args.keep = str(Path(args.keep).resolve())  # the forge, the shim and the hosts' folders are named by it
        if os.path.lexists(args.keep):
            parser.error(f"--keep {args.keep}: it exists; name a new folder (an earlier run's is never mixed in, "
                         "nor removed)")
        os.makedirs(args.keep)
    with (contextlib.nullcontext(args.keep) if args.keep else
          tempfile.TemporaryDirectory(prefix="assay-bench-realfleet-")) as name:
        tmp = Path(name)
        (tmp / "floor").mkdir()
        backend = Backend(tmp / "floor")
        threading.Thread(target=backend.serve_forever, daemon=True).start()
        floor = floor_push(backend, tmp)
        backend.shutdown()
        print(f"floor: one raw git push over HTTP {floor * 1000:.1f} ms")
        for n in dict.fromkeys(int(x) for x in args.desks.split(",")):  # each size once
            run(tmp, n, args, floor)
            if not args.keep:
                shutil.rmtree(tmp / f"n{n}", ignore_errors=True)


if __name__ == "__main__":
    main()
