"""Run a training script unchanged, watching every PyTorch DataLoader and DALI iterator it uses.

  ioprobe run [--live] [--json F] [--html F] [--md F] [--trace F] [-o F] -- python train.py ARGS...

The script's stdout, stderr and exit code pass through. At exit the summary of each loader
is printed on stderr; each output flag writes the loader that delivered the most samples to
its file, and any other loaders beside it with .loader2, .loader3, ... before the ending.

--live draws a panel on stderr while the script runs, redrawn every second: samples/s and
the stall over the last seconds, each stage's capacity now and the lowest, and the stall over
the last minute. Only on a terminal; with stderr a file or a pipe, nothing changes.

Ctrl-C stops the script as it would stop it unwatched; SIGTERM, SIGHUP, SIGUSR1, SIGUSR2,
SIGALRM, or SIGINT sent to ioprobe alone from outside a terminal, is passed on to it. What it saved is still reported, marked
incomplete. A second Ctrl-C kills the script and ends ioprobe at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import click
from rich.console import Console
from rich.text import Text

from ioprobe.analysis import finalize_watch
from ioprobe.analysis.catalog import Catalog, try_load_catalog
from ioprobe.analysis.ranks import merge_ranks
from ioprobe.analysis.report import findings
from ioprobe.cli._common import (
    EXTENSIONS,
    attempt,
    command_files,
    output_options,
    plan_outputs,
    show,
    signals_held,
    write_record,
    write_rendered,
)
from ioprobe.collect import leftovers, nvtx, procfs
from ioprobe.errors import BadInputError, IoprobeError
from ioprobe.loaders.run_hook import LIVE_ENV, TRIAL_ENV
from ioprobe.outputs import destination, writes_stdout
from ioprobe.record import RunRecord
from ioprobe.redact import console as text_console
from ioprobe.redact import printable, shown

# the folder each run keeps its hook and the script's records in, under TMPDIR
RUN_PREFIX = "ioprobe-run-"

SITECUSTOMIZE = """\
# Written by `ioprobe run`; removed when the run ends.
# Every Python the script starts runs this (PYTHONPATH), older ones too: Python 2's syntax.
import os as _os
import sys as _sys

try:
    from ioprobe.loaders import run_hook as _run_hook

    def _plan(record, trials):  # ioprobe tune --in-run: judged here, at the edge
        from ioprobe.cli.tune import plan_in_run

        return plan_in_run(record, trials)

    _run_hook.install(_plan)
except Exception as _exc:
    # another interpreter, without ioprobe: it runs unwatched and says so in the records
    # folder, where `ioprobe run` reads it, not on its stderr (a script's child Pythons)
    try:
        _dir = _os.environ.get("IOPROBE_RUN_DIR")
        if _dir:
            with open(_os.path.join(_dir, "unwatched-%d" % _os.getpid()), "w") as _f:
                _f.write("%s: %s" % (_sys.executable, _exc))
    except Exception:
        pass


# chain to the sitecustomize this one shadows, if there is one. Every `ioprobe run` hook is
# passed over, not only this one: under a nested run the outer hook would chain back here.
def _hook(folder):
    try:
        with open(_os.path.join(folder or ".", "sitecustomize.py"), "rb") as f:
            return f.readline().startswith(b"# Written by `ioprobe run`")
    except (IOError, OSError):
        return False


try:
    import importlib.machinery as _m
    import importlib.util as _u

    _spec = _m.PathFinder.find_spec("sitecustomize", [p for p in _sys.path if not _hook(p)])
except Exception:  # Python 2 has neither
    _spec = None
if _spec is not None and _spec.loader is not None:
    # the user's module becomes what `import sitecustomize` gives (the import system takes
    # what sys.modules holds once this code ends): the script's own import of it, and its
    # package's relative imports, find the user's module, not this hook
    _user = _u.module_from_spec(_spec)
    _sys.modules["sitecustomize"] = _user
    _spec.loader.exec_module(_user)
