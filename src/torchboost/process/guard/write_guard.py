"""The write guard: an observed run changes none of the user's files for good.

Installed in every observed process (the doctor's child, tune's trials and end-to-end
runs), it wraps the calls through which Python code changes files, and before the first
change of a file that existed when the run started keeps its original in the journal
folder (:mod:`.guard_keeper`); after the run the parent puts the originals back and moves
what the run made out of the user's folders (:mod:`torchboost.process.guard.user_files`).

What is wrapped, and why each, is :mod:`.writers`. A failure of the guard itself never
reaches the script: the change goes ahead and is journaled as unprotected. Python's own
bytecode cache writes past these wrappers, so it is switched off while installed
(``sys.dont_write_bytecode``).
"""

from __future__ import annotations

import atexit
import builtins
import functools
import os
import shutil
import sys
import threading
from typing import Any, Callable

from torchboost.process.guard.guard_spec import EXEMPT, UNPROTECTED, USERS, WriteGuardSpec, note_held
from torchboost.process.guard import writers
from torchboost.process.guard.guard_keeper import COPY, LINK, MOVE, Keeper

__all__ = ["WriteGuard"]

_READ_MODES = frozenset({"r", "rb", "rt", "br", "tr", "U", "rU", "Ur"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC | os.O_CREAT
_SQLITE_SIDECARS = ("-journal", "-wal", "-shm")


class WriteGuard:
    """Wraps the calls that change files so the user's originals are kept; ``uninstall`` undoes all.

    Use as a context manager, or ``install()`` / ``uninstall()``. Installing twice in one
    process is refused, since the second would wrap the first's wrappers.
    """

    _active: "WriteGuard | None" = None

    def __init__(self, spec: WriteGuardSpec) -> None:
        self.spec = spec
        self._keeper = Keeper(spec)
        self._saved: list[tuple[Any, str, Any]] = []
        self._wrappers: dict[int, Any] = {}
        self._torch_wrapped = False
        self._local = threading.local()
        self._bytecode = sys.dont_write_bytecode

    @property
    def installed(self) -> bool:
        """True between ``install()`` and ``uninstall()``."""
        return WriteGuard._active is self

    def install(self) -> "WriteGuard":
        """Wrap the writers (torch's too when torch is imported: else :meth:`add_torch`);
        raises RuntimeError if a guard is already installed in this process."""
        if WriteGuard._active is not None:
            raise RuntimeError("torchboost's write guard is already installed in this process")
        WriteGuard._active = self
        self._wrap(writers.base(self))
        if "torch" in sys.modules:
            self.add_torch()
        else:
            self._wrap_open_aliases()
        self._bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
        self._keeper.inherited = note_held(self.spec.journal_dir, os.getpid())
        atexit.register(self._at_exit)
        os.register_at_fork(after_in_child=self._keeper.after_fork)
        return self

    def add_torch(self) -> None:
        """Wrap torch's savers, once torch is imported (a guard started with the process
        gets them when the script imports torch), and the aliases of ``open`` its import made."""
        if not self._torch_wrapped:
            self._torch_wrapped = True
            self._wrap(writers.torch_savers(self, lambda index, name: _saver(self, index, name)))
            self._wrap_open_aliases()

    def _wrap(self, targets: list[writers.Target]) -> None:
        for owner, name, make in targets:
            original = getattr(owner, name)
            if id(original) not in self._wrappers:  # one wrapper per function: io.open is builtins.open
                wrapper = make(original)
                self._wrappers[id(original)] = wrapper if isinstance(original, type) else \
                    functools.wraps(original)(wrapper)
            self._saved.append((owner, name, original))
            setattr(owner, name, self._wrappers[id(original)])

    def _wrap_open_aliases(self) -> None:
        original = next(o for owner, name, o in self._saved if owner is builtins and name == "open")
        for module, name in writers.open_aliases(original, self._wrappers[id(original)]):
            self._saved.append((module, name, original))
            setattr(module, name, self._wrappers[id(original)])

    def uninstall(self) -> None:
        """Restore every wrapped attribute and close the journal; safe to call twice."""
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        if self._saved:
            sys.dont_write_bytecode = self._bytecode
            atexit.unregister(self._at_exit)
            self._at_exit()
        self._saved, self._wrappers, self._torch_wrapped = [], {}, False
        if WriteGuard._active is self:
            WriteGuard._active = None

    def __enter__(self) -> "WriteGuard":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _at_exit(self) -> None:
        self._call_quietly(self._keeper.flush)
        self._keeper.close()

    # -- the one path every change takes ------------------------------------------------------
    def change(self, call: Callable[[], Any], raw: Any, how: str | None, *, dir_fd: int | None = None,
               follow: bool = True, counts: bool = True, hold: bool = False) -> Any:
        """Run ``call()``, which changes the file ``raw`` names: keep the user's original first
        (``how``: MOVE, COPY or LINK; None for a change that cannot alter an existing
        entry, such as ``mkdir``), journal a new entry and count the write after.
        ``hold`` keeps the wrappers off during the call (a save that opens its own file)."""
        local = self._local
        if getattr(local, "busy", False):
            return call()
        local.busy = True
        path = existed = moved = None
        kind = EXEMPT
        try:
            path = _resolve(raw, dir_fd, follow)
            kind = self._keeper.kind(path) if path is not None else EXEMPT
            if kind != EXEMPT:
                existed = os.path.lexists(path)
                moved = self._keeper.before_change(path, how) if existed and how else None
            else:
                path = None
        except Exception as exc:  # the guard's failure never reaches the script
            self._unprotected(path or str(raw), exc)
            path = None
        local.busy = hold
        try:
            result = call()
        except BaseException:
            if moved is not None:
                self._call_quietly(self._keeper.undo_move, path, moved)
            raise
        finally:
            local.busy = False
        if path is not None:
            self._call_quietly(self._after, path, existed, counts, kind)
        return result

    def _after(self, path: str, existed: bool, counts: bool, kind: str) -> None:
        if not existed and os.path.lexists(path):
            self._keeper.created(path, kind)
        if counts and (kind == USERS or self._keeper.is_kept(path)):  # scratch: the user's files only
            self._keeper.wrote(path)

    def _call_quietly(self, fn: Callable[..., Any], *args: Any) -> None:
        local = self._local
        was, local.busy = getattr(local, "busy", False), True
        try:
            fn(*args)
        except Exception as exc:
            self._unprotected(str(args[0]) if args else "", exc)
        finally:
            local.busy = was

    def _unprotected(self, path: str, exc: Exception) -> None:
        try:
            self._keeper.record(UNPROTECTED, path, why=f"{type(exc).__name__}: {exc}")
        except Exception:  # not even the journal can be written: nothing more to do
            pass

    # -- the wrappers -------------------------------------------------------------------------
    def _open(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if mode in _READ_MODES or isinstance(file, int) or not any(c in mode for c in "wax+"):
                return original(file, mode, *args, **kwargs)
            # "x" fails on an existing file: nothing of the user's to keep.
            how = None if "x" in mode else MOVE if "w" in mode else COPY
            return self.change(lambda: original(file, mode, *args, **kwargs), file, how)

        return open

    def _file_io(self, original: type) -> type:
        guard = self

        class FileIO(original):  # type: ignore[misc, valid-type]
            """``io.FileIO`` opened on a path for writing keeps the user's original first."""

            def __init__(self, file: Any, mode: str = "r", closefd: bool = True, opener: Any = None) -> None:
                if isinstance(file, int) or not any(c in mode for c in "wax+"):
                    return original.__init__(self, file, mode, closefd, opener)
                how = None if "x" in mode else MOVE if "w" in mode else COPY
                guard.change(lambda: original.__init__(self, file, mode, closefd, opener), file, how)

        FileIO.__name__ = FileIO.__qualname__ = original.__name__
        FileIO.__module__ = original.__module__
        return FileIO

    def _os_open(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def open(path: Any, flags: int, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> Any:
            if not flags & _WRITE_FLAGS:
                return original(path, flags, *args, dir_fd=dir_fd, **kwargs)
            # Renaming away is only safe when the open may create the file anew.
            creates = flags & os.O_CREAT
            how = None if creates and flags & os.O_EXCL else MOVE if creates and flags & os.O_TRUNC else COPY
            call = lambda: original(path, flags, *args, dir_fd=dir_fd, **kwargs)  # noqa: E731
            return self.change(call, path, how, dir_fd=dir_fd, counts=bool(flags & ~os.O_CREAT & _WRITE_FLAGS))

        return open

    def _truncate(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def truncate(path: Any, length: int) -> Any:
            if isinstance(path, int):  # a descriptor: its open for writing was seen
                return original(path, length)
            return self.change(lambda: original(path, length), path, COPY)

        return truncate

    def _rename(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def rename(src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> Any:
            call = lambda: original(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)  # noqa: E731
            # The source goes from its place: keep it if it is the user's; then the
            # destination is replaced: keep it too, and count the write.
            inner = lambda: self.change(call, dst, LINK, dir_fd=dst_dir_fd, follow=False)  # noqa: E731
            return self.change(inner, src, LINK, dir_fd=src_dir_fd, follow=False, counts=False)

        return rename

    def _unlink(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def unlink(path: Any, *, dir_fd: int | None = None) -> Any:
            return self.change(lambda: original(path, dir_fd=dir_fd), path, LINK, dir_fd=dir_fd, follow=False,
                               counts=False)

        return unlink

    def _rmtree(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def rmtree(path: Any, *args: Any, **kwargs: Any) -> Any:
            own = self._own_inside(path, kwargs.get("dir_fd"))
            if own is not None:
                return self._rmtree_around(path, own, args, kwargs)
            return self.change(lambda: original(path, *args, **kwargs), path, LINK, dir_fd=kwargs.get("dir_fd"),
                               follow=False, counts=False, hold=True)

        return rmtree

    def _own_inside(self, raw: Any, dir_fd: int | None) -> str | None:
        """torchboost's report folder (or its journal, when the folder itself is the target)
        when it lies inside the tree ``raw`` names: removing that whole would take the
        originals kept there with it. None otherwise."""
        if getattr(self._local, "busy", False):
            return None
        try:
            target = _resolve(raw, dir_fd, False)
        except Exception:  # noqa: BLE001 - the guard's failure never reaches the script
            return None
        if target is None or os.path.islink(target):
            return None
        for own in (self.spec.own_folder, self.spec.journal_dir):
            if own and own != target and own.startswith(target.rstrip(os.sep) + os.sep):
                return own
        return None

    def _rmtree_around(self, path: Any, own: str, args: tuple, kwargs: dict) -> None:
        """Remove everything under ``path`` but the way down to ``own`` and ``own`` itself,
        through the wrapped calls (so each of the user's originals is kept)."""
        target = _resolve(path, kwargs.get("dir_fd"), False)
        with os.scandir(target) as found:
            children = [entry.path for entry in found]
        for child in children:
            if child == own:
                continue
            if own.startswith(child + os.sep) and os.path.isdir(child) and not os.path.islink(child):
                self._rmtree_around(child, own, args, {k: v for k, v in kwargs.items() if k != "dir_fd"})
            elif os.path.isdir(child) and not os.path.islink(child):
                shutil.rmtree(child, *args, **{k: v for k, v in kwargs.items() if k != "dir_fd"})
            else:
                os.unlink(child)

    def _mkdir(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> Any:
            return self.change(lambda: original(path, mode, dir_fd=dir_fd), path, None, dir_fd=dir_fd,
                               follow=False, counts=False)

        return mkdir

    def _utime(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def utime(path: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(path, int) and not getattr(self._local, "busy", False):
                self._call_quietly(self._keep_times, path, kwargs.get("dir_fd"), kwargs.get("follow_symlinks", True))
            return original(path, *args, **kwargs)

        return utime

    def _from_file(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def from_file(filename: Any, shared: Any = None, *args: Any, **kwargs: Any) -> Any:
            if not shared:  # a private map: the file is only read
                return original(filename, shared, *args, **kwargs)
            # A shared map: the tensor's writes reach the file past every call: kept whole now.
            return self.change(lambda: original(filename, shared, *args, **kwargs), filename, COPY, hold=True)

        return from_file

    def _sqlite(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def connect(database: Any, *args: Any, **kwargs: Any) -> Any:
            path = writers.sqlite_file(database, kwargs.get("uri", args[6] if len(args) > 6 else False))
            if path is None:  # in memory, read-only, or a name this guard cannot read
                return original(database, *args, **kwargs)
            # SQLite writes through its own C calls: the database (and the journal files
            # beside it) is kept whole before the connection, as a file opened "r+" is.
            self._call_quietly(self._sidecars, path)
            return self.change(lambda: original(database, *args, **kwargs), path, COPY, hold=True)

        return connect

    def _sidecars(self, raw: str) -> None:
        """The files SQLite keeps beside a database: one of the user's kept, one that does
        not exist yet journaled as the run's, to be moved away if the run leaves it."""
        for suffix in _SQLITE_SIDECARS:
            path = _resolve(raw + suffix, None, True)
            kind = self._keeper.kind(path) if path is not None else EXEMPT
            if kind == EXEMPT:
                continue
            if os.path.lexists(path):
                self._keeper.before_change(path, COPY)
            else:
                self._keeper.created(path, kind)

    def _link(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            # A new name for a user's file: a write through it changes the user's file, so
            # the original is kept now, whole, before either name is written.
            if not getattr(self._local, "busy", False):
                self._call_quietly(self._keep_linked, src, kwargs.get("src_dir_fd"), kwargs.get("follow_symlinks", True))
            return self.change(lambda: original(src, dst, *args, **kwargs), dst, None,
                               dir_fd=kwargs.get("dst_dir_fd"), follow=False, counts=False)

        return link

    def _symlink(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def symlink(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            return self.change(lambda: original(src, dst, *args, **kwargs), dst, None, dir_fd=kwargs.get("dir_fd"),
                               follow=False, counts=False)

        return symlink

    def _keep_linked(self, raw: Any, dir_fd: int | None, follow: bool) -> None:
        path = _resolve(raw, dir_fd, follow)
        if path is not None and self._keeper.guarded(path) and os.path.lexists(path):
            self._keeper.before_change(path, COPY)

    def _keep_times(self, raw: Any, dir_fd: int | None, follow: bool) -> None:
        path = _resolve(raw, dir_fd, follow)
        if path is not None and self._keeper.guarded(path):
            self._keeper.keep_times(path)


def _saver(guard: WriteGuard, index: int, name: str) -> Callable[[Any], Any]:
    """A wrapper for a save function whose argument ``index`` (or keyword ``name``) may be a path."""
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def save(*args: Any, **kwargs: Any) -> Any:
            target = args[index] if len(args) > index else kwargs.get(name)
            if not isinstance(target, (str, bytes, os.PathLike)):  # a file object: its open was seen
                return original(*args, **kwargs)
            return guard.change(lambda: original(*args, **kwargs), target, MOVE, hold=True)

        return save

    return wrap


def _resolve(raw: Any, dir_fd: int | None, follow: bool) -> str | None:
    """The absolute path ``raw`` names, its folders' links resolved (and its own when
    ``follow``); None for a descriptor or a ``dir_fd`` this process cannot name."""
    if isinstance(raw, int):
        return None
    path = os.fsdecode(os.fspath(raw))
    if dir_fd is not None and not os.path.isabs(path):
        try:
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        except OSError:
            return None
    if follow:
        return os.path.realpath(path)
    head, tail = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(head), tail)
