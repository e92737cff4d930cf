"""`cuptiprof compare`: files side by side by op name, kernel family and enclosing op/range."""
from __future__ import annotations

import html as html_mod
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuptiprof.analyse.compare import Comparison, known_gpu, work_list
from cuptiprof.cli import main
from cuptiprof.errors import InputError, SchemaVersionError, UsageError
from cuptiprof.store.writer import RunInfo, Writer

GEMM_H100 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel"
GEMM_T4 = "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float const*, int, int, int)"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
FLASH = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)"

# name -> (duration in us, calls per step, framework op that launches it)
BASE_OPS = {GEMM_H100: (400.0, 4, "aten::mm"), SOFTMAX: (100.0, 2, "aten::softmax"),
            ADD: (50.0, 6, "aten::add")}


def make_run(path, ops=None, copies=(("HtoD", 8 << 20, 400.0),), steps=5, noise=0.0, seed=0,
             device="NVIDIA H100 80GB HBM3", gap_us=5.0, warmup=1, peaks=True, label=None,
             record_warmup=False, outside_us=0.0, empty=(), sync_us=30.0):
    """A small run through the Writer: every step launches the same ops in order on one stream
    (each under a framework op range inside the step range), then the copies on a copy stream,
    one memset and a stream sync. `noise` is the relative step-to-step jitter of durations.
    record_warmup: the warm-up steps' kernels are recorded too (no step, as a run records them);
    outside_us: one kernel of that length launched after the last step, outside every range;
    empty: steps whose range is recorded but whose GPU work is not (a step that launched none);
    sync_us: the length of each step's stream sync (the host waiting after the kernels)."""
    ops = BASE_OPS if ops is None else ops
    rng = np.random.default_rng(seed)
    k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id", "range_id", "op_id")}
    m = {c: [] for c in ("start_ns", "end_ns", "step", "copy_kind", "bytes", "stream_id", "device_id")}
    ms = {c: [] for c in ("start_ns", "end_ns", "step", "bytes", "stream_id", "device_id")}
    sy = {c: [] for c in ("start_ns", "end_ns", "step", "sync_type", "device_id")}
    r = {c: [] for c in ("range_id", "parent_id", "depth", "name", "start_ns", "end_ns", "kind", "step")}
    t = 1_000_000_000
    rid = 0
    for s in range(warmup + steps):
        step_start = t
        rid += 1
        step_rid = rid
        recorded = s >= warmup
        gpu = s not in empty
        for name, (dur, calls, op) in ops.items():
            for _ in range(calls):
                d = int(dur * 1000 * max(0.05, 1 + noise * rng.standard_normal()))
                rid += 1
                r["range_id"].append(rid); r["parent_id"].append(step_rid); r["depth"].append(1)
                r["name"].append(op); r["start_ns"].append(t); r["end_ns"].append(t + d)
                r["kind"].append("op"); r["step"].append(s if recorded else None)
                if (recorded or record_warmup) and gpu:
                    for c, v in (("start_ns", t), ("end_ns", t + d), ("step", s if recorded else None), ("name", name),
                                 ("stream_id", 7), ("device_id", 0), ("range_id", rid), ("op_id", rid)):
                        k[c].append(v)
                t += d + int(gap_us * 1000)
        ct = step_start
        for kind, nbytes, dur in copies:
            d = int(dur * 1000 * max(0.05, 1 + noise * rng.standard_normal()))
            if recorded and gpu:
                for c, v in (("start_ns", ct), ("end_ns", ct + d), ("step", s), ("copy_kind", kind),
                             ("bytes", nbytes), ("stream_id", 21), ("device_id", 0)):
                    m[c].append(v)
            ct += d + 1000
        if recorded and gpu:
            for c, v in (("start_ns", t), ("end_ns", t + 20_000), ("step", s), ("bytes", 1 << 20),
                         ("stream_id", 7), ("device_id", 0)):
                ms[c].append(v)
            for c, v in (("start_ns", t), ("end_ns", t + int(sync_us * 1000)), ("step", s),
                         ("sync_type", "stream_synchronize"), ("device_id", 0)):
                sy[c].append(v)
        t = max(max(t, ct) + 30_000, t + int(sync_us * 1000))
        r["range_id"].append(step_rid); r["parent_id"].append(None); r["depth"].append(0)
        r["name"].append("step" if recorded else "warmup"); r["start_ns"].append(step_start)
        r["end_ns"].append(t); r["kind"].append("step" if recorded else "warmup")
        r["step"].append(s if recorded else None)
        t += 100_000
    if outside_us:
        for c, v in (("start_ns", t), ("end_ns", t + int(outside_us * 1000)), ("step", None),
                     ("name", "decode_kernel"), ("stream_id", 7), ("device_id", 0), ("range_id", None),
                     ("op_id", None)):
            k[c].append(v)
    dev = {"device_id": [0], "kind": ["gpu"], "name": [device], "compute_capability": ["9.0"],
           "sm_count": [132], "memory_bytes": [80 << 30],
           "peak_memory_bw_gbps": [3352.0 if peaks else None],
           "peak_host_link_gbps": [63.0 if peaks else None], "source": ["synthetic"]}
    import pyarrow as pa
    with Writer(path, RunInfo(source="synthetic", label=label)) as w:
        w.append({"kernels": k, "devices": {c: pa.array(v, None if c not in ("peak_memory_bw_gbps", "peak_host_link_gbps") else pa.float64()) for c, v in dev.items()},
                  "ranges": {c: pa.array(v, pa.int64() if c in ("range_id", "parent_id", "start_ns", "end_ns") else (pa.int32() if c in ("depth", "step") else None)) for c, v in r.items()}})
        if m["start_ns"]:
            w.append({"memcpys": m})
        w.append({"memsets": ms, "syncs": sy})
    return Path(path)


@pytest.fixture
def pair(tmp_path):
    """A baseline and a run where softmax is 2x slower, the copy moved from HtoD to DtoH and a
    new flash-attention kernel appeared."""
    a = make_run(tmp_path / "base.duckdb", copies=(("HtoD", 8 << 20, 450.0),), noise=0.01, seed=1)
    ops = dict(BASE_OPS)
    ops[SOFTMAX] = (200.0, 2, "aten::softmax")
    ops[FLASH] = (80.0, 1, "aten::_flash_attention_forward")
    b = make_run(tmp_path / "new.duckdb", ops=ops, copies=(("DtoH", 8 << 20, 450.0),), noise=0.01, seed=2)
    return a, b


def rows(rel):
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def test_kinds_shares_of_gpu_time_add_to_100_and_syncs_are_host_wait_time(tmp_path, capsys):
    """A run whose host waits 5 ms a step in syncs: sync is host wait time, not GPU work, so the
    kinds' shares of GPU time (kernel, memcpy, memset) add to 100%, as `report --by kind`'s do,
    and sync (with idle) is given as a share of the step's GPU window, in a column of its own."""
    import cuptiprof
    a = make_run(tmp_path / "a.duckdb", sync_us=5000.0)
    b = make_run(tmp_path / "b.duckdb", sync_us=5000.0, seed=3)
    with Comparison([a, b]) as c:
        kinds = rows(c.kinds())
        steps = rows(c.steps())
        wide = c.kinds_side_by_side().to_pylist()
    for run in (0, 1):
        mine = {(r["kind"], r["detail"]): r for r in kinds if r["run"] == run}
        work = [r for (kind, _), r in mine.items() if kind in ("kernel", "memcpy", "memset")]
        assert sum(r["pct_gpu_time"] for r in work) == pytest.approx(100.0)
        assert all(r["pct_window"] is None for r in work)
        window = sorted(s["window_ms"] for s in steps if s["run"] == run)[2]   # the median of 5
        sync, idle = mine[("sync", None)], mine[("idle", None)]
        assert sync["pct_gpu_time"] is None and idle["pct_gpu_time"] is None
        assert sync["pct_window"] == pytest.approx(100 * 5.0 / window) and sync["pct_window"] > 100
        assert idle["pct_window"] == pytest.approx(100 * idle["ms"] / window)
        # report --by kind gives the same shares (every step alike: medians are totals / steps)
        with cuptiprof.open([a, b][run]) as prof:
            rep = {(r["kind"], r["detail"]): r for r in rows(prof.kinds())}
        for key, r in mine.items():
            if key[0] != "idle":
                assert rep[key if key[0] != "sync" else ("sync", "stream_synchronize")][
                    "pct_gpu_time"] == (None if r["pct_gpu_time"] is None else pytest.approx(r["pct_gpu_time"]))
        assert rep[("sync", "stream_synchronize")]["pct_window"] == pytest.approx(sync["pct_window"])
    # the printed table: each file's pct column adds to 100 over the GPU work kinds
    assert sum(r["A_pct"] for r in wide if r["kind"] in ("kernel", "memcpy", "memset")) == pytest.approx(100.0)
    assert [r["A_pct"] for r in wide if r["kind"] in ("sync", "idle")] == [None, None]
    assert [r["A_pct_window"] is not None for r in wide] == [r["kind"] in ("sync", "idle") for r in wide]
    assert main(["compare", str(a), str(b), "--table", "kinds"]) == 0
    out = capsys.readouterr().out
    assert "pct = share of the step's GPU work" in out and "host wait" in out


def test_ops_by_name_show_ratio_rank_and_only_in(pair):
    with Comparison(pair) as c:
        ops = {(r["run"], r["key"]): r for r in rows(c.ops())}
        assert ops[(0, SOFTMAX)]["ms"] == pytest.approx(0.2, rel=0.05)
        assert ops[(1, SOFTMAX)]["ratio"] == pytest.approx(2.0, rel=0.05)
        assert ops[(1, SOFTMAX)]["key_type"] == "name"
        assert ops[(1, FLASH)]["only_in"] == 1 and ops[(1, FLASH)]["base_ms"] is None
        assert ops[(0, ADD)]["only_in"] is None and ops[(0, ADD)]["runs_with_key"] == 2
        # softmax (0.4 ms) overtakes add (0.3 ms) in B: rank 4 -> 3 (gemm 1.6 ms, copy 0.45 ms)
        assert ops[(0, SOFTMAX)]["rank"] == 4 and ops[(1, SOFTMAX)]["rank"] == 3
        assert ops[(1, SOFTMAX)]["rank_change"] == 1
        assert ops[(0, GEMM_H100)]["calls_per_step"] == 4
        shares = sum(r["pct_step"] for r in rows(c.ops()) if r["run"] == 0)
        assert shares == pytest.approx(100.0, abs=0.5)  # copies + memset + kernels = the step's GPU work
        wide = c.side_by_side(top=10).to_pylist()
        flash = next(r for r in wide if r["key"] == FLASH)
        assert flash["only_in"] == "B only" and flash["A_ms"] is None
        soft = next(r for r in wide if r["key"] == SOFTMAX)
        assert soft["B_x"] == pytest.approx(2.0, rel=0.05) and soft["B_drank"] == 1


def test_family_key_matches_gemms_of_different_gpus(tmp_path):
    a = make_run(tmp_path / "h100.duckdb", ops={GEMM_H100: (400.0, 4, "aten::mm")})
    b = make_run(tmp_path / "t4.duckdb", ops={GEMM_T4: (1600.0, 4, "aten::mm")}, device="Tesla T4", peaks=False)
    with Comparison([a, b], by="op") as c:
        by_name = rows(c.ops())
        assert {r["only_in"] for r in by_name if r["kind"] == "kernel"} == {0, 1}  # no exact match
    with Comparison([a, b], by="family") as c:
        gemm = {r["run"]: r for r in rows(c.ops()) if r["key"] == "gemm"}
        assert gemm[1]["key_type"] == "family" and gemm[1]["ratio"] == pytest.approx(4.0, rel=0.01)
    with Comparison([a, b], by="range") as c:
        mm = {r["run"]: r for r in rows(c.ops()) if r["key"] == "aten::mm"}
        assert mm[0]["key_type"] == "op" and mm[1]["ratio"] == pytest.approx(4.0, rel=0.01)
        # the copies and the memset, launched in no range, are one key of two kinds
        kinds = {r["key"]: r["kind"] for r in rows(c.ops())}
        assert (kinds["aten::mm"], kinds["(no range)"]) == ("kernel", "mixed")