"""


@click.command(help=__doc__, context_settings={"ignore_unknown_options": True})
@output_options
@click.option(
    "--live",
    is_flag=True,
    help="While the script runs, a panel on stderr (a terminal only): samples/s and stall "
    "over the last seconds, each stage's capacity now, the one limiting, the stall over the "
    "last minute.",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    json_path: str | None,
    html_path: str | None,
    md_path: str | None,
    trace_path: str | None,
    outputs: tuple[str, ...],
    live: bool,
    cmd: tuple[str, ...],
) -> None:
    plan = plan_outputs(json_path, html_path, md_path, trace_path, outputs, command_files(cmd))
    _check(plan, cmd)
    before = {p: _stamp(p) for paths in plan.values() for p in paths}
    unhooked = hook_skipped(cmd)
    if unhooked is not None:
        text_console(stderr=True).print(
            f"ioprobe: {shown(os.path.basename(cmd[0]))} {unhooked} keeps ioprobe's hook from "
            "loading (it comes in through PYTHONPATH and the site module): this run is not "
            f"watched; run the script without {unhooked}",
            soft_wrap=True,
        )
    returncode, runs, made = _run_watched(cmd, live)
    plan = _spare_scripts_files(plan, before)
    if returncode > 0:
        # a rank whose peer died, a script that raised: the figures are of what ran before
        for rec in runs:
            rec.notes.append(
                f"the script exited with code {returncode}: what is measured is the part of "
                "the run before it ended"
            )
    with signals_held():  # the script is over: its outputs are written whole
        _report_all(runs, plan, -returncode if returncode < 0 else None, made, unhooked)
    # a death by signal N exits 128+N, as a shell reports it
    sys.exit(128 - returncode if returncode < 0 else returncode)


def _check(plan: dict[str, list[str]], cmd: tuple[str, ...]) -> None:
    """Refuse, before the script starts, outputs to stdout and a command that cannot run."""
    if any(writes_stdout(p) for paths in plan.values() for p in paths):
        raise BadInputError("ioprobe run: stdout is the script's; give the outputs file names")
    _check_command(cmd[0])


# Python's options that keep the hook from loading: -I and -E ignore PYTHONPATH, -S skips
# the site module that imports sitecustomize
HOOK_SKIPPING = "IES"
# its short options whose argument follows (in the same word or the next)
WITH_ARGUMENT = "WX"


def hook_skipped(cmd: tuple[str, ...]) -> str | None:
    """The option (``-I``, ``-E`` or ``-S``) with which ``cmd``, a Python interpreter's
    command line, runs its script without ioprobe's hook; None for any other command."""
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(cmd[0])):
        return None
    args = iter(cmd[1:])
    for arg in args:
        if arg in ("-", "--") or not arg.startswith("-"):
            return None  # the script: what follows is its own
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":
                next(args, None)
            continue
        for n, letter in enumerate(arg[1:], 1):
            if letter in HOOK_SKIPPING:
                return f"-{letter}"
            if letter in "cm":
                return None  # the command or module: what follows is its own
            if letter in WITH_ARGUMENT:
                if n == len(arg) - 1:
                    next(args, None)
                break
    return None


def _check_command(program: str) -> None:
    """``program`` is one the OS will run: a name found on PATH, or (with a slash, which is
    how exec reads it) an executable file."""
    if os.sep not in program:
        if shutil.which(program) is not None:
            return
        if Path(program).exists():  # exec looks a bare name up on PATH only
            raise BadInputError(f"{program}: not on PATH; give it as ./{program}")
        raise BadInputError(f"{program}: command not found")
    path = Path(program)
    if not path.exists():
        raise BadInputError(f"{program}: no such file")
    if path.is_dir():
        raise BadInputError(f"{program}: is a directory, not a command")
    if not os.access(path, os.X_OK):
        raise BadInputError(
            f"{program}: not executable; chmod +x it, or give its interpreter first "
            f"(ioprobe run -- python {program})"
        )


