"""HTML report and comparison: self-contained, names escaped, plots render in a real browser."""
from __future__ import annotations

import html
import json
import re
import shutil
import stat
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

import cuptiprof
from cuptiprof.analyse.compare import Comparison
from cuptiprof.cli import main
from cuptiprof.render.html import esc, write_compare, write_report
from cuptiprof.render.table import fmt_value
from test_compare import ADD, BASE_OPS, FLASH, GEMM_H100, SOFTMAX, import_trace, make_run

EVIL_KERNEL = "<script>alert(1)</script>"
EVIL_OP = '"onload=alert(2) x="'
EVIL_DEVICE = "<img src=x onerror=alert(3)>"


@pytest.fixture
def evil(tmp_path):
    ops = dict(BASE_OPS)
    ops[EVIL_KERNEL] = (150.0, 2, EVIL_OP)
    a = make_run(tmp_path / "a.duckdb", ops=ops, device=EVIL_DEVICE, label="</title><b>x", noise=0.02)
    ops2 = dict(ops)
    ops2[SOFTMAX] = (200.0, 2, "aten::softmax")
    ops2[FLASH] = (80.0, 1, "aten::flash")
    b = make_run(tmp_path / "b.duckdb", ops=ops2, copies=(("DtoH", 4 << 20, 300.0),), seed=5, noise=0.02)
    return a, b


def _assert_safe(text: str) -> None:
    assert EVIL_KERNEL not in text and esc(EVIL_KERNEL) in text
    assert "<img" not in text and "<b>x" not in text
    assert 'x=""' not in text and '"onload' not in text
    assert text.count("<script") == 1  # only cuptiprof's own inline script
    # self-contained: nothing loaded from elsewhere
    assert not re.search(r"https?://|<link|<iframe|\bsrc=\"|@import|url\(", text)


def test_report_html_has_plots_and_escapes_names(evil, tmp_path):
    out = tmp_path / "r.html"
    with cuptiprof.open(evil[0]) as prof:
        assert write_report(prof, out, top=10) == out
    text = out.read_text()
    _assert_safe(text)
    assert text.count("<svg") >= 4  # ops, steps, kinds, timelines
    assert text.count('class="timeline"') == 5  # the 5 recorded steps (up to 6 embedded)
    assert 'class="plot ops"' in text and "(typical)</option>" in text
    assert "ended early" not in text   # every step ran to its end
    for color in ("#4c78a8", "#f58518", "#54a24b"):  # kernel, memcpy, memset boxes
        assert f'fill="{color}"' in text


def test_compare_html_has_rank_shift_and_escapes_names(evil, tmp_path):
    out = tmp_path / "c.html"
    with Comparison(evil) as cmp:
        write_compare(cmp, out, top=8)
    text = out.read_text()
    _assert_safe(text)
    assert "<polyline" in text  # the rank-shift lines
    assert text.count("<svg") >= 5
    assert "B: absent" in text or "A: absent" in text


def test_compare_html_shows_throughput_only_for_the_work_given(evil, tmp_path):
    from cuptiprof.analyse.compare import work_list
    heading = "<h2>Throughput against peak (estimates)</h2>"
    with Comparison(evil, work=work_list(["*gemm*=1.0"], [])) as cmp:
        write_compare(cmp, tmp_path / "w.html")
    text = (tmp_path / "w.html").read_text()
    assert heading in text and ">*gemm*<" in text.split(heading, 1)[1]
    with Comparison(evil) as cmp:
        write_compare(cmp, tmp_path / "n.html")
    assert heading not in (tmp_path / "n.html").read_text()


def test_an_html_page_without_a_doctype_is_replaced_and_any_other_file_kept(evil, tmp_path, capsys):
    old = tmp_path / "old.html"
    old.write_text("<html><body>an older page</body></html>")
    assert main(["report", str(evil[0]), "--html", str(old)]) == 0
    assert old.read_text().startswith("<!DOCTYPE html>")
    notes = tmp_path / "notes.html"
    notes.write_text("my notes, not a page")
    assert main(["report", str(evil[0]), "--html", str(notes)]) == 2
    assert notes.read_text() == "my notes, not a page"
    assert "exists and is not an HTML file" in capsys.readouterr().err


def test_compare_html_names_a_file_without_steps_whole_not_step_0(tmp_path):
    """compare counts a file without steps as one step, 0 inside; the text says "the whole file
    counts as one step" and the report's HTML labels that bar "all": so does compare's."""
    from cuptiprof.store.writer import RunInfo, Writer
    a = make_run(tmp_path / "a.duckdb")
    p = tmp_path / "nosteps.duckdb"
    with Writer(p, RunInfo(source="synthetic")) as w:
        w.append({"kernels": {"start_ns": [0, 1000], "end_ns": [500, 1800], "name": [ADD, ADD]}})
    out = tmp_path / "c.html"
    with Comparison([a, p]) as cmp:
        write_compare(cmp, out)
    steps = out.read_text().split("<h2>Steps per file</h2>")[1].split("<h2>")[0]
    a_part, b_part = steps.split("<p>B: ")
    labels = lambda part: re.findall(r'text-anchor="middle">([^<]*)</text>', part)
    assert labels(a_part) == ["1", "2", "3", "4", "5"]
    assert labels(b_part) == ["all"] and "<title>all | kernel" in b_part
    assert "the bar is the whole file" in b_part


def test_hover_text_shows_values_as_meant_and_names_escaped_once(evil, tmp_path):
    """A cell's tooltip is its whole value, a float without its binary noise and a NaN as empty
    (not "nan"); a name in it is escaped once (shown as written); a kind without a detail
    reads "kernel: ...", not "kernel : ..."."""
    import html as html_mod
    import pyarrow as pa
    from cuptiprof.render.html import table
    name = 'k<T & "q"> \'x\''
    cell = table(pa.table({"name": [name], "ms": [0.1 + 0.2], "x": [float("nan")]}))
    titles = [html_mod.unescape(t) for t in re.findall(r' title="([^"]*)"', cell)]
    assert titles == [name, "0.3", ""]
    out = tmp_path / "r.html"
    with cuptiprof.open(evil[0]) as prof:
        write_report(prof, out, top=10)
    tips = [html_mod.unescape(t) for t in re.findall(r"<title>(.*?)</title>", out.read_text())]
    assert any(t.startswith("kernel: ") for t in tips) and not any(" : " in t for t in tips)
    assert any(t.startswith(EVIL_KERNEL + " (kernel, ") for t in tips)   # timeline boxes
    assert any(t.startswith(EVIL_KERNEL + ": ") and " ms, " in t for t in tips)   # the ops bars


def test_cli_writes_html(evil, tmp_path, capsys):
    out = tmp_path / "cli.html"
    assert main(["report", str(evil[0]), "--html", str(out)]) == 0
    assert out.stat().st_size > 5000 and "wrote" in capsys.readouterr().err
    out2 = tmp_path / "cmp.html"
    assert main(["compare", str(evil[0]), str(evil[1]), "--html", str(out2), "--by", "family"]) == 0
    assert "gemm" in out2.read_text()
    assert main(["report", str(evil[0]), "--html", str(tmp_path / "nodir" / "x.html")]) != 0
    assert "Traceback" not in capsys.readouterr().err


# -- in a real browser ------------------------------------------------------------------------
def _chromium() -> str:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run_chromium(tmp_path: Path, page: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.iterdir()))}"
    args = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *extra, page.as_uri()]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _console_errors(stderr: str) -> list[str]:
    return [l for l in stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]