def test_per_step_medians_are_computed_once_per_key_choice(tmp_path):
    # compare --html and diff read compare_ops ten times or more; as a view each read redid the
    # per-step medians over keys x steps rows (seconds each on a run of thousands of steps)
    a = make_run(tmp_path / "h100.duckdb", ops={GEMM_H100: (400.0, 4, "aten::mm")})
    b = make_run(tmp_path / "t4.duckdb", ops={GEMM_T4: (1600.0, 4, "aten::mm")}, device="Tesla T4", peaks=False)
    with Comparison([a, b], by="op") as c:
        kind = c.con.execute("SELECT table_type FROM information_schema.tables "
                             "WHERE table_name = 'compare_ops'").fetchall()[0][0]
        assert kind != "VIEW"
        assert {r["key"] for r in rows(c.ops()) if r["kind"] == "kernel"} == {GEMM_H100, GEMM_T4}
        c.set_by("family")   # the stored rows follow the key chosen, not the first one
        assert {r["key"] for r in rows(c.ops()) if r["kind"] == "kernel"} == {"gemm"}
        assert {r["item"] for r in rows(c.items()) if r["item_type"] == "op"} >= {"gemm"}


def test_kind_split_sees_the_copy_move_direction(pair):
    with Comparison(pair) as c:
        k = {(r["run"], r["kind"], r["detail"]): r for r in rows(c.kinds())}
        assert k[(0, "memcpy", "HtoD")]["ms"] == pytest.approx(0.45, rel=0.05)
        assert (1, "memcpy", "HtoD") not in k and (0, "memcpy", "DtoH") not in k
        assert k[(1, "memcpy", "DtoH")]["bytes_per_step"] == 8 << 20
        assert k[(0, "sync", None)]["ms"] == pytest.approx(0.03)
        assert k[(0, "memset", None)]["ms"] == pytest.approx(0.02)
        # idle: the 5 us gaps after each of the 12 kernels, but the first lies under the 450 us copy
        assert k[(0, "idle", None)]["ms"] == pytest.approx(11 * 0.005, rel=0.05)
        assert k[(1, "kernel", None)]["ratio"] == pytest.approx(2.38 / 2.1, rel=0.03)
        wide = c.kinds_side_by_side().to_pylist()
        assert any(r["kind"] == "memcpy" and r["detail"] == "DtoH" and r["A_ms"] is None for r in wide)


def test_devices_and_peaks_side_by_side(tmp_path):
    a = make_run(tmp_path / "h100.duckdb")
    b = make_run(tmp_path / "t4.duckdb", device="Tesla T4", peaks=False)
    with Comparison([a, b]) as c:
        devs = {r["run"]: r for r in rows(c.devices())}
        assert devs[0]["peak_memory_bw_gbps"] == 3352.0 and devs[0]["peaks_from"] == "estimate+file"
        assert devs[1]["peak_memory_bw_gbps"] == 320 and devs[1]["peaks_from"] == "estimate"
        spec = {r["spec"]: r for r in c.devices_side_by_side().to_pylist()}
        assert spec["name"]["A"] == "NVIDIA H100 80GB HBM3" and spec["name"]["B"] == "Tesla T4"
        bw = {r["run"]: r for r in rows(c.bandwidth())}
        # 8 MiB in 400 us = 20.97 GB/s; H100 link 63 GB/s from the file, T4 16 GB/s from the table
        assert bw[0]["achieved_gbps"] == pytest.approx(8 * 2**20 / 400e3, rel=1e-3)
        assert bw[0]["peak_of"] == "host link" and bw[0]["peak_source"] == "file"
        assert bw[0]["pct_peak"] == pytest.approx(100 * 20.97 / 63.0, rel=1e-2)
        assert bw[1]["peak_gbps"] == 16 and bw[1]["peak_source"] == "estimate"


def test_throughput_against_peak_from_user_flops(pair):
    with Comparison(pair, work=work_list(["*gemm*=1.0"], ["*softmax*=0.01"])) as c:
        t = {(r["run"], r["pattern"]): r for r in rows(c.throughput())}
        g = t[(0, "*gemm*")]
        # 4 calls x 1 GFLOP in 1.6 ms per step = 2.5 TFLOP/s; H100 dense tensor peak 989 (estimate)
        assert g["tflops"] == pytest.approx(2.5, rel=0.02)
        assert g["pct_tensor_peak"] == pytest.approx(100 * 2.5 / 989, rel=0.02)
        s = t[(1, "*softmax*")]
        assert s["gbps"] == pytest.approx(2 * 0.01 / 0.4e-3, rel=0.05)


@pytest.mark.parametrize("by", ["op", "family"])
def test_copy_throughput_against_the_peak_of_its_direction(pair, by):
    """--bytes on a copy key sets it against the peak that bounds that direction (the host link
    for HtoD), as the bandwidth table does, not against DRAM; a kernel's stays against DRAM.
    --by family keys a copy by its name as well ('Memcpy HtoD'): the same peak."""
    softmax = SOFTMAX if by == "op" else "softmax"
    with Comparison(pair, by=by, work=work_list([], ["Memcpy HtoD=0.008388608", "*softmax*=0.01"])) as c:
        t = {(r["run"], r["key"]): r for r in rows(c.throughput())}
        bw = {r["run"]: r for r in rows(c.bandwidth())}
    h = t[(0, "Memcpy HtoD")]
    assert h["memory_peak_of"] == "host link" == bw[0]["peak_of"]
    # one 8 MiB copy of 450 us per step: 18.6 GB/s, 29.6% of the file's 63 GB/s host link
    assert h["gbps"] == pytest.approx(8 * 2**20 / 450e3, rel=0.03)
    assert h["pct_memory_peak"] == pytest.approx(100 * h["gbps"] / 63.0, rel=1e-6)
    assert h["pct_memory_peak"] == pytest.approx(bw[0]["pct_peak"], rel=0.03)
    s = t[(0, softmax)]
    assert s["memory_peak_of"] == "device memory"
    assert s["pct_memory_peak"] == pytest.approx(100 * s["gbps"] / 3352.0, rel=1e-6)


def test_work_given_twice_for_one_name_is_refused_not_overwritten():
    """--flops gemm=1 --flops gemm=2 (a value edited in one place of a CI script and not the
    other) is refused in one line naming both values, not read as the last one silently; the same
    value twice, or --flops and --bytes of one name, is no conflict."""
    with pytest.raises(UsageError, match=r"--flops 'gemm' is given twice \(1 and 2\)"):
        work_list(["gemm=1", "*softmax*=3", "gemm=2"])
    with pytest.raises(UsageError, match=r"--bytes 'Memcpy HtoD' is given twice"):
        work_list([], ["Memcpy HtoD=0.5", "Memcpy HtoD=0.25"])
    (w,) = work_list(["gemm=1", "gemm=1.0"], ["gemm=0.5"])
    assert (w.pattern, w.gflop, w.gbytes) == ("gemm", 1.0, 0.5)