def _run_watched(
    cmd: tuple[str, ...],
    live: bool = False,
    extra_env: dict[str, str] | None = None,
    also: Callable[[Path], None] | None = None,
    got: list[int] | None = None,
) -> tuple[int, list[RunRecord], bool | None]:
    """Run ``cmd`` with the hook on its path: its return code, the judged record of each
    loader it iterated, the one that delivered the most samples first, and whether it made a
    loader at all (None where the script took the records' folder away, said then).
    ``live``: the script's process draws the live panel (it owns stderr while it runs).
    ``extra_env``: more of the script's environment (a trial of ``ioprobe tune``).
    ``also``: called with the records folder before it is removed (``tune --in-run`` reads
    its trials there). ``got``: where every signal ioprobe got while the script ran goes,
    passed on or not (``tune`` stops on one, whatever the script made of it: it may have
    ended already, or caught it and exited 0)."""
    base = _run_base()
    # a run killed with SIGKILL left its folder: the next one removes it
    leftovers.remove_stale(base, RUN_PREFIX)
    tmp = Path(tempfile.mkdtemp(prefix=leftovers.own_prefix(RUN_PREFIX), dir=base))
    try:
        hook = tmp / "hook"
        records = tmp / "records"
        hook.mkdir()
        records.mkdir()
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        try:
            env = {**_child_env(hook, records, live), **(extra_env or {})}
            code = _call_script(cmd, env, got)
        finally:
            if live and _isatty(sys.stderr):
                # a script killed while its panel was up leaves the cursor hidden
                text_console(stderr=True, force_terminal=True).show_cursor(True)
        saved, made = _collected(records)
        runs = _judged(saved, try_load_catalog())
        if also is not None and made is not None:
            also(records)
    finally:
        leftovers.remove_tree(str(tmp))  # never into what the script mounted there
    runs.sort(key=lambda r: -sum(e.samples for e in (r.watch.epochs if r.watch else [])))
    return code, runs, made


# the names the hook saves records under (loaders/run_hook.py): loader-{pid}-{i}.json
_SAVED = re.compile(r"loader-\d+-\d+\.json")


def _saved(folder: Path) -> list[Path]:
    """The records the hook saved in ``folder``: the script shares that folder's path through
    its environment, and anything else it leaves there (a notes.json, a core file) is its
    own, not a record."""
    return sorted(p for p in folder.iterdir() if _SAVED.fullmatch(p.name) and p.is_file())


def _collected(records: Path) -> tuple[list[Path], bool | None]:
    """The records the script saved in ``records`` and whether it made a loader (None where
    what became of the folder was said here already), with a line on stderr where no record
    was saved for a reason the script could not help."""
    made: bool | None
    try:
        saved = _saved(records)
        made = any(p.name.startswith("made-") for p in records.iterdir())
        if not saved:
            _say_unwatched(records)
            if made and _say_empty(records):
                made = None
    except OSError:  # the script removed the folder, or put a file in its place
        text_console(stderr=True).print(
            "ioprobe: the script removed or replaced the folder its records were saved "
            "in ($IOPROBE_RUN_DIR): no record to report",
            soft_wrap=True,
        )
        return [], None
    if made and not saved and _out_of_space(records):
        # the script saved no record because it could not: not a script that never
        # iterated or skipped its exit handlers
        text_console(stderr=True).print(
            f"ioprobe: the script's records could not be saved: {records.parent.parent} "
            "(TMPDIR) has no space left; set TMPDIR to a folder with room and run again",
            soft_wrap=True,
        )
        made = None
    return saved, made


def _run_base() -> str:
    """Where run's folder goes: TMPDIR, unless its path holds PYTHONPATH's separator (":"),
    which would split the hook's folder in two and leave the script unwatched; then the
    first of /tmp and /var/tmp that can hold it."""
    base = tempfile.gettempdir()
    if os.pathsep not in base:
        return base
    for other in ("/tmp", "/var/tmp"):
        if os.pathsep not in other and os.access(other, os.W_OK | os.X_OK):
            return other
    return base


def _say_unwatched(folder: Path) -> None:
    """Where the script saved no record, why a Python it ran was not watched: one that could
    not import ioprobe (another interpreter, a venv without it) leaves a note in ``folder``
    (the hook's), not a line on its own stderr."""
    notes = sorted(folder.glob("unwatched-*"))
    if not notes:
        return
    try:
        why = notes[0].read_text(errors="replace")[:500].strip()
    except OSError:
        return
    text_console(stderr=True).print(
        shown(
            f"ioprobe: a Python the script ran could not import ioprobe and ran unwatched "
            f"({why}); install ioprobe in the interpreter that trains"
        ),
        soft_wrap=True,
    )


