#!/usr/bin/env bash
# Every GPU check of cuptiprof in one go, for one device call (docs/gpu-check.md):
#   versions -> pytest -m gpu -> parity with torch.profiler (+ fixtures) -> step attribution
#   with torch.compile / CUDA graphs -> steps on threads beside a CUDA graph capture ->
#   CUPTI questions -> overhead.
# Results land in $OUT (at most 8 files come back): log, summary.txt, versions.json,
# parity.json, attribution.json (with the threads stage's "threaded_steps"), questions.json,
# overhead.json, results.tar.gz (fixtures/,
# every DuckDB file and trace made here).
#
# Env: DRY_RUN=1 rehearses on a CPU-only machine (fake CUPTI, tiny sizes, GPU-only parts
# skipped with a line); STAGES="versions pytest parity attribution threads questions overhead" picks
# stages; GPU_CHECK_BUDGET_S (default 420) is the wall time the whole script may use: each
# stage gets min(its own cap, what is left) and a stage that cannot get 20 s is skipped.
set -uo pipefail
export PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DRY=${DRY_RUN:-0}
[ "${CUPTIPROF_FAKE_CUPTI:-0}" != 0 ] && DRY=1
if [ "$DRY" != 0 ]; then
  export DRY_RUN=1 CUPTIPROF_FAKE_CUPTI=1
  PY=${PY:-$( [ -x .venv/bin/python ] && echo "$ROOT/.venv/bin/python" || echo python3)}
  OUT=${OUT:-$ROOT/out/gpu-check}
else
  PY=${PY:-python3}
  OUT=${OUT:?OUT must name the folder whose files come back}
fi
mkdir -p "$OUT"
export OUT PY DRY
if [ -z "${GPU_CHECK_WORK:-}" ]; then
  GPU_CHECK_WORK=$(mktemp -d /tmp/gpucheck.XXXXXX)   # work files; only chosen ones go to $OUT
  export GPU_CHECK_WORK
fi
W=$GPU_CHECK_WORK
mkdir -p "$W/fixtures"
BUDGET=${GPU_CHECK_BUDGET_S:-420}
T0=$(date +%s)
STAGES=${STAGES:-versions pytest parity attribution threads questions overhead}
RESERVE=25                               # seconds kept for packing the results

