"""GPU power limits: what each device allows, whether this process may change it, and the call
that does. Reading never changes anything (`greenbench doctor` and the launcher's preflight only
read); the launcher records and restores every change (`greenbench.launcher.power_limits`).

Facts used (NVML API reference; ml-energy/zeus ``zeus/device/gpu/nvidia.py``,
``zeus/utils/zeusd.py`` and its "System privileges" docs):

- ``nvmlDeviceGetPowerManagementLimit`` (the limit now), ``…DefaultLimit`` (the driver's own) and
  ``…LimitConstraints`` (the allowed ``(min, max)``) are milliwatts and need no privilege.
- ``nvmlDeviceSetPowerManagementLimit`` needs root: Linux's ``CAP_SYS_ADMIN`` ("SYS_ADMIN
  capability is required to modify GPU power limits", Zeus). Without it NVML raises
  ``NVML_ERROR_NO_PERMISSION``; outside the constraints, ``NVML_ERROR_INVALID_ARGUMENT``. Whether
  the process has the capability is read from ``CapEff`` in ``/proc/self/status`` (bit 21), so the
  check itself changes nothing.
- Zeus's daemon ``zeusd`` runs privileged and sets limits for unprivileged processes; its client
  is configured by ``ZEUSD_SOCK_PATH`` (or ``ZEUSD_HOST_PORT``) and says whether this caller may
  control GPUs (``can_control_gpu``). It takes NVML indices.

The library is pynvml (nvidia-ml-py) unless the caller hands another with the same calls (an
emulated GPU's, `greenbench.hardware.nvml_model`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenbench.energy.nvml import _describe, _pynvml, nvml_index
from greenbench.errors import GreenbenchError

CAP_SYS_ADMIN = 21
PROC_STATUS = "/proc/self/status"


class PowerLimitRefused(GreenbenchError):
    """A power limit cannot be applied here (no permission, no NVML, no GPU); nothing ran."""

    exit_code = 2


class PowerLimitError(GreenbenchError):
    """Setting or restoring a power limit failed while a run was under way."""


@dataclass(frozen=True, slots=True)
class DeviceLimits:
    """One GPU's power limits, in watts: the limit now, the driver's default and the range."""

    index: int  # the index the run uses (a CUDA index, or an emulated device's)
    nvml_index: int | str  # NVML's index, or the GPU's UUID where CUDA_VISIBLE_DEVICES names one
    uuid: str
    name: str
    current_w: float
    default_w: float
    min_w: float
    max_w: float


@dataclass(frozen=True, slots=True)
class Permission:
    """Whether limits may be changed here, through what (``nvml``, ``zeusd``, ``emulated``), and
    why (a sentence naming what is missing when it may not)."""

    may: bool
    via: str
    why: str


def has_capability(bit: int = CAP_SYS_ADMIN, status_path: str | Path = PROC_STATUS) -> bool:
    """Whether this process holds capability ``bit`` (``CapEff`` of ``/proc/self/status``)."""
    try:
        for line in Path(status_path).read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def zeusd_client() -> tuple[Any | None, str]:
    """(a client of a running zeusd, "") or (None, why not); never raises."""
    if not (os.environ.get("ZEUSD_SOCK_PATH") or os.environ.get("ZEUSD_HOST_PORT")):
        return None, "no zeusd configured (ZEUSD_SOCK_PATH or ZEUSD_HOST_PORT unset)"
    try:
        from zeus.utils.zeusd import ZeusdClient, ZeusdConfig

        config = ZeusdConfig.from_env()
        return ZeusdClient(config), ""
    except ImportError:
        return None, "zeusd is configured but zeus is not installed (pip install zeus)"
    except Exception as e:  # ZeusdConnectionError, ZeusdAuthError, a bad host:port, …
        return None, f"zeusd is configured but does not answer ({_describe(e)})"


def clip_w(requested_w: float, devices: Sequence[DeviceLimits]) -> tuple[float, str]:
    """The limit to apply for ``requested_w`` on every device in ``devices``: within every
    device's range (rounded to whole watts, as NVML takes milliwatts from tools in watts), and
    a note when it had to be moved."""
    low = max(d.min_w for d in devices)
    high = min(d.max_w for d in devices)
    applied = float(round(min(max(requested_w, low), high)))
    if applied == round(requested_w):
        return applied, ""
    side = "lowest" if requested_w < low else "highest"
    return applied, (
        f"requested {requested_w:g} W is outside the allowed {low:g}–{high:g} W; clipped to "
        f"the {side} allowed, {applied:g} W"
    )


class LimitControl:
    """The power limits of this node's GPUs, through one NVML library (pynvml by default)."""

    def __init__(self, library: Any = None) -> None:
        self.emulated = getattr(library, "emulated", None)
        try:
            self._nv = library if library is not None else _pynvml()
            self._nv.nvmlInit()
        except Exception as e:
            raise PowerLimitRefused(
                f"GPU power limits need NVML, which is unavailable here ({_describe(e)})"
            ) from e
        self._zeusd: Any = None

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:
            pass

    def __enter__(self) -> LimitControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self, where: int | str) -> Any:
        if isinstance(where, int):
            return self._nv.nvmlDeviceGetHandleByIndex(where)
        return self._nv.nvmlDeviceGetHandleByUUID(where)

    def count(self) -> int:
        """How many GPUs NVML lists (every one on the node, whatever CUDA_VISIBLE_DEVICES)."""
        return int(self._nv.nvmlDeviceGetCount())

    def read(self, indices: Sequence[int], *, nvml_indices: bool = False) -> list[DeviceLimits]:
        """The limits of devices ``indices``: CUDA indices, mapped through CUDA_VISIBLE_DEVICES
        for the real driver (NVML's own with ``nvml_indices``; an emulated library's are its
        own). Changes nothing."""
        mapped = not (self.emulated or nvml_indices)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") if mapped else None
        out = []
        for i in indices:
            try:
                where = nvml_index(i, visible)
                h = self._handle(where)
                name = self._nv.nvmlDeviceGetName(h)
                uuid = self._nv.nvmlDeviceGetUUID(h)
                low, high = self._nv.nvmlDeviceGetPowerManagementLimitConstraints(h)
                out.append(
                    DeviceLimits(
                        index=i,
                        nvml_index=where,
                        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        current_w=self._nv.nvmlDeviceGetPowerManagementLimit(h) / 1000,
                        default_w=self._nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000,
                        min_w=low / 1000,
                        max_w=high / 1000,
                    )
                )
            except GreenbenchError as e:
                raise PowerLimitRefused(str(e)) from None
            except Exception as e:
                raise PowerLimitRefused(
                    f"cannot read the power limits of GPU {i} through NVML ({_describe(e)})"
                ) from e
        return out

    def read_uuid(self, uuid: str) -> DeviceLimits:
        """The limits of the GPU with ``uuid`` (the journal's key), whatever its index now."""
        h = self._handle(uuid)
        low, high = self._nv.nvmlDeviceGetPowerManagementLimitConstraints(h)
        name = self._nv.nvmlDeviceGetName(h)
        return DeviceLimits(
            index=-1,
            nvml_index=uuid,
            uuid=uuid,
            name=name.decode() if isinstance(name, bytes) else str(name),
            current_w=self._nv.nvmlDeviceGetPowerManagementLimit(h) / 1000,
            default_w=self._nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000,
            min_w=low / 1000,
            max_w=high / 1000,
        )

    def permission(self, status_path: str | Path | None = None) -> Permission:
        """May this process change limits, and through what? Changes nothing. (``status_path``:
        where the process's capabilities are read, ``/proc/self/status``.)"""
        if self.emulated:
            grants = getattr(self._nv, "grants_changes", lambda: True)()
            if grants:
                return Permission(True, "emulated", f"emulated {self.emulated}: no root needed")
            return Permission(
                False,
                "emulated",
                f"the emulated {self.emulated}'s driver refuses changes (it emulates a user "
                "without root or zeusd)",
            )
        if has_capability(CAP_SYS_ADMIN, status_path or PROC_STATUS):
            return Permission(True, "nvml", "this process has CAP_SYS_ADMIN (root)")
        client, why = zeusd_client()
        if client is not None:
            if client.can_control_gpu:
                self._zeusd = client
                return Permission(True, "zeusd", f"through zeusd at {client.endpoint}")
            why = f"zeusd at {client.endpoint} does not grant gpu-control to this caller"
        return Permission(
            False,
            "",
            "changing a GPU power limit needs root (CAP_SYS_ADMIN) or a running zeusd "
            f"(ZEUSD_SOCK_PATH); neither is here: not root, and {why}",
        )

    def set_w(self, device: DeviceLimits, watts: float, via: str) -> None:
        """Set ``device``'s limit to ``watts`` through ``via`` (``nvml``, ``emulated`` or
        ``zeusd``); PowerLimitError naming the device and the driver's reason on failure."""
        mw = round(watts * 1000)
        try:
            if via == "zeusd":
                if self._zeusd is None:
                    self._zeusd, why = zeusd_client()
                    if self._zeusd is None:
                        raise PowerLimitError(why)
                if not isinstance(device.nvml_index, int):
                    raise PowerLimitError(
                        "zeusd takes NVML indices; CUDA_VISIBLE_DEVICES names a UUID"
                    )
                self._zeusd.set_power_limit([device.nvml_index], mw, True)
            else:
                self._nv.nvmlDeviceSetPowerManagementLimit(self._handle(device.nvml_index), mw)
        except PowerLimitError:
            raise
        except Exception as e:
            raise PowerLimitError(
                f"cannot set GPU {device.index} ({device.uuid}) to {watts:g} W through {via}: "
                f"{_describe(e)}"
            ) from e
