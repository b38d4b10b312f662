"""Tests of the synthetic fixture generator (fixtures/synth.py, synth_writers.py, scenarios.py).

The written files are read back here with json + sqlite3 only (no project parser), and the
hand-written expected numbers of tiny_breakdown are recomputed by a ns-resolution sweep.
"""
from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `fixtures` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))

from fixtures import scenarios  # noqa: E402
from fixtures.synth import RankMeta, RankTrace, generate  # noqa: E402
from fixtures.synth_writers import kineto_doc, write_kineto, write_nsys, write_nsys_per_rank  # noqa: E402

REAL_NSYS = ROOT.parent / "shared" / "traces" / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
OP_RE = re.compile(r"^(?P<name>.*?)(?:, seq = (?P<seq>\d+))?, op_id = \d+(?:, sizes = \[.*\])?$", re.S)


# ---------------------------------------------------------------------------------------------
# readers (independent of the project's parsers)

def read_kineto(paths: list[Path]) -> dict:
    """Canonical-ish rows from Kineto files, times in epoch ns."""
    out = {"gpu": Counter(), "cpu": Counter(), "links": Counter(), "syncs": Counter(), "docs": []}
    for p in paths:
        doc = json.loads(p.read_text())
        out["docs"].append(doc)
        base = doc["baseTimeNanoseconds"]
        rank = doc["distributedInfo"]["rank"]
        ns = lambda us, base=base: base + round(us * 1000)  # noqa: E731
        runtime = {}
        for e in doc["traceEvents"]:
            if e.get("ph") != "X":
                continue
            cat, a = e.get("cat"), e.get("args", {})
            if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
                out["gpu"][(rank, a["device"], a["stream"], e["name"], ns(e["ts"]), ns(e["ts"] + e["dur"]))] += 1
            elif cat in ("cpu_op", "user_annotation"):
                kind = "op" if cat == "cpu_op" else "annotation"
                out["cpu"][(rank, e["tid"], kind, e["name"], a.get("Sequence number"), ns(e["ts"]),
                            ns(e["ts"] + e["dur"]))] += 1
            elif cat == "cuda_runtime":
                runtime[a["correlation"]] = e
            elif cat == "cuda_sync":
                out["syncs"][(rank, a["cuda_sync_kind"], a["stream"], ns(e["ts"]), ns(e["ts"] + e["dur"]))] += 1
        for e in doc["traceEvents"]:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                r = runtime[e["args"]["correlation"]]
                out["links"][(rank, r["name"], ns(r["ts"]), ns(r["ts"] + r["dur"]), e["name"], ns(e["ts"]))] += 1
    return out


SYNC_NAME = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}


