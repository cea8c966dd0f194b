"""pg_shell's supervisor: PID 1 of every sandbox container (started by
/opt/pg-shell/supervisor, sandbox-image/supervisor).

It speaks one framed, two-way protocol with the executor over the
container's stdin and stdout (executor/sandbox/protocol.py is the other
end). Every frame is a type byte, a 4-byte big-endian length and a payload.

    executor -> supervisor (stdin)
      c  JSON {"command", "cwd", "env", "capture", "max_entries"?, "known"?, "ask"?,
         "tty"?, "stdin"?}: run this command; "tty": {"cols", "rows"} runs it on a
         pseudo-terminal, "stdin": true gives it a pipe as stdin (else /dev/null);
         "known": {directory: digest} of what the executor knows (send_manifest);
         "ask": ask with an n frame, once the command ended, what to scan
      D  JSON {"known", "changed"?, "held"?}: the answer to n (send_manifest)
      i  4-byte big-endian sequence number, then input bytes for the command
      z  4-byte sequence number: end of input (a pipe is closed; a terminal
         gets its end-of-file character)
      w  JSON {"cols", "rows"}: the terminal's new window size
      K  stop the command (a time limit, a cancel): every process of the
         tenant is killed; the command then ends, and is captured, as any
      q  JSON {"paths": [...]}: send the contents of these files
      R  JSON {"wipe", "delete": [...], "sha256": [...]}: restore (`supervisor
         restore`); the rest of stdin is a tar stream of what to write, and
         "sha256" the SHA-256 of each of its regular files, in its order
    supervisor -> executor (stdout)
      o  output bytes: the command's stdout and stderr, merged in write order
      s  the shell's state report: cwd NUL, then NAME=value NUL each
      S  the state report was larger than MAX_STATE (it is dropped)
      x  JSON {"status": N, "oom"?}: the command's exit status (128+signal if
         killed); "oom": whether the kernel's OOM killer killed a process of the
         container meanwhile (absent: the container has no counter to read)
      k  JSON {"seq", "echo"}: input seq reached the command; "echo": whether
         the terminal echoed input when it was written (false: a password prompt)
      t  JSON {"echo"}: the terminal's echo changed (sent before the output
         read after the change)
      n  which directories changed? (the command ended; answered with D)
      m  JSON list of manifest entries [path, kind, mode, size, ino, ctime_ns, target],
         or [directory]: its entries are as "known" says
      M  JSON {"entries": N, "skipped": [...], "skipped_more": N, "failed": [path, why]
         or null, "over": bool}: the manifest is complete ("failed": a directory
         could not be listed; "over": more than the request's max_entries)
      f  JSON {"path", "size"}, then d frames (the bytes), then
      F  JSON {"ok", "error"?}: one requested file
      r  JSON {"ok", "error"?}: the restore is done (before its manifest)
      e  end of the conversation

Why a supervisor: the command runs in a bash that is this process's child,
so everything it prints reaches the executor only inside o frames; it cannot
forge a frame, and a stored variable never acts on anything here. This
process is not dumpable, so the tenant's processes (same uid) can neither
ptrace it nor open its pipes through /proc. It reports state and scans the
files only after every tenant process is gone (SIGKILL to all, then reaped),
from the read-only image, with no tenant variable in its environment. What
it reports is still validated by the executor as tenant data.
"""

import ctypes
import json
import os
import signal
import stat
import struct
import sys

# The version of the protocol below; `supervisor protocol` prints it, and an
# image is refused as a template's when it is not the executor's.
PROTOCOL = 1
HOME = os.environ.get("HOME", "/home/sandbox")
SHELL = "/opt/pg-shell/run"
MAX_STATE = 1024 * 1024
MAX_FRAME = 1024 * 1024
HEADER = struct.Struct(">cI")


def send(kind, payload=b""):
    data = HEADER.pack(kind, len(payload)) + payload
    while data:
        data = data[os.write(1, data):]


def send_json(kind, obj):
    send(kind, json.dumps(obj, separators=(",", ":")).encode())


