"""The cell sandbox of the subprocess executor: how the worker process is confined.

Three modes (``WorkerLimits(sandbox=...)``):

``"bwrap"`` (bubblewrap, used by ``"auto"`` when ``bwrap`` is installed and works)
    The worker runs in a bubblewrap cell: new user, PID, network, IPC, UTS and cgroup
    namespaces (no network: only a loopback device that is down), its own ``/proc``
    (it sees only its own processes, so it cannot read the host's memory through
    ``/proc/<pid>/mem``), a read-only view of the system and Python directories only
    (``/usr``, ``/etc``, the interpreter's prefixes, the ``spectool`` package folder:
    not the checkout around it), a size-bounded
    tmpfs at ``/tmp`` as its scratch dir and working directory, no capabilities, no
    nested user namespaces, a new session, an allow-listed environment, and
    ``--die-with-parent``. Orphans reparent to the cell's own init, so every process
    of the cell stays a descendant of the bwrap process the host started.
``"fallback"`` (no bubblewrap)
    A plain process with the same uid drop, environment allow-list, limits and
    per-turn kill, a private scratch dir as its working directory, its own session
    and process group. No namespaces: it shares the host's network and filesystem
    (whatever its uid may read or write; world-writable dirs such as ``/tmp``
    included) and sees the host's ``/proc``.
``"none"``
    No sandbox: the host's uid and environment, the
    worker's own resource limits only, no per-turn kill. For comparisons and for the
    negative controls of the sandbox tests.

Common to ``bwrap`` and ``fallback``:

- **uid.** When the host runs as root, the worker drops to a uid of its own, picked
  at random from ``UID_RANGE`` among uids no running process uses, with no
  supplementary groups, before anything of the cell runs. It therefore cannot raise
  its hard resource limits, cannot read root's ``/proc/<pid>/mem`` or root-only files,
  and ``RLIMIT_NPROC`` counts exactly its own processes. A non-root host cannot
  change uid: the worker keeps the host's uid (see the table in docs/security.md).
- **memory and processes.** When the host runs as root and a memory cgroup is
  writable (cgroup v2 with the ``memory`` controller enabled for children, else v1),
  the worker and all its children share one cgroup: ``memory_bytes`` bounds them
  together (the kernel's OOM killer acts inside the cgroup) and ``pids.max`` bounds
  their number. Otherwise ``RLIMIT_AS`` = ``memory_bytes`` per process and
  ``RLIMIT_NPROC`` = ``max_processes`` extra processes: together at most
  ``(1 + max_processes) * memory_bytes``.
- **CPU.** The host polls the CPU time of the whole process tree while a cell runs
  and kills the worker once the cell used more than ``cpu_seconds_per_cell``: a
  limit the cell cannot raise, whatever its rlimits. With a cgroup (root host) that
  is the cgroup's own CPU counter (``cpu.stat`` on v2, ``cpuacct.usage`` on v1),
  which keeps the time of every process that ever ran in it; otherwise the sum over
  the tree's processes, zombies included (a child that burnt CPU and exited unreaped
  still counts), and the children they reaped.
- **turn end.** After every cell the host kills every process of the cell except the
  worker itself (and bwrap's own two processes): the members of the cgroup (root
  host), else the descendants of the process it started and (root host) every
  process of the worker's uid. A daemonised, ``setsid`` double-forked child is found
  in the bwrap mode in any case (orphans reparent to the cell's own init) and in the
  fallback mode through the cgroup or uid (root host) and, on any host, because the
  fallback worker is a child subreaper (``PR_SET_CHILD_SUBREAPER``): orphans of the
  cell reparent to it and stay its descendants (a cell can switch that off, since it
  runs in the worker's process: on a non-root fallback a determined daemon escapes).
  The worker itself is then stopped (``SIGSTOP``) until the next cell.

Everything here runs on the host; :mod:`spectool.execution.worker` applies the launch plan
(cgroup join, rlimits, uid drop, ``exec`` of bwrap) before any cell code runs.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Iterable

__all__ = ["SANDBOX_MODES", "SandboxPlan", "bwrap_usable", "plan_sandbox", "UID_RANGE"]

SANDBOX_MODES = ("auto", "bwrap", "fallback", "none")
UID_RANGE = (0x5EC0_0000, 0x5EC0_0000 + (1 << 20))   # uids the root host hands to workers
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# bwrap's two processes (outer + the cell's init) and the worker itself
_BWRAP_OWN_PROCESSES = 3
_ENV_ALLOW = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")


@dataclass
class SandboxPlan:
    """How one worker is launched and confined (made by :func:`plan_sandbox`)."""

    mode: str                               # "bwrap" | "fallback" | "none"
    uid: int | None = None                  # drop to this uid (root host only)
    scratch: str | None = None              # fallback: the private working dir on the host
    cgroup_dirs: list[str] = field(default_factory=list)
    cgroup_procs: list[str] = field(default_factory=list)
    cgroup_memory: bool = False             # a cgroup bounds the memory of all processes
    cgroup_pids: bool = False               # a cgroup bounds the number of processes
    cgroup_cpu: str | None = None           # the cgroup's CPU counter (cpu.stat / cpuacct.usage)
    bwrap_argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    python_paths: list[str] = field(default_factory=list)   # the worker must reach these
    subreaper: bool = True                  # fallback: orphans of the cell reparent to the worker

    def launch_config(self, memory_bytes: int | None, max_processes: int) -> dict:
        """What the worker's launcher does before the cell can run (plain JSON data)."""
        extra = max_processes + (_BWRAP_OWN_PROCESSES - 1 if self.mode == "bwrap" else 0)
        return {"mode": self.mode, "uid": self.uid, "cgroup_procs": self.cgroup_procs,
                "memory_bytes": memory_bytes,
                "nproc_extra": None if self.cgroup_pids else extra,
                "bwrap_argv": self.bwrap_argv, "env": self.env, "scratch": self.scratch,
                "python_paths": self.python_paths,
                "subreaper": self.subreaper and self.mode == "fallback"}

    # ---------------------------------------------------------------- processes
    def processes(self, root_pid: int, *, zombies: bool = False) -> set[int]:
        """Every live process of this sandbox (host pids), found three ways.

        With a cgroup its member list is enough (members cannot leave it: the cgroup
        files they would write to belong to root). Else the descendants of the root
        (read from ``/proc/<pid>/task/<tid>/children``: no full scan of ``/proc``) and,
        when the worker has a uid of its own, every process of that uid (full scan)."""
        if self.cgroup_procs:
            found: set[int] = _descendants_quick(root_pid)
            for procs in self.cgroup_procs:
                found |= _read_pids(procs)
        else:
            found = _descendants_by_children(root_pid)
            if self.uid is not None:
                found |= {pid for pid, (_, uid, _s) in _process_table().items()
                          if uid == self.uid}
        dead = ("X", None) if zombies else ("Z", "X", None)
        return {pid for pid in found if _state(pid) not in dead}

    def kill_round(self, root_pid: int, keep: Iterable[int]) -> int:
        """SIGKILL every live process of the sandbox but ``keep``; returns how many.

        Call again until it returns 0: a process may fork while the sweep runs (the
        process limit bounds how often), and a killed one lingers until it exits."""
        victims = self.processes(root_pid) - set(keep)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return len(victims)

    def kill_strays(self, root_pid: int, keep: Iterable[int]) -> None:
        """kill_round until nothing is left (at most about a second)."""
        import time
        for attempt in range(500):
            if not self.kill_round(root_pid, keep):
                return
            time.sleep(0.002 if attempt else 0)

    def cpu_seconds(self, root_pid: int) -> float:
        """CPU time used by the whole sandbox so far: the cgroup's counter when there
        is one, else its processes (zombies included) and the children they reaped."""
        if self.cgroup_cpu is not None:
            used = _cgroup_cpu_seconds(self.cgroup_cpu)
            if used is not None:
                return used
        return sum(_cpu_seconds(pid) for pid in self.processes(root_pid, zombies=True))

    def worker_pid(self, root_pid: int) -> int:
        """The host pid of the worker: under bwrap, the deepest process of the chain
        bwrap -> its init -> the worker, right after start (nothing else runs yet)."""
        if self.mode != "bwrap":
            return root_pid
        table = _process_table()
        pid = root_pid
        for _ in range(2):
            children = [p for p, (ppid, _, _s) in table.items() if ppid == pid]
            if len(children) != 1:
                raise OSError(f"unexpected bwrap process tree under {root_pid}: {children}")
            pid = children[0]
        return pid

    def cleanup(self, root_pid: int | None) -> None:
        """After the worker was killed: kill the rest, remove the cgroups and scratch."""
        if root_pid is not None and self.mode != "none":
            self.kill_strays(root_pid, ())
        left = []
        for path in reversed(self.cgroup_dirs):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:      # processes not yet reaped: the caller retries
                left.append(path)
        self.cgroup_dirs = left[::-1]
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def plan_sandbox(mode: str, *, memory_bytes: int | None, max_processes: int,
                 scratch_bytes: int, python: str, worker: str) -> SandboxPlan:
    """Choose and prepare the confinement of one worker (cgroups, uid, scratch, argv)."""
    if mode not in SANDBOX_MODES:
        raise ValueError(f"sandbox must be one of {SANDBOX_MODES}, not {mode!r}")
    if mode == "none":
        return SandboxPlan("none")
    if mode == "auto":
        mode = "bwrap" if bwrap_usable() else "fallback"
    elif mode == "bwrap" and not bwrap_usable():
        raise RuntimeError("sandbox='bwrap' but bubblewrap is not usable here: "
                           + (_bwrap_problem() or "unknown reason"))
    plan = SandboxPlan(mode, uid=_free_uid() if os.geteuid() == 0 else None)
    plan.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    plan.env.update({k: os.environ[k] for k in _ENV_ALLOW if k in os.environ})
    if os.geteuid() == 0:
        _make_cgroups(plan, memory_bytes, max_processes)
    plan.python_paths = _python_paths(python, worker)
    if mode == "bwrap":
        plan.bwrap_argv = _bwrap_argv(python, worker, scratch_bytes, plan.env)
    else:
        plan.scratch = tempfile.mkdtemp(prefix="spectool-scratch-")
        if plan.uid is not None:
            os.chown(plan.scratch, plan.uid, plan.uid)
        os.chmod(plan.scratch, 0o700)
        plan.env["HOME"] = plan.scratch
        plan.env["TMPDIR"] = plan.scratch
    return plan