def _say_empty(folder: Path) -> bool:
    """Where the script iterated a loader and no batch reached it (the hook's
    ``empty-{pid}-{i}``), say so with the loader's error: True where it was said."""
    notes = sorted(folder.glob("empty-*"))
    if not notes:
        return False
    try:
        error = notes[0].read_text(errors="replace")[:500].strip()
    except OSError:
        return False
    why = f" ({error})" if error else ""
    text_console(stderr=True).print(
        shown(
            f"ioprobe: the script iterated a loader but no batch reached it{why}: nothing to report"
        ),
        soft_wrap=True,
    )
    return True


def _load_saved(path: Path) -> RunRecord | None:
    """A saved record, or None with a line on stderr where it cannot be loaded (the script
    overwrote it, the disk filled as it was written): the other loaders are still reported."""
    try:
        return RunRecord.load(path)
    except IoprobeError as exc:
        text_console(stderr=True).print(shown(f"ioprobe: a record was lost: {exc}"), soft_wrap=True)
        return None


def _judged(paths: list[Path], catalog: Catalog | None) -> list[RunRecord]:
    """Each saved record judged. The records a distributed job's ranks saved of one loader
    (the same loader index in each rank's process, the same job) become one record for the
    job (``merge_ranks``): each rank's judged first, since its figures carry its own verdict,
    then the merged one. A one-rank world saves records without a rank: they stay as they
    are, as without a launcher."""
    alone: list[RunRecord] = []
    jobs: dict[tuple[object, ...], list[RunRecord]] = {}
    for path in paths:
        loaded = _load_saved(path)
        if loaded is None:
            continue
        rec = finalize_watch(loaded, catalog)
        info = rec.watch.rank if rec.watch is not None else None
        if info is None:
            alone.append(rec)
            continue
        # loader-{pid}-{i}.json: loader i of its process; every rank runs the same script
        key = (info.launcher, info.world_size, info.master, path.stem.rsplit("-", 1)[-1])
        jobs.setdefault(key, []).append(rec)
    merged = [
        finalize_watch(merge_ranks(group), catalog) if len(group) > 1 else group[0]
        for group in jobs.values()
    ]
    return alone + merged