def read_nsys(path: Path, rank_of_pid: dict[int, int]) -> dict:
    con = sqlite3.connect(path)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    off = q("select utcEpochNs from TARGET_INFO_SESSION_START_TIME")[0][0]  # epoch of session time 0
    s = dict(q("select id, value from StringIds"))
    copy_kind = {i: n.rsplit("_", 1)[1] for i, n, _ in q("select * from ENUM_CUDA_MEMCPY_OPER")}
    mem = {i: lbl for i, _, lbl in q("select * from ENUM_CUDA_MEM_KIND")}
    pid = lambda g: (g >> 24) & 0xFFFFFF  # noqa: E731
    out = {"gpu": Counter(), "cpu": Counter(), "links": Counter(), "syncs": Counter()}
    gname = {}
    for st, corr, gp, name in q("select start,correlationId,globalPid,demangledName from CUPTI_ACTIVITY_KIND_KERNEL"):
        gname[(gp, corr)] = (s[name], st)
    for st, corr, gp, ck, sk, dk in q("select start,correlationId,globalPid,copyKind,srcKind,dstKind "
                                      "from CUPTI_ACTIVITY_KIND_MEMCPY"):
        k = copy_kind[ck]
        k = k[0] + "to" + k[-1] if len(k) == 4 else k  # HTOD -> HtoD
        gname[(gp, corr)] = (f"Memcpy {k} ({mem[sk]} -> {mem[dk]})", st)
    for st, corr, gp, mk in q("select start,correlationId,globalPid,memKind from CUPTI_ACTIVITY_KIND_MEMSET"):
        gname[(gp, corr)] = (f"Memset ({mem[mk]})", st)
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        for st, en, dev, stream, corr, gp in q("select start,end,deviceId,streamId,correlationId,globalPid "
                                               f"from CUPTI_ACTIVITY_KIND_{table}"):
            out["gpu"][(rank_of_pid[pid(gp)], dev, stream, gname[(gp, corr)][0], st + off, en + off)] += 1
    for st, en, gt, corr, nid in q("select start,end,globalTid,correlationId,nameId from CUPTI_ACTIVITY_KIND_RUNTIME"):
        gp = gt & ~0xFFFFFF
        if (gp, corr) in gname:
            n, gst = gname[(gp, corr)]
            out["links"][(rank_of_pid[pid(gt)], re.sub(r"_v\d+$", "", s[nid]), st + off, en + off, n, gst + off)] += 1
    for st, en, text, tid_, text_id, dom in q("select start,end,text,globalTid,textId,domainId from NVTX_EVENTS "
                                              "where eventType=59"):
        if dom != 0:
            continue
        name = text if text is not None else s[text_id]
        m = OP_RE.match(name)
        if m:
            kind, seq, name = "op", (int(m["seq"]) if m["seq"] else None), m["name"]
        else:
            kind, seq = "annotation", None
        out["cpu"][(rank_of_pid[pid(tid_)], tid_ & 0xFFFFFF, kind, name, seq, st + off, en + off)] += 1
    for st, en, stream, gp, stype in q("select start,end,streamId,globalPid,syncType "
                                       "from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        out["syncs"][(rank_of_pid[pid(gp)], SYNC_NAME[stype], -1 if stream == 4294967295 else stream, st + off,
                      en + off)] += 1
    con.close()
    return out


@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    generate(out)
    return out


def _rank_of_pid(docs) -> dict[int, int]:
    m = {}
    for d in docs:
        cpu = {e["pid"] for e in d["traceEvents"] if e.get("cat") == "cpu_op"}
        m.update({p: d["distributedInfo"]["rank"] for p in cpu})
    return m


TWINS = [("tiny_breakdown", ["tiny_breakdown.json"]), ("moe_overlap_1rank", ["moe_overlap_1rank.json"]),
         ("hostile_names", ["hostile_names.json"]),
         ("straggler_4rank", [f"straggler_4rank/rank{r}.json" for r in range(4)])]


# ---------------------------------------------------------------------------------------------
# validity

@pytest.mark.parametrize("name,files", TWINS)
def test_kineto_valid(gen, name, files):
    for f in files:
        doc = json.loads((gen / f).read_text())
        assert doc["schemaVersion"] == 1 and isinstance(doc["baseTimeNanoseconds"], int)
        assert {"backend", "rank", "world_size"} <= set(doc["distributedInfo"])
        assert doc["deviceProperties"][0]["numSms"] == 132
        ev = doc["traceEvents"]
        cats = Counter(e.get("cat") for e in ev)
        need = {"cpu_op", "user_annotation", "cuda_runtime", "kernel", "ac2g"}
        if name != "hostile_names":
            need |= {"gpu_memcpy", "cuda_sync"}
        if name.startswith(("moe", "straggler")):
            need |= {"fwdbwd"}
        assert need <= set(cats), need - set(cats)
        assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in ev)
        assert any(e.get("name", "").startswith("ProfilerStep#") for e in ev)
        # ts/dur are exactly representable as ns with 3 decimals
        for e in ev:
            for k in ("ts", "dur"):
                if isinstance(e.get(k), float):
                    assert abs(e[k] * 1000 - round(e[k] * 1000)) < 1e-3
        # every ac2g flow pairs a runtime call with a GPU record of the same correlation
        corr_rt = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"}
        assert len(corr_rt) == sum(1 for e in ev if e.get("cat") == "cuda_runtime")
        gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        assert all(e["args"]["correlation"] in corr_rt for e in gpu)
        s = Counter(e["id"] for e in ev if e.get("cat") == "ac2g" and e["ph"] == "s")
        f_ = Counter(e["id"] for e in ev if e.get("cat") == "ac2g" and e["ph"] == "f")
        assert s == f_ and len(s) >= len(gpu)
        # fwdbwd: s on a forward op, f on a backward op with the same seq
        ops = [e for e in ev if e.get("cat") == "cpu_op"]
        at = {}
        for e in ops:
            at.setdefault((e["tid"], e["ts"]), []).append(e)
        flows = {}
        for e in ev:
            if e.get("cat") == "fwdbwd":
                flows.setdefault(e["id"], {})[e["ph"]] = e
        for fl in flows.values():
            fwd = [o for o in at[(fl["s"]["tid"], fl["s"]["ts"])] if "Sequence number" in o["args"]]
            bwd = [o for o in at[(fl["f"]["tid"], fl["f"]["ts"])] if "Sequence number" in o["args"]]
            assert fwd and bwd and fwd[0]["args"]["Sequence number"] == bwd[0]["args"]["Sequence number"]
            assert bwd[0]["name"].startswith("autograd::engine::evaluate_function: ")
            assert fl["s"]["tid"] != fl["f"]["tid"]


