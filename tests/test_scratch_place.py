"""Where a mapped job's scratch goes (traceview/scratch_place.py): RAM where there is room, the store
otherwise and for Dask; what a killed run left is removed; a job run with its scratch in a given
folder gives the same bytes and leaves that folder as it found it."""
import os
import subprocess
import sys

import pytest
from helpers import TRACES

from traceview import scratch_place
from traceview.cli import run_cli
from traceview.errors import UsageError

DLRM = TRACES / "kineto" / "dlrm_8rank_v100"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(scratch_place.ENV, raising=False)


def files(tmp_path, sizes):
    out = []
    for i, (suffix, n) in enumerate(sizes):
        f = tmp_path / f"t{i}{suffix}"
        f.write_bytes(b"x" * n)
        out.append(f)
    return out


def test_estimate_is_the_input_bytes_times_the_factors(tmp_path):
    fs = files(tmp_path, [(".json", 1000), (".json.gz", 100), (".sqlite", 10)])
    # 1000 * 4 + 100 * 60 + 10 * 4, by hand
    assert scratch_place.estimate(fs + [tmp_path / "missing.json"]) == 4000 + 6000 + 40


def test_ram_folder_chosen_when_it_has_room(tmp_path, monkeypatch):
    shm = tmp_path / "shm"
    shm.mkdir()
    fs = files(tmp_path, [(".json", 1000)])
    monkeypatch.setattr(scratch_place, "mem_available", lambda: 16000)        # 4 * 4000 fits exactly
    assert scratch_place.root(fs, distributed=False, shm=shm) == shm
    assert scratch_place.root(fs, distributed=True, shm=shm) is None          # Dask: the store
    monkeypatch.setattr(scratch_place, "mem_available", lambda: 15999)        # a quarter of memory at most
    assert scratch_place.root(fs, distributed=False, shm=shm) is None
    assert scratch_place.root(fs, distributed=False, shm=tmp_path / "absent") is None


def test_ram_folder_needs_twice_the_estimate_free(tmp_path, monkeypatch):
    shm = tmp_path / "shm"
    shm.mkdir()
    st = os.statvfs(shm)
    free = st.f_bavail * st.f_frsize
    monkeypatch.setattr(scratch_place, "mem_available", lambda: 1 << 62)
    monkeypatch.setattr(scratch_place, "estimate", lambda fs: free // 2 + 1)
    assert scratch_place.root([], distributed=False, shm=shm) is None
    monkeypatch.setattr(scratch_place, "estimate", lambda fs: free // 4)
    assert scratch_place.root([], distributed=False, shm=shm) == shm


def test_the_environment_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(scratch_place.ENV, str(tmp_path / "x"))
    assert scratch_place.root([], distributed=True) == tmp_path / "x"
    monkeypatch.setenv(scratch_place.ENV, "store")
    assert scratch_place.root([], distributed=False) is None


def test_a_named_folder_is_made_and_one_that_cannot_be_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(scratch_place.ENV, str(tmp_path / "new" / "sub"))
    assert scratch_place.root([], distributed=False) == tmp_path / "new" / "sub"
    assert (tmp_path / "new" / "sub").is_dir()
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(scratch_place.ENV, str(tmp_path / "file" / "sub"))     # below a file: cannot be made
    with pytest.raises(UsageError, match="cannot use as the scratch folder"):
        scratch_place.root([], distributed=False)


@pytest.mark.skipif(not DLRM.exists(), reason="the shared corpus is not beside the checkout")
def test_a_scratch_folder_that_cannot_be_made_is_one_line_exit_2(tmp_path):
    (tmp_path / "file").write_text("x")
    env = {**os.environ, scratch_place.ENV: str(tmp_path / "file" / "sub")}
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(DLRM), "--jobs", "2", "--no-store",
                        "-f", "json", "-o", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot use as the scratch folder" in lines[0], p.stderr
    assert not out.exists()


def test_prune_removes_only_folders_of_dead_processes(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    gone = tmp_path / f"traceview-scratch-{pid}-abc"
    gone_run = tmp_path / f"traceview-run-{pid}-x1"
    mine = tmp_path / f"traceview-scratch-{os.getpid()}-abc"
    other = tmp_path / f"someone-{pid}-abc"
    for d in (gone, gone_run, mine, other):
        (d / "b00000").mkdir(parents=True)
        (d / "b00000" / "t.arrow").write_bytes(b"1")
    assert sorted(scratch_place.prune(tmp_path)) == sorted([gone.name, gone_run.name])
    assert not gone.exists() and not gone_run.exists() and mine.exists() and other.exists()


@pytest.mark.skipif(not DLRM.exists(), reason="the shared corpus is not beside the checkout")
def test_mapped_job_with_its_scratch_in_a_given_folder(tmp_path, monkeypatch):
    outs = []
    for where in ("store", str(tmp_path / "ram")):
        (tmp_path / "ram").mkdir(exist_ok=True)
        monkeypatch.setenv(scratch_place.ENV, where)
        out = tmp_path / f"r{len(outs)}.json"
        assert run_cli(["analyze", str(DLRM), "--jobs", "2", "--store", str(tmp_path / f"s{len(outs)}"),
                        "-f", "json", "-o", str(out)]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert list((tmp_path / "ram").iterdir()) == []                     # removed at the end of the run
    assert not (tmp_path / "s1" / "scratch").exists()                  # the scratch was in the folder given
    assert list((tmp_path / "s0" / "scratch").iterdir()) == []          # in the store, removed at the end
