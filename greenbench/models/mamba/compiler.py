"""The C compiler that builds Mamba's native selective scan (`greenbench.models.mamba.scan_native`),
found without building anything or importing torch, so that whether the kernel can be built
is known before a run (`greenbench.models.mamba.kernels.resolve_scan`)."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sysconfig


def find_compiler() -> str | None:
    """The system C compiler: Python's configured ``CC`` if it resolves, else ``cc`` or ``gcc``
    on PATH; None if there is none."""
    return _which_compiler(os.environ.get("PATH"))


@functools.cache
def _which_compiler(search_path: str | None) -> str | None:
    configured = shlex.split(sysconfig.get_config_var("CC") or "")
    for name in [*configured[:1], "cc", "gcc"]:
        path = shutil.which(name, path=search_path)
        if path:
            return path
    return None