# ------------------------------------------------------------------------ bubblewrap
@functools.lru_cache(maxsize=1)
def _bwrap_problem() -> str | None:
    """None when bwrap can start a cell here, else why not (checked once)."""
    path = shutil.which("bwrap")
    if path is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    argv = [path, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--size", "1048576", "--tmpfs", "/tmp", "--", "/bin/true"]
    kwargs: dict = {}
    if os.geteuid() == 0:   # the worker drops root before bwrap: check it as such a uid
        uid = _free_uid()
        kwargs = {"user": uid, "group": uid, "extra_groups": []}
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, **kwargs)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap failed to start: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot create a cell here: {done.stderr.decode(errors='replace').strip()}"
    return None


def bwrap_usable() -> bool:
    return _bwrap_problem() is None


def _bwrap_argv(python: str, worker: str, scratch_bytes: int, env: dict[str, str]) -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user",
            "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--proc", "/proc", "--dev", "/dev", "--size", str(scratch_bytes), "--tmpfs", "/tmp",
            "--chdir", "/tmp", "--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    for path in _readable_paths(python, worker):
        if os.path.islink(path) and os.path.dirname(path) == "/":   # /lib -> usr/lib
            argv += ["--symlink", os.readlink(path), path]
        else:
            argv += ["--ro-bind", path, path]
    return argv + ["--", python, "-I", worker]


