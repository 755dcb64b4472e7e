"""What a run ran on: host, git commit, hardware and software versions, stored with every run
so results can be re-analysed."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from typing import Any

import torch

from greenbench.hardware import git
from greenbench.hardware.machine import cpu_model, memory_bytes


def _gpus() -> tuple[list[dict[str, Any]], str | None]:
    gpus: list[dict[str, Any]] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": props.name, "memory_bytes": props.total_memory})
    driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver (or no nvidia-ml-py): nothing to report
        pass
    if isinstance(driver, bytes):
        driver = driver.decode()
    return gpus, driver


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
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": _version("transformers"),
            "duckdb": _version("duckdb"),
            "greenbench": __version__,
            "git_dirty": bool(status) if status is not None else None,
        },
    }
