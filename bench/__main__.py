"""Run the benchmarks and write ``bench/RESULTS.md`` with the machine and the date.

``python -m bench`` runs every ``bench_*.py`` module's ``run() -> str`` (a Markdown section);
``python -m bench store http`` runs only the named ones. Figures are ratios against the raw
backend measured in the same run; absolute numbers vary from run to run.
"""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _machine() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    cpu = names[0] if names else platform.processor() or "unknown CPU"
    system = f"{platform.system()} {platform.machine()}"
    return f"{system}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def _names(selected: list[str]) -> list[str]:
    found = sorted(path.stem.removeprefix("bench_") for path in HERE.glob("bench_*.py"))
    return [name for name in found if not selected or name in selected]


def main(selected: list[str]) -> None:
    sections = []
    for name in _names(selected):
        print(f"running bench_{name} ...", flush=True)
        started = time.perf_counter()
        try:
            section = importlib.import_module(f"bench.bench_{name}").run()
        except Exception:
            section = f"## {name}\n\nFailed:\n\n```\n{traceback.format_exc()}```\n"
        print(section, f"\n({time.perf_counter() - started:.0f} s)\n", flush=True)
        sections.append(section.strip() + "\n")
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        "# Benchmark results\n\n"
        f"Measured by `make bench` on {today}, on {_machine()}.\n"
        "Every figure is compared with the raw backend doing the same work in the same run; "
        "absolute numbers vary from run to run, ratios much less.\n"
    )
    if selected:
        header += f"\nThis file holds only: {', '.join(selected)}.\n"
    (HERE / "RESULTS.md").write_text(header + "\n" + "\n".join(sections))
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main(sys.argv[1:])
