"""Files and folders written where the user pointed (`export --out`, `report --out`).

Why this module: a path a user types can name an earlier report or export, a device such as
``/dev/full``, a folder nobody may write, or a place outside the working directory. Each case gets
one clear ``OutputError`` (exit 2) before anything is written, and nothing is ever half-written:
output goes to a temporary name beside the target (same folder, same file system) that is renamed
over it only once it is complete, and removed on any failure (a full disk, an exception, Ctrl-C).

Policy, shared by every command that writes user-named output:

- an existing target is replaced only with ``force`` (``--force``);
- a target that exists but is not a regular file (a device, a pipe) or not a folder (for a
  folder target) is always refused: renaming over ``/dev/full`` would replace the device;
- a path outside the current directory (after resolving ``..`` and symlinks) is allowed, because
  the user typed it, but ``where`` names the resolved place, so ``../../x`` is never written
  without a word.

Torch-free and SQL-free; imports only ``greenbench.errors``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from greenbench.errors import OutputError


def resolve_target(path: str | Path, *, kind: Literal["file", "folder"], force: bool) -> Path:
    """The absolute, symlink-free path to write ``path`` to; OutputError when it cannot be.

    A file target must not exist (or, with ``force``, be a regular file); a folder target must
    not exist, be empty, or (with ``force``) be a folder.
    """
    target = Path(path).expanduser().resolve()
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {_reason(exc)}") from None
    if kind == "file":
        if stat.S_ISDIR(mode):
            raise OutputError(f"{target} is a folder: give a file name to write")
        if not stat.S_ISREG(mode):
            raise OutputError(f"{target} exists and is not a regular file (a device or a pipe)")
        if not force:
            raise OutputError(f"{target} already exists: pass --force to overwrite it")
    else:
        if not stat.S_ISDIR(mode):
            raise OutputError(f"{target} exists and is not a folder: give a folder to write into")
        if not force and any(target.iterdir()):
            raise OutputError(f"{target} already exists and is not empty: pass --force to replace")
    return target


def where(path: Path) -> str:
    """``path`` made absolute, noting when it lies outside the current directory."""
    path = Path(path).resolve()
    cwd = Path.cwd().resolve()
    if path.is_relative_to(cwd):
        return str(path)
    return f"{path} (outside the current directory {cwd})"


@contextmanager
def atomic_file(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success rename it over ``target``.

    The temporary file exists (empty) when yielded, so an unwritable folder fails here, before
    any work. Any failure removes it; an OSError becomes one OutputError line.
    """
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.open("xb").close()
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {_reason(exc)}") from None
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"cannot write {target}: {_reason(exc)}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(target: Path, *, swap: bool, last: str | None = None) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success it becomes ``target``.

    Missing parents are created (and removed again on failure). A missing or empty ``target`` is
    replaced by one rename. An existing one is swapped whole when ``swap`` (the caller knows it
    holds only files it wrote), else the new files are renamed into it one by one, ``last``
    last (e.g. the README that links the others), and its other files are left alone.
    """
    created = _make_parents(target)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as exc:
        _remove_dirs(created)
        raise OutputError(f"cannot write {target}: {_reason(exc)}") from None
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        if not target.exists() or not any(target.iterdir()):
            os.replace(tmp, target)  # rename(2) replaces an empty folder
        elif swap and not Path.cwd().resolve().is_relative_to(target):  # never move the cwd
            old = target.with_name(f".{target.name}.{secrets.token_hex(4)}.old")
            os.rename(target, old)
            try:
                os.rename(tmp, target)
            except OSError:
                os.rename(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            names = sorted(os.listdir(tmp), key=lambda n: (n == last, n))
            for name in names:
                os.replace(tmp / name, target / name)
            tmp.rmdir()
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise OutputError(f"cannot write {target}: {_reason(exc)}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise


def _make_parents(target: Path) -> list[Path]:
    """Create ``target``'s missing parent folders; returns those created, deepest first."""
    created: list[Path] = []
    for parent in reversed(target.parents):  # shallowest first
        if parent.exists():
            continue
        try:
            parent.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            _remove_dirs(created)
            raise OutputError(f"cannot write {target}: {_reason(exc)}") from None
        created.insert(0, parent)
    return created


def _remove_dirs(dirs: list[Path]) -> None:
    for d in dirs:  # deepest first
        try:
            d.rmdir()
        except OSError:
            pass


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    """An OSError as its plain reason ("No space left on device"), without the errno prefix."""
    return exc.strerror or str(exc)