note() { printf '\n=== %s [t=%ss] %s\n' "$(date -u +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) - RESERVE )); }
want() { [[ " $STAGES " == *" $1 "* ]]; }
# stage NAME CAP_S CMD...: run CMD under timeout min(CAP, time left); report its status
stage() {
  local name=$1 cap=$2; shift 2
  local t; t=$(left); [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 20 ]; then note "SKIP $name: only $(left) s of the budget left"; return 0; fi
  note "BEGIN $name (timeout ${t}s)"
  if declare -F "$1" >/dev/null; then
    timeout -k 5 "$t" bash "$ROOT/scripts/gpu-check.sh" __run "$1"
  else
    timeout -k 5 "$t" "$@"
  fi
  local rc=$?
  [ $rc -eq 124 ] && note "TIMEOUT $name after ${t}s" || note "END $name rc=$rc"
  return 0
}
pack() {
  note "packing results"
  cp -f "$OUT"/*.json "$OUT"/summary.txt "$W"/ 2>/dev/null   # the tarball holds everything
  ( cd "$W" && tar czf "$OUT/results.tar.gz" --exclude='*.parts' . ) 2>/dev/null
  if [ "$(stat -c %s "$OUT/results.tar.gz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
    ( cd "$W" && tar czf "$OUT/results.tar.gz" --exclude='tp-*' fixtures ./*.json ./*.txt ) 2>/dev/null
  fi
  ls -la "$OUT"
  note "done in $(( $(date +%s) - T0 )) s"
}

# -- stage bodies (run by `stage` in a child bash, under its own timeout) --------------------
if [ "$DRY" != 0 ]; then PSIZE=(--size tiny --warmup 1 --steps 4); PSKIP=1; PREC=3
else PSIZE=(--size ${PARITY_SIZE:-medium} --warmup 2 --steps 6); PSKIP=1; PREC=5; fi
EX=("${PSIZE[@]}" --seed 0)
parity_runs() {
  for r in 1 2; do   # A B A B: each tool twice, for its own spread
    $PY -m cuptiprof run -o "$W/cp-$r.duckdb" --warmup $PSKIP --steps $PREC --no-report -- \
      $PY examples/denoise.py "${EX[@]}" || echo "parity: cuptiprof run $r failed"
    $PY scripts/torch_profile_example.py --trace "$W/tp-$r.json" --skip $PSKIP --record $PREC -- "${EX[@]}" \
      && $PY -m cuptiprof import "$W/tp-$r.json" -o "$W/tp-$r.duckdb" --no-progress \
      || echo "parity: torch.profiler run $r failed"
  done
  $PY scripts/parity.py --cuptiprof "$W"/cp-*.duckdb --torch "$W"/tp-*.duckdb \
    --json "$OUT/parity.json" | tee "$W/parity.txt"
  [ "$DRY" != 0 ] && echo "parity: DRY RUN: fake CUPTI against CPU-only torch.profiler; differences are expected"
  # fixtures: the first run of each tool, gzipped (DuckDB files are mostly empty blocks)
  for f in cp-1 tp-1; do [ -f "$W/$f.duckdb" ] && gzip -c "$W/$f.duckdb" > "$W/fixtures/eager-$f.duckdb.gz"; done
  ls -la "$W/fixtures"; true
}
attribution_runs() {
  local sz=(--size tiny --seed 0)
  $PY -m cuptiprof run -o "$W/compile-default.duckdb" --warmup 1 --steps 3 --no-report -- \
    $PY examples/denoise.py "${sz[@]}" --compile --warmup 2 --steps 4 || echo "attribution: --compile run failed"
  if [ "$DRY" != 0 ]; then
    echo "attribution: SKIP reduce-overhead (CUDA graphs need a GPU)"
  else
    $PY -m cuptiprof run -o "$W/compile-graphs.duckdb" --warmup 1 --steps 3 --no-report -- \
      $PY scripts/denoise_mode.py --mode reduce-overhead -- "${sz[@]}" --warmup 3 --steps 4 \
      || echo "attribution: reduce-overhead run failed"
  fi
  files=("$W/cp-1.duckdb" "$W/compile-default.duckdb")
  [ "$DRY" != 0 ] || files+=("$W/compile-graphs.duckdb")
  $PY scripts/attribution.py "${files[@]}" --json "$OUT/attribution.json" | tee "$W/attribution.txt"
  for f in compile-default compile-graphs; do
    [ -f "$W/$f.duckdb" ] && gzip -c "$W/$f.duckdb" > "$W/fixtures/$f.duckdb.gz"
  done
  true
}
threads_runs() {   # steps on two threads, a CUDA graph captured on a third (docs/gpu-check.md)
  local n=8
  [ "$DRY" != 0 ] && echo "threads: SKIP (dry run: CUDA graph capture, streams and NVTX markers need a GPU; the threads and ranges run on the CPU)"
  $PY scripts/threaded_steps.py scenario --mode profile --out "$W/threads-profile.duckdb" \
    --facts "$W/threads-profile.json" --steps $n --watchdog-s 60 || echo "threads: profile() run failed"
  CUPTIPROF_FLUSH_EVERY_S=0 $PY -m cuptiprof run -o "$W/threads-run.duckdb" --warmup 1 --steps $n --no-report -- \
    $PY scripts/threaded_steps.py scenario --mode run --facts "$W/threads-run.json" --steps $n \
    --watchdog-s 60 || echo "threads: cuptiprof run failed"
  $PY scripts/threaded_steps.py check --work "$W" --steps $n --json "$OUT/attribution.json" | tee "$W/threads.txt"
  for f in threads-profile threads-run; do
    [ -f "$W/$f.duckdb" ] && gzip -c "$W/$f.duckdb" > "$W/fixtures/$f.duckdb.gz"
  done
  true
}
if [ "${1:-}" = __run ]; then "$2"; exit $?; fi

exec > >(tee -a "$OUT/log") 2>&1
trap pack EXIT
if [ "$DRY" != 0 ]; then
  note "DRY RUN on $(hostname): fake CUPTI, CPU torch, tiny sizes; GPU-only parts say SKIP"
else
  note "installing the carried wheels"
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || note "WARNING: wheel install failed"
  else
    note "WARNING: no .whl/ folder was carried (carry [\".whl\"]); cupti-python/duckdb may be missing"
  fi
  export PYTHONPATH=/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

# -- versions ------------------------------------------------------------------------------
if want versions; then
  note "versions"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi: not available"
  $PY - > "$OUT/versions.json" <<'PYEOF'
import json, platform, sys
from importlib import metadata
v = {"python": sys.version.split()[0], "platform": platform.platform()}
for d in ("torch", "cupti-python", "nvidia-cuda-cupti", "cuda-bindings", "cuda-pathfinder",
          "duckdb", "nvtx", "msgspec", "cxxfilt", "pyarrow", "numpy"):
    try: v[d] = metadata.version(d)
    except Exception: v[d] = None
try:
    import torch
    v["torch_cuda"] = torch.version.cuda
    v["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
except Exception as e: v["torch_error"] = str(e)
try:
    from cuda import pathfinder
    v["libcupti"] = pathfinder.load_nvidia_dynamic_lib("cupti").abs_path
except Exception as e: v["libcupti"] = f"not found: {e}"
try:
    from cuptiprof.collect import device_info, libcuda
    v["driver_api"] = libcuda.driver_version()
    v["cupti_version_row"] = device_info.cupti_version()
except Exception as e: v["cuptiprof_error"] = str(e)
try:
    import cuptiprof; v["cuptiprof"] = cuptiprof.__version__
except Exception as e: v["cuptiprof_error"] = str(e)
print(json.dumps(v, indent=1))
PYEOF
  cat "$OUT/versions.json"
  $PY -m cuptiprof doctor 2>&1 | tail -20
fi

# -- a: the GPU tests ----------------------------------------------------------------------
if want pytest; then
  if [ "$DRY" != 0 ]; then
    stage pytest 120 $PY -m pytest -q -p no:cacheprovider tests/gpu -m gpu -rs
  else
    stage pytest 150 $PY -m pytest -q -p no:cacheprovider tests/gpu -m gpu -rs --timeout 120
  fi
fi

# -- b: parity with torch.profiler ---------------------------------------------------------
want parity && stage parity 150 parity_runs

# -- d: step attribution with torch.compile and CUDA graphs --------------------------------
want attribution && stage attribution 170 attribution_runs

# -- f: steps on worker threads beside a CUDA graph capture (into attribution.json) ---------
want threads && stage threads 90 threads_runs

# -- e: the open CUPTI questions -----------------------------------------------------------
want questions && stage questions 110 $PY scripts/cupti_questions.py --json "$OUT/questions.json" \
  --parity-file "$W/cp-1.duckdb" --watchdog-s 100

# -- c: overhead (last: it uses what is left of the budget) --------------------------------
if want overhead; then
  t=$(( $(left) - 15 ))
  if [ "$DRY" != 0 ]; then
    stage overhead 200 $PY scripts/overhead.py --json "$OUT/overhead.json" --repeats 1 --skip 1 --budget-s 60
  else
    stage overhead 260 $PY scripts/overhead.py --json "$OUT/overhead.json" --repeats ${OVERHEAD_REPEATS:-3} \
      --budget-s $(( t > 60 ? t - 60 : 10 )) --run-timeout-s 90
  fi
fi

# -- summary -------------------------------------------------------------------------------
{
  echo "cuptiprof GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ) dry_run=$DRY"
  [ -f "$OUT/versions.json" ] && cat "$OUT/versions.json"
  for f in parity.txt attribution.txt threads.txt; do [ -f "$W/$f" ] && { echo; echo "## $f"; cat "$W/$f"; }; done
  if [ -f "$OUT/overhead.json" ]; then
    echo; echo "## overhead"
    $PY -c "import json,sys; sys.path.insert(0,'scripts'); import overhead; print(overhead.table(json.load(open('$OUT/overhead.json'))['summary']), end='')"
  fi
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
