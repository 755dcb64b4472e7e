"""Reading and changing GPU power limits (greenbench.energy.power_limit), with pynvml's
functions faked at the library boundary (as tests/energy/test_nvml.py fakes them), the
process's capabilities at /proc/self/status, and zeusd at its client's boundary."""

from __future__ import annotations

from typing import ClassVar

import pynvml
import pytest
from fake_nvml import ROOT_CAPS, USER_CAPS, nvml_fixture, status_file  # noqa: F401

from greenbench.energy.power_limit import (
    CAP_SYS_ADMIN,
    LimitControl,
    PowerLimitError,
    PowerLimitRefused,
    clip_w,
    has_capability,
)


def test_capabilities_are_read_from_proc_status(tmp_path):
    assert has_capability(CAP_SYS_ADMIN, status_file(tmp_path, ROOT_CAPS))
    assert not has_capability(CAP_SYS_ADMIN, status_file(tmp_path, USER_CAPS))
    assert not has_capability(CAP_SYS_ADMIN, status_file(tmp_path, ROOT_CAPS & ~(1 << 21)))
    assert not has_capability(CAP_SYS_ADMIN, tmp_path / "missing")


def test_reading_limits_changes_nothing(nvml):
    with LimitControl() as control:
        devices = control.read([0, 1])
    assert [(d.current_w, d.default_w, d.min_w, d.max_w) for d in devices] == [
        (700, 700, 200, 700)
    ] * 2
    assert [d.uuid for d in devices] == ["GPU-0", "GPU-1"] and nvml.sets == []


def test_cuda_indices_map_through_cuda_visible_devices(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with LimitControl() as control:
        (device,) = control.read([0])
        assert device.uuid == "GPU-1" and device.nvml_index == 1
        assert [d.uuid for d in control.read([0, 1], nvml_indices=True)] == ["GPU-0", "GPU-1"]


def test_permission_as_root_without_root_and_through_zeusd(nvml, tmp_path, monkeypatch):
    monkeypatch.delenv("ZEUSD_SOCK_PATH", raising=False)
    monkeypatch.delenv("ZEUSD_HOST_PORT", raising=False)
    with LimitControl() as control:
        root = control.permission(status_file(tmp_path, ROOT_CAPS))
        user = control.permission(status_file(tmp_path, USER_CAPS))
    assert root.may and root.via == "nvml"
    assert not user.may and "needs root (CAP_SYS_ADMIN) or a running zeusd" in user.why

    import zeus.utils.zeusd as zeusd

    class Client:  # zeusd's client at its boundary: a daemon that grants gpu-control
        endpoint = "/run/zeusd.sock"
        can_control_gpu = True
        calls: ClassVar[list[tuple[list[int], int, bool]]] = []

        def __init__(self, config: object) -> None:
            pass

        def set_power_limit(self, ids: list[int], mw: int, block: bool) -> None:
            Client.calls.append((ids, mw, block))

    monkeypatch.setenv("ZEUSD_SOCK_PATH", "/run/zeusd.sock")
    monkeypatch.setattr(zeusd, "ZeusdClient", Client)
    with LimitControl() as control:
        via_zeusd = control.permission(status_file(tmp_path, USER_CAPS))
        assert via_zeusd.may and via_zeusd.via == "zeusd"
        control.set_w(control.read([1])[0], 490, "zeusd")
    assert Client.calls == [([1], 490_000, True)] and nvml.sets == []
    Client.can_control_gpu = False
    with LimitControl() as control:
        refused = control.permission(status_file(tmp_path, USER_CAPS))
    assert not refused.may and "does not grant gpu-control" in refused.why


def test_setting_goes_through_nvml_and_names_the_driver_s_refusal(nvml):
    with LimitControl() as control:
        device = control.read([0])[0]
        control.set_w(device, 490, "nvml")
        assert nvml.sets == [("GPU-0", 490_000)]
        nvml.root = False
        with pytest.raises(PowerLimitError, match="NoPermission"):
            control.set_w(device, 400, "nvml")


def test_without_nvml_power_limits_are_refused(nvml):
    nvml.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(PowerLimitRefused, match="need NVML"):
        LimitControl()
    assert PowerLimitRefused.exit_code == 2


def test_a_request_outside_the_range_is_clipped_with_a_note(nvml):
    with LimitControl() as control:
        devices = control.read([0, 1])
    assert clip_w(490.4, devices) == (490.0, "")
    watts, note = clip_w(100, devices)
    assert watts == 200 and "clipped to the lowest allowed, 200 W" in note
    nvml.gpus[1].high_mw = 650_000  # a device with a narrower range bounds them all
    with LimitControl() as control:
        assert clip_w(700, control.read([0, 1]))[0] == 650