def _png_pixels(path: Path) -> np.ndarray:
    """Decode an 8-bit, non-interlaced RGB/RGBA PNG (what chromium writes) into an (h, w, c) array."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and interlace == 0 and ctype in (2, 6)
            c = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * c)
    out = np.zeros((h, w * c), np.int32)
    prev = np.zeros(w * c, np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) % 256
        elif f == 1:
            cur = line.reshape(w, c).cumsum(axis=0).reshape(-1) % 256
        else:
            cur = np.zeros_like(line)
            for x in range(w * c):
                a = cur[x - c] if x >= c else 0
                b = prev[x]
                if f == 3:
                    cur[x] = (line[x] + (a + b) // 2) % 256
                else:
                    cc = prev[x - c] if x >= c else 0
                    p = a + b - cc
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - cc)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else cc)
                    cur[x] = (line[x] + pred) % 256
        out[y] = cur
        prev = cur
    return out.reshape(h, w, c)[:, :, :3].astype(np.uint8)


@pytest.mark.browser
def test_report_renders_in_chromium(evil, tmp_path):
    page = tmp_path / "report.html"
    with cuptiprof.open(evil[0]) as prof:
        write_report(prof, page, top=10)
    res = _run_chromium(tmp_path, page, "--dump-dom")
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    assert dom.count("<svg") >= 4 and "<rect" in dom
    # the inline script ran: exactly one timeline is shown, the others are hidden
    assert dom.count('style="display: block;"') == 1 and dom.count('style="display: none;"') == 4
    assert EVIL_KERNEL not in dom and "<img" not in dom
    assert not _console_errors(res.stderr), _console_errors(res.stderr)

    shot = tmp_path / "report.png"
    res = _run_chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=900,1100", "--hide-scrollbars")
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    px = _png_pixels(shot)
    colours = {tuple(p) for p in px.reshape(-1, 3)[::7]}
    assert len(colours) > 30  # not a blank page: bars, text anti-aliasing, legends
    kernel_blue = np.all(px == (0x4c, 0x78, 0xa8), axis=2).sum()
    memcpy_orange = np.all(px == (0xf5, 0x85, 0x18), axis=2).sum()
    assert kernel_blue > 2000 and memcpy_orange > 200  # the bars were painted


@pytest.mark.browser
def test_console_error_check_catches_a_broken_page(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    res = _run_chromium(tmp_path, page, "--dump-dom")
    assert _console_errors(res.stderr)


@pytest.mark.browser
def test_compare_renders_in_chromium(evil, tmp_path):
    page = tmp_path / "compare.html"
    with Comparison(evil) as cmp:
        write_compare(cmp, page, top=8)
    res = _run_chromium(tmp_path, page, "--dump-dom")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("<svg") >= 5 and "<polyline" in res.stdout
    assert not _console_errors(res.stderr), _console_errors(res.stderr)
    shot = tmp_path / "compare.png"
    res = _run_chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=900,900", "--hide-scrollbars")
    assert res.returncode == 0 and shot.exists()
    px = _png_pixels(shot)
    run_red = np.all(px == (0xe4, 0x57, 0x56), axis=2).sum()  # file B's bars
    assert run_red > 500 and len({tuple(p) for p in px.reshape(-1, 3)[::7]}) > 30


def test_real_trace_report_html(shared_traces, tmp_path):
    src = shared_traces / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    dest = import_trace(src, tmp_path / "ns.duckdb")
    out = tmp_path / "ns.html"
    assert main(["report", str(dest), "--html", str(out)]) == 0
    text = out.read_text()
    assert text.count('class="timeline"') == 5 and text.count("<svg") >= 8
    assert "multi_tensor_apply_kernel" in text


# -- timelines --------------------------------------------------------------------------------
def _kineto_trace(path: Path, t0_us: float = 1000.0, devices: int = 1, kernels: int = 10,
                  steps: int = 2, pid: int = 1, every_us: float = 10.0) -> Path:
    """A Kineto trace: each step launches `kernels` 5 us kernels per device on stream 7, one
    every `every_us`, under a ProfilerStep range."""
    ev, corr = [], 1
    step_us = kernels * every_us + 10
    for s in range(steps):
        s0 = t0_us + s * (step_us + 1000)
        for dev in range(devices):
            t = s0
            for _ in range(kernels):
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                           "tid": 1, "ts": t, "dur": 1, "args": {"correlation": corr}})
                ev.append({"ph": "X", "cat": "kernel", "name": f"k{dev}", "pid": dev, "tid": 7,
                           "ts": t + 1, "dur": 5, "args": {"correlation": corr, "device": dev, "stream": 7}})
                corr += 1
                t += every_us
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": pid,
                   "tid": 1, "ts": s0 - 1, "dur": step_us})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def _page_of(trace: Path, doc: dict) -> tuple[Path, str]:
    """`doc` written to `trace`, imported beside it and reported as HTML: (the file, the page)."""
    trace.write_text(json.dumps(doc))
    db, out = trace.with_suffix(".duckdb"), trace.with_suffix(".html")
    assert main(["import", str(trace), "-o", str(db)]) == 0
    assert main(["report", str(db), "--html", str(out)]) == 0
    return db, out.read_text()


def _timeline_svgs(text: str) -> dict[str, str]:
    """step -> the timeline markup of that step in a report page."""
    return dict(re.findall(r'<div class="timeline" data-step="([^"]*)">(.*?)</div>', text, re.S))


def _axis_ms(svg: str) -> float:
    return float(re.findall(r">([\d.]+) ms</text></svg>", svg)[-1])


def test_timeline_lanes_are_per_process_and_far_apart_traces_stay_readable(tmp_path, capsys):
    # two traces an hour apart on the clock, merged into one file: the same device 0 stream 7
    a = tmp_path / "a.duckdb"
    b = tmp_path / "b.duckdb"
    assert main(["import", str(_kineto_trace(tmp_path / "a.json", pid=11)), "-o", str(a)]) == 0
    assert main(["import", str(_kineto_trace(tmp_path / "b.json", t0_us=3.6e9, pid=22)), "-o", str(b)]) == 0
    merged = tmp_path / "m.duckdb"
    assert main(["merge", str(a), str(b), "-o", str(merged)]) == 0
    out = tmp_path / "m.html"
    assert main(["report", str(merged), "--html", str(out)]) == 0
    svgs = _timeline_svgs(out.read_text())
    assert svgs
    for svg in svgs.values():
        # one heading per process, each with its own device 0 stream 7 lane
        heads = re.findall(r'class="process"[^>]*>([^<]*)<', svg)
        assert len(heads) == 2 and heads[0].startswith("a ") and heads[1].startswith("b "), heads
        assert svg.count(">dev 0 stream 7<") == 2
        # the axis spans one step (about 0.1 ms), not the hour between the traces
        assert _axis_ms(svg) < 1.0
        assert "own first op" in svg


def test_timeline_processes_of_one_job_share_the_clock():
    """Ranks whose work overlaps in time keep one origin (their skew shows); a process hours
    away starts at its own first op."""
    def rows(run_id, pid, t0):
        return [{"run_id": run_id, "pid": pid, "device_id": 0, "stream_id": 7, "kind": "kernel",
                 "name": "k", "start_ns": t0 + i * 100_000, "end_ns": t0 + i * 100_000 + 50_000}
                for i in range(10)]
    from cuptiprof.render.html import timeline
    svg = timeline(rows(1, 10, 0) + rows(1, 20, 500_000))
    xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)" y="\d+" width="[\d.]+" height="18" fill="#4c78a8"', svg)]
    assert len(xs) == 20 and min(xs[10:]) > min(xs[:10]) + 200  # rank 20 starts 0.5 ms later
    assert _axis_ms(svg) == pytest.approx(1.45) and "own first op" not in svg
    svg = timeline(rows(1, 10, 0) + rows(2, 20, 3_600 * 10**9))
    xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)" y="\d+" width="[\d.]+" height="18" fill="#4c78a8"', svg)]
    assert min(xs[10:]) == pytest.approx(min(xs[:10])) and _axis_ms(svg) == pytest.approx(0.95)
    assert "own first op" in svg


def test_timeline_tooltip_of_an_op_under_a_microsecond_gives_its_time():
    from cuptiprof.render.html import timeline
    rows = [{"run_id": 1, "pid": 10, "device_id": 0, "stream_id": 7, "kind": k, "name": n,
             "start_ns": t, "end_ns": t + d}
            for k, n, t, d in (("kernel", "k", 0, 12_345), ("memset", "Memset", 20_000, 40),
                               ("kernel", "k2", 30_000, 600))]
    tips = re.findall(r"<title>(.*?)</title>", timeline(rows))
    assert tips == ["k (kernel, 12.3 us)", "Memset (memset, 0.04 us)", "k2 (kernel, 0.6 us)"]


def _step_timelines(tmp_path, devices: int, kernels: int) -> tuple[str, dict]:
    """The report page of a one-step trace of `kernels` kernels on each of `devices` devices,
    and its two timelines, each checked to keep every lane and the whole step."""
    db = tmp_path / "steps.duckdb"
    assert main(["import", str(_kineto_trace(tmp_path / "steps.json", devices=devices, kernels=kernels)),
                 "-o", str(db)]) == 0
    out = tmp_path / "steps.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    text = out.read_text()
    svgs = _timeline_svgs(text)
    assert len(svgs) == 2
    for svg in svgs.values():
        assert [f"dev {d} stream 7" for d in range(devices)] == re.findall(r">(dev \d+ stream 7)<", svg)
        # the axis ends at the step's last kernel: kernels every 10 us, 5 us long
        assert _axis_ms(svg) == pytest.approx((kernels - 1) * 0.010 + 0.005)
    return text, svgs


@pytest.mark.parametrize("devices,kernels", [(1, 8000), (3, 2500)])
def test_timeline_of_a_busy_step_keeps_every_lane_and_the_whole_step(tmp_path, devices, kernels):
    text, svgs = _step_timelines(tmp_path, devices, kernels)
    for svg in svgs.values():
        # drawn in a bounded number of boxes (pale: the GPU is idle half the time), and said so
        boxes = re.findall(r'<rect x="[\d.]+" y="\d+" width="[\d.]+" height="18" fill="#4c78a8"'
                           r'( fill-opacity="([\d.]+)")?>', svg)
        assert 1 <= len(boxes) <= 1000 * devices
        assert all(op and float(op) == pytest.approx(0.5, abs=0.01) for _, op in boxes)
        assert f"{devices * kernels:,} ops as {len(boxes):,} box" in svg and "Thinned" in svg
    assert len(text) < 200_000


@pytest.mark.parametrize("devices,kernels", [(40, 300), (3, 1900)])
def test_timeline_of_a_step_with_many_lanes_is_thinned_as_a_whole(tmp_path, devices, kernels):
    # no lane passes the per-lane cap, but one box per op made a page of tens of MB for 64
    # ranks or hundreds of streams; the step as a whole is capped, and the note says so
    from cuptiprof.render.html import TIMELINE_STEP_OPS
    _, svgs = _step_timelines(tmp_path, devices, kernels)
    for svg in svgs.values():
        boxes = re.findall(r'<rect x="[\d.]+" y="\d+" width="[\d.]+" height="18" fill="#4c78a8"', svg)
        assert devices <= len(boxes) <= TIMELINE_STEP_OPS + devices
        assert f"this step has more than {TIMELINE_STEP_OPS:,} ops" in svg
        # the lanes share the step's boxes: 40 lanes of 960 pixels merge ops 8 pixels apart
        px = max(1.0, devices * 960 / TIMELINE_STEP_OPS)
        assert f"ops less than {px:.0f} pixel{'s' if px >= 1.5 else ''} apart" in svg
        assert "in lanes of more than" not in svg   # no lane is that busy
        assert f"{devices * kernels:,} ops as {len(boxes):,} box" in svg


# -- what the file holds ----------------------------------------------------------------------
def _three_steps(ops, *, stream: int, device: int) -> tuple[dict, dict]:
    """Kernel and range columns of three steps, each holding `ops` (one 0.4 ms kernel each, 0.5
    ms apart) on one stream of one device: (kernels, ranges) for Writer.append."""
    import pyarrow as pa
    k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
    r = {c: [] for c in ("range_id", "depth", "name", "start_ns", "end_ns", "kind", "step")}
    t = 1_000_000
    for s in range(3):
        r["range_id"].append(s + 1); r["depth"].append(0); r["name"].append("step")
        r["start_ns"].append(t); r["kind"].append("step"); r["step"].append(s)
        for op in ops:
            for c, v in (("start_ns", t), ("end_ns", t + 400_000), ("step", s), ("name", op),
                         ("stream_id", stream), ("device_id", device)):
                k[c].append(v)
            t += 500_000
        r["end_ns"].append(t)
    return k, {c: pa.array(v, pa.int64() if c in ("range_id", "start_ns", "end_ns") else
                           (pa.int32() if c in ("depth", "step") else None))
               for c, v in r.items()}


def _cpu_run(path: Path) -> Path:
    """A run recorded without a GPU, as `cuptiprof run` writes it: torch.profiler's CPU ops as
    kernels on device -1 (kind 'cpu'), one stream per thread, and the no_gpu quality row."""
    from cuptiprof.store.writer import RunInfo, Writer
    k, r = _three_steps(("aten::addmm", "aten::gelu"), stream=1, device=-1)
    with Writer(path, RunInfo(source="cpu", label="cpu")) as w:
        w.append({"kernels": k,
                  "devices": {"device_id": [-1], "kind": ["cpu"], "name": ["AMD EPYC"], "source": ["torch"]},
                  "ranges": r})
        w.add_quality("no_gpu", "gpu", None, "no GPU activity was captured (no CUDA GPU found): "
                      "kernels holds CPU ops from torch.profiler on device -1, one stream per thread")
    return path


def test_report_html_of_a_run_without_a_gpu_says_it_holds_cpu_op_times(tmp_path):
    db = _cpu_run(tmp_path / "cpu.duckdb")
    out = tmp_path / "cpu.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    text = out.read_text()
    assert '<p class="notice cpu">No GPU activity was captured' in text
    assert "Every time on this page is CPU op time, not GPU time" in text
    assert "by CPU op time</h2>" in text and "GPU time</h2>" not in text and "% of GPU time" not in text
    assert "one lane per process and thread" in text
    # the no_gpu row of data_quality is on the page, as `report` prints it
    quality = text.split("<h2>Data quality</h2>", 1)[1].split("<h2>", 1)[0]
    assert ">no_gpu<" in quality and "kernels holds CPU ops from torch.profiler" in quality


def test_text_report_of_a_run_without_a_gpu_says_its_gpu_time_is_cpu_op_time(tmp_path, evil, capsys):
    """The text report's headings and columns say GPU and kernel: its header says what they
    mean for a file, or the runs of one, recorded without a GPU; a GPU file gets no such line."""
    db = _cpu_run(tmp_path / "cpu.duckdb")
    assert main(["report", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("no GPU activity in this file: it holds CPU op times from torch.profiler")
    merged = tmp_path / "m.duckdb"
    assert main(["merge", str(evil[1]), str(db), "-o", str(merged)]) == 0
    capsys.readouterr()
    assert main(["report", str(merged), "--format", "markdown"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("recorded without a GPU: cpu; those runs'")
    assert main(["report", str(evil[1])]) == 0
    assert capsys.readouterr().out.splitlines()[1] == ""


def test_one_text_report_of_a_run_without_a_gpu_says_its_gpu_time_is_cpu_op_time(tmp_path, evil, capsys):
    """`report --by op` (one table, 'top GPU ops', pct_gpu_time) of a file recorded without a GPU
    says above its table what GPU time means there, as the summary does; CSV and JSON stay the
    table alone, and a GPU file gets no such line."""
    db = _cpu_run(tmp_path / "cpu.duckdb")
    for fmt in ("table", "markdown"):
        assert main(["report", str(db), "--by", "op", "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert out.startswith("no GPU activity in this file: it holds CPU op times from torch.profiler"), out
        assert "ops: top GPU ops" in out
    for fmt in ("csv", "json"):
        assert main(["report", str(db), "--by", "op", "--format", fmt]) == 0
        assert "no GPU activity" not in capsys.readouterr().out
    assert main(["report", str(evil[1]), "--by", "op"]) == 0
    assert capsys.readouterr().out.startswith("ops: top GPU ops")


def test_report_of_host_side_ranges_only_claims_no_cpu_op_times(tmp_path, capsys):
    """profile() without a GPU records host-side ranges only (a 'cpu' device, no op rows): the
    report does not say that the file holds CPU op times from torch.profiler."""
    db = tmp_path / "ranges.duckdb"
    with cuptiprof.profile(db, source="none"):
        for i in range(2):
            with cuptiprof.range("step", step=i):
                pass
    assert main(["report", str(db)]) == 0
    out = capsys.readouterr().out
    assert "CPU op times" not in out and "recorded without a GPU" not in out
    with cuptiprof.open(db) as prof:
        from cuptiprof.analyse.compare import cpu_time
        assert cpu_time(prof).fetchall()[0][2] is None   # cpu_runs: no run holds CPU op rows


def test_report_html_of_gpu_and_cpu_runs_names_the_cpu_ones(tmp_path, evil):
    merged = tmp_path / "m.duckdb"
    assert main(["merge", str(evil[1]), str(_cpu_run(tmp_path / "cpu.duckdb")), "-o", str(merged)]) == 0
    out = tmp_path / "m.html"
    assert main(["report", str(merged), "--html", str(out)]) == 0
    text = out.read_text()
    assert '<p class="notice cpu">Recorded without a GPU: cpu. Those runs hold CPU op times' in text
    assert "by GPU and CPU op time</h2>" in text
    # in the timeline each op says what it is: the CPU run's ops are CPU ops, the GPU's kernels
    tips = re.findall(r"<title>([^<]*)</title></rect>", text.split("<h2>Timeline</h2>", 1)[1])
    assert any(t.startswith("aten::addmm (CPU op, ") for t in tips), tips
    assert any("(kernel, " in t for t in tips) and not any("aten::addmm (kernel" in t for t in tips)


def test_timeline_of_a_run_without_a_gpu_calls_its_ops_cpu_ops(tmp_path):
    db = _cpu_run(tmp_path / "cpu.duckdb")
    out = tmp_path / "cpu.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    timeline = out.read_text().split("<h2>Timeline</h2>", 1)[1].split("<h2>", 1)[0]
    tips = re.findall(r"<title>([^<]*)</title></rect>", timeline)
    assert len(tips) == 6   # 3 steps of 2 ops
    assert all(re.fullmatch(r"aten::(addmm|gelu) \(CPU op, 400\.0 us\)", t) for t in tips), tips
    assert ">CPU op</span>" in timeline and ">kernel</span>" not in timeline   # the legend


def test_report_html_shows_the_quality_rows(tmp_path):
    # kernels launched after the last step: no step claims them
    trace = _kineto_trace(tmp_path / "t.json", steps=2)
    doc = json.loads(trace.read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "late", "pid": 0, "tid": 7, "ts": 9e6,
                               "dur": 5, "args": {"correlation": 999, "device": 0, "stream": 7}})
    db, text = _page_of(trace, doc)
    quality = text.split("<h2>Data quality</h2>", 1)[1].split("<h2>", 1)[0]
    assert ">unclaimed_records<" in quality and ">kernel<" in quality
    # its details are sentences: wrapped whole, not cut as a long name is
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", quality)]
    assert max(map(len, cells)) > 72 and not any("\u2026" in c for c in cells)
    assert '<p class="notice' not in text and "ops by GPU time</h2>" in text
    # a file with nothing to say about its data has no such section
    clean_out = tmp_path / "clean.html"
    assert main(["report", str(_kineto_trace_db(tmp_path)), "--html", str(clean_out)]) == 0
    assert "<h2>Data quality</h2>" not in clean_out.read_text()


def _kineto_trace_db(tmp_path: Path) -> Path:
    db = tmp_path / "clean.duckdb"
    assert main(["import", str(_kineto_trace(tmp_path / "clean.json")), "-o", str(db)]) == 0
    return db


# -- rank shift -------------------------------------------------------------------------------
def _svg_texts(svg: str) -> list[tuple[float, float, str]]:
    return [(float(x), float(y), re.sub(r"<[^>]+>", "", t))
            for x, y, t in re.findall(r'<text[^>]* x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg)]


def test_rank_shift_labels_stay_clear_of_the_columns_and_every_file_has_its_top_ops(tmp_path):
    # A and C share the gemm; the softmax is B's alone (in neither end file); C's ops are its own
    runs = [make_run(tmp_path / "a.duckdb", ops={GEMM_H100: (400.0, 2, "aten::mm"), SOFTMAX: (90.0, 1, "s"),
                                                  ADD: (50.0, 1, "a")}, copies=()),
            make_run(tmp_path / "b.duckdb", ops={FLASH: (300.0, 1, "f"), "only_b_kernel": (200.0, 1, "o"),
                                                  ADD: (100.0, 1, "a")}, copies=()),
            make_run(tmp_path / "c.duckdb", ops={GEMM_H100: (100.0, 1, "aten::mm"), "c_one": (300.0, 1, "x"),
                                                  "c_two": (200.0, 1, "y")}, copies=())]
    out = tmp_path / "c.html"
    with Comparison(runs) as cmp:
        write_compare(cmp, out, top=2)
    svg = re.search(r'<h2>Rank shift</h2>.*?(<svg.*?</svg>)', out.read_text(), re.S).group(1)
    columns = sorted({float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)})
    assert len(columns) == 3
    texts = _svg_texts(svg)
    labels = [t for t in texts if t[1] > 20]          # below the column letters
    # no label starts between the first and the last column, where it would run over lines and
    # the next column's labels
    assert labels and all(x < columns[0] or x > columns[-1] for x, _, _ in labels), labels
    # no two labels on one side share a row
    for side in (lambda x: x < columns[0], lambda x: x > columns[-1]):
        ys = [y for x, y, _ in labels if side(x)]
        assert len(ys) == len(set(ys)), labels
    # each file's top 2 are plotted: a dot per file at ranks 1 and 2
    dots = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', svg)
    for cx in columns:
        ys = sorted(float(y) for x, y in dots if float(x) == cx)
        assert ys[:2] == [30.0, 50.0], (cx, ys)
    text = " ".join(t for _, _, t in labels)
    for name in ("only_b_kernel", "c_one", "c_two", "flash_fwd_kernel"):
        assert name in text
    assert "B 2. only_b_kernel" in text   # its last rank is in B, named so on the right


# -- output-path mistakes ---------------------------------------------------------------------
def test_html_to_a_fifo_is_refused_without_reading_it(evil, tmp_path):
    """A FIFO (or a terminal, `--html /dev/stdout`) at the output path: refused at once, not
    opened to look for an HTML head, which would wait forever for a writer."""
    import os
    import _run_helpers as H
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    for argv in (["report", evil[0], "--html", fifo], ["compare", *evil, "--html", fifo]):
        res = H.cli(argv, tmp_path, timeout=60)
        assert res.returncode == 2, res.stderr
        H.one_line_error(res.stderr)
        assert "not a regular file" in res.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode) and not list(tmp_path.glob(".*tmp-*"))



def test_an_empty_html_path_is_an_error_not_a_missing_option(evil, tmp_path, capsys):
    """`--html "$OUT"` with OUT unset: one error line, not the text report as if --html was not given."""
    for argv in (["report", str(evil[0]), "--html", ""], ["compare", *map(str, evil), "--html", ""]):
        assert main(argv) == 2
        cap = capsys.readouterr()
        assert cap.out == "" and cap.err.startswith("cuptiprof: error: --html needs a file name")
        assert len(cap.err.strip().splitlines()) == 1


def test_a_very_long_range_name_is_cut_in_the_legend(tmp_path):
    """A range name thousands of characters long: the steps-by-range legend shows it cut (full on
    hover), as the bars do, so the page is not stretched to its length."""
    trace = _kineto_trace(tmp_path / "t.json", steps=2)
    doc = json.loads(trace.read_text())
    long_name = "attention_" + "x" * 5000
    steps = [e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    doc["traceEvents"] += [{"ph": "X", "cat": "user_annotation", "name": long_name, "pid": 1, "tid": 1,
                            "ts": s["ts"] + 0.5, "dur": s["dur"] - 1} for s in steps]
    db, text = _page_of(trace, doc)
    section = text.split("<h2>Steps by range</h2>", 1)[1].split("<h2>", 1)[0]
    legend = re.search(r'<div class="legend">(.*?)</div>', section).group(1)
    shown = re.findall(r"</i>([^<]*)</span>", legend)
    assert shown and shown[0].startswith("attention_xxx") and len(shown[0]) <= 48, shown
    assert f'title="{long_name}"' in legend
    shown_text = re.sub(r"<(title|style|script)>.*?</\1>", "", text, flags=re.S)   # not tooltips
    assert max(len(t) for t in re.findall(r">([^<]+)<", shown_text)) < 200   # no text that long


def test_thousands_of_steps_fit_the_page_width(tmp_path):
    """3,000 steps: inside a plot as wide as the page, not 10 pixels a step; more steps than
    the plot has pixels are drawn as bars of consecutive steps (a column a third of a pixel
    wide could not be seen or hovered, and 10,000 steps made pages of tens of MB), each step in
    exactly one bar, the spike of each bar named in its tooltip."""
    from cuptiprof.render.html import PLOT_COLUMNS
    db = tmp_path / "many.duckdb"
    assert main(["import", str(_kineto_trace(tmp_path / "many.json", kernels=2, steps=3000, every_us=2.0)),
                 "-o", str(db)]) == 0
    out = tmp_path / "many.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    for plot in ("Steps",):
        section = out.read_text().split(f"<h2>{plot}</h2>", 1)[1].split("<h2>", 1)[0]
        width = int(re.search(r'<svg class="plot" width="(\d+)"', section).group(1))
        assert width <= 1000, width
        cols = re.findall(r'<g><title>steps (\d+)\u2013(\d+) \((\d+) steps\), mean per step \| slowest: step '
                          r'(\d+)[^<]*</title><rect x="([\d.]+)" y="[\d.]+" width="([\d.e-]+)"', section)
        assert len(cols) == 750 <= PLOT_COLUMNS   # 4 steps a bar
        covered = [s for a, b, n, _, _, _ in cols for s in range(int(a), int(b) + 1)]
        assert covered == list(range(3000))
        assert all(int(n) == int(b) - int(a) + 1 == 4 and int(a) <= int(w) <= int(b) for a, b, n, w, _, _ in cols)
        xs = [float(x) for *_, x, _ in cols]
        assert xs == sorted(xs) and xs[-1] + float(cols[-1][5]) <= width
        assert "3,000 steps, more than the page has pixels: each bar is the mean per step of 4" in section


def test_report_html_of_a_light_run_plots_host_times(tmp_path):
    """A --light run holds ranges and no activity: the page says so and plots the host time of
    each step and range, as `report` prints it, not bars of 0 ms GPU time."""
    import sys
    import _run_helpers as H
    prog = H.script(tmp_path, """
        import time, cuptiprof
        for i in range(3):
            with cuptiprof.range("step", step=i):
                with cuptiprof.range("attention"):
                    time.sleep(0.02 * (i + 1))
                with cuptiprof.range("mlp"):
                    time.sleep(0.001)
    """)
    res = H.cli(["run", "-o", "li.duckdb", "--no-report", "--light", "--", sys.executable, prog], tmp_path)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "li.html"
    assert main(["report", str(tmp_path / "li.duckdb"), "--html", str(out)]) == 0
    text = out.read_text()
    assert '<p class="notice host">No GPU activity in scope (a <code>--light</code> run' in text
    with cuptiprof.open(tmp_path / "li.duckdb") as prof:
        host = {s: h for s, h in prof.sql("SELECT step, host_ms FROM (" + prof.report("steps").sql_query()
                                          + ")").fetchall()}
        attention = prof.sql("SELECT host_ms FROM (" + prof.report("ranges").sql_query()
                             + ") WHERE range = 'attention'").fetchall()[0][0]
    steps = text.split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    tips = re.findall(r"<title>(\d+) \| host: ([\d.,]+) ms</title>", steps)
    assert {int(s): float(v) for s, v in tips} == pytest.approx(host, rel=1e-3) and len(tips) == 3
    assert min(host.values()) >= 20
    ranges = text.split("<h2>The program's ranges</h2>", 1)[1].split("<h2>", 1)[0]
    got = float(re.search(r"<title>attention: ([\d.,]+) ms on the host in 3 calls</title>", ranges).group(1))
    assert got == pytest.approx(attention, rel=1e-3) and got >= 120
    assert "<h2>Steps by range</h2>" not in text and ">0 ms</text>" not in ranges
    # no activity to draw: said once, without a typical step or one empty timeline per step
    # (the last section of a page without ops: up to the page's script)
    timeline = text.split("<h2>Timeline</h2>", 1)[1].split("<h2>", 1)[0].split("<script>", 1)[0]
    assert "there is no timeline to draw" in timeline and text.count("no timeline to draw") == 1
    assert "(typical)" not in text and "no GPU work in this step" not in text
    assert 'class="timeline"' not in text and "step-select" not in timeline
    # ranges cut by --top: the page counts those left out
    assert "not shown" not in ranges
    with cuptiprof.open(tmp_path / "li.duckdb") as prof:
        n = len(prof.report("ranges").fetchall())
    assert n >= 2
    assert main(["report", str(tmp_path / "li.duckdb"), "--html", str(out), "--top", "1"]) == 0
    ranges = out.read_text().split("<h2>The program's ranges</h2>", 1)[1].split("<h2>", 1)[0]
    assert f"{n - 1} more range{'s' if n > 2 else ''} not shown; <code>--top {n}</code>" in ranges


def test_a_page_interrupted_while_written_leaves_nothing(evil, tmp_path, monkeypatch):
    out = tmp_path / "r.html"
    real = Path.write_text

    def interrupted(self, text, *a, **k):
        real(self, text[: len(text) // 2], *a, **k)   # half the page is on disk
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", interrupted)
    with cuptiprof.open(evil[0]) as prof, pytest.raises(KeyboardInterrupt):
        write_report(prof, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "b.duckdb"]


def test_report_html_of_a_file_without_steps_shows_the_whole_file(tmp_path):
    """No steps (an nsys trace, a Kineto trace without ProfilerStep): the steps plot is the one
    whole-file row that `report --by step` prints, not '(nothing to plot)', and no empty
    steps-by-range section."""
    trace = _kineto_trace(tmp_path / "t.json", steps=2)
    doc = json.loads(trace.read_text())
    for e in doc["traceEvents"]:
        if e["name"].startswith("ProfilerStep#"):
            e["name"] = "forward"   # a range of the program's own, not a step
    db, text = _page_of(trace, doc)
    with cuptiprof.open(db) as prof:
        (step, kernel_ms, idle_ms), = prof.report("steps").select("step, kernel_ms, idle_ms").fetchall()
    assert step is None and kernel_ms == pytest.approx(0.1) and idle_ms > 1
    steps = text.split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    tip = re.search(r"<title>all \| kernel: ([\d.]+) ms \|.*? idle: ([\d.,]+) ms</title>", steps)
    assert tip and float(tip.group(1)) == pytest.approx(kernel_ms) and float(tip.group(2)) == pytest.approx(idle_ms, rel=1e-3)
    assert "<h2>The program's ranges</h2>" in text and "<h2>Steps by range</h2>" not in text


def test_report_html_of_a_cpu_run_with_ranges_calls_the_split_cpu_op_time(tmp_path):
    """A run without a GPU, whose steps hold ranges: the steps-by-range plot splits CPU op time
    and says so (the page says that every time on it is CPU op time)."""
    import sys
    import _run_helpers as H
    pytest.importorskip("torch")
    prog = H.script(tmp_path, """
        import torch, cuptiprof
        x = torch.ones(64, 64)
        for i in range(2):
            with cuptiprof.range("step", step=i):
                with cuptiprof.range("attention"):
                    (x @ x).sum()
    """)
    res = H.cli(["run", "-o", "cpu.duckdb", "--no-report", "--", sys.executable, prog], tmp_path,
                timeout=300, CUDA_VISIBLE_DEVICES="")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "cpu.html"
    assert main(["report", str(tmp_path / "cpu.duckdb"), "--html", str(out)]) == 0
    text = out.read_text()
    assert "Every time on this page is CPU op time" in text
    section = text.split("<h2>Steps by range</h2>", 1)[1].split("<h2>", 1)[0]
    assert "Each step's CPU op time split by" in section and "attention" in section
    assert "GPU" not in section


def test_html_under_a_file_says_that_file_is_not_a_directory(evil, tmp_path, capsys):
    out = evil[0] / "r.html"       # inside the profile, as if it were a folder
    assert main(["report", str(evil[0]), "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"cuptiprof: error: {out}: {evil[0]} is a file, not a directory; give a path in a directory"


def _column_labels(svg: str) -> list[tuple[float, str]]:
    return [(float(x), t) for x, t in
            re.findall(r'<text x="([\d.]+)" y="\d+" text-anchor="middle">([^<]*)</text>', svg)]


def test_step_numbers_under_the_columns_are_never_cut():
    from cuptiprof.render.html import stacked_columns
    svg = stacked_columns([(str(123456789 + i) + ("*" if i == 2 else ""), {"kernel": 1.0 + i})
                           for i in range(3)])
    assert [t for _, t in _column_labels(svg)] == ["123456789", "123456790", "123456791*"]
    assert "\u2026" not in svg
    # a name is still cut
    assert [t for _, t in _column_labels(stacked_columns([("a_long_label", {"kernel": 1.0})]))] \
        == ["a_long_\u2026"]


def test_a_bar_of_many_steps_is_their_mean_and_names_the_slowest():
    from cuptiprof.render.html import stacked_columns
    cols = [(str(i), {"kernel": 1.0, "idle": 1.0}) for i in range(2000)]
    cols[1234] = ("1234*", {"kernel": 31.0, "idle": 1.0})   # a spike, ended early
    svg = stacked_columns(cols)
    tips = re.findall(r"<g><title>([^<]*)</title>", svg)
    assert len(tips) == 667 and svg.count("<rect") == 2 * 667   # 3 steps a bar
    spike = next(t for t in tips if t.startswith("steps 1233\u20131235"))
    assert spike == ("steps 1233\u20131235 (3 steps), mean per step | slowest: step 1234*, 32.000 ms"
                     " | kernel: 11.000 ms | memcpy: 0 ms | memset: 0 ms | idle: 1.000 ms")
    assert tips[-1].startswith("steps 1998\u20131999 (2 steps)")
    # labelled by its first step, starred as a step ended early is
    from cuptiprof.render.html import PARTS, _buckets
    labels = [label for label, _ in _buckets(cols, PARTS, "ms")[0]]
    assert labels[411:413] == ["1233*", "1236"] and labels[0] == "0"


@pytest.mark.parametrize("n", [12, 40, 300])
def test_long_step_numbers_are_labelled_whole_and_clear_of_each_other(n):
    from cuptiprof.render.html import stacked_columns
    svg = stacked_columns([(str(10**11 + i), {"kernel": 1.0}) for i in range(n)])
    labels = _column_labels(svg)
    assert labels and all(t == str(10**11 + int(t) - 10**11) and len(t) == 12 for _, t in labels)
    assert labels[0][1] == str(10**11)
    xs = [x for x, _ in labels]
    assert min(b - a for a, b in zip(xs, xs[1:])) >= 12 * 6   # 12 digits about 6 pixels wide


@pytest.mark.parametrize("err,status,says", [
    (PermissionError(13, "Permission denied"), 2, "cannot write (Permission denied); give a path"),
    (OSError(30, "Read-only file system"), 2, "cannot write (Read-only file system); give a path"),
    (OSError(28, "No space left on device"), 1, "cannot write: the disk is full"),
])
def test_a_page_that_cannot_be_written_is_one_line_and_leaves_nothing(evil, tmp_path, capsys,
                                                                       monkeypatch, err, status, says):
    """The path passed the up-front check, the report was computed, then the write failed: one
    line naming the path, exit 2 (a full disk: 1, a runtime failure), no temporary file left."""
    out = tmp_path / "r.html"

    def fails(self, text, *a, **k):
        self.write_bytes(b"<!DOCTYPE html><p>half")   # the temporary file is already there
        raise err

    monkeypatch.setattr(Path, "write_text", fails)
    assert main(["report", str(evil[0]), "--html", str(out)]) == status
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith(f"cuptiprof: error: {out}: {says}"), err_lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "b.duckdb"]


def test_report_html_into_proc_is_a_usage_error(evil, tmp_path):
    """/proc passes the writability check as root; the write itself fails: exit 2, one line."""
    import os
    import sys
    if not os.access("/proc", os.W_OK):
        pytest.skip("/proc is refused up front when not root")
    r = subprocess.run([sys.executable, "-m", "cuptiprof", "report", str(evil[0]), "--html",
                        "/proc/cuptiprof-x.html"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("cuptiprof: error: /proc/cuptiprof-x.html: cannot write (")
    assert len(r.stderr.strip().splitlines()) == 1


def test_long_names_that_share_a_prefix_are_cut_apart_with_the_full_name_on_hover(tmp_path):
    """Table cells cut C++ template names that share their first hundred characters where they
    differ (the browser would cut them all to one text at its end); the full name, escaped, is
    the cell's tooltip."""
    from html.parser import HTMLParser

    from cuptiprof.render.html import CELL_CHARS

    head = 'void cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "x" & '
    names = [head + f"cutlass::gemm::collective::CollectiveMma<{k}, cute::Shape<_128>>>(Params)"
             for k in ("MainloopSm90TmaGmmaWarpSpecialized", "MainloopSm90TmaGmmaWarpSpecializedPingpong",
                       "MainloopSm90CpAsyncGmma")]
    ops = {n: (100.0 + 10 * i, 2, "aten::mm") for i, n in enumerate(names)}
    a = make_run(tmp_path / "a.duckdb", ops=ops)
    b = make_run(tmp_path / "b.duckdb", ops=ops, seed=1)

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.cells, self._title = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "td":
                self._title = dict(attrs).get("title")
                self.cells.append((self._title, ""))

        def handle_data(self, data):
            if self._title is not None:
                self.cells[-1] = (self._title, self.cells[-1][1] + data)

        def handle_endtag(self, tag):
            if tag == "td":
                self._title = None

    for write, src in ((write_compare, Comparison([a, b])), (write_report, cuptiprof.open(a))):
        with src as x:
            out = write(x, tmp_path / "page.html")
        parser = Cells()
        parser.feed(out.read_text())
        shown = {title: text for title, text in parser.cells if title in names}
        assert set(shown) == set(names), write.__name__
        assert len(set(shown.values())) == len(names), shown   # told apart
        assert all(len(t) <= CELL_CHARS and "\u2026" in t for t in shown.values()), shown
        assert all(t.startswith("void cutlass::Kernel") for t in shown.values())