def _python_paths(python: str, worker: str) -> list[str]:
    """The interpreter's prefixes and site-packages, and spectool's package folder
    (only the package: not the checkout around it, with its ``.git``, tests, data)."""
    import site
    # the worker is spectool/execution/worker.py; the whole spectool/ folder is bound
    # (the worker imports spectool.errors when it can)
    package = os.path.dirname(os.path.dirname(os.path.abspath(worker)))
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, package,
              os.path.dirname(os.path.dirname(os.path.realpath(python))),
              os.path.dirname(python)]
    wanted += [p for p in site.getsitepackages() if os.path.isdir(p)]
    return sorted({os.path.abspath(p) for p in wanted})


def _readable_paths(python: str, worker: str) -> list[str]:
    """System dirs and the interpreter's (and spectool's) folders, nothing of /home etc."""
    wanted = ["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
    wanted += _python_paths(python, worker)
    out: list[str] = []
    for path in wanted:
        path = os.path.abspath(path)
        # a checkout or venv under /tmp is bound read-only over the cell's tmpfs /tmp
        # (bwrap applies binds in order, after the tmpfs); /tmp itself stays private
        if not os.path.exists(path) or path in ("/", "/tmp"):
            continue
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in out):
            continue
        out = [p for p in out if not p.startswith(path.rstrip("/") + "/")] + [path]
    # top-level symlinks first (so /lib -> usr/lib is a symlink inside the cell too)
    return sorted(out, key=lambda p: (not os.path.islink(p), p))