# columns that the real export fills on every row although its DDL allows NULL
FILLED = {"CUPTI_ACTIVITY_KIND_KERNEL": ["correlationId", "globalPid", "mangledName", "launchType"],
          "CUPTI_ACTIVITY_KIND_RUNTIME": ["globalTid", "correlationId"],
          "CUPTI_ACTIVITY_KIND_MEMCPY": ["correlationId", "globalPid", "srcKind", "dstKind"],
          "CUPTI_ACTIVITY_KIND_MEMSET": ["correlationId", "globalPid", "memKind"],
          "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["correlationId", "globalPid", "eventSyncId"],
          "PROCESSES": ["globalPid", "pid", "name"], "ThreadNames": ["globalTid"],
          "TARGET_INFO_GPU": ["name", "smCount"], "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs", "systemClockNs"]}
TABLES = ["StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "PROCESSES",
          "ThreadNames",
          "META_DATA_EXPORT", "META_DATA_CAPTURE", "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME",
          "ENUM_NSYS_EVENT_TYPE", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUPTI_SYNC_TYPE", "ENUM_CUDA_MEM_KIND"]


@pytest.mark.parametrize("name", ["tiny_breakdown", "moe_overlap_1rank", "straggler_4rank", "hostile_names"])
def test_nsys_valid(gen, name):
    con = sqlite3.connect(gen / f"{name}.sqlite")
    have = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    assert set(TABLES) <= have
    for t, cols in FILLED.items():
        for c in cols:
            assert con.execute(f"select count(*) from {t} where {c} is null").fetchone()[0] == 0, (t, c)
    meta = dict(con.execute("select name, value from META_DATA_EXPORT"))
    assert meta["EXPORT_SCHEMA_VERSION"] == "3.25.0" and meta["EXPORT_PRODUCT_VERSION"].startswith("2026.")
    assert con.execute("select count(*) from NVTX_EVENTS where eventType=59 and (end is null or "
                       "coalesce(text, (select value from StringIds where id=textId)) is null)").fetchone()[0] == 0
    # every string reference resolves
    for t, c in [("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"), ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"),
                 ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), ("ThreadNames", "nameId")]:
        assert con.execute(f"select count(*) from {t} where {c} not in (select id from StringIds)").fetchone()[0] == 0
    # every GPU activity has its runtime call in the same process
    for t in ("KERNEL", "MEMCPY", "MEMSET"):
        assert con.execute(f"select count(*) from CUPTI_ACTIVITY_KIND_{t} g where not exists (select 1 from "
                           "CUPTI_ACTIVITY_KIND_RUNTIME r where r.correlationId=g.correlationId and "
                           "(r.globalTid >> 24) = (g.globalPid >> 24))").fetchone()[0] == 0
    assert con.execute("select count(*) from TARGET_INFO_GPU where name like 'NVIDIA H100%' and smCount=132"
                       ).fetchone()[0] >= 1
    if name == "moe_overlap_1rank":
        assert con.execute("select count(*) from NVTX_EVENTS e join StringIds s on s.id=e.textId "
                           "where s.value='ncclAlltoAll' and e.domainId=1").fetchone()[0] == 16
    if name == "straggler_4rank":
        assert con.execute("select count(*) from PROCESSES where name='python3'").fetchone()[0] == 4
        assert con.execute("select count(*) from NVTX_EVENTS where eventType=75 and text='NCCL' and domainId=1"
                           ).fetchone()[0] == 4
        n = dict(con.execute("select s.value, count(*) from NVTX_EVENTS e join StringIds s on s.id=e.textId "
                             "where e.domainId=1 and e.eventType=59 group by 1"))
        assert n == {"ncclGroupStart": 32, "ncclGroupEnd": 32, "ncclSend": 128, "ncclRecv": 128}
    con.close()