def test_bar_labels_of_names_that_share_a_long_start_are_cut_apart():
    """The ops plots label each bar with its name cut to fit beside the bar: names that share
    their first 46 characters (CloverLeaf's `void clover::par_ranged2d_kernel<advec_mom_kernel(`
    lambdas, CUTLASS templates) are cut where they differ, as in the tables, not to one label."""
    from cuptiprof.render.html import grouped_hbars, hbars

    head = "void clover::par_ranged2d_kernel<advec_mom_kernel(int, int, int, int, clover::Buffer2D"
    names = [head + f"<double>&)::{{lambda(int, int)#{k}}}>(clover::Range2d)" for k in (1, 2, 3)]

    def labels(svg):   # the text drawn left of each bar (its name), unescaped
        return [html.unescape(t) for t in re.findall(r'text-anchor="end">(?:<title>[^<]*</title>)?([^<]*)<', svg)]

    for svg in (hbars([(n, 3.0 - i, n) for i, n in enumerate(names)]),
                grouped_hbars(names, [("A", [3.0, 2.0, 1.0])])):
        shown = labels(svg)
        assert len(shown) == 3 and len(set(shown)) == 3, shown   # told apart
        assert all(len(t) <= 46 and t.startswith("void clover::") for t in shown), shown
        assert any(f"#{k}" in t for t in shown for k in (1, 2, 3)), shown
    assert labels(hbars([("kernel", 1.0, "")])) == ["kernel"]   # a short name stays whole
    # the rank-shift chart labels each file's first and last ranks the same way
    from cuptiprof.render.html import bump_chart
    svg = bump_chart(names, ["A", "B"], {n: [i + 1, 3 - i] for i, n in enumerate(names)})
    for side in ("left", "right"):
        shown = [html.unescape(t) for t in re.findall(rf'<text class="{side}"[^>]*>\d+\. ([^<]*)<', svg)]
        assert len(shown) == 3 and len(set(shown)) == 3, shown