class Inbox:
    """The executor's frames on stdin. While a command runs they are read
    as they come (input for it, or the order to stop it); otherwise one is
    awaited. Input, or a stop, that arrives after the command ended is
    dropped."""

    INPUT = (b"i", b"z", b"w")
    STOP = b"K"

    def __init__(self):
        self.buf = bytearray()

    def fill(self, most=65536):
        """Reads what stdin has, up to ``most`` bytes; False at its end."""
        chunk = os.read(0, most)
        self.buf += chunk
        return bool(chunk)

    def missing(self):
        """Bytes the next frame still needs: receive() reads no further, so
        a restore's tar stream, which follows its R frame, stays on stdin."""
        if len(self.buf) < HEADER.size:
            return HEADER.size - len(self.buf)
        return HEADER.size + HEADER.unpack_from(self.buf)[1] - len(self.buf)

    def frames(self):
        """The complete frames received so far."""
        while len(self.buf) >= HEADER.size:
            kind, length = HEADER.unpack_from(self.buf)
            if length > 64 * MAX_FRAME:
                raise ValueError(f"frame {kind!r} of {length} bytes")
            if len(self.buf) < HEADER.size + length:
                return
            payload = bytes(self.buf[HEADER.size:HEADER.size + length])
            del self.buf[:HEADER.size + length]
            yield kind, payload

    def receive(self, expected):
        while True:
            for kind, payload in self.frames():
                if kind in self.INPUT or kind == self.STOP:
                    continue
                if kind != expected:
                    raise ValueError(f"unexpected frame {kind!r}")
                return json.loads(payload)
            if not self.fill(self.missing()):
                raise EOFError("stdin closed")


INBOX = Inbox()
receive = INBOX.receive


# -- the command --------------------------------------------------------------

def run_command(request):
    """Runs the command in the shell, relaying its output (and input, when
    it has a terminal or a stdin pipe) until it and everything it started
    are gone; returns its exit status."""
    window = request.get("tty")
    command = command_file(request["command"].encode("utf-8", "surrogateescape"))
    state_r, state_w = os.pipe()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": HOME,
           "PG_SHELL_CWD": request.get("cwd") or HOME}
    for name, value in (request.get("env") or {}).items():
        env["PG_SHELL_ENV_" + name] = value
    # The shell's fd 4 becomes its stdin once it has read the command from fd 0.
    actions = [(os.POSIX_SPAWN_DUP2, command, 0), (os.POSIX_SPAWN_DUP2, state_w, 3)]
    terminal = feed = None
    if window:
        terminal = Terminal(window)
        env["PG_SHELL_WINDOW"] = f"{terminal.cols}x{terminal.rows}"
        # Opened in the child after setsid: the terminal becomes its controlling one.
        actions += [(os.POSIX_SPAWN_OPEN, 4, terminal.path, os.O_RDWR, 0),
                    (os.POSIX_SPAWN_DUP2, 4, 1), (os.POSIX_SPAWN_DUP2, 4, 2)]
        out_r, out_w, feed = terminal.master, None, terminal.master
    else:
        out_r, out_w = os.pipe()
        actions += [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)]
        if request.get("stdin"):
            in_r, feed = os.pipe()
            actions.append((os.POSIX_SPAWN_DUP2, in_r, 4))
        else:
            in_r = None
            actions.append((os.POSIX_SPAWN_OPEN, 4, "/dev/null", os.O_RDONLY, 0))
    # SIGPIPE as a shell gives it (Python ignores it, and an ignored signal
    # stays ignored across exec): `yes | head -1` ends quietly.
    oom_before = oom_kills()
    pid = os.posix_spawn("/bin/bash", ["bash", SHELL], env, file_actions=actions,
                         setsid=terminal is not None, setsigdef=(signal.SIGPIPE,))
    for fd in (command, state_w, out_w, None if terminal else in_r):
        if fd is not None:
            os.close(fd)
    if terminal:
        terminal.spawned()
    relay = Relay(out_r, state_r, Input(feed, terminal) if feed is not None else None)
    status = relay.run(pid)
    end_everything()
    if relay.overflow:
        send(b"S")
    elif relay.state:
        send(b"s", bytes(relay.state))
    report = {"status": status}
    oom_after = oom_kills()
    if oom_before is not None and oom_after is not None:
        report["oom"] = oom_after > oom_before
    send_json(b"x", report)
    return status