# --------------------------------------------------------------------------- cgroups
_CGROUP_COUNTER = [0]


def _make_cgroups(plan: SandboxPlan, memory_bytes: int | None, max_processes: int) -> None:
    """Create the worker's cgroup(s) (host is root); leave the plan untouched if none works."""
    _CGROUP_COUNTER[0] += 1
    name = f"spectool-{os.getpid()}-{_CGROUP_COUNTER[0]}-{random.randrange(1 << 30):x}"
    # the worker (+ bwrap's two processes) and the cell's own; threads count too
    max_pids = max_processes + (_BWRAP_OWN_PROCESSES if plan.mode == "bwrap" else 1)
    v2 = _cgroup_v2_parent()
    if v2 is not None:
        _sweep_stale_cgroups(v2)
        path = os.path.join(v2, name)
        try:
            os.mkdir(path)
            plan.cgroup_dirs.append(path)
            if memory_bytes:
                _write(os.path.join(path, "memory.max"), str(memory_bytes))
                _write_try(os.path.join(path, "memory.swap.max"), "0")
                plan.cgroup_memory = True
            _write(os.path.join(path, "pids.max"), str(max_pids))
            plan.cgroup_pids = True
            plan.cgroup_procs.append(os.path.join(path, "cgroup.procs"))
            if _cgroup_cpu_seconds(os.path.join(path, "cpu.stat")) is not None:
                plan.cgroup_cpu = os.path.join(path, "cpu.stat")
            return
        except OSError:
            plan.cleanup(None)
            plan.cgroup_memory = plan.cgroup_pids = False
            plan.cgroup_procs, plan.cgroup_cpu = [], None
    for controller in ("memory", "pids", "cpuacct"):
        parent = _cgroup_v1_parent(controller)
        if parent is None:
            continue
        _sweep_stale_cgroups(parent)
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except OSError:
            continue
        plan.cgroup_dirs.append(path)
        try:
            if controller == "cpuacct":
                usage = os.path.join(path, "cpuacct.usage")
                if _cgroup_cpu_seconds(usage) is not None:
                    plan.cgroup_cpu = usage
            elif controller == "memory":
                if memory_bytes:
                    _write(os.path.join(path, "memory.limit_in_bytes"), str(memory_bytes))
                    _write_try(os.path.join(path, "memory.memsw.limit_in_bytes"),
                               str(memory_bytes))
                    plan.cgroup_memory = True
            else:
                _write(os.path.join(path, "pids.max"), str(max_pids))
                plan.cgroup_pids = True
            plan.cgroup_procs.append(os.path.join(path, "cgroup.procs"))
        except OSError:
            pass


def _sweep_stale_cgroups(parent: str) -> None:
    """Remove empty cgroups left by a host that died (their names carry its pid)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) == 4 and parts[0] == "spectool" and parts[1].isdigit() \
                and not os.path.exists(f"/proc/{parts[1]}"):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


def _cgroup_v2_parent() -> str | None:
    """Our own v2 cgroup's dir when it lets children use memory and pids, else None."""
    mount = _mount_point("cgroup2", None)
    own = _own_cgroup("")
    if mount is None or own is None:
        return None
    parent = os.path.join(mount, own.lstrip("/"))
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as fh:
            enabled = fh.read().split()
        if not {"memory", "pids"} <= set(enabled):
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
        with open(os.path.join(parent, "cgroup.subtree_control")) as fh:
            enabled = fh.read().split()
    except OSError:
        return None
    return parent if {"memory", "pids"} <= set(enabled) else None