# -- plot geometry ------------------------------------------------------------------------------
def _rects(svg: str) -> list[tuple[float, float, float, float]]:
    return [tuple(float(v) for v in m) for m in
            re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg)]


def test_bar_lengths_are_proportional_to_their_values():
    from cuptiprof.render.html import hbars
    svg = hbars([("a", 4.0, "ta"), ("b", 1.0, "tb")], width=900, label_w=330)
    (xa, _, wa, _), (xb, _, wb, _) = _rects(svg)
    assert xa == xb == 330 and wa == 900 - 330 - 90 and wb == pytest.approx(wa / 4)
    assert re.findall(r"<title>([^<]*)</title>", svg) == ["ta", "tb"]


def test_the_longest_bar_fills_the_plot_wherever_it_is_listed():
    # the kinds plot lists kernels first: a copy-bound run's memcpy bar is the longest
    from cuptiprof.render.html import grouped_hbars, hbars
    widths = [w for _, _, w, _ in _rects(hbars([("kernel", 1.0, ""), ("memcpy HtoD", 4.0, "")]))]
    assert widths == [120.0, 480.0]
    # a file whose ops are slower than the first file's: every bar on its scale
    svg = grouped_hbars(["gemm"], [("A", [1.0]), ("B", [4.0])])
    assert [w for _, _, w, _ in _rects(svg)] == [120.0, 480.0]