@pytest.mark.skipif(not REAL_NSYS.exists(), reason="real nsys export not available")
def test_nsys_schema_matches_real_export(gen):
    real = sqlite3.connect(REAL_NSYS)
    ours = sqlite3.connect(gen / "moe_overlap_1rank.sqlite")
    for t in TABLES:
        if t == "TARGET_INFO_GPU":
            continue  # trimmed out of that export; ours is copied from a 2024.6 export
        a = real.execute(f"pragma table_info({t})").fetchall()
        b = ours.execute(f"pragma table_info({t})").fetchall()
        assert a == b, t
    for t in ("ENUM_NSYS_EVENT_TYPE", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUPTI_SYNC_TYPE", "ENUM_CUDA_MEM_KIND"):
        assert real.execute(f"select * from {t}").fetchall() == ours.execute(f"select * from {t}").fetchall()


def test_nsys_per_rank_files_carry_rank_env(gen):
    for r in range(4):
        con = sqlite3.connect(gen / "straggler_4rank_nsys" / f"rank{r}.sqlite")
        env = [v for n,
               v in con.execute("select name, value from META_DATA_CAPTURE") if n.endswith("ENVIRONMENT_VARIABLE")]
        assert f'RANK="{r}"' in env
        assert con.execute("select count(*) from PROCESSES").fetchone()[0] == 1


# ---------------------------------------------------------------------------------------------
# the two outputs describe the same events

@pytest.mark.parametrize("name,files", TWINS)
def test_twins_identical(gen, name, files):
    k = read_kineto([gen / f for f in files])
    n = read_nsys(gen / f"{name}.sqlite", _rank_of_pid(k["docs"]))
    assert k["gpu"] and k["gpu"] == n["gpu"]
    assert k["cpu"] and k["cpu"] == n["cpu"]
    assert k["links"] == n["links"] and sum(k["links"].values()) == sum(k["gpu"].values())
    assert k["syncs"] == n["syncs"]


def test_twins_per_rank_nsys_same_local_times(gen):
    """One file per rank: nsys times equal the rank-clock (Kineto) times, not only in epoch."""
    for r in range(4):
        k = read_kineto([gen / f"straggler_4rank/rank{r}.json"])
        n = read_nsys(gen / "straggler_4rank_nsys" / f"rank{r}.sqlite", _rank_of_pid(k["docs"]))
        assert k["gpu"] == n["gpu"] and k["cpu"] == n["cpu"]
        con = sqlite3.connect(gen / "straggler_4rank_nsys" / f"rank{r}.sqlite")
        utc = con.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        assert utc == k["docs"][0]["baseTimeNanoseconds"]


def test_nccl_domain_only_in_nsys(tmp_path):
    rt = RankTrace(RankMeta())
    rt.range("ProfilerStep#1", 1_000, 50_000)
    rt.range("ncclGroupStart", 2_000, 3_000, domain="NCCL")
    rt.launch("k", 4_000, 5_000, 6_000, 9_000, 7)
    assert "ncclGroupStart" not in {e.get("name") for e in kineto_doc(rt)["traceEvents"]}
    con = sqlite3.connect(write_nsys(rt, tmp_path / "n.sqlite"))
    assert con.execute("select count(*) from NVTX_EVENTS e join StringIds s on s.id=e.textId "
                       "where s.value='ncclGroupStart' and e.domainId=1").fetchone()[0] == 1
    assert con.execute("select text, domainId from NVTX_EVENTS where eventType=75").fetchall() == [("NCCL", 1)]


def test_generator_is_deterministic(gen, tmp_path):
    generate(tmp_path)
    a = sorted(p.relative_to(gen) for p in gen.rglob("*") if p.is_file())
    b = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert a == b and len(a) >= 14
    for p in a:
        assert (gen / p).read_bytes() == (tmp_path / p).read_bytes(), p


def test_committed_fixtures_are_current(gen):
    committed = ROOT / "fixtures" / "generated"
    for p in gen.rglob("*"):
        if p.is_file():
            q = committed / p.relative_to(gen)
            assert q.exists() and q.read_bytes() == p.read_bytes(), f"{q} is stale: run python fixtures/synth.py"


def test_generated_files_are_small(gen):
    for p in gen.rglob("*"):
        if p.is_file():
            assert p.stat().st_size < 240_000, p


# ---------------------------------------------------------------------------------------------
# tiny_breakdown: the hand-written numbers against a brute-force ns sweep

def sweep(kineto_doc: dict) -> list[dict]:
    """Per ProfilerStep: classify every ns of the GPU window by what runs (boolean timeline)."""
    ev = kineto_doc["traceEvents"]
    rt = {e["args"]["correlation"]: round(e["ts"] * 1000) for e in ev if e.get("cat") == "cuda_runtime"}
    gpu = [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000), e["cat"], e["name"],
            rt[e["args"]["correlation"]])
           for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    out = []
    for st in sorted((e for e in ev if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"]):
        c0, c1 = round(st["ts"] * 1000), round((st["ts"] + st["dur"]) * 1000)
        acts = [g for g in gpu if c0 <= g[4] < c1]
        w0, w1 = min(g[0] for g in acts), max(g[1] for g in acts)
        n = w1 - w0
        comp, comm, mem = bytearray(n), bytearray(n), bytearray(n)
        for s, e, cat, name, _ in acts:
            arr = mem if cat != "kernel" else (comm if name.startswith("nccl") else comp)
            arr[s - w0:e - w0] = b"\x01" * (e - s)
        r = dict(window_ns=n, compute_ns=0, comm_ns=0, overlapped_comm_ns=0, exposed_comm_ns=0, memory_ns=0,
                 exposed_memory_ns=0, idle_ns=0, window_start_ns=w0, window_end_ns=w1, n_activities=len(acts))
        for i in range(n):
            a, b, m = comp[i], comm[i], mem[i]
            r["compute_ns"] += a
            r["comm_ns"] += b
            r["memory_ns"] += m
            r["overlapped_comm_ns"] += a and b
            r["exposed_comm_ns"] += b and not a
            r["exposed_memory_ns"] += m and not a and not b
            r["idle_ns"] += not (a or b or m)
        out.append(r)
    return out


def test_tiny_breakdown_expected_matches_sweep(tmp_path):
    s = scenarios.tiny_breakdown()
    p = write_kineto(s.ranks[0], tmp_path / "t.json")
    got = sweep(json.loads(p.read_text()))
    assert len(got) == len(s.expected["steps"]) == 2
    for g, e in zip(got, s.expected["steps"], strict=True):
        for k, v in g.items():
            assert e[k] == v, (e["name"], k, e[k], v)
        assert e["compute_ns"] + e["exposed_comm_ns"] + e["exposed_memory_ns"] + e["idle_ns"] == e["window_ns"]
        assert e["comm_ns"] == e["overlapped_comm_ns"] + e["exposed_comm_ns"]


def test_tiny_breakdown_sweep_detects_a_change(tmp_path):
    """The check can fail: move the all-reduce of step 1 by 1 us and the numbers differ."""
    s = scenarios.tiny_breakdown()
    g = next(g for g in s.ranks[0].gpu() if g.name.startswith("nccl"))
    g.end += 1_000
    got = sweep(json.loads(write_kineto(s.ranks[0], tmp_path / "t.json").read_text()))
    e = s.expected["steps"][0]
    assert got[0]["overlapped_comm_ns"] == e["overlapped_comm_ns"] + 1_000 and got[0]["comm_ns"] == e["comm_ns"] + 1_000
    assert got[1] == {k: v for k, v in s.expected["steps"][1].items() if k in got[1]}


def test_tiny_breakdown_expected_file(gen):
    e = json.loads((gen / "tiny_breakdown.expected.json").read_text())
    assert [x["window_ns"] for x in e["steps"]] == [80_000, 75_000]
    assert sweep(json.loads((gen / "tiny_breakdown.json").read_text()))[1]["idle_ns"] == e["steps"][1]["idle_ns"]


# ---------------------------------------------------------------------------------------------
# moe_step: expected (recorded by construction) agrees with what was written

def _windows(doc) -> list[tuple[int, int]]:
    ev = doc["traceEvents"]
    rt = {e["args"]["correlation"]: round(e["ts"] * 1000) for e in ev if e.get("cat") == "cuda_runtime"}
    gpu = [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000), rt[e["args"]["correlation"]])
           for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    out = []
    for st in sorted((e for e in ev if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"]):
        c0, c1 = round(st["ts"] * 1000), round((st["ts"] + st["dur"]) * 1000)
        acts = [g for g in gpu if c0 <= g[2] < c1]
        out.append((min(g[0] for g in acts), max(g[1] for g in acts)))
    return out


def test_straggler_expected(gen):
    e = json.loads((gen / "straggler_4rank.expected.json").read_text())
    docs = [json.loads((gen / f"straggler_4rank/rank{r}.json").read_text()) for r in range(4)]
    assert e["straggler"] == {"rank": 2, "delay_ns": 150_000}
    # windows
    for x in e["steps"]:
        assert _windows(docs[x["rank"]])[x["step"] - 1] == (x["window_start_ns"], x["window_end_ns"])
    # every all-to-all: same epoch end on all ranks; the straggler starts exactly delay_ns after the others
    kern = {}
    for r, d in enumerate(docs):
        base = d["baseTimeNanoseconds"]
        kern[r] = sorted((base + round(k["ts"] * 1000), base + round((k["ts"] + k["dur"]) * 1000))
                         for k in d["traceEvents"]
                         if k.get("cat") == "kernel" and k["name"].startswith("ncclDevKernel_SendRecv"))
    n = len(kern[0])
    assert n == 8 and all(len(v) == n for v in kern.values())
    for i in range(n):
        ends = {kern[r][i][1] for r in range(4)}
        assert len(ends) == 1
        others = {kern[r][i][0] for r in (0, 1, 3)}
        assert len(others) == 1 and kern[2][i][0] - others.pop() == 150_000
    # clocks differ by the chosen skew, epoch alignment holds
    assert [d["baseTimeNanoseconds"] for d in docs] == e["clock_offsets_ns"]
    assert len(set(e["clock_offsets_ns"])) == 4
    # collectives in expected are the kernels in the files (rank clock)
    for c in e["collectives"]:
        base = docs[c["rank"]]["baseTimeNanoseconds"]
        assert (c["start_ns"] + base, c["end_ns"] + base) in kern[c["rank"]]
    # NCCL kernels carry the all-to-all metadata
    k = next(k for k in docs[0]["traceEvents"] if k.get("cat") == "kernel" and k["name"].startswith("nccl"))
    assert k["args"]["Collective name"] == "all_to_allv" and k["args"]["Group size"] == 4
    assert json.loads(k["args"]["In split size"]) == [2_097_152] * 4


def _annotation_of(ev, e_rt) -> str | None:
    """Innermost user annotation on the launch's thread whose name starts with 'layer_'."""
    best = None
    for a in ev:
        if a.get("cat") == "user_annotation" and a["tid"] == e_rt["tid"] and a["name"].startswith("layer_") \
                and a["ts"] <= e_rt["ts"] and e_rt["ts"] + e_rt["dur"] <= a["ts"] + a["dur"]:
            if best is None or a["ts"] >= best["ts"]:
                best = a
    return best["name"] if best else None


def test_moe_forward_stages_expected(gen):
    e = json.loads((gen / "moe_overlap_1rank.expected.json").read_text())
    doc = json.loads((gen / "moe_overlap_1rank.json").read_text())
    ev = doc["traceEvents"]
    rt = {x["args"]["correlation"]: x for x in ev if x.get("cat") == "cuda_runtime"}
    steps = [(round(s["ts"] * 1000), round((s["ts"] + s["dur"]) * 1000)) for s in ev if s.get("name",
                                                                                              "").startswith("ProfilerStep#")]
    got = Counter()
    for g in ev:
        if g.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            r = rt[g["args"]["correlation"]]
            ann = _annotation_of(ev, r)
            if ann and not ann.endswith("/moe"):
                t = round(r["ts"] * 1000)
                step = next(i + 1 for i, (a, b) in enumerate(steps) if a <= t < b)
                layer, stage = int(ann[6:8]), ann.split("/")[-1]
                got[(step, layer, stage)] += round(g["dur"] * 1000)
    want = {(x["step"], x["layer"], x["stage"]): x["sum_ns"] for x in e["stages"] if x["phase"] == "fwd"}
    assert got == Counter(want)
    # planted host syncs: one cudaStreamSynchronize per layer inside layer_NN/moe/experts, durations as expected
    syncs = [x for x in ev if x.get("name") == "cudaStreamSynchronize"
             and (_annotation_of(ev, x) or "").endswith("/experts")]
    assert sorted(round(x["dur"] * 1000) for x in syncs) == sorted(h["duration_ns"] for h in e["host_syncs"])
    assert len(e["host_syncs"]) == 2 * 2
    # world size 1: the all-to-all is a DtoD copy under c10d::alltoall_base_, no NCCL kernel
    assert not any(x.get("cat") == "kernel" and "nccl" in x["name"] for x in ev)
    assert sum(1 for x in ev if x.get("name") == "Memcpy DtoD (Device -> Device)") == len(e["collectives"])


def test_deepseek_naming_has_no_nccl(tmp_path):
    s = scenarios.moe_step(naming="deepseek", world_size=2, layers=2, steps=1)
    doc = json.loads(write_kineto(s.ranks[0], tmp_path / "d.json").read_text())
    names = {x["name"] for x in doc["traceEvents"] if x.get("ph") == "X"}
    assert not any("nccl" in n.lower() or n == "record_param_comms" for n in names)
    assert {"layers.0", "layers.1", "attn(F)", "dispatch(F)", "mlp(F)", "combine(F)", "combine(B)", "dispatch(B)",
            "mlp(B)", "mlp(W)", "attn(B)"} <= names
    assert any(n.startswith("void dpsk::ep::internode::dispatch<") for n in names)
    assert any(n.startswith("void dpsk::ep::internode::combine<") for n in names)


def test_expert_slowdown_and_modes():
    base = scenarios.moe_step()
    slow = scenarios.moe_step(expert_slowdown=(1, 3.0, "float32"))
    kn = lambda s: Counter(g.name for g in s.ranks[0].gpu())  # noqa: E731
    assert scenarios.GEMM_FP32 not in kn(base) and kn(slow)[scenarios.GEMM_FP32] > 0
    assert slow.expected["expert_slowdown"]["layer"] == 1
    blk = scenarios.moe_step(mode="blocking")
    assert blk.expected["step_time_ns"] > base.expected["step_time_ns"]


def test_regression_pairs():
    pairs = {p["name"]: p for p in scenarios.regression_pairs()}
    assert set(pairs) == {"expert_gemm_fp32", "a2a_exposed", "new_host_sync", "straggler", "noise"}
    for name, p in pairs.items():
        assert p["step_time_delta_ns"] == p["new"].expected["step_time_ns"] - p["base"].expected["step_time_ns"]
        assert p["cause"]["kind"]
        if name == "noise":
            assert abs(p["step_time_delta_ns"]) <= 2 * p["cause"]["max_jitter_ns"]
        else:
            assert p["step_time_delta_ns"] > 10_000, name
    # the noise pair is seeded: rebuilding gives identical jitter
    again = {p["name"]: p for p in scenarios.regression_pairs()}["noise"]
    assert [g.end for g in again["new"].ranks[0].gpu()] == [g.end for g in pairs["noise"]["new"].ranks[0].gpu()]


def test_hostile_names_round_trip(gen):
    e = json.loads((gen / "hostile_names.expected.json").read_text())
    doc = json.loads((gen / "hostile_names.json").read_text())
    names = {x["name"] for x in doc["traceEvents"] if x.get("ph") == "X"}
    assert e["kernel_name"] in names and e["annotation_name"] in names
    con = sqlite3.connect(gen / "hostile_names.sqlite")
    assert con.execute("select count(*) from StringIds where value=?", (e["kernel_name"],)).fetchone()[0] == 1
    assert con.execute("select count(*) from NVTX_EVENTS where text=?", (e["annotation_name"],)).fetchone()[0] == 1


def test_validate_rejects_impossible_events():
    rt = RankTrace(RankMeta())
    rt.range("a", 0, 10)
    rt.range("b", 5, 20)  # crosses a on the same thread
    with pytest.raises(ValueError):
        rt.validate()
    rt = RankTrace(RankMeta())
    rt.launch("k1", 0, 1, 10, 20, 7)
    rt.launch("k2", 2, 3, 15, 25, 7)  # overlaps k1 on the same stream
    with pytest.raises(ValueError):
        rt.validate()


def test_clock_skew_keeps_epoch(tmp_path):
    a = scenarios.moe_step(world_size=2, layers=1, steps=1)
    b = scenarios.moe_step(world_size=2, layers=1, steps=1, clock_skew_ns=1_000_000)
    ga = sorted(g.start + a.ranks[1].meta.clock_offset_ns for g in a.ranks[1].gpu())
    gb = sorted(g.start + b.ranks[1].meta.clock_offset_ns for g in b.ranks[1].gpu())
    assert ga == gb and a.ranks[1].meta.clock_offset_ns - b.ranks[1].meta.clock_offset_ns == 1_000_000
    assert b.expected["steps"][1]["window_start_ns"] - a.expected["steps"][1]["window_start_ns"] == 1_000_000
    # combined nsys file: one session clock, epoch-equal to the Kineto files
    write_nsys(b.ranks, tmp_path / "b.sqlite")
    docs = [json.loads(write_kineto(rt, tmp_path / f"r{rt.meta.rank}.json").read_text()) for rt in b.ranks]
    k = read_kineto([tmp_path / f"r{r}.json" for r in range(2)])
    n = read_nsys(tmp_path / "b.sqlite", _rank_of_pid(docs))
    assert k["gpu"] == n["gpu"]
    write_nsys_per_rank(b.ranks, tmp_path / "per")
    assert len(list((tmp_path / "per").glob("*.sqlite"))) == 2


def test_all_sync_kinds_and_scenario_write(tmp_path):
    rt = RankTrace(RankMeta(rank=0, world_size=1, pid=777))
    rt.range("ProfilerStep#1", 1_000, 90_000)
    rt.op("aten::mm", 2_000, 9_000, seq=1)
    rt.launch("k", 3_000, 5_000, 6_000, 30_000, 7)
    rec = rt.event_record(10_000, 11_000, 7)
    rt.stream_wait_event(12_000, 13_000, 21, rec)
    rt.launch("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 14_000, 16_000, 30_000, 40_000, 21)
    rt.event_sync(17_000, 30_500, rec)
    rt.stream_sync(31_000, 40_500, 21)
    rt.device_sync(41_000, 42_000)
    paths = scenarios.Scenario("syncs", [rt], {"note": "hand-made"}).write(tmp_path)
    k = read_kineto([paths["kineto"]])
    n = read_nsys(paths["nsys"], {777: 0})
    assert {s[1] for s in k["syncs"]} == {"Stream Wait Event", "Event Sync", "Stream Sync", "Context Sync"}
    assert k["syncs"] == n["syncs"] and k["gpu"] == n["gpu"] and k["cpu"] == n["cpu"]
    ev = k["docs"][0]["traceEvents"]
    es = next(e for e in ev if e.get("name") == "Event Sync")
    assert es["args"]["wait_on_stream"] == 7 and es["args"]["wait_on_cuda_event_record_corr_id"] == rec[0].correlation
    con = sqlite3.connect(paths["nsys"])
    # the awaited event's record is in CUDA_EVENT, linked by eventSyncId
    assert con.execute("select count(*) from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION s "
                       "join CUPTI_ACTIVITY_KIND_CUDA_EVENT e on e.eventSyncId = s.eventSyncId and e.streamId = 7"
                       ).fetchone()[0] == 2
    assert json.loads(paths["expected"].read_text()) == {"note": "hand-made"}


def test_moe_experts_leave_gpu_gaps():
    s = scenarios.moe_step(layers=2, steps=1, experts=4)
    fwd_exp = [x for x in s.expected["stages"] if x["stage"] == "experts" and x["phase"] == "fwd"]
    assert len(fwd_exp) == 2
    for x in fwd_exp:
        # each expert GEMM (4 us) waits for >= EXPERT_HOST_NS of host time after the previous launch
        assert x["gap_ns"] >= 4 * (scenarios.EXPERT_HOST_NS - 4_000)
        assert x["busy_ns"] + x["gap_ns"] == x["last_end_ns"] - x["first_start_ns"]