def test_work_that_matches_no_key_is_noted(pair, capsys):
    """A mistyped --flops/--bytes NAME says so, instead of only leaving the throughput table
    without its row; a NAME that matches keeps quiet."""
    a, b = pair
    with Comparison(pair, work=work_list(["*gemm*=1.0", "gemmm=2"], ["softmx=0.01"])) as c:
        notes = [n for n in c.legend() if "matches no key" in n]
        assert {p for (p,) in c.throughput().select("pattern").fetchall()} == {"*gemm*"}
    assert len(notes) == 2
    assert "--flops 'gemmm'" in notes[0] and "--bytes 'softmx'" in notes[1]
    assert main(["compare", str(a), str(b), "--flops", "nothing=1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("--flops 'nothing' matches no key" in n for n in doc["notes"])
    # CSV holds only the tables: the notes go to stderr
    assert main(["compare", str(a), str(b), "--flops", "nothing=1", "--format", "csv"]) == 0
    got = capsys.readouterr()
    assert "note:" not in got.out
    assert "cuptiprof compare: note: --flops 'nothing' matches no key" in got.err


def test_work_beyond_the_peak_is_noted(pair, capsys):
    """--flops/--bytes that make a key run faster than its device's peak (a GFLOP per call given
    for a whole step, MB written as GB) say so, instead of leaving 700% of peak in the table as
    if measured; work within the peak keeps quiet."""
    a, b = pair
    with Comparison(pair, work=work_list(["*gemm*=1000"], ["*softmax*=100"])) as c:
        notes = [n for n in c.legend() if n.startswith("note:") and "beyond what" in n]
    assert len(notes) == 2, notes
    assert "--flops '*gemm*'" in notes[0] and "tensor-core peak" in notes[0]
    assert "--bytes '*softmax*'" in notes[1] and "device memory" in notes[1]
    with Comparison(pair, work=work_list(["*gemm*=1.0"], ["*softmax*=0.01"])) as c:
        assert not [n for n in c.legend() if n.startswith("note:") and "beyond what" in n]
    assert main(["compare", str(a), str(b), "--flops", "*gemm*=1000", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("beyond" in n and "--flops '*gemm*'" in n for n in doc["notes"])


def test_known_gpu_table():
    assert known_gpu("NVIDIA A100-SXM4-80GB")["peak_memory_bw_gbps"] == 2039
    assert known_gpu("NVIDIA A100-PG509-200")["peak_memory_bw_gbps"] == 1555
    assert known_gpu("Tesla V100-SXM2-32GB")["peak_nvlink_gbps"] == 150
    assert known_gpu("NVIDIA L4")["peak_memory_bw_gbps"] == 300
    assert known_gpu("Some Future GPU") is None
    # a variant is matched before the plain name it contains, and a name is not another's prefix
    hbm = {n: known_gpu(n)["peak_memory_bw_gbps"] for n in (
        "NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB", "NVIDIA H200", "NVIDIA A10G",
        "NVIDIA L40S", "Tesla V100-PCIE-16GB")}
    assert hbm == {"NVIDIA H100 PCIe": 2000, "NVIDIA H100 80GB HBM3": 3350, "NVIDIA GH200 480GB": 4000,
                   "NVIDIA H200": 4800, "NVIDIA A10G": 600, "NVIDIA L40S": 864, "Tesla V100-PCIE-16GB": 900}
    assert known_gpu("NVIDIA A10G")["peak_tensor_tflops"] == 70
    assert known_gpu("Tesla V100-PCIE-16GB")["peak_nvlink_gbps"] is None
    assert known_gpu("NVIDIA GH200 480GB")["peak_host_link_gbps"] == 450
    # the NVLink-bridged PCIe card has figures of its own, not the SXM part's
    assert known_gpu("NVIDIA H100 NVL") == {
        "peak_memory_bw_gbps": 3900, "peak_host_link_gbps": 64, "peak_nvlink_gbps": 300,
        "peak_tensor_tflops": 835, "peak_fp32_tflops": 60}
    assert known_gpu("NVIDIA H200 NVL")["peak_tensor_tflops"] == 835
    assert known_gpu("NVIDIA H200")["peak_tensor_tflops"] == 989


def test_bad_input_exits_2_with_one_line(tmp_path, capsys, pair):
    a, b = pair
    assert main(["compare", str(a)]) == 2
    assert "at least 2 files" in capsys.readouterr().err
    assert main(["compare", str(a), str(a)]) == 2
    assert "same file" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "missing.duckdb")]) == 2
    assert "no such file" in capsys.readouterr().err
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database")
    assert main(["compare", str(a), str(junk)]) == 2
    assert "not a DuckDB file" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--flops", "gemm"]) == 2
    assert "NAME=GFLOP" in capsys.readouterr().err
    for spec in ("gemm=\u0663", "gemm=\uff14.3", "gemm=1_000"):   # float() reads these
        assert main(["compare", str(a), str(b), "--flops", spec]) == 2
        assert "NAME=GFLOP with a positive number" in capsys.readouterr().err
    for top in ("0", "99999999999999999999"):   # refused as the arguments are read
        with pytest.raises(SystemExit) as stop:
            main(["compare", str(a), str(b), "--top", top])
        assert stop.value.code == 2 and "--top" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--flops", "*=inf"]) == 2
    assert "positive number" in capsys.readouterr().err
    # work so large that throughput overflows to infinity (no JSON number): a typo, refused
    # and work of 0 (a throughput of 0 would read as measured): no positive number either
    for opt, spec in (("--flops", "*gemm*=1e308"), ("--bytes", "*=1e10"), ("--bytes", "*=nan"),
                      ("--flops", "gemm=0"), ("--bytes", "*=-1")):
        assert main(["compare", str(a), str(b), opt, spec, "--format", "json"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"cuptiprof: error: {opt} {spec!r}: expected") and "up to 1000000000" in err
        assert err.count("\n") == 1
    assert main(["compare", str(a), str(b), "--flops", "*gemm*=1e9", "--format", "json"]) == 0
    assert "Infinity" not in capsys.readouterr().out


def test_different_schema_versions_are_refused(tmp_path, pair):
    import duckdb
    a, _ = pair
    newer = make_run(tmp_path / "newer.duckdb")
    con = duckdb.connect(str(newer))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(SchemaVersionError, match="newer cuptiprof.*upgrade cuptiprof"):
        Comparison([a, newer])    # the answer for a file from a newer cuptiprof: upgrade


def test_file_without_steps_counts_as_one_step(tmp_path, pair):
    a, _ = pair
    p = tmp_path / "nosteps.duckdb"
    with Writer(p, RunInfo(source="synthetic")) as w:
        w.append({"kernels": {"start_ns": [0, 1000], "end_ns": [500, 1800], "name": [ADD, ADD]}})
    with Comparison([a, p]) as c:
        add = {r["run"]: r for r in rows(c.ops()) if r["key"] == ADD}
        assert add[1]["ms"] == pytest.approx(0.0013) and add[1]["steps"] == 1
        assert "no steps recorded" in c.legend()[1]
        # its one step is the whole file, not a recorded step of unknown noise
        assert not any("single step" in line for line in c.legend())
    with pytest.raises(InputError, match="no recorded steps"):
        Comparison([a, p], require_steps=True)


def test_cli_formats(pair, capsys):
    a, b = pair
    assert main(["compare", str(a), str(b), "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "A = " in out and "B = " in out and "B only" in out and "kinds" in out
    assert main(["compare", str(a), str(b), "--format", "json", "--by", "family"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["by"] == "family" and {"flash_attention", "softmax", "gemm"} <= {r["key"] for r in doc["ops"]}
    assert {r["direction"] for r in doc["bandwidth"]} == {"HtoD", "DtoH"}
    # --top holds in JSON too: the keys in the top N of any file, each with its row per file
    assert main(["compare", str(a), str(b), "--format", "json", "--top", "2"]) == 0
    ops = json.loads(capsys.readouterr().out)["ops"]
    assert sorted((r["key"], r["run"]) for r in ops) == [
        ("Memcpy DtoH", 1), ("Memcpy HtoD", 0), (GEMM_H100, 0), (GEMM_H100, 1)]
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("key,key_type,kind,A_ms")
    assert main(["compare", str(a), str(b), "--format", "markdown"]) == 0
    assert "| key |" in capsys.readouterr().out


def test_csv_and_json_name_a_key_of_one_file_alike(pair, capsys):
    """A key only one file has is "B only" in CSV and in JSON alike (JSON gave the file's
    position, 1, where CSV said "B only")."""
    import csv
    import io
    a, b = pair
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    by_csv = {r["key"]: r["only_in"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    by_json = {}
    for r in json.loads(capsys.readouterr().out)["ops"]:
        by_json.setdefault(r["key"], set()).add(r["only_in"])
    assert by_csv[FLASH] == "B only" and by_json[FLASH] == {"B only"}
    assert by_json[SOFTMAX] == {None} and by_csv[SOFTMAX] == ""
    assert {k: v.pop() or "" for k, v in by_json.items()} == by_csv


def test_throughput_is_shown_only_with_work_per_call(pair, capsys):
    """Without --flops or --bytes the throughput table would be empty: it is left out of the
    table and JSON outputs, and shown once work is given."""
    a, b = pair
    for work, shown in (([], False), (["--flops", "*gemm*=2"], True)):
        assert main(["compare", str(a), str(b), *work]) == 0
        titles = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("throughput")]
        assert bool(titles) == shown, titles
        assert main(["compare", str(a), str(b), "--format", "json", *work]) == 0
        assert ("throughput" in json.loads(capsys.readouterr().out)) == shown


def test_html_page_keeps_the_top_and_leaves_stdout_to_the_table(pair, tmp_path, capsys):
    """compare --html: the line naming the page goes to stderr (stdout holds the table asked
    for: a CSV file written with `> out.csv` stays one table), and the page's ops table holds
    the keys --top picks, as the printed one does."""
    a, b = pair

    def page_rows(page):
        ops = page.read_text().split("<h2>Ops side by side</h2>", 1)[1].split("</table>", 1)[0]
        return ops.split("<tbody>", 1)[1].count("<tr>")

    counts = {}
    for top in ("1", "15"):
        page = tmp_path / f"top{top}.html"
        assert main(["compare", str(a), str(b), "--html", str(page), "--format", "csv",
                     "--top", top]) == 0
        cap = capsys.readouterr()
        rows = _csv_rows(cap.out)
        assert rows[0][0] == "key" and f"cuptiprof: wrote {page}" in cap.err
        counts[top] = len(rows) - 1
        assert page_rows(page) == counts[top]
    assert counts["1"] < counts["15"]


def _csv_rows(text: str) -> list[list[str]]:
    """A CSV document's rows, every one as wide as its header (else it is no single table)."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    assert rows and all(len(r) == len(rows[0]) for r in rows), text
    return rows


def test_csv_is_one_table_that_loads_as_one_file(tmp_path, pair, capsys):
    """CSV holds one table (ops unless --table names another), so that csv, pandas or DuckDB
    read it whole; the legend's notes, which a CSV file cannot hold, go to stderr."""
    import duckdb

    a, b = pair
    heads = {"ops": ["key", "key_type", "kind", "A_ms"], "kinds": ["kind", "detail", "A_ms"],
             "devices": ["spec", "A", "B"], "bandwidth": ["file", "direction", "copies"],
             "throughput": ["file", "key", "key_type", "pattern"]}
    for table, head in heads.items():
        args = ["compare", str(a), str(b), "--format", "csv", "--flops", "*gemm*=2"]
        assert main(args + (["--table", table] if table != "ops" else [])) == 0
        text = capsys.readouterr().out
        rows = _csv_rows(text)
        assert rows[0][:len(head)] == head and len(rows) > 1, (table, rows[0])
        path = tmp_path / f"{table}.csv"
        path.write_text(text)
        got = duckdb.sql(f"SELECT count(*) FROM read_csv('{path}', header = true)").fetchall()[0][0]
        assert got == len(rows) - 1, table
    big = make_run(tmp_path / "big.duckdb", outside_us=25_000.0)
    assert main(["compare", str(a), str(big), "--format", "csv"]) == 0
    cap = capsys.readouterr()
    assert _csv_rows(cap.out)[0][0] == "key" and "outside every step" in cap.err
    # --table narrows the other formats too
    assert main(["compare", str(a), str(b), "--table", "kinds", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "kinds" in doc and not {"ops", "devices", "bandwidth"} & set(doc)
    assert main(["compare", str(a), str(b), "--table", "bandwidth"]) == 0
    out = capsys.readouterr().out
    assert "bandwidth" in out and "kinds:" not in out and "ops:" not in out
    assert main(["compare", str(a), str(b), "--table", "throughput", "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--flops" in err


def test_three_files(tmp_path, pair):
    a, b = pair
    c3 = make_run(tmp_path / "third.duckdb", ops={ADD: (100.0, 6, "aten::add")})
    with Comparison([a, b, c3]) as c:
        wide = c.side_by_side(top=3).to_pylist()
        add = next(r for r in wide if r["key"] == ADD)
        assert add["C_x"] == pytest.approx(2.0, rel=0.01) and add["C_rank"] == 1


def test_python_m_entry_point(pair):
    a, b = pair
    res = subprocess.run([sys.executable, "-m", "cuptiprof", "compare", str(a), str(b), "--top", "2"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "sm90_xmma_gemm" in res.stdout and "B = " in res.stdout


def import_trace(src: Path, dest: Path) -> Path:
    """Import a Kineto trace with cuptiprof's importer; skip when this build has none."""
    try:
        from cuptiprof.interop.kineto import import_kineto
    except ImportError:
        pytest.skip("the Kineto importer (cuptiprof.interop.kineto) is not part of this build")
    try:
        with Writer(dest, RunInfo(source="kineto", command=str(src)), atomic=True) as w:
            import_kineto(w, [src])
    except Exception as exc:  # the importer is developed separately; its failures are not compare's
        pytest.skip(f"the Kineto importer could not import {src.name}: {exc}")
    return dest


def test_real_traces_compare_by_family(shared_traces, tmp_path):
    src0 = shared_traces / "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    src4 = shared_traces / "kineto-tbplugin/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
    out = []
    for i, src in enumerate((src0, src4)):
        out.append(import_trace(src, tmp_path / f"r{i}.duckdb"))
    with Comparison(out, by="family") as c:
        fam = {(r["run"], r["key"]): r for r in rows(c.ops())}
        # Both are the same ResNet-50 on a V100: conv and batchnorm dominate, in both files
        for run in (0, 1):
            assert fam[(run, "conv")]["rank"] <= 3
            assert (run, "batchnorm") in fam
        assert 0.5 < fam[(1, "conv")]["ratio"] < 2.0
        assert all(r["steps"] >= 5 for r in rows(c.ops()))


def test_steps_an_exception_ended_are_left_out(tmp_path, pair):
    """A step cut short (data_quality step_incomplete) would pull the medians down: compare and
    diff leave it out and say so."""
    import duckdb

    a, b = pair
    with duckdb.connect(str(a)) as con:
        run_id, pid = con.execute("SELECT run_id, pid FROM kernels LIMIT 1").fetchone()
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) VALUES "
                    "(?, ?, 'step_incomplete', '3', 'step 3 was ended early by KeyboardInterrupt')",
                    [run_id, pid])
    with Comparison([a, b]) as cmp:
        steps = {(r["run"], r["step"]) for r in rows(cmp.steps())}
        assert (0, 3) not in steps and (1, 3) in steps
        assert cmp.runs[0].steps == 4 and cmp.runs[1].steps == 5
        assert "1 left out (ended early by an exception)" in cmp.legend()[0]


def _region_run(path, compiled: bool, dur_us: float, steps: int = 3):
    """Each step: a 'transformer' range holding its kernels (eager: under aten ops inside it;
    compiled: one fused kernel straight under it) and one copy outside every range of the
    program's own."""
    import pyarrow as pa

    r = {c: [] for c in ("range_id", "parent_id", "depth", "name", "start_ns", "end_ns", "kind", "step")}
    k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id", "range_id")}
    t, rid, frames = 1_000_000_000, 0, set()
    for s in range(steps):
        rid += 1
        step_rid, tr_rid = rid, rid + 1
        rid += 1
        for row in ((step_rid, None, 0, "step", t, t + 1_000_000, "step", s),
                    (tr_rid, step_rid, 1, "transformer", t, t + 500_000, "user", s)):
            for c, v in zip(r, row):
                r[c].append(v)
        launches = []
        if compiled:   # launched under a Python frame of a with_stack trace: not a region
            rid += 1
            for c, v in zip(r, (rid, tr_rid, 2, "torch/_inductor/output_code.py(570): __call__",
                                t, t + 400_000, "user", s)):
                r[c].append(v)
            frames.add(rid)
            launches.append(("triton_fused_0", rid, dur_us))
        if not compiled:
            for name, op in (("gemm_kernel", "aten::mm"), ("add_kernel", "aten::add")):
                rid += 1
                for c, v in zip(r, (rid, tr_rid, 2, op, t, t + 100_000, "op", s)):
                    r[c].append(v)
                launches.append((name, rid, dur_us / 2))
        launches.append(("copy_kernel", step_rid, 10.0))
        ct = t
        for name, where, d in launches:
            for c, v in zip(k, (ct, ct + int(d * 1000), s, name, 7, 0, where)):
                k[c].append(v)
            ct += int(d * 1000) + 1000
        t += 2_000_000
    typed = {c: pa.array(v, pa.int64() if c in ("range_id", "parent_id", "start_ns", "end_ns")
                         else (pa.int32() if c in ("depth", "step") else None)) for c, v in r.items()}
    typed["domain"] = pa.array(["python_function" if i in frames else None for i in r["range_id"]],
                               pa.string())
    with Writer(path, RunInfo(source="synthetic")) as w:
        w.append({"ranges": typed, "kernels": k,
                  "devices": {"device_id": [0], "kind": ["gpu"], "name": ["NVIDIA H100 80GB HBM3"]}})
    return Path(path)


def test_by_region_matches_eager_and_compiled_on_the_programs_own_ranges(tmp_path):
    """Eager kernels sit under aten ops, compiled ones under no op at all: --by range keys them
    apart, --by region on the program's own range around both."""
    a = _region_run(tmp_path / "eager.duckdb", compiled=False, dur_us=400.0)
    b = _region_run(tmp_path / "compiled.duckdb", compiled=True, dur_us=300.0)
    with Comparison([a, b], by="region") as cmp:
        got = {(r["run"], r["key"]): r for r in rows(cmp.ops())}
    assert {k for _, k in got} == {"transformer", "(no range)"}   # the copy under the step alone
    assert got[(0, "transformer")]["key_type"] == "range"
    assert got[(0, "transformer")]["ms"] == pytest.approx(0.4)
    assert got[(1, "transformer")]["ms"] == pytest.approx(0.3)
    assert got[(1, "transformer")]["ratio"] == pytest.approx(0.75)
    assert got[(1, "(no range)")]["ratio"] == pytest.approx(1.0)
    with Comparison([a, b], by="range") as cmp:
        keys = {(r["run"], r["key"]) for r in rows(cmp.ops())}
    assert {(0, "aten::mm"), (0, "aten::add"), (1, "transformer")} <= keys
    assert (1, "aten::mm") not in keys and (0, "transformer") not in keys
    # By op the two share almost nothing: the legend names the keys that line them up.
    with Comparison([a, b], by="op") as cmp:
        note = cmp.legend()[-1]
    assert note.startswith("note: only 3% of B's time is on keys A also has") and "--by region" in note
    with Comparison([a, b], by="region") as cmp:
        assert not any(line.startswith("note:") for line in cmp.legend())
    # diff gates on the same key
    r = subprocess.run([sys.executable, "-m", "cuptiprof", "diff", str(b), str(a), "--by", "region",
                        "--fail-above", "5"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "transformer" in r.stdout, r.stdout + r.stderr


def test_a_file_of_unlike_runs_is_flagged_and_one_of_ranks_is_not(tmp_path):
    """Runs of one job (hosts, ranks) pool by step as they should; runs on different GPUs
    merged into one file would mix their medians and noise, and compare and diff say so."""
    from cuptiprof.store.merge import merge_files

    h100 = make_run(tmp_path / "h100.duckdb", seed=1)
    h100b = make_run(tmp_path / "h100b.duckdb", seed=2)
    a100 = make_run(tmp_path / "a100.duckdb", device="NVIDIA A100-SXM4-80GB", seed=3)
    ranks = merge_files([h100, h100b], tmp_path / "ranks.duckdb")
    mixed = merge_files([h100, a100], tmp_path / "mixed.duckdb")
    with Comparison([ranks, h100]) as cmp:
        assert not [n for n in cmp.legend() if "runs of different" in n]
    with Comparison([mixed, h100]) as cmp:
        (note,) = [n for n in cmp.legend() if "runs of different" in n]
    assert note.startswith("note: A (mixed.duckdb) holds 2 runs of different sources or GPUs")
    r = subprocess.run([sys.executable, "-m", "cuptiprof", "diff", str(mixed), str(h100),
                        "--fail-above", "5"], capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1) and "BASE (mixed.duckdb) holds 2 runs" in r.stdout, r.stdout + r.stderr


def test_a_process_without_steps_in_a_merged_file_is_named_as_left_out(tmp_path, pair):
    """Files are compared step by step, so a run without steps merged with runs that have them
    has no place in the comparison; the legend (and diff) say what was left out, with its size."""
    from cuptiprof.store.merge import merge_files

    a, _ = pair
    alone = tmp_path / "nosteps.duckdb"
    with Writer(alone, RunInfo(source="synthetic"), pid=77) as w:
        w.append({"kernels": {"start_ns": [0, 1000], "end_ns": [500, 1800], "name": [ADD, ADD]}})
    merged = merge_files([a, alone], tmp_path / "all.duckdb")
    with Comparison([merged, a]) as cmp:
        (note,) = [n for n in cmp.legend() if "without steps" in n]
        add = {r["run"]: r for r in rows(cmp.ops()) if r["key"] == ADD}
    assert note.startswith("note: A (all.duckdb) holds 1 process without steps "
                           "(2 GPU activities, 0.0 ms), left out")
    assert add[0]["ms"] == pytest.approx(add[1]["ms"])   # the per-step numbers are A's own
    with Comparison(pair) as cmp:
        assert not [n for n in cmp.legend() if "without steps" in n]
    r = subprocess.run([sys.executable, "-m", "cuptiprof", "diff", str(a), str(merged),
                        "--fail-above", "5"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "NEW (all.duckdb) holds 1 process without steps" in r.stdout, \
        r.stdout + r.stderr


def test_markdown_shows_names_as_written(tmp_path, capsys):
    """Markdown tables of compare and diff: a template's `<float>` is not an HTML tag, `*`
    not emphasis, `|` not a cell edge; rendered by a CommonMark parser the names read as written."""
    markdown_it = pytest.importorskip("markdown_it")
    names = ["gemm_kernel<float>", "scale*x*y", "_a_b_ | c", "tile[4]&amp;~~z~~\\n"]
    ops = {n: (100.0 + 50 * i, 1, "aten::op") for i, n in enumerate(names)}
    a = make_run(tmp_path / "a.duckdb", ops=ops)
    b = make_run(tmp_path / "b.duckdb", ops={n: (v[0] * 1.5, *v[1:]) for n, v in ops.items()}, seed=2)
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    for argv in (["compare", str(a), str(b), "--format", "markdown"],
                 ["diff", str(a), str(b), "--fail-above", "5", "--format", "markdown"]):
        main(argv)
        page = md.render(capsys.readouterr().out)
        cells = [html_mod.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", page)]
        for n in names:
            assert n in cells, (argv[0], n, cells[:12])
        assert "<float>" not in page and "<em>" not in page and "<del>" not in page and "<s>" not in page


def test_markdown_shows_labels_and_paths_as_written(tmp_path, capsys):
    """The lines above the Markdown tables (compare's legend, diff's heading) hold a file's
    path and label: they read as written too, not as an image tag or emphasis."""
    markdown_it = pytest.importorskip("markdown_it")
    import duckdb

    label = "<img src=x>*lab*"
    a = make_run(tmp_path / "a.duckdb")
    b = make_run(tmp_path / "x_<b>y_.duckdb", label=label, seed=2)
    with duckdb.connect(str(b)) as con:   # diff's note of a run that did not complete names the file
        con.execute("UPDATE runs SET status = 'failed'")
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    for argv, shown in ((["compare", str(a), str(b), "--format", "markdown"], (label, f"{b}")),
                        (["diff", str(a), str(b), "--fail-above", "5", "--format", "markdown"],
                         (f"{b}", f"note: NEW ({b.name}) is a run that did not complete"))):
        main(argv)
        page = md.render(capsys.readouterr().out)
        text = html_mod.unescape(re.sub(r"<[^>]+>", "", page))
        for s in shown:
            assert s in text, (argv[0], s)
        assert "<img" not in page and "<b>" not in page and "<em>" not in page, argv[0]


def test_files_of_different_sizes_are_noted(tmp_path, capsys):
    """One rank against a whole job reads as N times slower: times per step are summed over
    processes and devices, and the legend says that the files differ in size."""
    a = make_run(tmp_path / "rank0.duckdb", seed=1)
    b = make_run(tmp_path / "rank1.duckdb", seed=2)
    job = tmp_path / "job.duckdb"
    assert main(["merge", str(a), str(b), "-o", str(job)]) == 0
    capsys.readouterr()
    with Comparison([a, job]) as cmp:
        assert [r.lanes for r in cmp.runs] == [1, 2]
        assert ("note: the files hold work of different numbers of processes or devices (A: 1, B: 2)"
                in "\n".join(cmp.legend()))
    assert main(["diff", str(a), str(job), "--fail-above", "5"]) == 1
    assert "different numbers of processes or devices (BASE: 1, NEW: 2)" in capsys.readouterr().out
    with Comparison([a, b]) as cmp:   # alike: no note
        assert not any("different numbers" in line for line in cmp.legend())


def test_by_range_work_launched_in_the_step_alone_is_keyed_as_no_range(tmp_path):
    """'(step, no inner range)' is not one of the program's ranges: its key_type says 'none',
    as '(no range)' does for --by region."""
    a = _region_run(tmp_path / "a.duckdb", compiled=False, dur_us=400.0)
    b = _region_run(tmp_path / "b.duckdb", compiled=False, dur_us=300.0)
    with Comparison([a, b], by="range") as cmp:
        types = {r["key"]: r["key_type"] for r in rows(cmp.ops())}
    assert types["(step, no inner range)"] == "none"
    assert types["aten::mm"] == types["aten::add"] == "range"


def test_a_step_one_rank_of_a_merged_file_cut_short_is_left_out_for_every_rank(tmp_path, capsys):
    """Steps of a merged file pool by number: the other rank's half of a step cut short in one
    rank would count as a whole step half as long."""
    import duckdb

    jobs = []
    for name, seeds in (("base", (1, 2)), ("new", (3, 4))):
        parts = [make_run(tmp_path / f"{name}{s}.duckdb", steps=2, seed=s) for s in seeds]
        jobs.append(tmp_path / f"{name}.duckdb")
        assert main(["merge", *map(str, parts), "-o", str(jobs[-1])]) == 0
    with duckdb.connect(str(jobs[1])) as con:
        run_id, pid = con.execute("SELECT run_id, pid FROM kernels ORDER BY run_id LIMIT 1").fetchone()
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) VALUES "
                    "(?, ?, 'step_incomplete', '2', 'step 2 was ended early by KeyboardInterrupt')",
                    [run_id, pid])
    with Comparison(jobs) as cmp:
        steps = {(r["run"], r["step"]): r["gpu_ms"] for r in rows(cmp.steps())}
        assert set(steps) == {(0, 1), (0, 2), (1, 1)}
        assert steps[(1, 1)] == pytest.approx(steps[(0, 1)])
        assert cmp.runs[1].steps == 1 and "1 left out (ended early" in cmp.legend()[1]
    capsys.readouterr()


def test_gpu_work_mostly_outside_the_steps_is_noted(tmp_path, capsys):
    """Files are compared step by step: when most of a file's GPU work ran outside every step,
    the comparison covers a small part of it, and compare and diff say how small; warm-up work,
    left out on purpose, and a normal file stay quiet."""
    a = make_run(tmp_path / "a.duckdb", seed=1)
    b = make_run(tmp_path / "b.duckdb", seed=2, outside_us=25_000.0)   # 2x the 5 steps' work
    warm = make_run(tmp_path / "warm.duckdb", seed=3, warmup=6, steps=2, record_warmup=True)
    with Comparison([a, b]) as cmp:
        n, of, share = cmp.runs[1].outside
        assert (n, of) == (1, 5 * 14 + 1) and 0.6 < share < 0.7
        assert not cmp.runs[0].outside
        (note,) = [line for line in cmp.legend() if "outside every step" in line]
    assert note == (f"note: B (b.duckdb): {100 * share:.0f}% of its GPU time (1 of 71 activities) ran "
                    "outside every step and is not compared (files are compared step by step); "
                    f"`cuptiprof report {b} --by quality` shows it")
    for us, noted in ((8_400.0, True), (3_100.0, False)):   # from 30% on: 40% is named, 20% is not
        c = make_run(tmp_path / f"o{us:.0f}.duckdb", seed=2, outside_us=us)
        with Comparison([a, c]) as cmp:
            share = cmp.runs[1].outside[2]
            assert any("outside every step" in line for line in cmp.legend()) == noted, share
    with Comparison([warm, a]) as cmp:
        assert cmp.runs[0].outside == ()   # 6 warm-up steps of 8: all launched in the warm-up range
        assert not [line for line in cmp.legend() if "outside every step" in line]
    assert main(["compare", str(a), str(b)]) == 0
    assert "  " + note + "\n" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    assert note in json.loads(capsys.readouterr().out)["notes"]
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 0
    assert note.replace("note: B (", "note: NEW (") + "\n" in capsys.readouterr().out
    assert main(["diff", str(a), str(make_run(tmp_path / "c.duckdb", seed=4)), "--fail-above", "5"]) == 0
    assert "outside every step" not in capsys.readouterr().out


def test_real_traces_whose_work_lies_outside_the_steps_are_noted(shared_traces, tmp_path, capsys):
    """HTA's trace_compare pair: all but one or two kernels and every copy and memset of each
    file ran outside its ProfilerSteps."""
    base = import_trace(shared_traces / "hta/trace_compare/base/base.json.gz", tmp_path / "tcb.duckdb")
    test = import_trace(shared_traces / "hta/trace_compare/test/test.json.gz", tmp_path / "tct.duckdb")
    assert main(["compare", str(base), str(test)]) == 0
    out = capsys.readouterr().out
    assert "note: A (tcb.duckdb): 99+% of its GPU time (16 of 18 activities) ran outside every step" in out
    assert "note: B (tct.duckdb): 99+% of its GPU time (16 of" in out
    assert f"`cuptiprof report {test} --by quality` shows it" in out
    rn = shared_traces / "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    ns = shared_traces / "hta/negative_queue_length_values_check/rank0.json.gz"   # 13% outside
    assert main(["compare", str(import_trace(rn, tmp_path / "rn.duckdb")),
                 str(import_trace(ns, tmp_path / "ns.duckdb"))]) == 0
    assert "outside every step" not in capsys.readouterr().out


def _kernels_only_run(path, name, steps=3, dur_us=400):
    """A run of one kernel per step and nothing else (no copy or memset another run shares)."""
    k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
    for s in range(steps):
        for c, v in (("start_ns", 1_000_000 * (s + 1)), ("end_ns", 1_000_000 * (s + 1) + dur_us * 1000),
                     ("step", s), ("name", name), ("stream_id", 7), ("device_id", 0)):
            k[c].append(v)
    with Writer(path, RunInfo(source="synthetic")) as w:
        w.append({"kernels": k})
    return path


def _odd_text_run(path, label, gpu):
    """A run of one kernel per step, its label and GPU name as a trace may hold them."""
    k = {"start_ns": [1_000_000 * s for s in (1, 2, 3)], "end_ns": [1_000_000 * s + 400_000 for s in (1, 2, 3)],
         "step": [1, 2, 3], "name": ["k"] * 3, "stream_id": [7] * 3, "device_id": [0] * 3}
    with Writer(path, RunInfo(source="synthetic", label=label)) as w:
        w.append({"kernels": k, "devices": {"device_id": [0], "name": [gpu], "kind": ["gpu"]}})
    return path


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_legend_strips_line_breaks_and_terminal_escapes_from_labels_and_gpu_names(tmp_path, capsys, fmt):
    """A label or GPU name read from a file is data, as a kernel name is: its line break does
    not start a line of the legend, its escape does not reach the terminal."""
    a = _odd_text_run(tmp_path / "a.duckdb", "run\n# one\x1b[31m", "GPU\x1b[2J\nX")
    b = _odd_text_run(tmp_path / "b.duckdb", "two\ttabs", "GPU")
    assert main(["compare", str(a), str(b), "--table", "kinds", "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    legend = out.splitlines()[1:3]
    esc = "\\" if fmt == "markdown" else ""   # markdown shows a [ as written
    assert legend[0].endswith(f"(label run # one{esc}[31m; synthetic; GPU{esc}[2J X; 3 steps)")
    assert legend[1].endswith("(label two tabs; synthetic; GPU; 3 steps)")


def test_json_devices_of_a_file_without_a_gpu_listed_is_null(tmp_path, capsys, pair):
    """The table says 'no GPU listed'; JSON says null, not an empty string a reader takes for a
    GPU's name."""
    a = _kernels_only_run(tmp_path / "a.duckdb", GEMM_H100)
    assert main(["compare", str(a), str(pair[0]), "--format", "json"]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert files[0]["devices"] is None and files[1]["devices"]


def test_files_that_share_no_key_at_all_get_the_key_hint(tmp_path):
    """Kernels of another GPU and no copy or memset in common: none of B's time is on a key A
    has, and the legend names the key that lines them up, as it does for a small share; among
    several files the one sharing least is named."""
    a = _kernels_only_run(tmp_path / "h100.duckdb", GEMM_H100)
    b = _kernels_only_run(tmp_path / "t4.duckdb", GEMM_T4)
    hint = ("note: only 0% of B's time is on keys A also has; to line the files up try --by family "
            "across GPU architectures, --by region for eager against torch.compile")
    with Comparison([a, b]) as cmp:
        assert cmp.legend()[-1] == hint
    c = _kernels_only_run(tmp_path / "h100b.duckdb", GEMM_H100)
    with Comparison([a, c, b]) as cmp:
        assert cmp.legend()[-1] == hint.replace("B's", "C's")
    with Comparison([a, b], by="family") as cmp:   # both gemm: lined up, no hint
        assert not any("line the files up" in line for line in cmp.legend())


def test_a_step_without_gpu_work_counts_as_a_step_of_0(tmp_path, capsys):
    """A complete step that launched no GPU work is a step of 0 GPU time in the medians, as
    `report --by step` lists it, not a step left out; a step cut short stays out either way."""
    import duckdb

    a = make_run(tmp_path / "a.duckdb", steps=4, seed=1)
    b = make_run(tmp_path / "b.duckdb", steps=4, seed=1, empty=(3, 4))   # steps 1..4
    with Comparison([a, b]) as cmp:
        assert [r.steps for r in cmp.runs] == [4, 4]
        steps = {(r["run"], r["step"]): r for r in rows(cmp.steps())}
        assert steps[(1, 3)]["gpu_ms"] == steps[(1, 4)]["window_ms"] == steps[(1, 4)]["idle_ms"] == 0
        ops = {(r["run"], r["key"]): r for r in rows(cmp.ops())}
        kinds = {(r["run"], r["kind"], r["detail"]): r for r in rows(cmp.kinds())}
    assert ops[(1, SOFTMAX)]["ms"] == pytest.approx(ops[(0, SOFTMAX)]["ms"] / 2)   # median of x, x, 0, 0
    assert ops[(1, SOFTMAX)]["steps"] == 4 and ops[(1, SOFTMAX)]["min_ms"] == 0
    assert ops[(1, SOFTMAX)]["calls_per_step"] == 1   # the median of 2, 2, 0, 0 calls, not the most
    assert kinds[(1, "memcpy", "HtoD")]["ratio"] == pytest.approx(0.5)
    assert kinds[(1, "memcpy", "HtoD")]["bytes_per_step"] == 4 << 20   # of 8, 8, 0, 0 MiB
    assert main(["report", str(b), "--by", "step", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4   # the report lists the same 4 steps
    assert main(["diff", str(b), str(a), "--fail-above", "5"]) == 0   # x, x, 0, 0: noise of x / 2
    out = capsys.readouterr().out
    assert f"BASE {b} (4 steps) -> NEW {a} (4 steps)" in out
    with duckdb.connect(str(b)) as con:   # an empty step an exception ended is still left out
        run_id, pid = con.execute("SELECT run_id, pid FROM kernels LIMIT 1").fetchone()
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) VALUES "
                    "(?, ?, 'step_incomplete', '4', 'step 4 was ended early by KeyboardInterrupt')",
                    [run_id, pid])
    with Comparison([a, b]) as cmp:
        assert cmp.runs[1].steps == 3 and (1, 4) not in {(r["run"], r["step"]) for r in rows(cmp.steps())}
    # most steps empty: the median step has no GPU window, and a share of it is no number (not
    # an infinity JSON cannot hold)
    c = make_run(tmp_path / "c.duckdb", steps=3, seed=1, empty=(2, 3))
    with Comparison([a, c]) as cmp:
        kinds = rows(cmp.kinds())
    assert {r["pct_window"] for r in kinds if r["run"] == 1} == {None}
    assert {r["pct_gpu_time"] for r in kinds if r["run"] == 1} == {None}   # no GPU work: no share of it
    assert all(r["pct_window"] > 0 for r in kinds if r["run"] == 0 and r["kind"] in ("sync", "idle"))
    assert all(r["pct_gpu_time"] > 0 for r in kinds if r["run"] == 0 and r["kind"] not in ("sync", "idle"))


def test_real_trace_with_an_empty_step_compares_both_steps(shared_traces, tmp_path):
    """HTA's trace_compare test trace: ProfilerStep#1010 launched nothing the trace holds."""
    base = import_trace(shared_traces / "hta/trace_compare/base/base.json.gz", tmp_path / "tcb.duckdb")
    test = import_trace(shared_traces / "hta/trace_compare/test/test.json.gz", tmp_path / "tct.duckdb")
    with Comparison([base, test]) as cmp:
        assert [r.steps for r in cmp.runs] == [2, 2]
        assert {r["step"]: r["gpu_ms"] for r in rows(cmp.steps()) if r["run"] == 1} == {
            1009: pytest.approx(0.004), 1010: 0}


def test_reports_count_a_step_without_gpu_work_as_compare_does(tmp_path, capsys):
    """step_spread and the steps report's busy_vs_median_pct count a complete step without GPU
    work as a step of 0, as compare and diff do: every summary of one file agrees on its steps."""
    import cuptiprof
    b = make_run(tmp_path / "b.duckdb", steps=4, seed=1, empty=(3, 4))   # steps 1..4
    with Comparison([make_run(tmp_path / "a.duckdb", steps=4, seed=1), b]) as cmp:
        n_cmp = cmp.runs[1].steps
        busy = sorted(r["busy_ms"] for r in rows(cmp.steps()) if r["run"] == 1)
    with cuptiprof.open(b) as prof:
        (spread,) = rows(prof.report("step_spread"))
        steps = rows(prof.steps_report())
    assert n_cmp == spread["steps"] == len(steps) == 4 and spread["incomplete"] == 0
    assert busy[:2] == [0, 0] and busy[2] > 0
    assert spread["busy_median_ms"] == pytest.approx((busy[1] + busy[2]) / 2)
    assert spread["busy_min_ms"] == 0 and spread["busy_max_ms"] == pytest.approx(busy[3])
    by_step = {r["step"]: r for r in steps}
    assert by_step[3]["busy_ms"] == by_step[4]["gpu_window_ms"] == 0
    med = (busy[1] + busy[2]) / 2
    assert by_step[1]["busy_vs_median_pct"] == pytest.approx(100 * (by_step[1]["busy_ms"] / med - 1))
    # the empty steps are on the device the process worked on, 100% below its median
    assert {by_step[s]["device_id"] for s in by_step} == {0}
    assert by_step[3]["busy_vs_median_pct"] == by_step[4]["busy_vs_median_pct"] == -100


def test_real_trace_with_an_empty_step_reports_both_steps(shared_traces, tmp_path, capsys):
    """HTA's trace_compare test trace, whose ProfilerStep#1010 launched nothing: report's
    step_spread, report --by step, the HTML page and compare all count 2 steps."""
    test = import_trace(shared_traces / "hta/trace_compare/test/test.json.gz", tmp_path / "tct.duckdb")
    assert main(["report", str(test), "--by", "spread", "--format", "json"]) == 0
    (spread,) = json.loads(capsys.readouterr().out)
    assert spread["steps"] == 2 and spread["busy_median_ms"] == pytest.approx(0.002)
    assert spread["busy_min_ms"] == 0 and spread["busy_max_ms"] == pytest.approx(0.004)
    assert main(["report", str(test), "--by", "step", "--format", "json"]) == 0
    steps = {r["step"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(steps) == {1009, 1010} and steps[1010]["busy_ms"] == 0
    assert steps[1009]["busy_vs_median_pct"] == pytest.approx(100.0)
    assert steps[1010]["busy_vs_median_pct"] == -100 and steps[1010]["device_id"] == steps[1009]["device_id"]
    assert main(["report", str(test), "--by", "step_range", "--format", "json"]) == 0
    by_range = json.loads(capsys.readouterr().out)
    assert {r["step"] for r in by_range} == {1009, 1010}
    assert [r for r in by_range if r["step"] == 1010] == [
        {"step": 1010, "range": None, "gpu_calls": 0, "gpu_ms": 0, "pct_step": None}]
    html = tmp_path / "t.html"
    assert main(["report", str(test), "--html", str(html)]) == 0
    page = html.read_text()
    by_range = page[page.index("<h2>Steps by range</h2>"):page.index("<h2>Kinds</h2>")]
    assert ">1009</text>" in by_range and ">1010</text>" in by_range


def test_work_launched_in_no_range_during_a_warm_up_step_is_warm_up(tmp_path):
    """GPU work launched outside every range while a warm-up step is open (from the warm-up's own
    thread before its steps begin, or from another thread) is warm-up work by its launch time, as
    work launched while a recorded step is open goes into that step on import: compare's note
    about work outside the steps leaves it aside; work launched after the steps does not."""
    import shutil
    import threading

    import cuptiprof
    from cuptiprof.collect.fake import FakeCupti
    from cuptiprof.collect.session import Session

    def record(path, after_us=0):
        f = FakeCupti()
        with Session(path, warmup=1, steps=3, source=f, quiet=True):   # runs 2: still collecting
            started, recording, done = threading.Event(), threading.Event(), threading.Event()

            def warm_thread():
                with cuptiprof.range("step"):   # the warm-up step
                    started.set()
                    recording.wait()
                    f.launch_kernel("k_warm", duration_ns=200_000)   # in no range
                    done.wait()

            def pool_thread():   # a thread without ranges, launching while the warm-up is open
                recording.wait()
                f.launch_kernel("k_pool", duration_ns=200_000)
                done.set()

            threads = [threading.Thread(target=warm_thread), threading.Thread(target=pool_thread)]
            threads[0].start()
            started.wait()
            threads[1].start()
            for i in (1, 2):
                if i == 2:   # between the steps: only the warm-up step is open, collecting
                    recording.set()
                    done.wait()
                    threads[0].join()
                with cuptiprof.range("step", step=i):
                    f.launch_kernel(f"k{i}", duration_ns=10_000)
            threads[1].join()
            if after_us:
                f.launch_kernel("k_after", duration_ns=after_us * 1000)
        return path

    a = record(tmp_path / "a.duckdb")
    with cuptiprof.open(a) as prof:   # both launched while only the warm-up step was open
        assert prof.sql("SELECT count(*) FROM kernels WHERE step IS NULL").fetchall() == [(2,)]
    shutil.copyfile(a, tmp_path / "b.duckdb")
    c = record(tmp_path / "c.duckdb", after_us=400)
    with Comparison([a, tmp_path / "b.duckdb", c]) as cmp:
        assert cmp.runs[0].outside == () and cmp.runs[1].outside == ()
        n, of, share = cmp.runs[2].outside
        assert (n, of) == (1, 3) and share > 0.9   # warm-up work counts on neither side


def test_a_merged_files_label_follows_the_order_of_its_runs(tmp_path):
    """The label of a merged file joined its runs' labels in hash order: the same file could
    head a comparison as 'b+a' one day and 'a+b' the next."""
    from cuptiprof.store.merge import merge_files

    names = ["zeta", "alpha", "mu", "kappa", "beta"]
    parts = [make_run(tmp_path / f"{n}.duckdb", label=n, seed=i) for i, n in enumerate(names)]
    merge_files(parts, tmp_path / "all.duckdb")
    merge_files(parts[::-1], tmp_path / "rev.duckdb")
    with Comparison([tmp_path / "all.duckdb", tmp_path / "rev.duckdb"]) as cmp:
        assert [r.label for r in cmp.runs] == ["+".join(names), "+".join(names[::-1])]


def test_busy_time_is_read_from_the_stored_summary_and_folded_from_the_rows_alike(tmp_path, pair,
                                                                                   monkeypatch):
    """compare reads each step's busy time from step_busy where the writer stored it for every
    run of the file (folding millions of rows takes seconds), and folds it from the rows where
    not: the same numbers either way, for steps cut short, processes without steps, files
    without steps, steps without GPU work and work overlapping across streams."""
    import shutil

    import duckdb

    import cuptiprof.analyse.compare as cm
    from cuptiprof.store.merge import merge_files
    from cuptiprof.synthetic import write_synthetic

    a, b = pair
    cut = Path(shutil.copy(a, tmp_path / "cut.duckdb"))
    with duckdb.connect(str(cut)) as con:
        run_id, pid = con.execute("SELECT run_id, pid FROM kernels LIMIT 1").fetchone()
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) VALUES "
                    "(?, ?, 'step_incomplete', '3', 'step 3 was ended early')", [run_id, pid])
    alone = tmp_path / "nosteps.duckdb"
    with Writer(alone, RunInfo(source="synthetic"), pid=77) as w:
        w.append({"kernels": {"start_ns": [0, 300, 1000], "end_ns": [500, 600, 1800], "name": [ADD] * 3}})
    merged = merge_files([b, alone], tmp_path / "merged.duckdb")
    syn = write_synthetic(tmp_path / "syn.duckdb", steps=4, kernels_per_step=300, seed=3)
    empty = make_run(tmp_path / "empty.duckdb", empty=(2,), seed=4)

    def compared(files):
        with Comparison(files) as c:
            return ([r.stored_busy for r in c.runs],
                    [c.steps().fetchall(), c.kinds().fetchall(), c.items().fetchall()])

    for files in ([a, b], [cut, merged], [syn, alone], [empty, syn]):
        stored, numbers = compared(files)
        with monkeypatch.context() as m:
            m.setattr(cm, "has_stored_busy", lambda con, db="": False)
            folded, again = compared(files)
        assert stored == [True] * len(files) and folded == [False] * len(files)
        assert numbers == again, files

    def busy(path):
        with Comparison([path, a]) as c:
            return {s: ms for run, s, ms in c.con.execute(
                "SELECT run, step, busy_ms FROM cmp_steps").fetchall() if run == 0}

    true = busy(syn)
    with duckdb.connect(str(syn)) as con:   # what compare reads is the stored summary...
        con.execute("UPDATE step_busy SET busy_ns = busy_ns * 2")
    assert busy(syn) == {s: pytest.approx(2 * ms) for s, ms in true.items()}
    with duckdb.connect(str(syn)) as con:   # ...while the file vouches for it: a run whose
        con.execute("DELETE FROM step_busy_runs")   # writer died has its busy time folded
    assert busy(syn) == true


def test_the_outside_steps_note_reads_each_files_rows_in_few_passes(tmp_path, monkeypatch):
    """Counting the GPU work, finding the processes without steps and weighing the work outside
    every step against the steps' own take one pass over a file's rows (sql/compare/totals.sql)
    and one over the rows no step claims (outside.sql); processes without steps come from the
    stored busy summary. Each pass costs a scan of millions of rows; the numbers stay the same."""
    import duckdb

    a = make_run(tmp_path / "a.duckdb", seed=1)
    b = make_run(tmp_path / "b.duckdb", seed=2, outside_us=25_000.0)
    seen: list[str] = []

    class Recording:
        def __init__(self, con):
            self._con = con

        def __getattr__(self, name):
            return getattr(self._con, name)

        def execute(self, query, *args, **kw):
            seen.append(query)
            return self._con.execute(query, *args, **kw)

    connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *x, **kw: Recording(connect(*x, **kw)))
    with Comparison([a, b]) as cmp:
        outside = cmp.runs[1].outside
    built = seen[:next(i for i, q in enumerate(seen) if "CREATE TEMP TABLE cmp_act" in q)]
    for db in ("f0", "f1"):   # before the compared rows are gathered: totals and outside (the
        # note's two passes), CPU ops, names and regions
        passes = sum(q.count(f"{db}.gpu_activities") for q in built)
        assert 1 <= passes <= 5, [q[:80] for q in built]
    assert outside[:2] == (1, 5 * 14 + 1) and 0.6 < outside[2] < 0.7


def test_ranks_of_one_run_pool_by_step_with_busy_time_stored_or_folded(tmp_path, monkeypatch):
    """Two ranks of one run on their device 0 (the same ordinal in each process): a step's busy
    time is each rank's own union of work, summed (the other rank's work bridging a gap between
    two kernels of one rank does not fill that gap), whether read from step_busy or folded from
    the rows; rank 11's step 2, cut short, leaves step 2 out for both; step 4, without GPU work
    in either rank, is a step of 0."""
    import shutil

    import cuptiprof.analyse.compare as cm
    from test_reports import _two_ranks_file

    a = _two_ranks_file(tmp_path)
    b = Path(shutil.copy(a, tmp_path / "again.duckdb"))

    def steps():
        with Comparison([a, b]) as c:
            assert [r.steps for r in c.runs] == [3, 3]
            return [(r["step"], round(r["busy_ms"], 6), round(r["window_ms"], 6), round(r["kernel_ms"], 6))
                    for r in rows(c.steps()) if r["run"] == 0]

    want = [(1, 0.14, 0.14, 0.14), (3, 0.26, 0.35, 0.26), (4, 0.0, 0.0, 0.0)]
    assert steps() == want
    monkeypatch.setattr(cm, "has_stored_busy", lambda con, db="": False)
    assert steps() == want


def test_compare_counts_busy_and_idle_time_of_work_on_an_unknown_device_as_the_steps_report_does(tmp_path):
    """Imported rows sometimes carry no device: their busy time is a part of the step's busy
    time and only their gaps are idle, in compare and diff as in `report --by step`."""
    import shutil

    import cuptiprof
    from test_reports import write_fixture

    a = write_fixture(tmp_path / "golden.duckdb")
    b = Path(shutil.copy(a, tmp_path / "again.duckdb"))
    with cuptiprof.open(a) as prof:
        report = rows(prof.steps())
    assert any(r["device_id"] is None for r in report)
    want = {}
    for r in report:
        w = want.setdefault(r["step"], [0.0, 0.0, 0.0])
        w[0] += r["gpu_window_ms"]
        w[1] += r["busy_ms"]
        w[2] += r["idle_ms"]
    with Comparison([a, b]) as c:
        got = {r["step"]: [r["window_ms"], r["busy_ms"], r["idle_ms"]] for r in rows(c.steps()) if r["run"] == 0}
        idle = next(r for r in rows(c.kinds()) if r["run"] == 0 and r["kind"] == "idle")
    assert got.keys() == want.keys()
    for step, w in want.items():
        assert got[step] == pytest.approx(w, abs=1e-9), step
    assert idle["ms"] == pytest.approx(sorted(w[2] for w in want.values())[1], abs=1e-9)


def test_kernels_without_a_name_are_one_op_row_that_adds_up_to_the_totals(tmp_path, capsys):
    """Kernels recorded without a name (NULL, or an empty string) count in the kernel kind and
    the step; the per-op rows hold them as one '(unnamed)' op, the name the report's per-op view
    and the families give them (one row in the report too), so the op rows add up to the kind's
    time."""
    ops = dict(BASE_OPS)
    ops[None] = (300.0, 1, "aten::mystery")
    ops[""] = (100.0, 1, "aten::mystery")
    a = make_run(tmp_path / "a.duckdb", ops=ops, seed=1)
    b = make_run(tmp_path / "b.duckdb", ops=ops, seed=2)
    for by in ("op", "family"):
        with Comparison([a, b], by=by) as c:
            unnamed = {r["run"]: r for r in rows(c.ops()) if r["key"] == "(unnamed)"}
            assert unnamed[1]["ms"] == pytest.approx(0.4) and unnamed[1]["ratio"] == pytest.approx(1.0)
            kernel = {r["run"]: r["ms"] for r in rows(c.kinds()) if r["kind"] == "kernel"}
            summed = sum(r["ms"] for r in rows(c.ops()) if r["run"] == 0 and r["kind"] == "kernel")
            assert summed == pytest.approx(kernel[0])
    assert main(["report", str(a), "--by", "op", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert not {None, ""} & {r["name"] for r in got}
    unnamed = [r for r in got if r["name"] == "(unnamed)"]   # NULL and '' names: one row
    assert len(unnamed) == 1 and unnamed[0]["calls"] == 10
    assert unnamed[0]["total_ms"] == pytest.approx(2.0)


def test_keys_of_equal_time_rank_in_key_order(tmp_path):
    """Five kernels of exactly the same time per step: their ranks follow the key, so that the
    ranks, the rank changes and the top N of a table are the same on every run of compare."""
    ops = {n: (100.0, 1, "aten::x") for n in ("zeta_k", "alpha_k", "mid_k", "beta_k", "omega_k")}
    a = make_run(tmp_path / "a.duckdb", ops=ops, seed=1)
    b = make_run(tmp_path / "b.duckdb", ops=ops, seed=2)
    with Comparison([a, b]) as cmp:
        for run in (0, 1):
            ranked = [r["key"] for r in sorted(rows(cmp.ops()), key=lambda r: r["rank"])
                      if r["run"] == run and r["key"].endswith("_k")]
            assert ranked == ["alpha_k", "beta_k", "mid_k", "omega_k", "zeta_k"]
        assert {r["rank_change"] for r in rows(cmp.ops()) if r["run"] == 1} == {0}


def _uneven_run(path, calls=(2, 2, 3), copy_mb=(1, 1, 4), kernel_us=100):
    """Steps of uneven work: step s runs `calls[s]` back-to-back kernels 'k' of `kernel_us` on
    one stream and, under the first of them, one 10 us HtoD copy of `copy_mb[s]` MiB."""
    k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
    m = {c: [] for c in ("start_ns", "end_ns", "step", "copy_kind", "bytes", "stream_id", "device_id")}
    for s, (n, mb) in enumerate(zip(calls, copy_mb)):
        t = 10_000_000 * (s + 1)
        for i in range(n):
            for c, v in (("start_ns", t + i * kernel_us * 1000), ("end_ns", t + (i + 1) * kernel_us * 1000),
                         ("step", s), ("name", "k"), ("stream_id", 7), ("device_id", 0)):
                k[c].append(v)
        for c, v in (("start_ns", t + 1000), ("end_ns", t + 11_000), ("step", s), ("copy_kind", "HtoD"),
                     ("bytes", mb << 20), ("stream_id", 21), ("device_id", 0)):
            m[c].append(v)
    with Writer(path, RunInfo(source="synthetic")) as w:
        w.append({"kernels": k, "memcpys": m})
    return Path(path)


def test_per_step_figures_are_medians_over_the_steps_not_the_busiest_step(tmp_path):
    """One step of three launches more kernels and four times the bytes: calls per step, bytes per step and the
    GPU window each share is taken of are the typical step's (the median), as the times are."""
    a = _uneven_run(tmp_path / "a.duckdb")
    b = _uneven_run(tmp_path / "b.duckdb", kernel_us=200)
    with Comparison([a, b], work=work_list(["k=2"], ["k=0.1"])) as cmp:
        k = {r["run"]: r for r in rows(cmp.ops()) if r["key"] == "k"}
        assert [k[0]["calls_per_step"], k[0]["ms"], k[0]["max_ms"]] == [2, 0.2, 0.3]
        assert k[1]["ratio"] == pytest.approx(2.0)
        # 2 calls of 2 GFLOP and 0.1 GB in 0.4 ms: 10 TFLOP/s, 500 GB/s (both given for one key)
        tp = {r["run"]: r for r in rows(cmp.throughput())}
        assert tp[1]["calls_per_step"] == 2 and tp[1]["tflops"] == pytest.approx(10.0)
        assert tp[1]["gbps"] == pytest.approx(500.0)
        kinds = {(r["run"], r["kind"], r["detail"]): r for r in rows(cmp.kinds())}
        copy = kinds[(0, "memcpy", "HtoD")]
        assert copy["bytes_per_step"] == 1 << 20 and copy["ms"] == pytest.approx(0.01)
        # the median step's GPU work: 0.2 ms of kernels and the 0.01 ms copy
        assert copy["pct_gpu_time"] == pytest.approx(100 * 0.01 / 0.21)
        assert kinds[(0, "kernel", None)]["pct_gpu_time"] == pytest.approx(100 * 0.2 / 0.21)
        # windows per step 0.2, 0.2, 0.3 ms, kernels back to back: idle 0% of the median's
        assert kinds[(0, "idle", None)]["pct_window"] == 0
        # the wide table: 0.2 of the median step's 0.21 ms of GPU work; rows lettered by file
        (wide,) = [r for r in cmp.side_by_side(top=5).to_pylist() if r["key"] == "k"]
        assert (wide["A_ms"], wide["B_x"]) == (0.2, 2.0) and wide["A_pct"] == pytest.approx(100 * 0.2 / 0.21)
        assert [(r["file"], r["direction"], r["copies"]) for r in rows(cmp.lettered("bandwidth"))] == [
            ("A", "HtoD", 3), ("B", "HtoD", 3)]
        # printed kernels first, idle last, not in the order of the names
        assert [(r["kind"], r["detail"]) for r in cmp.kinds_side_by_side().to_pylist()] == [
            ("kernel", None), ("memcpy", "HtoD"), ("idle", None)]
        bw = {r["run"]: r for r in rows(cmp.bandwidth())}
        # 6 MiB in 3 copies of 10 us each
        assert bw[0]["copies"] == 3 and bw[0]["achieved_gbps"] == pytest.approx((6 << 20) / 30_000)


def test_step_timeline_thins_a_lane_only_past_its_cap_and_names_a_box_by_its_longest_op(tmp_path):
    """One step: a 1 us memset, a 5 us kernel 'long_k', a 2 us kernel 'short_k', 0.1 us apart
    on one stream (a window of 8.2 us; at 10 pixels one pixel spans 0.82 us)."""
    from cuptiprof.analyse.compare import step_timeline
    from cuptiprof.analyse.profile import open_profile
    k = {"start_ns": [1_100, 6_200], "end_ns": [6_100, 8_200], "step": [0, 0], "name": ["long_k", "short_k"],
         "stream_id": [7, 7], "device_id": [0, 0]}
    ms = {"start_ns": [0], "end_ns": [1_000], "step": [0], "bytes": [4096], "stream_id": [7], "device_id": [0]}
    path = tmp_path / "t.duckdb"
    with Writer(path, RunInfo(source="synthetic")) as w:
        w.append({"kernels": k, "memsets": ms})
    with open_profile(path) as prof:
        # a lane of exactly its cap (3 ops): every op its own row
        got = rows(step_timeline(prof, 0, pixels=10, lane_ops=3))
        assert sorted((r["name"], r["ops"], r["merge_px"]) for r in got) == [
            ("Memset", 1, 0.0), ("long_k", 1, 0.0), ("short_k", 1, 0.0)]
        # one op past it: gaps under a pixel, so one box, named and kinded by its longest op
        (box,) = rows(step_timeline(prof, 0, pixels=10, lane_ops=2))
        assert (box["name"], box["kind"], box["ops"], box["merge_px"]) == ("long_k", "kernel", 3, 1.0)
        assert (box["start_ns"], box["end_ns"], box["busy_ns"]) == (0, 8_200, 8_000)


def test_outside_steps_share_weighs_gpu_work_not_host_waits(tmp_path):
    """Two steps of one 100 us kernel and one 100 us stream sync each; after them a 300 us
    kernel and a 1 ms sync no step claims. The GPU work outside is the kernel alone: 300 of
    500 us, 1 of 3 activities; the host waits count on neither side."""
    def run(name, outside):
        k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
        sy = {c: [] for c in ("start_ns", "end_ns", "step", "sync_type", "device_id")}
        for s in range(2):
            t = 1_000_000 * (s + 1)
            for c, v in (("start_ns", t), ("end_ns", t + 100_000), ("step", s), ("name", "k"),
                         ("stream_id", 7), ("device_id", 0)):
                k[c].append(v)
            for c, v in (("start_ns", t + 100_000), ("end_ns", t + 200_000), ("step", s),
                         ("sync_type", "stream_synchronize"), ("device_id", 0)):
                sy[c].append(v)
        if outside:
            for c, v in (("start_ns", 5_000_000), ("end_ns", 5_300_000), ("step", None), ("name", "late"),
                         ("stream_id", 7), ("device_id", 0)):
                k[c].append(v)
            for c, v in (("start_ns", 5_300_000), ("end_ns", 6_300_000), ("step", None),
                         ("sync_type", "device_synchronize"), ("device_id", 0)):
                sy[c].append(v)
        with Writer(tmp_path / name, RunInfo(source="synthetic")) as w:
            w.append({"kernels": k, "syncs": sy})
        return tmp_path / name

    a, b = run("a.duckdb", False), run("b.duckdb", True)
    with Comparison([a, b]) as cmp:
        assert cmp.runs[0].outside == () and cmp.runs[1].outside == (1, 3, 0.6)
        (note,) = [line for line in cmp.legend() if "outside every step" in line]
    assert note.startswith("note: B (b.duckdb): 60% of its GPU time (1 of 3 activities) ran outside")


def test_devices_of_one_process_are_counted_and_peer_copies_meet_the_nvlink_peak(tmp_path):
    """A synthetic run on two H200s of one process (peaks recorded: 4800 GB/s DRAM, 64 GB/s
    host link, 450 GB/s NVLink): both GPUs are counted, and each copy direction is set against
    the peak that bounds it."""
    from cuptiprof.synthetic import write_synthetic
    a = write_synthetic(tmp_path / "a.duckdb", steps=2, kernels_per_step=40, devices=2, spikes=0)
    b = write_synthetic(tmp_path / "b.duckdb", steps=2, kernels_per_step=40, devices=2, spikes=0, seed=1)
    with Comparison([a, b]) as cmp:
        devs = rows(cmp.devices())
        assert [(r["run"], r["name"], r["count"]) for r in devs] == [(0, "NVIDIA H200", 2), (1, "NVIDIA H200", 2)]
        bw = {r["direction"]: r for r in rows(cmp.bandwidth()) if r["run"] == 0}
        assert {d: (r["peak_of"], r["peak_gbps"], r["peak_source"]) for d, r in bw.items()} == {
            "DtoD": ("device memory", 4800.0, "file"), "DtoH": ("host link", 64.0, "file"),
            "HtoD": ("host link", 64.0, "file"), "PtoP": ("nvlink", 450.0, "file")}
        # one 8 MiB peer copy of 40 us per device and step
        assert bw["PtoP"]["copies"] == 4 and bw["PtoP"]["achieved_gbps"] == pytest.approx((8 << 20) / 40_000)


def test_the_key_hint_starts_below_half_of_a_files_time_on_shared_keys(tmp_path):
    """B adds a kernel A lacks: at half of B's time on A's keys the files line up well enough
    and no hint is given; at 40% the hint names the share."""
    def run(name, kernels):
        k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
        for s in range(2):
            t = 1_000_000 * (s + 1)
            for name_, us in kernels.items():
                for c, v in (("start_ns", t), ("end_ns", t + us * 1000), ("step", s), ("name", name_),
                             ("stream_id", 7), ("device_id", 0)):
                    k[c].append(v)
                t += us * 1000 + 1000
        with Writer(tmp_path / name, RunInfo(source="synthetic")) as w:
            w.append({"kernels": k})
        return tmp_path / name

    a = run("a.duckdb", {"x": 100})
    for extra_us, hint in ((100, None), (150, "note: only 40% of B's time is on keys A also has")):
        b = run(f"b{extra_us}.duckdb", {"x": 100, "y": extra_us})
        with Comparison([a, b]) as cmp:
            got = [line for line in cmp.legend() if "also has" in line]
        assert [line.split(";")[0] for line in got] == ([hint] if hint else [])


def test_steps_of_a_process_without_gpu_work_add_no_steps_of_0(tmp_path):
    """A merged file: process 1 runs one 100 us kernel in each of steps 0-3; process 2 (a data
    loader, say) marks steps 0-7 and launches nothing. The compared steps are the 4 of the
    process with GPU work, not 8 of which half are empty."""
    import pyarrow as pa
    from cuptiprof.store.merge import merge_files

    def ranges(n):
        return {"range_id": pa.array(range(1, n + 1), pa.int64()), "parent_id": pa.array([None] * n, pa.int64()),
                "depth": pa.array([0] * n, pa.int32()), "name": ["step"] * n,
                "start_ns": pa.array([1_000_000 * (s + 1) for s in range(n)], pa.int64()),
                "end_ns": pa.array([1_000_000 * (s + 1) + 500_000 for s in range(n)], pa.int64()),
                "kind": ["step"] * n, "step": pa.array(range(n), pa.int32())}

    gpu, loader = tmp_path / "gpu.duckdb", tmp_path / "loader.duckdb"
    with Writer(gpu, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": ranges(4), "kernels": {
            "start_ns": [1_000_000 * (s + 1) for s in range(4)],
            "end_ns": [1_000_000 * (s + 1) + 100_000 for s in range(4)], "step": [0, 1, 2, 3],
            "name": ["k"] * 4, "stream_id": [7] * 4, "device_id": [0] * 4, "range_id": [1, 2, 3, 4]}})
    with Writer(loader, RunInfo(source="synthetic"), pid=2) as w:
        w.append({"ranges": ranges(8)})
    merged = merge_files([gpu, loader], tmp_path / "all.duckdb")
    with Comparison([gpu, merged]) as cmp:
        assert [r.steps for r in cmp.runs] == [4, 4]
        k = {r["run"]: r for r in rows(cmp.ops()) if r["key"] == "k"}
        assert (k[1]["ms"], k[1]["min_ms"], k[1]["ratio"]) == (0.1, 0.1, 1.0)


def test_the_median_step_of_an_even_count_is_the_earlier_of_the_two_middle_steps(tmp_path):
    """Steps 0-3 of 300, 100, 200 and 400 us of work: steps 0 and 2 lie as close to the median
    (250 us); the typical step the report draws is the same on every run: the earlier one."""
    from cuptiprof.analyse.compare import median_step
    from cuptiprof.analyse.profile import open_profile
    us = {0: 300, 1: 100, 2: 200, 3: 400}
    path = tmp_path / "m.duckdb"
    with Writer(path, RunInfo(source="synthetic")) as w:
        w.append({"kernels": {"start_ns": [1_000_000 * (s + 1) for s in us],
                              "end_ns": [1_000_000 * (s + 1) + d * 1000 for s, d in us.items()],
                              "step": list(us), "name": ["k"] * 4, "stream_id": [7] * 4, "device_id": [0] * 4}})
    with open_profile(path) as prof:
        assert median_step(prof) == 0


def test_keys_the_top_leaves_out_are_counted(tmp_path, capsys):
    """The ops table holds the keys in the top 15 of any file, or the top N --top gives: the
    keys it leaves out are counted below it, with the --top that shows every one (a table cut
    by --top would otherwise read as complete, as report counts its rows); csv and json stay
    data alone and say so on stderr for the default 15, an explicit --top taken as meant
    there."""
    ops = {f"kernel_{i:02d}": (100.0 + 10 * i, 1, "aten::op") for i in range(20)}
    a = make_run(tmp_path / "a.duckdb", ops=ops)
    b = make_run(tmp_path / "b.duckdb", ops=ops, seed=2)
    assert main(["compare", str(a), str(b)]) == 0
    out, err = capsys.readouterr()
    assert "... 7 more keys: --top 22 shows every one" in out.splitlines(), out   # and copies
    assert main(["compare", str(a), str(b), "--top", "17"]) == 0
    out = capsys.readouterr().out
    assert "... 5 more keys: --top 22 shows every one" in out.splitlines(), out
    assert main(["compare", str(a), str(b), "--top", "17", "--format", "markdown"]) == 0
    assert "... 5 more keys: --top 22 shows every one" in capsys.readouterr().out.splitlines()
    assert main(["compare", str(a), str(b), "--top", "22"]) == 0
    assert "more key" not in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 16 and "more key" not in out
    assert "cuptiprof compare: note: ops: the keys in the top 15 of any file, 7 keys left out; " \
           "--top 22 gives every one" in err, err
    for fmt in ("csv", "json"):
        assert main(["compare", str(a), str(b), "--format", fmt, "--top", "15"]) == 0
        out, err = capsys.readouterr()
        assert "left out" not in err and "more key" not in out, (fmt, err)


def test_markdown_legend_is_a_list_and_top_is_15_unless_given(tmp_path, capsys):
    """--help: --top defaults to 15 keys; in Markdown the lines naming the files are list items,
    one per line once rendered (plain lines would run together into one paragraph)."""
    ops = {f"kernel_{i:02d}": (100.0 + 10 * i, 1, "aten::op") for i in range(20)}
    a = make_run(tmp_path / "a.duckdb", ops=ops)
    b = make_run(tmp_path / "b.duckdb", ops=ops, seed=2)

    def keys(*top):
        assert main(["compare", str(a), str(b), "--format", "json", *top]) == 0
        return {r["key"] for r in json.loads(capsys.readouterr().out)["ops"]}

    assert keys() == keys("--top", "15") != keys("--top", "14")
    assert main(["compare", str(a), str(b), "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("- A = ") and lines[2].startswith("- B = "), lines[:3]


def test_compare_notes_a_run_that_did_not_complete(tmp_path, capsys):
    """A program that crashed or was stopped after a few steps may have stopped before its
    slow part: compare says so, as diff does, in its legend and in the JSON notes."""
    import duckdb
    a = make_run(tmp_path / "a.duckdb", seed=1)
    b = make_run(tmp_path / "b.duckdb", seed=2, steps=2)
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    assert not any("did not complete" in n for n in json.loads(capsys.readouterr().out)["notes"])
    with duckdb.connect(str(b)) as con:
        con.execute("UPDATE runs SET status = 'interrupted'")
    note = "note: B (b.duckdb) is a run that did not complete (interrupted); only its 2 complete steps are compared"
    assert main(["compare", str(a), str(b)]) == 0
    assert note in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    assert note in json.loads(capsys.readouterr().out)["notes"]


@pytest.mark.parametrize("by", ["op", "family"])
def test_a_kernel_named_as_a_memset_is_not_pooled_with_the_memsets(tmp_path, by):
    """A trace's kernel named 'Memset' (or 'Memcpy HtoD') took the key cuptiprof gives
    memsets (copies): compare pooled both into one row of kind 'mixed', and its time into
    theirs. It is keyed 'Memset (kernel)'; the memsets keep 'Memset'. A kernel recorded without
    a name is '(unnamed)' in every file, whether its name is '' or '(unnamed)'."""
    paths = []
    for i, unnamed in enumerate(["", "(unnamed)"]):
        k = {"start_ns": [1_000, 3_000, 5_000], "end_ns": [2_000, 4_000, 6_000],
             "step": [0, 0, 0], "name": ["Memset", "Memcpy HtoD", unnamed],
             "stream_id": [7] * 3, "device_id": [0] * 3}
        ms = {"start_ns": [0], "end_ns": [500], "step": [0], "bytes": [4096], "stream_id": [7],
              "device_id": [0]}
        paths.append(tmp_path / f"{i}.duckdb")
        with Writer(paths[-1], RunInfo(source="synthetic")) as w:
            w.append({"kernels": k, "memsets": ms})
    with Comparison(paths) as cmp:
        cmp.set_by(by)
        got = {(r["key"], r["kind"]): (r["A_ms"], r["B_ms"])
               for r in cmp.side_by_side(top=10).to_pylist()}
    assert got == {("Memset (kernel)", "kernel"): (0.001, 0.001),
                   ("Memcpy HtoD (kernel)", "kernel"): (0.001, 0.001),
                   ("(unnamed)", "kernel"): (0.001, 0.001),
                   ("Memset", "memset"): (0.0005, 0.0005)}, got


def test_step_timeline_names_a_box_of_equal_ops_by_the_first_name_whatever_the_row_order(tmp_path):
    """Two 1 us kernels 0.1 us apart, written in either order, thinned into one box: a round
    trip or a merge writes rows in another order, and the box keeps its name."""
    from cuptiprof.analyse.compare import step_timeline
    from cuptiprof.analyse.profile import open_profile
    got = []
    for i, (names, starts) in enumerate(((["kZ", "kA"], [0, 1_100]), (["kA", "kZ"], [1_100, 0]))):
        k = {"start_ns": starts, "end_ns": [s + 1_000 for s in starts], "step": [0, 0],
             "name": names, "stream_id": [7, 7], "device_id": [0, 0]}
        path = tmp_path / f"t{i}.duckdb"
        with Writer(path, RunInfo(source="synthetic")) as w:
            w.append({"kernels": k})
        with open_profile(path) as prof:
            (box,) = rows(step_timeline(prof, 0, pixels=2, lane_ops=1))
            got.append((box["name"], box["kind"], box["ops"]))
    assert got == [("kA", "kernel", 2)] * 2