def test_control_characters_in_a_name_are_dropped_from_the_page():
    # NUL and escapes are invalid in HTML; a bidi override would reverse the text after it
    assert esc('k\x00<1>\x1b[31m\u202e"x"\nend') == "k&lt;1&gt;[31m&quot;x&quot; end"


def test_plots_of_nothing_but_zeros_draw_empty_bars():
    # ops of 0 ms (a run cut short), steps that launched no GPU work
    from cuptiprof.render.html import hbars, stacked_columns
    svg = hbars([("a", 0.0, "ta"), ("b", None, "tb")])
    assert [w for _, _, w, _ in _rects(svg)] == [1.0, 1.0] and ">0 ms<" in svg
    svg = stacked_columns([("1", {}), ("2", {"kernel": 0.0})])
    assert _rects(svg) == [] and re.findall(r"<g><title>([^<|]*) \|", svg) == ["1", "2"]


def test_stacked_columns_stack_parts_and_the_tallest_fills_the_plot():
    from cuptiprof.render.html import stacked_columns
    svg = stacked_columns([("1", {"kernel": 3.0, "idle": 1.0}), ("2", {"kernel": 1.0, "idle": 1.0})],
                          height=240)
    base, plot_h = 240 - 28, 240 - 40
    (x1, yk, _, hk), (_, yi, _, hi), (x2, yk2, _, hk2), (_, yi2, _, hi2) = _rects(svg)
    # column 1 (4 ms) is the tallest: its kernel time at the bottom, its idle time on top
    assert (hk, hi) == (plot_h * 0.75, plot_h * 0.25) and yk + hk == base and yi + hi == yk
    assert (hk2, hi2) == (plot_h * 0.25, plot_h * 0.25) and yk2 + hk2 == base and yi2 + hi2 == yk2
    assert x1 < x2 and '<text x="4" y="12">4.000 ms</text>' in svg


