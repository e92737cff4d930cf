"""Reliability count: hostile inputs through `cuptiprof import`, damaged and foreign files
through every reading command, and the fault tests on real processes; how many ended cleanly.

"Cleanly" means: one error line on stderr and the documented exit status (or a clean success
when the input is valid), no traceback, no hang, no partial output file, and for the fault tests
every batch committed before the fault still in the file.

    python bench/faults.py [--huge-mb 128] [--no-pytest]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import hostile_corpus as H  # noqa: E402


def hostile(work: Path, huge_mb: int) -> dict:
    cases = H.generate(work / "hostile", huge_mb=huge_mb)
    t0 = time.perf_counter()
    res = H.import_cases(cases, work / "hostile-out", timeout=300)
    bad = {o.case.name: o.why for o in res if not o.clean}
    huge = next(o for o in res if o.case.name == "huge_array_of_nothing")
    return {"tried": len(res), "clean": len(res) - len(bad), "failed": bad,
            "seconds": round(time.perf_counter() - t0, 1),
            "huge_mb": round(huge.case.path.stat().st_size / 2**20), "huge_s": round(huge.seconds, 1)}


def fault_tests() -> dict:
    """Run the fault, fuzz and output-safety tests and read their reliability lines."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_faults.py", "tests/test_fuzz.py", "tests/test_output_safety.py"],
                       cwd=ROOT, capture_output=True, text=True)
    lines = [ln[ln.index("reliability:"):] for ln in r.stdout.splitlines() if "reliability:" in ln]
    tried = clean = 0
    for ln in lines:
        m = re.search(r"reliability: (\d+) .*?, (\d+) ended cleanly", ln)
        if m:
            tried += int(m.group(1))
            clean += int(m.group(2))
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]
    return {"tried": tried, "clean": clean, "lines": lines, "pytest": summary,
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--huge-mb", type=int, default=128, help="size of the huge empty-events array")
    ap.add_argument("--no-pytest", action="store_true", help="only the hostile corpus")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cuptiprof-faults-"))
    try:
        out = {"date": _dt.date.today().isoformat(), "machine": f"{platform.node()}, "
               f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
               "hostile": hostile(work, args.huge_mb)}
        if not args.no_pytest:
            out["tests"] = fault_tests()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    h = out["hostile"]
    print(f"{out['date']}  {out['machine']}")
    print(f"hostile inputs through `cuptiprof import`: {h['clean']}/{h['tried']} ended cleanly "
          f"({h['seconds']} s; the {h['huge_mb']} MB array of empty events took {h['huge_s']} s)")
    for name, why in h["failed"].items():
        print(f"  NOT CLEAN {name}: {why}")
    if "tests" in out:
        t = out["tests"]
        print(f"fault, fuzz and output-safety tests: {t['clean']}/{t['tried']} cases ended cleanly "
              f"({t['pytest']}, {t['seconds']} s)")
        for ln in t["lines"]:
            print("  " + ln)
    total = h["tried"] + out.get("tests", {}).get("tried", 0)
    clean = h["clean"] + out.get("tests", {}).get("clean", 0)
    print(f"total: {clean}/{total} ended cleanly with nothing lost")
    return 0 if clean == total else 1


if __name__ == "__main__":
    sys.exit(main())