def _child_env(hook: Path, records: Path, live: bool = False) -> dict[str, str]:
    """The script's environment: the hook first on its path, where to save records, and
    whether to draw the live panel (set by --live alone, never inherited)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH")) if p)
    env["IOPROBE_RUN_DIR"] = str(records)
    env.pop(LIVE_ENV, None)
    env.pop(TRIAL_ENV, None)  # set by ioprobe tune alone, never inherited
    if live:
        env[LIVE_ENV] = "1"
    # DALI's per-operator timing, set before the script builds a pipeline
    env.update(nvtx.injection_env())
    return env


def _ending_signals() -> tuple[int, ...]:
    """Every signal that ends a process by default and that comes from someone else: the
    interrupts, the user's own (SIGUSR1, SIGUSR2, SIGALRM, a job scheduler's SIGXCPU, SIGPWR
    from a UPS), the profilers' timers and the real-time signals. Not the faults the kernel
    raises in the thread that made them (SIGSEGV, SIGBUS, SIGFPE, SIGILL: a handler that
    returns would meet the fault again), nor SIGKILL and SIGSTOP, which no handler sees."""
    names = (
        "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
        "SIGPROF", "SIGXCPU", "SIGPWR", "SIGSTKFLT", "SIGIO", "SIGTRAP", "SIGSYS",
    )  # fmt: skip
    named = [getattr(signal, n) for n in names if hasattr(signal, n)]
    rt = range(signal.SIGRTMIN, signal.SIGRTMAX + 1) if hasattr(signal, "SIGRTMIN") else ()
    return tuple(dict.fromkeys([*named, *rt]))


RELAYED = _ending_signals()
# what a terminal's keys send to its foreground group (Ctrl-C, and Ctrl-backslash): a script
# in ioprobe's group has it already
KEYBOARD = (signal.SIGINT, signal.SIGQUIT)


def _call_script(cmd: tuple[str, ...], env: dict[str, str], got: list[int] | None = None) -> int:
    """Run the script and wait for it, passing on the signals ioprobe gets meanwhile; its
    return code (-N for a death by signal N).

    In a terminal's foreground the script shares ioprobe's process group, so that it can read
    the terminal (a debugger's prompt) and Ctrl-C reaches it directly. Anywhere else it gets a
    group of its own, so a signal to ioprobe's group reaches it once, passed on by ioprobe;
    a group it joins rather than leads (``_group_leader``), so that it may start a session of
    its own as it could unwatched."""
    in_terminal = _terminal_foreground()
    relay = _Relay(got, witness=not in_terminal)
    # SIGINT, SIGTERM and SIGHUP (a closed terminal, a supervisor), and every other signal
    # that would end a process (``RELAYED``: SIGUSR1 for a checkpoint, SIGXCPU from a
    # scheduler's CPU limit, a real-time signal of the user's)
    # are passed on; left at their default they ended ioprobe alone, the script running on
    # orphaned. One ignored where ioprobe was started (nohup, `trap '' INT`, a job started
    # with `&` from a script) the script inherits ignored, as it would unwatched
    relayed = [s for s in RELAYED if signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, relay.handle) for s in relayed}
    try:
        leader = None if in_terminal else _group_leader()
        group = None if in_terminal else (leader.pid if leader is not None else 0)
        try:
            child = subprocess.Popen(list(cmd), env=env, process_group=group)
        except OSError as exc:  # passed the checks but exec refused it: no #! line, a bad ELF
            raise BadInputError(f"{cmd[0]}: cannot run: {exc.strerror or exc}") from None
        finally:
            if leader is not None:  # the group goes on with the script in it
                leader.kill()
                leader.wait()
        relay.start(child)
        code = relay.wait()
    finally:
        relay.reap()
        relay.close()
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
    return code


def _resume(pid: int, group: int | None) -> None:
    """SIGCONT to a stopped script (its ``group`` where the signal went to the group), as a
    shell's ``kill`` does for a stopped job: a signal it handles (the watch's hook handles
    SIGTERM in a trial) waits while it is stopped, and ioprobe waited on it for ever."""
    if procfs.process_state(pid) in (b"T", b"t"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group is not None:
                os.killpg(group, signal.SIGCONT)
            else:
                os.kill(pid, signal.SIGCONT)


def _group_leader() -> subprocess.Popen[bytes] | None:
    """A process that starts a process group for the script to join and then ends: the
    script is in a group of its own without leading it, so it may call ``setsid()`` as it
    could unwatched (a group leader may not). None where none starts (the script then leads
    its group)."""
    try:
        return subprocess.Popen(
            ["sleep", "3600"], process_group=0, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        return None


def _isatty(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False


def _terminal_foreground() -> bool:
    """Whether ioprobe runs in the foreground of its controlling terminal, where Ctrl-C sends
    SIGINT to every process of its group."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:  # no controlling terminal: a service, a batch job, a test
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class _Relay:
    """The signal handler while the script runs: each of ``RELAYED`` is passed on to the
    script, SIGINT and SIGQUIT only where they did not come from the keyboard; a second
    SIGINT kills it and ends ioprobe at once.

    Ctrl-C in the terminal already reached the script, which shares ioprobe's process group
    then: sending it again would interrupt the script's own handling of the first (a Python
    script's ``finally`` blocks, the exit hook that saves its records)."""

    def __init__(self, got: list[int] | None = None, witness: bool = False) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.early: list[int] = []  # signals that came before the script started
        self.got = got if got is not None else []  # every signal handled, passed on or not
        self.interrupts = 0
        # with the script in a group of its own: a process in ioprobe's group that a signal
        # to that whole group ends too (``_to_group``)
        self.witness = _witness() if witness else None

    def start(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        for signum in self.early:
            self._pass_on(signum)

    def wait(self) -> int:
        assert self.child is not None
        return self.child.wait()

    def handle(self, signum: int, frame: object) -> None:
        self.got.append(signum)
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1:
                self._kill()
                raise KeyboardInterrupt  # the second Ctrl-C: stop waiting
        if signum in KEYBOARD and self._shares_group():
            return
        self._pass_on(signum)

    def _shares_group(self) -> bool:
        """Whether the script is in ioprobe's process group, so a Ctrl-C reached it too."""
        child = self.child
        try:
            return child is not None and os.getpgid(child.pid) == os.getpgrp()
        except ProcessLookupError:
            return False

    def _pass_on(self, signum: int) -> None:
        child = self.child
        if child is None:
            self.early.append(signum)
        elif child.poll() is None:  # one that ended has nobody left to pass it to
            try:
                group = os.getpgid(child.pid)
                if group != os.getpgrp() and self._to_group(signum):
                    os.killpg(group, signum)
                    _resume(child.pid, group)
                    return
            except ProcessLookupError:
                return
            child.send_signal(signum)
            _resume(child.pid, None)

    def _to_group(self, signum: int) -> bool:
        """Whether ``signum`` was sent to ioprobe's whole process group, so it goes to the
        script's whole group: unwatched, one to the job's group (``kill -- -PGID``, a
        supervisor's, a session's hang-up) reaches the script's forkserver and DataLoader
        workers too; one to ioprobe alone goes to the script alone, as to a script killed
        by its PID. Told by the witness: it shares ioprobe's group, and dies of the signal
        only if the group was sent it. A new one stands for the next signal."""
        witness = self.witness
        if witness is None:
            return False
        try:
            died = witness.wait(WITNESS_S) == -signum
        except subprocess.TimeoutExpired:
            return False
        self.close()
        self.witness = _witness()
        return died

    def close(self) -> None:
        """End the witness, if any, and close its pipe."""
        witness, self.witness = self.witness, None
        if witness is not None:
            witness.kill()
            witness.wait()
            if witness.stdin is not None:
                witness.stdin.close()

    def _kill(self) -> None:
        """SIGKILL to the script, and to its whole group (its DataLoader workers) when it has
        one of its own."""
        child = self.child
        if child is None or child.poll() is not None:
            return
        try:
            group = os.getpgid(child.pid)
            if group != os.getpgrp():
                os.killpg(group, signal.SIGKILL)
            else:
                child.kill()
        except ProcessLookupError:
            pass

    def reap(self) -> None:
        """Wait for a script that ioprobe stops waiting for (a second Ctrl-C killed it): it
        must not outlive ioprobe, nor linger as a zombie."""
        child = self.child
        if child is not None and child.poll() is None:
            self._kill()
            child.wait()


# How long a signal's witness is given to die of it: the kernel signals a group's processes
# in one call, but the witness must be scheduled to die
WITNESS_S = 0.2


def _witness() -> subprocess.Popen[bytes] | None:
    """A process in ioprobe's group that only waits, holding none of its streams; None where
    none starts. It reads a pipe only ioprobe writes to, so it ends with ioprobe however
    ioprobe ends (SIGKILL included)."""
    try:
        return subprocess.Popen(
            ["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    except OSError:
        return None


def _out_of_space(folder: Path) -> bool:
    """Whether ``folder``'s file system has too little room left for a record (1 MiB)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20


def _report_all(
    runs: list[RunRecord],
    plan: dict[str, list[str]],
    killed_by: int | None,
    made: bool | None = False,
    unhooked: str | None = None,
) -> None:
    """Each loader's summary on stderr (the script's stdout is its own), then its planned
    outputs: the first loader's at the paths given, each other one's beside them (``_nth``)."""
    err = text_console(stderr=True)
    if not runs and killed_by is not None and killed_by != signal.SIGINT:
        # a death by signal skips the exit hook that saves the records (a Python script's
        # KeyboardInterrupt runs it, then ends by SIGINT)
        err.print(f"ioprobe: the script was killed by {_signal_name(killed_by)}: no record saved")
    elif not runs and made:
        # os._exit or a crash in C skips the exit hook, as a signal does
        err.print(
            "ioprobe: the script made a DataLoader but saved no record: it never iterated it, "
            "or it ended without Python's exit handlers (os._exit, a crash)",
            soft_wrap=True,
        )
    elif not runs and unhooked is not None:
        err.print(f"ioprobe: nothing was watched: the script's Python ran with {unhooked}")
    elif not runs and made is not None:  # None: the lost folder was said already
        err.print("ioprobe: no DataLoader was iterated: nothing to report")
    # the records first, then the pages, then the summaries: each step tried whatever became
    # of the others, so a renderer's failure costs that output alone and the exit code stays
    # the script's
    failed: list[str] = []
    plans = [plan if i == 1 else _beside(plan, i, err) for i in range(1, len(runs) + 1)]
    for rec, mine in zip(runs, plans, strict=True):
        for path in mine["json"]:
            attempt(failed, "--json", write_record, rec, path)
    judged = [(rec, attempt(failed, "the analysis", findings, rec)) for rec in runs]
    for (rec, f), mine in zip(judged, plans, strict=True):
        if f is not None:
            failed += write_rendered(rec, f, mine)
    for i, (rec, f) in enumerate(judged, 1):
        if len(runs) > 1:
            err.print(Text(f"\nloader {i} of {len(runs)}", style="bold"))
        if f is not None:
            attempt(failed, "the summary", show, rec, f, True)
    for line in failed:
        err.print(shown(f"ioprobe: {' '.join(line.split())}"), soft_wrap=True)


def _beside(plan: dict[str, list[str]], i: int, err: Console) -> dict[str, list[str]]:
    """Loader ``i``'s outputs, beside the first loader's files (``_nth``). A stream (a
    device, a FIFO, a descriptor) has no "beside": a name derived from /dev/null would be a
    new file in /dev, so that output is skipped for this loader, and the user told."""
    out: dict[str, list[str]] = {}
    for fmt, paths in plan.items():
        out[fmt] = []
        for path in paths:
            if destination(path).kind == "file":
                out[fmt].append(_nth(path, i))
            else:
                err.print(
                    printable(
                        f"ioprobe: loader {i}'s {fmt} output not written: {path} is a stream, "
                        "which holds the first loader's; give a file name to keep each loader's"
                    ),
                    markup=False,
                    soft_wrap=True,  # one line, as every ioprobe note
                )
    return out


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _stamp(path: str) -> tuple[int, int, int, int] | None:
    """What tells a file another wrote from the one that was there: its device, inode,
    size and change time; None where there is none (or no plain file: a device, a FIFO)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns) if stat.S_ISREG(st.st_mode) else None


def _spare_scripts_files(
    plan: dict[str, list[str]], before: dict[str, tuple[int, int, int, int] | None]
) -> dict[str, list[str]]:
    """The outputs, less those the script itself wrote while it ran (``run --json
    model.json`` of a script that saves model.json): the script's file stays as it is, and
    that output goes beside it (``model.ioprobe.json``), the user told in one line."""
    out: dict[str, list[str]] = {}
    for fmt, paths in plan.items():
        out[fmt] = []
        for path in paths:
            now = _stamp(path) if path != "-" else None
            if now is None or now == before.get(path):
                out[fmt].append(path)
                continue
            spare = _free_name(path)
            text_console(stderr=True).print(
                shown(
                    f"ioprobe: {path} was written by the script while it ran: left as it is; "
                    f"this {fmt} output is {spare}"
                ),
                soft_wrap=True,
            )
            out[fmt].append(spare)
    return out


def _free_name(path: str) -> str:
    """``model.json`` -> ``model.ioprobe.json`` (then ``model.ioprobe2.json`` ...), the
    first that names no file: the ending that names the format stays."""
    for n in range(1, 1000):
        name = _tagged(path, f"ioprobe{n if n > 1 else ''}")
        if not os.path.lexists(name):
            return name
    return _tagged(path, f"ioprobe.{os.getpid()}")


def _nth(path: str, i: int) -> str:
    """``run.trace.json`` -> ``run.loader2.trace.json``: the ending that names the format stays."""
    return _tagged(path, f"loader{i}")


def _tagged(path: str, tag: str) -> str:
    """``path`` with ``.tag`` before the ending that names its format (``.trace.json``
    whole, or the last suffix)."""
    low = path.lower()
    ext = next((x for x, _ in EXTENSIONS if low.endswith(x)), Path(path).suffix)
    stem = path[: len(path) - len(ext)] if ext else path
    return f"{stem}.{tag}{path[len(stem) :]}"
