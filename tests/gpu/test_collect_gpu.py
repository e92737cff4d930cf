"""The collector on a real GPU: known kernels and copies inside known steps, exact counts.

Runs only where a CUDA GPU, torch with CUDA and cupti-python are present (`pytest -m gpu`).
"""
from __future__ import annotations

import duckdb
import pytest

import cuptiprof

pytestmark = pytest.mark.gpu

N = 1 << 20  # floats per tensor: 4 MiB copies


@pytest.fixture(scope="module")
def torch():
    t = pytest.importorskip("torch")
    if not t.cuda.is_available():
        pytest.skip("torch has no CUDA")
    pytest.importorskip("cupti")
    return t


def q(path, sql):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


def _loop(torch, x, h, steps):
    for i in range(steps):
        with cuptiprof.step(i):
            y = x * 2                          # one elementwise kernel
            y.add_(1)                          # one more
            h.copy_(y, non_blocking=True)      # DtoH into pinned memory, 4 MiB
            x.copy_(h, non_blocking=True)      # HtoD from pinned memory, 4 MiB
            torch.cuda.current_stream().synchronize()  # one stream sync


def test_known_work_in_known_steps(torch, tmp_path):
    p = tmp_path / "gpu.duckdb"
    x = torch.ones(N, device="cuda")
    h = torch.empty(N, pin_memory=True)
    _loop(torch, x, h, 2)  # allocator and kernels warm before profiling
    torch.cuda.synchronize()
    with cuptiprof.profile(p, warmup=1, steps=3, source="cupti"):
        _loop(torch, x, h, 6)
    assert q(p, "SELECT source, status FROM runs") == [("cupti", "complete")]
    assert q(p, "SELECT step, count(*) FROM kernels GROUP BY step ORDER BY step") == [
        (1, 2), (2, 2), (3, 2)]
    assert q(p, "SELECT step, copy_kind, src_kind, dst_kind, bytes FROM memcpys "
                "ORDER BY step, copy_kind") == [
        (s, d, a, b, 4 * N) for s in (1, 2, 3)
        for d, a, b in (("DtoH", "device", "pinned"), ("HtoD", "pinned", "device"))]
    syncs = q(p, "SELECT step, count(*) FROM syncs WHERE sync_type = 'stream_synchronize' "
                 "GROUP BY step ORDER BY step")
    assert [s for s, _ in syncs] == [1, 2, 3] and all(n >= 1 for _, n in syncs)
    # every recorded GPU row was launched inside a step range
    assert q(p, "SELECT count(*) FROM gpu_activities WHERE step IS NULL") == [(0,)]
    assert q(p, "SELECT count(*) FROM data_quality WHERE check_name IN "
                "('dropped_records', 'no_gpu', 'subscriber_conflict', 'cupti_error')") == [(0,)]
    name = torch.cuda.get_device_name(0)
    dev = q(p, "SELECT name, sm_count, memory_bytes, peak_memory_bw_gbps FROM devices "
               "WHERE device_id = 0")
    props = torch.cuda.get_device_properties(0)
    assert dev[0][0] == name and dev[0][1] == props.multi_processor_count
    assert dev[0][2] > 0 and dev[0][3] > 100
    # the launching API calls are recorded and joined
    assert q(p, "SELECT count(*) FROM kernels k LEFT JOIN api_calls a USING (correlation_id) "
                "WHERE a.name IS NULL") == [(0,)]


def test_graph_replay_kernels_are_per_node_and_tagged(torch, tmp_path):
    p = tmp_path / "graph.duckdb"
    x = torch.ones(N, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (x * 2).add_(1)  # warm up on the side stream before capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
        y.add_(1)
    torch.cuda.synchronize()
    with cuptiprof.profile(p, steps=2, source="cupti"):
        for i in range(2):
            with cuptiprof.step(i):
                g.replay()
    rows = q(p, "SELECT step, count(*), count(DISTINCT correlation_id), "
                "count(*) FILTER (WHERE graph_id IS NOT NULL) FROM kernels GROUP BY step "
                "ORDER BY step")
    assert rows == [(0, 2, 1, 2), (1, 2, 1, 2)]
    launches = q(p, "SELECT DISTINCT a.name FROM kernels k JOIN api_calls a USING (correlation_id)")
    assert launches and all("GraphLaunch" in n for (n,) in launches)


def test_collection_is_off_after_the_recorded_steps(torch, tmp_path):
    p = tmp_path / "off.duckdb"
    x = torch.ones(N, device="cuda")
    with cuptiprof.profile(p, warmup=0, steps=1, source="cupti"):
        for i in range(3):
            with cuptiprof.step(i):
                x.mul_(1.0)
        x.add_(1)  # after the recorded steps: not collected
    assert q(p, "SELECT step, count(*) FROM kernels GROUP BY step") == [(0, 1)]


def test_run_step_fn_in_the_main_script_on_cuda(torch, tmp_path):
    """`cuptiprof run --step-fn __main__:step` with the real collector: each call of a function
    the script defines is a step holding its kernels, and the profiled process does not load
    pandas (a stand-in on the path says when it is imported)."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pandas.py").write_text("import os\nopen(os.environ['PANDAS_MARK'], 'a').write('x')\n"
                                    "raise ImportError('stand-in')\n")
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import torch
        x = torch.ones(1 << 20, device="cuda")

        def step(x):
            y = x * 2
            y.add_(1)
            torch.cuda.synchronize()
            return y

        for i in range(5):
            x = step(x)
    """))
    mark = tmp_path / "pandas-imported"
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{fake}", PANDAS_MARK=str(mark))
    r = subprocess.run([sys.executable, "-m", "cuptiprof", "run", "-o", "s.duckdb", "--no-report",
                        "--step-fn", "__main__:step", "--warmup", "1", "--steps", "3", "--",
                        sys.executable, str(prog)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "s.duckdb"
    assert q(out, "SELECT step, count(*) FROM kernels GROUP BY step ORDER BY step") == [
        (1, 2), (2, 2), (3, 2)]
    assert not mark.exists(), "the profiled process imported pandas"