def command_file(text):
    """The command as an in-memory file, at its start: the shell reads it
    whole with one builtin (bash 5.2 reads a seekable file in blocks, a pipe
    a byte at a time), so no process starts for it, which under gVisor costs
    a command about 25 ms."""
    fd = os.memfd_create("command", os.MFD_CLOEXEC)
    view = memoryview(text)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# The container's own memory cgroup (cgroup v2, then v1): both count OOM kills
# on an "oom_kill N" line.
OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def oom_kills():
    """How many processes the OOM killer has killed in this container (None:
    no counter here). Read here, as the command ends, because the engine's
    own flag arrives by an event that can come after the executor asks."""
    for path in OOM_COUNTERS:
        try:
            with open(path) as counter:
                for line in counter:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


class Terminal:
    """The pseudo-terminal a command runs on: the master stays here."""

    def __init__(self, window):
        import fcntl
        import termios
        self.fcntl, self.termios = fcntl, termios
        self.master, self._slave = os.openpty()
        self.path = os.ttyname(self._slave)
        self.cols, self.rows = int(window["cols"]), int(window["rows"])
        self.resize(self.cols, self.rows)
        os.set_blocking(self.master, False)
        self.echo = True  # as last reported (a new terminal echoes)

    def spawned(self):
        # Only the command holds the terminal now: the master reads EIO once
        # the command and its children have all closed it.
        os.close(self._slave)

    def resize(self, cols, rows):
        # The kernel sends SIGWINCH to the terminal's foreground process group.
        size = struct.pack("HHHH", min(max(int(rows), 1), 1000), min(max(int(cols), 1), 1000), 0, 0)
        self.fcntl.ioctl(self.master, self.termios.TIOCSWINSZ, size)

    def echoes(self):
        """False at a password prompt: echo off in line mode. A line editor
        (readline in python3 or bash -i) turns echo off too, but leaves line
        mode and echoes the keys itself: what is typed there is shown."""
        try:
            lflag = self.termios.tcgetattr(self.master)[3]
        except self.termios.error:
            return True  # the terminal is gone: nothing more is typed into it
        return bool(lflag & self.termios.ECHO) or not lflag & self.termios.ICANON

    def report_echo(self):
        """A t frame when the echo changed since last reported."""
        echo = self.echoes()
        if echo != self.echo:
            self.echo = echo
            send_json(b"t", {"echo": echo})

    def end_of_file(self):
        try:
            return self.termios.tcgetattr(self.master)[6][self.termios.VEOF] or b"\x04"
        except self.termios.error:
            return b"\x04"


class Input:
    """Input frames for the command, written in order to its terminal or
    stdin pipe as it takes them; each acknowledged with a k frame once
    written, saying whether the terminal echoed at that moment."""

    def __init__(self, fd, terminal):
        self.fd = fd
        self.terminal = terminal
        self.queue = []  # [seq, bytes, echo or None, end-of-input]
        os.set_blocking(fd, False)

    def frame(self, kind, payload):
        if kind == b"w":
            if self.terminal:
                size = json.loads(payload)
                self.terminal.resize(size["cols"], size["rows"])
            return
        (seq,) = struct.unpack_from(">I", payload)
        if kind == b"i":
            self.queue.append([seq, payload[4:], None, False])
        elif self.terminal:  # z on a terminal: its end-of-file character
            self.queue.append([seq, self.terminal.end_of_file(), None, False])
        else:
            self.queue.append([seq, b"", None, True])

    def write(self):
        """Writes what the fd takes now."""
        while self.queue and self.fd is not None:
            item = self.queue[0]
            if item[2] is None:
                item[2] = self.terminal.echoes() if self.terminal else True
            if item[3]:
                os.close(self.fd)  # a pipe's end of input
                self.fd = None
            else:
                try:
                    written = os.write(self.fd, item[1][:65536]) if item[1] else 0
                except BlockingIOError:
                    return
                except OSError:
                    self.fd = None  # the command's side is gone; what is left is dropped
                    return
                item[1] = item[1][written:]
                if item[1]:
                    return
            self.queue.pop(0)
            send_json(b"k", {"seq": item[0], "echo": item[2]})

    def close(self):
        if self.fd is not None and not self.terminal:
            os.close(self.fd)
        self.fd = None