def _beside(svg: str) -> list[tuple[float, float, float, float]]:
    """The bars drawn beside a stacked column (host sync time), not stacked on it."""
    return [tuple(float(v) for v in m) for m in re.findall(
        r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" fill="[^"]*" class="beside"', svg)]


def test_sync_time_is_a_bar_beside_the_gpu_work_not_stacked_on_it():
    """Host sync time is the host waiting, not GPU work: a bar of its own beside the column, on
    the same scale, so that the stacked column is the step's GPU work and idle time alone."""
    from cuptiprof.render.html import stacked_columns
    svg = stacked_columns([("1", {"kernel": 3.0, "idle": 1.0, "sync": 6.0}),
                           ("2", {"kernel": 2.0, "idle": 1.0})], height=240)
    base, plot_h = 240 - 28, 240 - 40
    stacked = [r for r in _rects(svg) if r not in _beside(svg)]
    (x1, yk, wk, hk), (_, yi, _, hi), (x2, _, _, hk2), (_, _, _, hi2) = stacked
    # the scale is the tallest bar of either: the 6 ms sync
    assert '<text x="4" y="12">6.000 ms</text>' in svg
    assert (hk, hi) == (plot_h / 2, pytest.approx(plot_h / 6, abs=0.05)) and yk + hk == base
    assert yi + hi == yk
    assert hk2 + hi2 == pytest.approx(plot_h / 2)
    (xs, ys, ws, hs), = _beside(svg)   # step 2 has no sync: no bar
    assert hs == plot_h and ys + hs == base and x1 + wk <= xs < x2
    tip = re.findall(r"<g><title>([^<]*)</title>", svg)[0]
    assert tip == "1 | kernel: 3.000 ms | memcpy: 0 ms | memset: 0 ms | idle: 1.000 ms | sync (host wait): 6.000 ms"
    assert "sync (host wait, beside the bar)" in svg
    # steps grouped into bars: the sync beside each is the mean of its steps' too
    from cuptiprof.render.html import BESIDE, PLOT_COLUMNS, STACKED, _buckets
    cols = [(str(i), {"kernel": 1.0, "sync": 4.0 if i % 2 else 2.0}) for i in range(2 * PLOT_COLUMNS)]
    assert {d["sync"] for _, d in _buckets(cols, STACKED, "ms", BESIDE)[0]} == {3.0}


def test_report_html_steps_plot_stacks_gpu_work_and_draws_sync_beside(tmp_path):
    """A run whose host waits in syncs far longer than its GPU works: each step's stacked bar is
    its GPU window as `report --by step` gives it (its copies run under its kernels: the summed
    kernel, copy, memset and idle times made a bar taller than the window), the sync time a bar
    of its own (stacked on top it made the bar several times the step's GPU window)."""
    db = make_run(tmp_path / "s.duckdb", steps=3, sync_us=5000.0)
    out = tmp_path / "s.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    with cuptiprof.open(db) as prof:
        rows = _dicts_of(prof.report("steps"))
    text = out.read_text()
    steps = text.split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    vmax = float(re.search(r'<text x="4" y="12">([\d.,]+) ms</text>', steps).group(1).replace(",", ""))
    plot_h = 240 - 40
    groups = re.findall(r"<g><title>(\d+) \|[^<]*</title>(.*?)</g>", steps)
    assert len(groups) == len(rows) == 3
    for (step, g), r in zip(groups, rows):
        assert int(step) == r["step"] and r["sync_ms"] == pytest.approx(5.0)
        assert r["kernel_ms"] + r["memcpy_ms"] + r["memset_ms"] + r["idle_ms"] > r["gpu_window_ms"] * 1.1
        stacked = sum(h for _, _, _, h in _rects(g)) - sum(h for _, _, _, h in _beside(g))
        assert stacked * vmax / plot_h == pytest.approx(r["gpu_window_ms"], rel=1e-2)
        (_, _, _, hs), = _beside(g)
        assert hs * vmax / plot_h == pytest.approx(r["sync_ms"], rel=1e-2)
    assert "not GPU work" in steps
    kinds = text.split("<h2>Kinds</h2>", 1)[1].split("<h2>", 1)[0]
    assert re.search(r"<title>sync stream_synchronize: [\d.]+ ms, 3 calls, host wait \(not GPU time\)</title>", kinds)
    # the comparison's kinds and steps per file: sync beside, not stacked, as well
    out = tmp_path / "c.html"
    with Comparison([db, make_run(tmp_path / "t.duckdb", steps=3, seed=1)]) as cmp:
        write_compare(cmp, out, top=15)
    text = out.read_text()
    kinds = text.split("<h2>Kinds per file</h2>", 1)[1].split("<h2>", 1)[0]
    assert len(_beside(kinds)) == 2 and "sync (host wait, beside the bar)" in kinds
    per_file = text.split("<h2>Steps per file</h2>", 1)[1].split("<h2>", 1)[0]
    assert len(_beside(per_file)) == 6


def _overlapping_step(path: Path) -> Path:
    """One step on one device: kernels on streams 7 and 8 that overlap, a copy on stream 21 that
    starts under them and runs on past them, a memset under the copy's end and past it, a gap,
    one more kernel: window 3.0 ms; 2.0 ms under kernels, 0.5 ms of copy and 0.2 ms of memset
    under neither, 0.3 ms idle (summed: kernels 2.5 ms, copy 0.8 ms, memset 0.4 ms)."""
    import pyarrow as pa
    from cuptiprof.store.writer import RunInfo, Writer
    t, us = 1_000_000, 1000
    k = {"start_ns": [t, t + 500 * us, t + 2500 * us], "end_ns": [t + 1000 * us, t + 1500 * us, t + 3000 * us],
         "step": [0] * 3, "name": ["gemm", "softmax", "gelu"], "stream_id": [7, 8, 7], "device_id": [0] * 3}
    m = {"start_ns": [t + 1200 * us], "end_ns": [t + 2000 * us], "step": [0], "copy_kind": ["HtoD"],
         "bytes": [1 << 20], "stream_id": [21], "device_id": [0]}
    ms = {"start_ns": [t + 1800 * us], "end_ns": [t + 2200 * us], "step": [0], "bytes": [1 << 20],
          "stream_id": [7], "device_id": [0]}
    r = {"range_id": pa.array([1], pa.int64()), "depth": pa.array([0], pa.int32()), "name": ["step"],
         "start_ns": pa.array([t], pa.int64()), "end_ns": pa.array([t + 3100 * us], pa.int64()),
         "kind": ["step"], "step": pa.array([0], pa.int32())}
    with Writer(path, RunInfo(source="synthetic")) as w:
        w.append({"kernels": k, "ranges": r})
        w.append({"memcpys": m, "memsets": ms})
    return path


def test_a_steps_bar_splits_its_gpu_window_where_work_overlaps(tmp_path):
    """Kernels on two streams at once and a copy beside them: each moment of the step's GPU
    window is in one piece of its bar (a kernel, else a copy, else a memset, else idle), so the
    bar is the window `report --by step` gives, not the summed durations (4.0 ms of bar for a
    3.0 ms step); the summed durations are on hover, and the note says what the bar holds."""
    db = _overlapping_step(tmp_path / "o.duckdb")
    out = tmp_path / "o.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    with cuptiprof.open(db) as prof:
        (row,) = _dicts_of(prof.report("steps"))
    assert row["gpu_window_ms"] == pytest.approx(3.0) and row["idle_ms"] == pytest.approx(0.3)
    assert (row["kernel_ms"], row["memcpy_ms"], row["memset_ms"]) == pytest.approx((2.5, 0.8, 0.4))
    steps = out.read_text().split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    tip, g = re.search(r"<g><title>(0 \|[^<]*)</title>(.*?)</g>", steps).groups()
    parts = dict(re.findall(r"(kernel|memcpy|memset|idle): ([\d.]+) ms", tip))
    assert {p: float(v) for p, v in parts.items()} == pytest.approx(
        {"kernel": 2.0, "memcpy": 0.5, "memset": 0.2, "idle": 0.3})
    for p, summed in (("kernel", 2.5), ("memcpy", 0.8), ("memset", 0.4)):
        assert f"{p}: {parts[p]} ms (summed durations: {fmt_value(summed)} ms)" in tip
    vmax = float(re.search(r'<text x="4" y="12">([\d.,]+) ms</text>', steps).group(1))
    assert vmax == pytest.approx(3.0)   # the tallest bar: the window
    assert sum(h for _, _, _, h in _rects(g)) == pytest.approx(240 - 40, abs=0.5)
    assert "splits its GPU window" in steps and "counts once" in steps


def test_the_comparisons_steps_bars_split_each_steps_gpu_window_too(tmp_path):
    """compare --html's steps per file: each bar is the step's GPU window (the comparison's
    window_ms), split as the report's steps plot splits it, not its summed durations."""
    a, b = _overlapping_step(tmp_path / "a.duckdb"), _overlapping_step(tmp_path / "b.duckdb")
    out = tmp_path / "c.html"
    with Comparison([a, b]) as cmp:
        assert [r["window_ms"] for r in _dicts_of(cmp.steps())] == pytest.approx([3.0, 3.0])
        write_compare(cmp, out)
    per_file = out.read_text().split("<h2>Steps per file</h2>", 1)[1].split("<h2>", 1)[0]
    tips = re.findall(r"<g><title>(0 \|[^<]*)</title>", per_file)
    assert len(tips) == 2
    for tip in tips:
        parts = dict(re.findall(r"(kernel|memcpy|memset|idle): ([\d.]+) ms", tip))
        assert {p: float(v) for p, v in parts.items()} == pytest.approx(
            {"kernel": 2.0, "memcpy": 0.5, "memset": 0.2, "idle": 0.3})
        assert f"memcpy: {parts['memcpy']} ms (summed durations: {fmt_value(0.8)} ms)" in tip
    assert all(f'<text x="4" y="12">{fmt_value(3.0)} ms</text>' in svg
               for svg in re.findall(r"<svg.*?</svg>", per_file))
    assert "splits" in per_file and "counts once" in per_file
    # the kinds per file stack each kind's summed durations, as the kinds table beside them does
    # (4.0 ms here, for 3.0 ms steps): the note says so, not that the bar is a step
    kinds = out.read_text().split("<h2>Kinds per file</h2>", 1)[1].split("<h2>", 1)[0]
    assert f'<text x="4" y="12">{fmt_value(4.0)} ms</text>' in kinds
    assert "summed durations" in kinds and "taller than" in kinds


def _dicts_of(rel) -> list[dict]:
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def test_cloverleaf_steps_bar_is_its_gpu_window_and_its_syncs_a_bar_beside(shared_traces, tmp_path):
    """CloverLeaf (nsys) waits 301 ms in event syncs in a 342 ms GPU window: the whole-file bar
    is the window (kernels, copies and idle), the syncs a bar of their own, as the tables say."""
    src = shared_traces / "pipit-nsys/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"
    db = tmp_path / "clover.duckdb"
    assert main(["import", str(src), "-o", str(db)]) == 0
    out = tmp_path / "clover.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    with cuptiprof.open(db) as prof:
        (window, sync), = prof.report("steps").select("gpu_window_ms, sync_ms").fetchall()
    steps = out.read_text().split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    assert f'<text x="4" y="12">{fmt_value(window)} ms</text>' in steps   # the tallest: the window
    (_, _, _, hs), = _beside(steps)
    assert hs * window / (240 - 40) == pytest.approx(sync, rel=1e-2)


def test_the_last_bar_of_fewer_steps_is_their_mean():
    from cuptiprof.render.html import PARTS, _buckets
    cols = [(str(i), {"kernel": 2.0, "idle": 1.0}) for i in range(2000)]   # 3 steps a bar
    bars, tips, note = _buckets(cols, PARTS, "ms")
    assert bars[-1] == ("1998", {"kernel": 2.0, "memcpy": 0.0, "memset": 0.0, "sync": 0.0, "idle": 1.0})
    assert all(d == bars[-1][1] for _, d in bars)
    assert "per step of 3 consecutive steps (the last bar of 2)" in note


def test_steps_are_grouped_into_bars_only_past_the_columns_a_plot_draws():
    from cuptiprof.render.html import PARTS, PLOT_COLUMNS, _buckets
    cols = [(str(i), {"kernel": 1.0}) for i in range(PLOT_COLUMNS + 1)]
    assert _buckets(cols[:-1], PARTS, "ms") == (cols[:-1], None, "")   # one bar a step
    bars, tips, note = _buckets(cols, PARTS, "ms")
    assert len(bars) == len(tips) == (PLOT_COLUMNS + 2) // 2 and "of 2 consecutive steps" in note


def test_a_range_named_with_markup_is_escaped_in_the_steps_by_range_tooltips():
    from cuptiprof.render.html import stacked_columns
    svg = stacked_columns([("1", {EVIL_KERNEL: 2.0, EVIL_OP: 1.0})], [EVIL_KERNEL, EVIL_OP],
                          colors={EVIL_KERNEL: "#4c78a8"})
    assert "<script" not in svg and '"onload' not in svg
    tip = re.findall(r"<g><title>([^<]*)</title>", svg)
    assert tip == [f"1 | {esc(EVIL_KERNEL)}: 2.000 ms | {esc(EVIL_OP)}: 1.000 ms"]


def test_steps_are_plotted_in_step_order_whatever_order_the_runs_list_them():
    # a merged file lists each run's steps in turn: run 1's steps 5 to 6, then run 2's 0 to 1
    from cuptiprof.render.html import _by_step
    per = {s: {"kernel": float(s)} for s in (5, 6, 0, 1)}
    assert _by_step(per, {6}) == [("0", {"kernel": 0.0}), ("1", {"kernel": 1.0}),
                                  ("5", {"kernel": 5.0}), ("6*", {"kernel": 6.0})]


def test_a_steps_bar_sums_the_work_of_every_device(tmp_path):
    db = tmp_path / "two.duckdb"
    assert main(["import", str(_kineto_trace(tmp_path / "two.json", devices=2, kernels=10)), "-o", str(db)]) == 0
    out = tmp_path / "two.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    with cuptiprof.open(db) as prof:
        per_device = prof.report("steps").select("step, device_id, kernel_ms").fetchall()
    assert len(per_device) == 4   # 2 steps on 2 devices
    steps = out.read_text().split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    tips = {s: float(ms) for s, ms in re.findall(r"<title>(\d+) \| kernel: ([\d.]+) ms", steps)}
    assert tips == {"0": pytest.approx(0.1), "1": pytest.approx(0.1)}   # 10 kernels of 5 us on each of 2 devices
    assert all(ms == pytest.approx(0.05) for _, _, ms in per_device)


def test_a_file_named_with_markup_is_escaped_in_the_title_and_heading(tmp_path):
    db = make_run(tmp_path / "<img src=x onerror=alert(4)>.duckdb", steps=2)
    out = tmp_path / "r.html"
    with cuptiprof.open(db) as prof:
        write_report(prof, out, top=5)
    text = out.read_text()
    assert "<img" not in text
    assert f"<title>cuptiprof report: {esc(db.name)}</title>" in text
    assert f"<h1>cuptiprof report: {esc(db.name)}</h1>" in text


def test_timeline_draws_an_op_too_short_for_a_pixel():
    from cuptiprof.render.html import timeline
    row = {"run_id": 1, "pid": 1, "device_id": 0, "stream_id": 7, "kind": "kernel"}
    svg = timeline([{**row, "name": "long", "start_ns": 0, "end_ns": 1_000_000},
                    {**row, "name": "tiny", "start_ns": 500_000, "end_ns": 500_000}])
    widths = re.findall(r'width="([\d.]+)" height="18" fill="#4c78a8"><title>(\w+)', svg)
    assert widths == [("960.00", "long"), ("0.60", "tiny")]


def test_timeline_headings_name_each_process_and_its_run_only_where_there_are_several():
    from cuptiprof.render.html import timeline

    def rows(run_id, pid):
        return [{"run_id": run_id, "pid": pid, "device_id": 0, "stream_id": 7, "kind": "kernel",
                 "name": "k", "start_ns": i * 100_000, "end_ns": i * 100_000 + 50_000} for i in range(3)]

    def heads(svg):
        return re.findall(r'class="process"[^>]*>([^<]*)<', svg)
    one_run = [{"run_id": 1, "pid": p, "run_label": "train", "runs": 1, "host": "node1", "rank": r}
               for p, r in ((10, 0), (20, 1))]
    assert heads(timeline(rows(1, 10) + rows(1, 20), processes=one_run)) == [
        "pid 10 \u00b7 rank 0 \u00b7 host node1", "pid 20 \u00b7 rank 1 \u00b7 host node1"]
    two_runs = [{"run_id": r, "pid": 10, "run_label": label, "runs": 2, "host": None, "rank": None}
                for r, label in ((1, "base"), (2, "new"))]
    assert heads(timeline(rows(1, 10) + rows(2, 10), processes=two_runs)) == [
        "base \u00b7 pid 10", "new \u00b7 pid 10"]
    # one process: its lanes need no heading
    svg = timeline(rows(1, 10), processes=one_run)
    assert heads(svg) == [] and ">dev 0 stream 7<" in svg
    # a run's label and a host name come from the user and the trace: escaped like any name
    named = [{"run_id": r, "pid": 10, "run_label": EVIL_KERNEL, "runs": 2, "host": EVIL_DEVICE,
              "rank": None} for r in (1, 2)]
    svg = timeline(rows(1, 10) + rows(2, 10), processes=named)
    assert "<script" not in svg and "<img" not in svg
    assert heads(svg) == [f"{esc(EVIL_KERNEL)} \u00b7 pid 10 \u00b7 host {esc(EVIL_DEVICE)}"] * 2


def test_the_embedded_timelines_are_the_typical_step_and_its_neighbours():
    import pyarrow as pa
    from cuptiprof.render.html import TIMELINE_STEPS, _timelines
    none = pa.table({"run_id": pa.array([], pa.int64())})

    def page(steps, typical):
        text = _timelines(None, steps, lambda p: typical, lambda p, s, *a: none, lambda p: none)
        return ([int(s) for s in re.findall(r'<div class="timeline" data-step="(-?\d+)"', text)],
                re.findall(r'<option value="(-?\d+)" selected>step -?\d+ \(typical\)</option>', text))
    assert TIMELINE_STEPS == 6
    assert page(list(range(10, 20)), 15) == ([12, 13, 14, 15, 16, 17], ["15"])
    assert page(list(range(10, 20)), 10) == ([10, 11, 12, 13, 14, 15], ["10"])
    # the last step is typical: as many steps as at the start, not the half window after it
    assert page(list(range(10, 20)), 19) == ([14, 15, 16, 17, 18, 19], ["19"])
    assert page(list(range(10, 20)), 17) == ([14, 15, 16, 17, 18, 19], ["17"])
    # no typical step among the plotted ones (every step cut short): the middle one
    assert page([1, 2, 3], None) == ([1, 2, 3], ["2"])


def test_steps_by_range_colours_the_biggest_ranges_and_groups_the_rest_as_other():
    import pyarrow as pa
    from cuptiprof.render.html import RANGES_SHOWN, _steps_by_range
    names = [f"r{i}" for i in range(8)]          # r7 is the biggest, r0 the smallest
    rows = [(s, n, float(i + 1)) for s in (1, 2) for i, n in enumerate(names)] + [(1, "(no range)", 0.5)]

    class Prof:
        def report(self, name):
            assert name == "step_ranges"
            return pa.table({"step": [r[0] for r in rows], "range": [r[1] for r in rows],
                             "gpu_ms": [r[2] for r in rows]})
    html_ = _steps_by_range(Prof(), set(), "GPU", [1, 2, 3])
    legend = re.findall(r'<span title="([^"]*)">', html_)
    assert RANGES_SHOWN == 6
    assert legend == ["r7", "r6", "r5", "r4", "r3", "r2", "other", "(no range)"]
    tips = re.findall(r"<title>([^<]*)</title>", html_)
    assert tips[0].startswith("1 | r7: 8.000 ms | r6: 7.000 ms") and "other: 3.000 ms" in tips[0]
    assert tips[0].endswith("(no range): 0.5 ms") and tips[1].endswith("(no range): 0 ms")
    assert tips[2].startswith("3 | r7: 0 ms")   # a step without GPU work: an empty bar


def test_a_range_named_other_keeps_its_own_piece_apart_from_the_rest():
    import pyarrow as pa
    from cuptiprof.render.html import _steps_by_range
    names = ["other"] + [f"r{i}" for i in range(7)]   # the program's own range "other": the biggest
    gpu = [10.0] + [float(i + 1) for i in range(7)]

    class Prof:
        def report(self, name):
            return pa.table({"step": [1] * len(names), "range": names, "gpu_ms": gpu})
    html_ = _steps_by_range(Prof(), set(), "GPU", [1])
    legend = re.findall(r'<span title="([^"]*)">', html_)
    assert legend == ["other", "r6", "r5", "r4", "r3", "r2", "(other ranges)"]
    tip, = re.findall(r"<title>([^<]*)</title>", html_)
    assert tip.startswith("1 | other: 10.000 ms |") and tip.endswith("(other ranges): 3.000 ms")
    # the bar is the step's 38 ms, not the range counted twice
    assert re.search(r'<text x="4" y="12">([^<]*)</text>', html_).group(1) == "38.000 ms"


def test_a_table_shows_its_first_rows_says_how_many_more_and_right_aligns_numbers_only():
    import pyarrow as pa
    from cuptiprof.render.html import table
    cell = table(pa.table({"n": list(range(201)), "ok": [True] * 201, "name": ["k"] * 201}))
    assert cell.count("<tr>") == 1 + 200 and '<td class="n" title="199">199</td>' in cell
    assert '<td class="n" title="200">' not in cell
    assert cell.endswith('<p class="note">1 more row not shown</p>')
    assert '<td title="True">' in cell and '<td title="k">k</td>' in cell   # text and flags: left
    assert "more rows not shown" not in table(pa.table({"n": list(range(200))}))


def test_grouped_bars_of_every_file_share_one_scale():
    from cuptiprof.render.html import grouped_hbars
    svg = grouped_hbars(["gemm", "add"], [("A", [4.0, 1.0]), ("B", [2.0, None])])
    assert re.findall(r"<g><title>([^<]*)</title>", svg) == ["A: gemm: 4.000 ms", "B: gemm: 2.000 ms",
                                                            "A: add: 1.000 ms"]
    assert [w for _, _, w, _ in _rects(svg)] == [480.0, 240.0, 120.0]   # B's gemm: half of A's
    assert "B: absent" in svg


def test_top_limits_the_ops_plotted_to_the_biggest(tmp_path):
    db = make_run(tmp_path / "a.duckdb", steps=2)
    out = tmp_path / "r.html"
    with cuptiprof.open(db) as prof:
        write_report(prof, out, top=2)
        ops = [r[0] for r in prof.ops().select("name").fetchall()]
    assert len(ops) > 3
    text = out.read_text()
    assert "<h2>Top 2 ops by GPU time</h2>" in text

    def bars(cls):
        svg = re.search(rf'<svg class="plot {cls}".*?</svg>', text, re.S).group(0)
        return [html.unescape(t) for t in re.findall(r'text-anchor="end">([^<]*)</text>', svg)]
    assert bars("ops") == [o[:45] + "\u2026" if len(o) > 46 else o for o in ops[:2]]
    # the page says how many ops the cut left out, and the --top that shows them all, under
    # the plot and under the table
    left = len(ops) - 2
    say = f"{left:,} more op{'s' if left != 1 else ''} not shown; <code>--top {len(ops)}</code>"
    assert text.count(say) == 2


def test_a_report_cut_at_no_op_says_nothing_left_out(tmp_path):
    db = make_run(tmp_path / "a.duckdb", steps=2)
    out = tmp_path / "r.html"
    with cuptiprof.open(db) as prof:
        n = len(prof.ops().fetchall())
        write_report(prof, out, top=n)
    assert "not shown" not in out.read_text()


def test_compare_html_counts_the_keys_its_top_leaves_out(tmp_path):
    runs = [make_run(tmp_path / "a.duckdb", ops={GEMM_H100: (400.0, 2, "aten::mm"), SOFTMAX: (90.0, 1, "s"),
                                                  ADD: (50.0, 1, "a")}, copies=()),
            make_run(tmp_path / "b.duckdb", ops={FLASH: (300.0, 1, "f"), ADD: (100.0, 1, "a")},
                     copies=())]
    out = tmp_path / "c.html"
    with Comparison(runs) as cmp:
        more, need = cmp.keys_left_out(1)
        write_compare(cmp, out, top=1)
    assert more >= 2 and need >= 2
    text = out.read_text()
    say = f"{more:,} more keys not shown; <code>--top {need}</code> shows every one."
    assert text.count(say) == 2   # under the heading of the plot and under the table
    with Comparison(runs) as cmp:
        write_compare(cmp, out, top=50)
    assert "not shown" not in out.read_text()


def test_a_step_thinned_in_one_busy_lane_says_so_not_that_the_step_is_too_big(tmp_path):
    from cuptiprof.render.html import TIMELINE_LANE_OPS, TIMELINE_STEP_OPS
    assert TIMELINE_LANE_OPS < 3000 <= TIMELINE_STEP_OPS
    _, svgs = _step_timelines(tmp_path, 1, 3000)
    for svg in svgs.values():
        assert f"in lanes of more than {TIMELINE_LANE_OPS:,} ops" in svg and "3,000 ops as" in svg
        assert "this step has more than" not in svg


def test_compare_html_kinds_sum_copy_directions_and_rank_each_files_top(tmp_path):
    copies = (("HtoD", 8 << 20, 400.0), ("DtoH", 4 << 20, 300.0))
    runs = [make_run(tmp_path / f"{n}.duckdb", steps=2, copies=copies, seed=i) for i, n in enumerate("ab")]
    out = tmp_path / "c.html"
    with Comparison(runs) as cmp:
        write_compare(cmp, out, top=15)
    text = out.read_text()
    kinds = text.split("<h2>Kinds per file</h2>", 1)[1].split("<h2>", 1)[0]
    memcpy = re.findall(r"<title>([AB]) \| kernel: [\d.]+ ms \| memcpy: ([\d.]+) ms", kinds)
    assert [(L, float(ms)) for L, ms in memcpy] == [("A", pytest.approx(0.7)), ("B", pytest.approx(0.7))]
    # about 24 lines in the rank-shift chart: each of 2 files' top 12
    assert "Rank of each file's top 12 ops in every file" in text
    # each file's steps: both copy directions in its memcpy part's summed durations, as in the
    # steps report (the copies run under the kernels: almost none of the bar)
    steps = text.split("<h2>Steps per file</h2>", 1)[1].split("<h2>", 1)[0]
    parts = re.findall(r"<title>(\d+) \| kernel: [\d.]+ ms \| memcpy: 0.004 ms \(summed durations: "
                       r"([\d.]+) ms\) \| memset: ([\d.]+) ms", steps)
    assert len(parts) == 4 and all(float(cp) == pytest.approx(0.7) and float(ms) < 0.7 for _, cp, ms in parts)


def test_a_box_of_merged_ops_escapes_the_name_of_its_longest_op():
    from cuptiprof.render.html import timeline
    rows = [{"run_id": 1, "pid": 10, "device_id": 0, "stream_id": 7, "kind": "kernel", "name": EVIL_KERNEL,
             "start_ns": 0, "end_ns": 10_000, "ops": 3, "busy_ns": 5_000, "merge_px": 1.0}]
    svg = timeline(rows)
    assert EVIL_KERNEL not in svg and "<script" not in svg
    assert re.findall(r"<title>([^<]*)</title>", svg) == [
        f"3 ops less than a pixel apart, 5.0 us busy in 10.0 us; longest: {esc(EVIL_KERNEL)} (kernel)"]
    assert 'fill-opacity="0.50"' in svg


def test_processes_of_one_job_a_moment_apart_share_the_clock():
    # rank 20 starts just after rank 10 ends: one job, so its lane starts later on the same axis
    from cuptiprof.render.html import timeline
    rows = [{"run_id": 1, "pid": pid, "device_id": 0, "stream_id": 7, "kind": "kernel", "name": "k",
             "start_ns": t0 + i * 100_000, "end_ns": t0 + i * 100_000 + 50_000}
            for pid, t0 in ((10, 0), (20, 1_000_000)) for i in range(10)]
    svg = timeline(rows)
    xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)" y="\d+" width="[\d.]+" height="18" fill="#4c78a8"', svg)]
    assert min(xs[10:]) > max(xs[:10]) and _axis_ms(svg) == pytest.approx(1.95)
    assert "own first op" not in svg


def test_the_ranges_plot_shows_each_ranges_gpu_time(tmp_path):
    trace = _kineto_trace(tmp_path / "t.json", steps=2, kernels=10)
    doc = json.loads(trace.read_text())
    for s in range(2):   # a range of the program's own around each step's launches
        doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "attention", "pid": 1,
                                   "tid": 1, "ts": 1000 + s * 1110, "dur": 100})
    db, text = _page_of(trace, doc)
    with cuptiprof.open(db) as prof:
        (gpu_ms, calls), = prof.sql("SELECT gpu_ms, calls FROM (" + prof.report("ranges").sql_query()
                                    + ") WHERE range = 'attention'").fetchall()
    assert gpu_ms == pytest.approx(0.1) and calls == 2
    ranges = text.split("<h2>The program's ranges</h2>", 1)[1].split("<h2>", 1)[0]
    bar = re.search(r"<title>attention: ([^<]*)</title>.*?<text x=\"[\d.]+\" y=\"\d+\">([^<]*)</text>", ranges)
    assert bar.group(1).startswith(f"{fmt_value(gpu_ms)} ms in 2 calls, ")
    assert bar.group(2) == f"{fmt_value(gpu_ms)} ms"


