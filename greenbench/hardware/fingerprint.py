"""What a run ran on: host, git commit, hardware and software versions, stored with every run
so results can be re-analysed.

It imports no torch: ``greenbench measure`` fingerprints the machine without paying for
torch's import (seconds). The GPUs are torch's view where torch is already loaded (the launcher,
a user's own loop), else NVML's (`greenbench.hardware.nvidia`), and torch's version and CUDA are
read from its installed files.
"""

from __future__ import annotations

import ast
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata, util
from pathlib import Path
from typing import Any

from greenbench.hardware import git
from greenbench.hardware.machine import cpu_model, memory_bytes
from greenbench.hardware.nvidia import driver_version, visible_gpus


def _gpus() -> tuple[list[dict[str, Any]], str | None]:
    torch = sys.modules.get("torch")
    if torch is None:
        gpus = [{"index": g.index, "name": g.name, "memory_bytes": g.memory_bytes}
                for g in visible_gpus()]  # fmt: skip
    else:
        gpus = []
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                gpus.append({"index": i, "name": props.name, "memory_bytes": props.total_memory})
    return gpus, driver_version()


def torch_versions() -> tuple[str | None, str | None]:
    """(torch's version, the CUDA it was built with) without importing torch where it is not
    loaded yet: from ``torch/version.py``, the file torch's build writes them to."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.__version__, torch.version.cuda
    try:
        spec = util.find_spec("torch")
    except (ImportError, ValueError):
        return None, None
    if spec is None or not spec.submodule_search_locations:
        return None, None
    found: dict[str, Any] = {}
    try:
        tree = ast.parse((Path(spec.submodule_search_locations[0]) / "version.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return _version("torch"), None
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found[target.id] = value.value
    version = found.get("__version__")
    return (version if isinstance(version, str) else _version("torch")), found.get("cuda")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=5, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip()


def fingerprint() -> dict[str, Any]:
    """This machine and software, stored with every run so results can be re-analysed.

    Keys match ``runs`` columns: ``host``, ``git_sha`` and ``git_branch`` (of the repository in
    the current directory, None outside one; a detached HEAD's branch is the CI's,
    `greenbench.hardware.git.branch`), ``hardware`` (os, cpu_model, logical_cores, memory_bytes,
    gpus, gpu_driver) and ``versions`` (python, torch, cuda, transformers, duckdb,
    greenbench, git_dirty). Which kernels a run used is part of its configuration (``kernels``).
    """
    from greenbench import __version__

    gpus, driver = _gpus()
    torch_version, cuda = torch_versions()
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {
        "host": socket.gethostname(),
        "git_sha": sha or None,
        "git_branch": git.branch() if sha else None,
        "hardware": {
            "os": platform.platform(),
            "cpu_model": cpu_model(),
            "logical_cores": os.cpu_count(),
            "memory_bytes": memory_bytes(),
            "gpus": gpus,
            "gpu_driver": driver,
        },
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch_version,
            "cuda": cuda,
            "transformers": _version("transformers"),
            "duckdb": _version("duckdb"),
            "greenbench": __version__,
            "git_dirty": bool(status) if status is not None else None,
        },
    }