class Relay:
    """Moves bytes while the command runs: its output out in o frames, its
    state report into memory, and, with an Input, the executor's frames in."""

    def __init__(self, out_r, state_r, feed):
        self.out_r, self.state_r = out_r, state_r
        self.readers = {out_r, state_r}
        self.feed = feed
        self.stdin_open = True  # the executor's frames: input, or the order to stop
        self.state = bytearray()
        self.overflow = False

    def run(self, pid):
        import select
        status = None
        while self.readers or status is None:
            if status is None:
                # Once both pipes are closed only the exit is missing: wait for it.
                status = reap(pid, block=not self.readers)
                if status is not None:
                    end_everything()  # a leftover holding a pipe would keep it open forever
            if not self.readers:
                continue
            watched = list(self.readers) + ([0] if self.stdin_open else [])
            writers = []
            if self.feed is not None and self.feed.queue and self.feed.fd is not None:
                writers.append(self.feed.fd)
            ready_r, ready_w, _ = select.select(watched, writers, [], 0.05)
            if self.feed is not None and self.feed.fd in ready_w:
                self.feed.write()
            for fd in ready_r:
                if fd == 0:
                    self._receive()
                else:
                    self._read(fd)
        if self.feed is not None:
            self.feed.close()
        return status

    def _receive(self):
        if not INBOX.fill():
            self.stdin_open = False  # the executor is gone; the engine ends us
            return
        for kind, payload in INBOX.frames():
            if kind == Inbox.STOP:
                # Stopped (a time limit, a cancel): every process of the
                # tenant goes now; the shell's death ends the command, and
                # its files are saved as for one that ended.
                kill_everyone()
            elif kind in Inbox.INPUT and self.feed is not None:
                self.feed.frame(kind, payload)
        if self.feed is not None:
            self.feed.write()
            if self.feed.terminal:
                self.feed.terminal.report_echo()

    def _read(self, fd):
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""  # a terminal's master reads EIO once nobody holds the terminal
        if not data:
            self.readers.discard(fd)
            if self.feed is not None and self.feed.fd == fd:
                self.feed.fd = None  # the terminal's master: nothing more can be typed
            os.close(fd)
        elif fd == self.out_r:
            if self.feed is not None and self.feed.terminal:
                self.feed.terminal.report_echo()  # before the prompt that follows the change
            send(b"o", data)
        elif len(self.state) + len(data) <= MAX_STATE:
            self.state += data
        else:
            self.overflow = True


def reap(pid, block=False):
    """The shell's exit status once it has ended (reaping any orphan on the way)."""
    while True:
        try:
            found, raw = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return 255
        if found == 0:
            return None
        if found == pid:
            code = os.waitstatus_to_exitcode(raw)
            return code if code >= 0 else 128 - code