def test_a_file_whose_steps_launched_nothing_is_not_called_a_light_run(tmp_path):
    trace = _kineto_trace(tmp_path / "t.json", steps=2, kernels=0)
    _, text = _page_of(trace, json.loads(trace.read_text()))
    assert '<p class="notice host">No GPU activity in scope (nothing in it launched GPU work)' in text
    assert "--light" not in text


def test_a_tooltip_counts_one_call_as_one_call(tmp_path):
    trace = _kineto_trace(tmp_path / "t.json", steps=1, kernels=1)
    doc = json.loads(trace.read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "attention", "pid": 1,
                               "tid": 1, "ts": 1000, "dur": 100})
    _, text = _page_of(trace, doc)
    assert re.search(r"<title>attention: [^<]* ms in 1 call, ", text)
    assert "1 calls" not in text


def test_an_op_ranked_past_the_last_row_is_drawn_on_it_and_labelled_below():
    from cuptiprof.render.html import BUMP_MAX_RANK, bump_chart
    svg = bump_chart(["a", "z"], ["A", "B"], {"a": [1, 1], "z": [2, 100]})
    labels = re.findall(r'class="right"[^>]*y="([\d.]+)">([^<]*)<', svg)
    # row 40 of the chart, not row 100: the chart keeps its height
    assert labels == [("34.0", "1. a"), (f"{30 + (BUMP_MAX_RANK - 1) * 20 + 4:.1f}", "100. (below) z")]
    assert f'height="{30 + BUMP_MAX_RANK * 20}"' in svg