def _cgroup_v1_parent(controller: str) -> str | None:
    mount = _mount_point("cgroup", controller)
    own = _own_cgroup(controller)
    if mount is None or own is None:
        return None
    parent = os.path.join(mount, own.lstrip("/"))
    return parent if os.access(parent, os.W_OK) else None


def _proc_lines(path: str) -> list[str] | None:
    """The lines of a ``/proc`` file, or None where it cannot be read."""
    try:
        with open(path) as fh:
            return fh.read().splitlines()
    except OSError:
        return None


def _mount_point(fstype: str, option: str | None) -> str | None:
    lines = _proc_lines("/proc/self/mountinfo")
    if lines is None:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, tail = left.split(), right.split()
        if len(parts) < 5 or len(tail) < 3 or tail[0] != fstype:
            continue
        if option is None or option in tail[2].split(","):
            return parts[4]
    return None


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller ("" means the v2 hierarchy)."""
    lines = _proc_lines("/proc/self/cgroup")
    if lines is None:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (controller == "" and controllers == "") or controller in controllers.split(","):
            return path
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _write_try(path: str, text: str) -> None:
    try:
        _write(path, text)
    except OSError:
        pass


def _cgroup_cpu_seconds(path: str) -> float | None:
    """A cgroup's cumulative CPU time: ``cpu.stat`` (v2, usage_usec) or
    ``cpuacct.usage`` (v1, nanoseconds); None if unreadable."""
    try:
        with open(path) as fh:
            text = fh.read()
        if path.endswith("cpu.stat"):
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            return None
        return int(text) / 1e9
    except (OSError, ValueError):
        return None


def _read_pids(path: str) -> set[int]:
    try:
        with open(path) as fh:
            return {int(x) for x in fh.read().split()}
    except (OSError, ValueError):
        return set()


# ------------------------------------------------------------------------- processes
def _free_uid() -> int:
    """A uid in UID_RANGE that no running process uses (random; the range is large)."""
    used = {uid for _, uid, _s in _process_table().values()}
    while True:
        uid = random.randrange(*UID_RANGE)
        if uid not in used:
            return uid


def _process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, real uid, state letter) for every process visible in /proc.

    Read from ``status`` (world-readable even for a process that made itself
    non-dumpable, whose ``/proc/<pid>`` then belongs to root)."""
    table: dict[int, tuple[int, int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                status = fh.read()
        except OSError:
            continue
        info = {}
        for line in status.split(b"\n"):
            key, _, value = line.partition(b":")
            if key in (b"State", b"PPid", b"Uid"):
                info[key] = value.split()
        try:
            table[int(name)] = (int(info[b"PPid"][0]), int(info[b"Uid"][0]),
                                info[b"State"][0].decode())
        except (KeyError, IndexError, ValueError):
            continue
    return table


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3].decode()


def _descendants_quick(root: int) -> set[int]:
    """The root and its direct children (bwrap's chain before it joins nothing else)."""
    found = {root}
    try:
        with open(f"/proc/{root}/task/{root}/children") as fh:
            found |= {int(x) for x in fh.read().split()}
    except (OSError, ValueError):
        pass
    return found


def _descendants_by_children(root: int) -> set[int]:
    """The root and all its descendants, through the kernel's per-thread children lists
    (falls back to a full /proc scan where the kernel does not provide them)."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        return _descendants(root, _process_table())
    return _reach(root, _kernel_children)


def _kernel_children(pid: int) -> list[int]:
    """The children of every thread of a process, as the kernel lists them (none for a
    process that is gone; a list that cannot be read counts as far as it was read)."""
    children: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                children.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            pass
    return children


def _descendants(root: int, table: dict[int, tuple[int, int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _s) in table.items():
        children.setdefault(ppid, []).append(pid)
    return _reach(root, lambda pid: children.get(pid, ()))


def _reach(root: int, children_of: Callable[[int], Iterable[int]]) -> set[int]:
    """The root and every process reached from it through ``children_of``."""
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children_of(pid))
    return found


def _cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of one process, in seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(b")") + 2:].split()
    # fields[0] is the state (stat field 3): utime..cstime are stat fields 14..17
    return sum(int(x) for x in fields[11:15]) / _CLOCK_TICKS