def kill_everyone():
    """SIGKILL every other process: PID 1, the supervisor, is spared."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def end_everything():
    """SIGKILL every other process until none is left (reaping them)."""
    while True:
        kill_everyone()
        try:
            while os.waitpid(-1, 0):
                pass
        except ChildProcessError:
            return


# -- the files ------------------------------------------------------------------

KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}


class Access:
    """Every entry in the home is the sandbox user's own, but its modes are
    the tenant's: a directory made read-only (or unreadable) must not stop a
    scan or a restore. Missing owner bits are added while the work needs
    them, and the modes are put back at the end (restore() then sets the
    modes its tree asks for)."""

    def __init__(self):
        self.saved = {}

    def grant(self, path, bits):
        try:
            mode = stat.S_IMODE(os.lstat(path).st_mode)
        except OSError:
            return
        if mode & bits != bits:
            self.saved.setdefault(path, mode)
            os.chmod(path, mode | bits)

    def parents(self, path):
        """Makes the directories above ``path`` (below HOME) enterable and writable."""
        home = os.fsencode(HOME) if isinstance(path, bytes) else HOME
        chain = []
        parent = os.path.dirname(path)
        while len(parent) > len(home):
            chain.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(chain):
            self.grant(directory, stat.S_IRWXU)

    def put_back(self):
        for path, mode in sorted(self.saved.items(), reverse=True):
            try:
                os.chmod(path, mode)
            except OSError:
                pass
        self.saved.clear()


ACCESS = Access()


# A manifest frame is cut by its bytes, not by a count of entries: an entry
# is at most a 4096-byte path and a 4096-byte target, each byte at most six
# once JSON escapes it (a control character is \u00XX), so no frame comes
# near the executor's limit on a frame (8 MiB), whatever the names hold.
MANIFEST_FRAME_BYTES = 256 * 1024
MAX_PATH_BYTES = 4096  # the longest path a tree holds (executor/workspace/tree.py)
MAX_SKIPPED = 100  # listed in the M frame; the rest are counted


def entry_json(item):
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode()


def listing_digest(items):
    """What a directory holds, in 32 hex digits: its entries' names, kinds,
    modes, sizes, inodes, ctimes and targets, in byte order of the names.
    executor/workspace/cache.py computes the same from its index."""
    import hashlib

    text = "".join(f"{path.rpartition('/')[2]}\0{kind}\0{mode}\0{size}\0{ino}\0{ctime}\0"
                   f"{target or ''}\0" for path, kind, mode, size, ino, ctime, target in items)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def send_manifest(max_entries=None, known=None, changed=None, held=None):
    """Every entry below HOME, parents first; symlinks are never followed.

    The walk runs in HOME (the caller's cwd) on relative paths, so a path
    up to PATH_MAX bytes below it can be opened and examined. A directory
    that cannot be listed is a failure reported in the M frame, never a
    skip: what is under it would be lost from the session's files. The walk
    stops once it found more than ``max_entries`` entries (the executor
    refuses such a capture; going on would only cost time).

    ``known``: {directory: listing_digest} of the executor's index. A
    directory whose entries still hash to its digest is sent as [path]
    alone (its entries are as the executor knows them); its subdirectories
    are walked all the same. A directory holding a skipped entry is always
    sent whole.

    ``changed``: when the executor knows which directories changed since
    its index (its kernel's change record), only those are listed, and
    below them only the directories its index does not hold as they are:
    ``held`` gives [inode, ctime_ns] of each subdirectory of ``changed``
    that the index holds; one found otherwise (a new one, or another one
    put in its place) is walked whole."""
    known = known if isinstance(known, dict) else {}
    held = held if isinstance(held, dict) else {}
    batch, batch_bytes, count = [], 0, 0
    skipped, skipped_more, failed = [], 0, None
    if isinstance(changed, list):
        changed = {path for path in changed if isinstance(path, str)}
        stack = []
        for path in sorted(changed, reverse=True):
            try:
                if changed_directory(path):
                    stack.append((os.fsencode(path) if path else b".",
                                  f"{path}/" if path else ""))
            except OSError as exc:
                failed = [path or ".", f"cannot list: {exc.strerror}"]
                stack = []
                break
    else:
        changed, stack = None, [(b".", "")]
    while stack and failed is None and (max_entries is None or count <= max_entries):
        directory, prefix = stack.pop()
        ACCESS.grant(directory, stat.S_IRUSR | stat.S_IXUSR)
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                found = []
                with os.scandir(fd) as listing:
                    for entry in listing:
                        # fstatat on the directory's fd: no path is resolved again
                        found.append((entry.name, entry.stat(follow_symlinks=False)))
                links = {name: os.readlink(name, dir_fd=fd)
                         for name, st in found if stat.S_ISLNK(st.st_mode)}
            finally:
                os.close(fd)
        except OSError as exc:
            failed = [prefix.rstrip("/") or ".", f"cannot list: {exc.strerror}"]
            break
        items, whole = [], False
        saved = ACCESS.saved  # modes the scan itself opened up (rarely any)
        # In byte order of the names: the order the digest is taken in.
        for name, raw, st in sorted((os.fsencode(raw), raw, st) for raw, st in found):
            try:
                path = prefix + name.decode("utf-8")
            except UnicodeDecodeError:
                path, why = prefix + repr(name)[2:-1], "name is not UTF-8"
            else:
                why = None
            full = name if directory == b"." else directory + b"/" + name
            mode = stat.S_IMODE(saved.get(full, st.st_mode) if saved else st.st_mode)
            kind = KINDS.get(stat.S_IFMT(st.st_mode))
            target = None
            if why is None and kind is None:
                why = "not a file, directory or symbolic link"
            if why is None and kind == "symlink":
                try:
                    target = os.fsencode(links[raw]).decode("utf-8")
                except UnicodeDecodeError:
                    why = "link target is not UTF-8"
            if len(full) > MAX_PATH_BYTES:
                failed = [path, f"its path is longer than {MAX_PATH_BYTES} bytes"]
                break
            if why is not None:
                whole = True
                if len(skipped) < MAX_SKIPPED:
                    skipped.append([path, why])
                else:
                    skipped_more += 1
                continue
            items.append([path, kind, mode, st.st_size if kind == "file" else 0, st.st_ino,
                          st.st_ctime_ns, target])
            if kind == "dir" and (changed is None or (
                    path not in changed and held.get(path) != [st.st_ino, st.st_ctime_ns])):
                stack.append((full, path + "/"))
        if failed is not None:
            break
        count += len(items)
        here = prefix.rstrip("/")
        if not whole and here in known and known[here] == listing_digest(items):
            encoded = [entry_json([here])]
        else:
            encoded = [entry_json(item) for item in items]
        for item in encoded:
            batch.append(item)
            batch_bytes += len(item) + 1
            if batch_bytes >= MANIFEST_FRAME_BYTES:
                send(b"m", b"[" + b",".join(batch) + b"]")
                batch, batch_bytes = [], 0
    if batch:
        send(b"m", b"[" + b",".join(batch) + b"]")
    send_json(b"M", {"entries": count, "skipped": skipped, "skipped_more": skipped_more,
                     "failed": failed,
                     "over": max_entries is not None and count > max_entries})


def changed_directory(path):
    """Whether a directory the executor names as changed is one to list (it
    names what its kernel saw; nothing has changed since), made enterable:
    not if it is gone or not a directory; OSError if it cannot be looked at."""
    rel = os.fsencode(path) if path else b"."
    parts = rel.split(b"/")
    for end in range(1, len(parts)):
        ACCESS.grant(b"/".join(parts[:end]), stat.S_IXUSR)
    try:
        return stat.S_ISDIR(os.lstat(rel).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def enter_home():
    """The scan and the files sent work on paths relative to HOME, whose
    modes (e.g. 000 after `chmod 000 ~`) are put back at the end."""
    ACCESS.grant(HOME, stat.S_IRUSR | stat.S_IXUSR)
    os.chdir(HOME)


def send_files(paths):
    """The bytes of the files asked for, by their paths relative to HOME
    (the caller's cwd)."""
    for path in paths:
        send_json(b"f", {"path": path})
        rel = path.encode("utf-8")
        try:
            if not os.path.islink(rel):
                ACCESS.grant(rel, stat.S_IRUSR)
            fd = os.open(rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            send_json(b"F", {"ok": False, "error": exc.strerror})
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                send_json(b"F", {"ok": False, "error": "not a regular file"})
                continue
            while chunk := os.read(fd, MAX_FRAME):
                send(b"d", chunk)
            send_json(b"F", {"ok": True})
        except OSError as exc:
            send_json(b"F", {"ok": False, "error": exc.strerror})
        finally:
            os.close(fd)


# -- restore ----------------------------------------------------------------------

def remove(path, parents_ready=False):
    """Removes whatever is at ``path``; ``parents_ready``: the caller made
    the directories above it enterable and writable already."""
    import shutil

    def allow_and_retry(function, failed, _exc_info):
        # A read-only or unreadable directory inside the tree: open it up, try again.
        os.chmod(os.path.dirname(failed), stat.S_IRWXU)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, stat.S_IRWXU)
        function(failed)

    if not parents_ready:
        ACCESS.parents(path)
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            ACCESS.saved.pop(path, None)
            os.chmod(path, stat.S_IRWXU)
            shutil.rmtree(path, onerror=allow_and_retry)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


class Archive:
    """The executor's archive on stdin (executor/workspace/restore.py writes
    it): a POSIX tar of regular files, directories and symbolic links, an
    entry whose name, target or size does not fit its ustar header preceded
    by a PAX header that holds it. Read here, not with tarfile, whose layers
    cost more than writing the files does; anything else is refused."""

    BLOCK = 512
    KINDS = {b"0": "file", b"\0": "file", b"5": "dir", b"2": "symlink"}

    def __init__(self, stream):
        self.stream = stream  # buffered: exact reads of any size

    def exactly(self, size):
        data = self.stream.read(size)
        if len(data) != size:
            raise EOFError("the archive ended early")
        return data

    def entries(self):
        """[name, kind, mode, size, target, PAX values] of each entry; a
        file's bytes are read (``chunks``) before the next entry is."""
        pax = {}
        while (header := self.exactly(self.BLOCK)) != bytes(self.BLOCK):  # zeros: the end
            if sum(header[:148]) + 8 * 32 + sum(header[156:]) != _octal(header[148:156]):
                raise ValueError("an archive header whose checksum does not match")
            kind, size = header[156:157], _octal(header[124:136])
            if kind == b"x":
                pax = _pax_records(self.exactly(-size % self.BLOCK + size)[:size])
                continue
            if kind not in self.KINDS:
                raise ValueError(f"an archive entry of type {kind!r}")
            name = pax.get("path") or "/".join(
                part for part in (_text(header[345:500]), _text(header[:100])) if part)
            yield [name.rstrip("/"), self.KINDS[kind], _octal(header[100:108]),
                   int(pax.get("size", size)), pax.get("linkpath") or _text(header[157:257]), pax]
            pax = {}

    def chunks(self, size):
        """The next ``size`` bytes, in pieces, then the padding skipped."""
        left = size
        while left:
            chunk = self.exactly(min(left, MAX_FRAME))
            left -= len(chunk)
            yield chunk
        self.exactly(-size % self.BLOCK)


def _octal(field):
    digits = field.split(b"\0", 1)[0].strip()
    return int(digits, 8) if digits else 0


def _text(field):
    return field.split(b"\0", 1)[0].decode("utf-8")


def _pax_records(data):
    """A PAX header's records ("<length> <key>=<value>\\n" each) as a dict."""
    values, at = {}, 0
    while at < len(data):
        space = data.index(b" ", at)
        end = at + int(data[at:space])
        if end > len(data) or end <= space or data[end - 1:end] != b"\n":
            raise ValueError("a PAX header that does not parse")
        key, _, value = data[space + 1:end - 1].partition(b"=")
        values[key.decode("utf-8")] = value.decode("utf-8")
        at = end
    return values


def write_checked(chunks, name, mode, path, expected):
    """Writes a file of the archive (``chunks``: its bytes) under a name of
    its own beside ``path``, and puts it in place only once its bytes hash
    to ``expected``, the SHA-256 the executor sent for it: a blob altered in
    the database fails the restore, and no file ever holds its bytes."""
    import hashlib

    if expected is None:
        raise ValueError(f"{name!r}: no SHA-256 was sent for it")
    while True:
        part = os.path.join(os.path.dirname(path), f".pg-shell-{os.urandom(8).hex()}.restoring")
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            break
        except FileExistsError:
            continue
    try:
        digest = hashlib.sha256()
        try:
            for chunk in chunks:
                digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        if digest.hexdigest() != expected:
            raise ValueError(f"{name!r}: its bytes do not hash to blob {expected}")
        os.rename(part, path)
    except BaseException:
        os.unlink(part)
        raise


def restore(header):
    """Brings HOME to the executor's tree: deletions first, then the
    archive's entries (built by the executor from blobs it read itself)."""
    if header.get("wipe"):
        for entry in os.scandir(HOME):
            remove(entry.path)
    for path in sorted(header.get("delete") or [], reverse=True):
        remove(os.path.join(HOME, path))
    dir_modes = []
    digests = iter(header.get("sha256") or ())
    ready = None  # the directory whose parents were made ready last
    archive = Archive(os.fdopen(0, "rb", buffering=MAX_FRAME))
    for name, kind, mode, size, target, pax in archive.entries():
        path = os.path.join(HOME, name)
        # Entries come directory by directory, and no mode is put back
        # before the end: the parents of the last entry's stay ready.
        if os.path.dirname(path) != ready:
            ACCESS.parents(path)
            ready = os.path.dirname(path)
        if kind == "dir":
            if not os.path.isdir(path) or os.path.islink(path):
                remove(path, parents_ready=True)
                os.mkdir(path, 0o700)
            dir_modes.append((path, mode))
        elif kind == "symlink":
            remove(path, parents_ready=True)
            os.symlink(target, path)
        else:
            remove(path, parents_ready=True)
            # An older executor sends the SHA-256 in the file's PAX header.
            expected = next(digests, None) or pax.get("PGSHELL.sha256")
            write_checked(archive.chunks(size), name, mode, path, expected)
    # Modes last, deepest first: a read-only directory must not stop its own restore.
    ACCESS.put_back()
    for path, mode in reversed(dir_modes):
        os.chmod(path, mode)


def load_while_idle():
    """A warm container waits for its command: the modules the command and
    the scan after it need (hashlib loads OpenSSL, 2-3 ms) are loaded
    meanwhile rather than on the command's time. A command already waiting
    (a cold start) goes first; they are loaded when needed."""
    import select
    if not select.select([0], [], [], 0)[0]:
        import hashlib  # noqa: F401


def main():
    # Not dumpable: no ptrace, no /proc/1/fd or /proc/1/mem for the tenant.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    # As PID 1, a signal with no handler is ignored; Python's SIGINT handler
    # would let the tenant end the supervisor.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    mode = sys.argv[1] if len(sys.argv) > 1 else "run"
    status = 0
    if mode == "protocol":
        print(PROTOCOL)
        return 0
    if mode == "restore":
        try:
            restore(receive(b"R"))
            send_json(b"r", {"ok": True})
        except Exception as exc:  # reported, and the copy stays untrusted
            send_json(b"r", {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            send(b"e")
            return 1
        enter_home()
        send_manifest()
        ACCESS.put_back()
    else:
        load_while_idle()
        request = receive(b"c")
        status = run_command(request)
        if request.get("capture"):
            enter_home()
            limit = request.get("max_entries")
            scan = request
            if request.get("ask"):
                send(b"n")
                scan = receive(b"D")
            send_manifest(limit if isinstance(limit, int) else None, scan.get("known"),
                          scan.get("changed"), scan.get("held"))
            send_files(receive(b"q").get("paths") or [])
            ACCESS.put_back()
    send(b"e")
    if mode == "run":
        linger()
    return status


def linger():
    """Every tenant process is gone and everything is said: the container
    exits once the executor closes stdin, which it does after it stored the
    command's completion, so that the engine's work of tearing the container
    down (its volume, its cgroup, the runtime) comes after it, not beside it."""
    while INBOX.fill():
        INBOX.buf.clear()

