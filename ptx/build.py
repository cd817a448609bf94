"""Build every ptx/*.cu into the committed ptx/*.ptx, or check that the committed PTX is fresh.

    python ptx/build.py            rebuild ptx/*.ptx in place
    python ptx/build.py --check    rebuild twice into temp dirs; fail if the two builds differ (nvcc output must
                                   be reproducible) or a committed .ptx differs or is missing, then run
                                   `ptxas -arch=sm_90a -v` on each (fails on errors, reports spills)

The .ptx files are generated: never edit them by hand (DESIGN.md, "Kernels"). nvcc output is deterministic
for a given nvcc release as long as the code leaves it no free choice: once, after a kernel change, nvcc 13.0
vectorized a shared-memory read one way or the other from build to build (fixed by writing the 16-byte load out),
hence the double build. CI must use the same release (13.0) as the committed files (header line "Cuda compilation
tools, release 13.0").
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PTX_DIR = Path(__file__).resolve().parent
NVCC_FLAGS = ["-ptx", "-arch=sm_90a", "-O3", "-std=c++17"]
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def find_tool(name: str) -> str | None:
    """The CUDA tool `name` on PATH or in /usr/local/cuda*/bin and /usr/local/bin."""
    found = shutil.which(name)
    if found:
        return found
    for cand in [Path("/usr/local/bin"), *sorted(Path("/usr/local").glob("cuda*/bin"))]:
        if (cand / name).exists():
            return str(cand / name)
    return None


def sources() -> list[Path]:
    return sorted(PTX_DIR.glob("*.cu"))


def _compile(nvcc: str, src: Path, out: Path) -> Path:
    subprocess.run(
        [nvcc, *NVCC_FLAGS, "-I", str(PTX_DIR), str(src), "-o", str(out)],
        check=True,
        capture_output=True,
        text=True,
        cwd=PTX_DIR,
    )
    return out


def build_into(out_dir: Path, nvcc: str, *more: Path) -> list[Path]:
    """Compile each .cu to out_dir/<stem>.ptx (and to each of `more`, the same way), one nvcc per core. Returns
    the out_dir files. Raises CalledProcessError with nvcc's message on failure."""
    jobs = [(src, d / (src.stem + ".ptx")) for d in (out_dir, *more) for src in sources()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        done = list(pool.map(lambda job: _compile(nvcc, *job), jobs))
    return [p for p in done if p.parent == out_dir]


def ptxas_report(ptx: Path, ptxas: str) -> tuple[int, list[str]]:
    """Run `ptxas -arch=sm_90a -v`; return (total spill bytes, lines naming kernels that spill)."""
    proc = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(ptx), "-o", "/dev/null"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed on {ptx.name}:\n{proc.stderr[-4000:]}")
    total, spilling, current = 0, [], ""
    for line in proc.stderr.splitlines():
        if "Compiling entry function" in line:
            current = line.split("'")[1]
        m = _SPILL.search(line)
        if m and (int(m.group(1)) or int(m.group(2))):
            total += int(m.group(1)) + int(m.group(2))
            spilling.append(f"{ptx.name}:{current}: {m.group(0)}")
    return total, spilling


def check(nvcc: str, ptxas: str) -> list[str]:
    """Return a list of problems (empty when the committed PTX is fresh and assembles)."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as again:
        for fresh in build_into(Path(tmp), nvcc, Path(again)):
            committed = PTX_DIR / fresh.name
            if fresh.read_bytes() != (Path(again) / fresh.name).read_bytes():
                why = "nvcc output is not reproducible: leave the compiler no free choice, e.g. write vector loads out"
                problems.append(f"{fresh.name}: two builds of the same {fresh.stem}.cu differ ({why})")
            elif not committed.exists():
                problems.append(f"{committed.name} is missing: run `python ptx/build.py`")
            elif committed.read_bytes() != fresh.read_bytes():
                problems.append(f"{committed.name} is stale (differs from its .cu): run `python ptx/build.py`")
    stale = {p.stem for p in PTX_DIR.glob("*.ptx")} - {s.stem for s in sources()}
    problems += [f"{s}.ptx has no {s}.cu" for s in sorted(stale)]
    for ptx in sorted(PTX_DIR.glob("*.ptx")):
        try:
            spill, lines = ptxas_report(ptx, ptxas)
        except RuntimeError as exc:
            problems.append(str(exc))
            continue
        print(f"ptxas ok: {ptx.name} ({spill} spill bytes)")
        for line in lines:
            print(f"  spills: {line}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the committed PTX instead of rebuilding it")
    args = parser.parse_args(argv)
    nvcc, ptxas = find_tool("nvcc"), find_tool("ptxas")
    if nvcc is None or ptxas is None:
        print("nvcc/ptxas not found", file=sys.stderr)
        return 2
    if args.check:
        problems = check(nvcc, ptxas)
        for p in problems:
            print(f"FAIL: {p}", file=sys.stderr)
        return 1 if problems else 0
    for out in build_into(PTX_DIR, nvcc):
        print(f"built {out.relative_to(PTX_DIR.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
