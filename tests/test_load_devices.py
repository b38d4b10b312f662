"""load._warn_several_devices: the distinct (rank, device) pairs, worked by hand."""
from pathlib import Path

from traceview import load, schema
from traceview.profile import Profile


def _profile(ranks, devices) -> Profile:
    n = len(ranks)
    gpu = schema.from_pydict("gpu_activities", {
        "id": list(range(n)), "rank": ranks, "device": devices, "start_ns": [0] * n, "end_ns": [1] * n,
        "kind": ["kernel"] * n, "name": ["k"] * n})
    return Profile(gpu_activities=gpu, cpu_ranges=schema.empty("cpu_ranges"), launches=schema.empty("launches"),
                   syncs=schema.empty("syncs"), meta=schema.empty("meta"))


def test_several_devices_per_rank_worked_by_hand():
    # rank -1: devices 0 and 3 (twice); rank 0: device 2 only (a null device is no device);
    # rank 1: 5; rank 2: -1 and 2147483647 (the ends of int32); rank -2147483648: one device
    ranks = [-1, -1, -1, 0, 0, 0, 1, 2, 2, -2147483648]
    devices = [3, 0, 3, 2, 2, None, 5, -1, 2147483647, -2147483648]
    p = load._warn_several_devices(_profile(ranks, devices), Path("t"))
    assert p.warnings == [
        "t: GPU activity on 2 devices (0, 3) in one process: its step breakdown is one timeline over all of them",
        "t: GPU activity on 2 devices (-1, 2147483647) in one process: its step breakdown is one timeline over "
        "all of them"]


def test_one_device_per_rank_or_none_warns_nothing():
    p = load._warn_several_devices(_profile([0, 0, 1, 1], [1, 1, None, 4]), Path("t"))
    assert p.warnings == []
    assert load._warn_several_devices(_profile([], []), Path("t")).warnings == []


def test_rows_without_rank_are_one_process():
    # rank 0 on device 1 and 2; the rows without a rank (not from the parsers) on 1 and 2 too, and
    # a null device; their warning comes after the ranked ones
    p = load._warn_several_devices(_profile([None, 0, None, 0, None], [1, 1, 2, 2, None]), Path("t"))
    assert p.warnings == [
        "t: GPU activity on 2 devices (1, 2) in one process: its step breakdown is one timeline over all of them"] * 2