def test_a_label_moves_to_the_nearest_free_row_above_or_below():
    from cuptiprof.render.html import _free_rows
    assert _free_rows({"a": 1}, {1, 2}) == {"a": 0}
    assert _free_rows({"a": 1, "b": 1}, {0}) == {"a": 1, "b": 2}


def test_rank_shift_labels_the_first_files_ops_left_and_the_last_files_right():
    from cuptiprof.render.html import bump_chart
    svg = bump_chart(["a", "b", "c", "d", "e"], ["A", "B", "C"],
                     {"a": [1, 2, None], "b": [2, 1, 1], "c": [None, 3, 2], "d": [3, None, None],
                      "e": [None, 4, None]})
    labels = re.findall(r'class="(left|right)"[^>]*>([^<]*)<', svg)
    assert sorted(t for side, t in labels if side == "left") == ["1. a", "2. b", "3. d"]
    # the last file's ops at their rank there; B's own op at its rank in B
    assert sorted(t for side, t in labels if side == "right") == ["1. b", "2. c", "B 4. e"]


def test_a_step_ended_early_is_starred_in_the_steps_plot_and_said_so(tmp_path):
    from cuptiprof.store.writer import RunInfo, Writer
    k, r = _three_steps(("k",), stream=7, device=0)
    db = tmp_path / "cut.duckdb"
    with Writer(db, RunInfo(source="synthetic")) as w:
        w.append({"kernels": k, "ranges": r})
        w.add_quality("step_incomplete", "2", None, "step 2 was ended by an exception")
    out = tmp_path / "cut.html"
    with cuptiprof.open(db) as prof:
        write_report(prof, out)
    steps = out.read_text().split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    assert [t for _, t in _column_labels(steps)] == ["0", "1", "2*"]
    assert "* ended early by an exception" in steps


def test_report_html_of_a_merged_run_without_steps_says_its_work_is_in_no_step_bar(tmp_path):
    """A run without steps merged with runs that have them: its work is in scope (the ops and
    kinds count it) but no step's bar holds it; the steps plot says so with its GPU time, as
    compare's legend does, rather than reading as all of the file's work."""
    stepped = _kineto_trace(tmp_path / "a.json", steps=2, kernels=3)
    doc = json.loads(_kineto_trace(tmp_path / "b.json", steps=2, kernels=4, pid=2).read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep#")]
    (tmp_path / "b.json").write_text(json.dumps(doc))
    a, b, merged, out = (tmp_path / n for n in ("a.duckdb", "b.duckdb", "m.duckdb", "m.html"))
    assert main(["import", str(stepped), "-o", str(a)]) == 0
    assert main(["import", str(tmp_path / "b.json"), "-o", str(b)]) == 0
    assert main(["merge", str(a), str(b), "-o", str(merged)]) == 0
    assert main(["report", str(merged), "--html", str(out)]) == 0
    steps = out.read_text().split("<h2>Steps</h2>", 1)[1].split("<h2>", 1)[0]
    note = re.search(r'<p class="note stepless">([^<]*)', steps)
    # the stepless run: 2 steps' worth of 4 kernels of 5 us, in no bar
    assert note and "the GPU time of 1 process without steps (0.04 ms" in note.group(1)
    assert main(["report", str(a), "--html", str(out)]) == 0
    assert "stepless" not in out.read_text()


def test_report_html_of_kernels_all_of_zero_duration_shows_them_and_says_no_time_was_measured(tmp_path):
    """Kernels recorded, every one starting and ending at the same time: the page said "No GPU
    activity", as if nothing had run. It counts them, plots their calls, and says that their
    time was not measured."""
    from cuptiprof.store.writer import RunInfo, Writer
    db = tmp_path / "z.duckdb"
    with Writer(db, RunInfo(source="cupti"), pid=11) as w:
        w.append({"processes": {"pid": [11]},
                  "kernels": {"start_ns": [1000, 2000, 3000], "end_ns": [1000, 2000, 3000],
                              "name": ["k_rare", "k_often", "k_often"], "stream_id": [7, 7, 7],
                              "device_id": [0, 0, 0]}})
    out = tmp_path / "z.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    text = out.read_text()
    assert "No GPU activity" not in text and "nothing in it launched GPU work" not in text
    assert "GPU activity was recorded (3 kernels), but every row of it has zero duration" in text
    assert "<h2>Top 2 ops by calls (no GPU time measured)</h2>" in text
    ops = text.split("<h2>Top 2 ops", 1)[1].split("<h2>", 1)[0]
    assert re.findall(r">([^<>]*) calls</text>", ops) == ["2", "1"]   # k_often first
    assert ops.index("k_often") < ops.index("k_rare")
    kinds = text.split("<h2>Kinds</h2>", 1)[1].split("<h2>", 1)[0]
    assert ">3 calls</text>" in kinds


def test_a_report_with_no_op_says_so_not_top_0_over_empty_tables(tmp_path):
    """A --light run holds no op and no kind: the page said "Top 0 ops", plotted "(nothing to
    plot)" and drew the ops and kinds tables as a header over no row. It says why there is
    nothing; a comparison's table without rows says what it lacks too."""
    from cuptiprof.store.writer import RunInfo, Writer
    db = tmp_path / "light.duckdb"
    with Writer(db, RunInfo(source="light"), pid=11) as w:
        w.append({"processes": {"pid": [11]},
                  "ranges": {"range_id": [1, 2], "parent_id": [None, None], "depth": [0, 0],
                             "name": ["step", "step"], "start_ns": [1000, 5000],
                             "end_ns": [4000, 9000], "kind": ["step", "step"], "step": [0, 1]}})
    out = tmp_path / "light.html"
    assert main(["report", str(db), "--html", str(out)]) == 0
    text = out.read_text()
    assert "Top 0" not in text and "<tbody></tbody>" not in text and "nothing to plot" not in text
    assert ('<h2>Ops</h2><p class="note none">No ops in scope (a <code>--light</code> run records '
            "ranges and logs only, no GPU or CPU op).</p>") in text
    assert text.count("<h2>Ops</h2>") == 1
    assert ('<h2>Kinds</h2><p class="note none">No GPU activity in scope (a <code>--light</code> '
            "run records ranges and logs only): nothing to split by kind.</p>") in text
    a = make_run(tmp_path / "a.duckdb", copies=())
    b = make_run(tmp_path / "b.duckdb", copies=(), seed=3)
    with Comparison([a, b]) as cmp:
        write_compare(cmp, tmp_path / "c.html")
    text = (tmp_path / "c.html").read_text()
    assert "<tbody></tbody>" not in text
    assert "No copies (memcpy) in the recorded steps of any file: no bandwidth to show." in text


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_page_never_replaces_a_file_that_appeared_after_its_check(evil, tmp_path, monkeypatch,
                                                                    capsys, command):
    """Two reports of one new page at once: each found the path free, and the later rename
    replaced the earlier one's page (or any file that appeared there meanwhile). Now the file
    is kept, the command says so in one line and leaves no temporary file; a page that was
    there when the path was checked is replaced, as before."""
    import cuptiprof.render.html.compare as compare_mod
    import cuptiprof.render.html.report as report_mod
    mod = report_mod if command == "report" else compare_mod
    out = tmp_path / "page.html"
    real = mod._page

    def another_command_writes_it(*a, **k):   # as this page is made, another one is written
        out.write_text("<!DOCTYPE html><html>the other command's page</html>")
        return real(*a, **k)
    monkeypatch.setattr(mod, "_page", another_command_writes_it)
    args = ["report", str(evil[0])] if command == "report" else ["compare", *map(str, evil)]
    capsys.readouterr()
    assert main([*args, "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"cuptiprof: error: {out}: already exists (written by another command "
                                "since this one began); choose another path (or remove it first)"]
    assert out.read_text() == "<!DOCTYPE html><html>the other command's page</html>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "b.duckdb", "page.html"]
    # there when the path was checked: replaced
    assert main([*args, "--html", str(out)]) == 0
    assert "the other command's page" not in out.read_text() and out.read_text().startswith("<!DOCTYPE")
