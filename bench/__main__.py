"""Run the benchmarks and write ``bench/RESULTS.md`` with the machine and the date.

``python -m bench`` runs every ``bench_*.py`` module's ``run() -> str`` (a Markdown section);
``python -m bench store http`` runs only the named ones and puts their sections in place of the
ones with the same heading in the existing file, each stamped with its own date and machine, so
that one benchmark can be measured again without losing the others. Figures are ratios against
the raw backend measured in the same run; absolute numbers vary from run to run.
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
    results = HERE / "RESULTS.md"
    if selected and results.exists():
        stamp = f"Measured alone (`python -m bench {' '.join(selected)}`) on {today}, on {_machine()}."
        results.write_text(_merged(results.read_text(), sections, stamp))
    else:
        header = (
            "# Benchmark results\n\n"
            f"Measured by `make bench` on {today}, on {_machine()}.\n"
            "Every figure is compared with the raw backend doing the same work in the same run; "
            "absolute numbers vary from run to run, ratios much less.\n"
        )
        if selected:
            header += f"\nThis file holds only: {', '.join(selected)}.\n"
        results.write_text(header + "\n" + "\n".join(sections))
    print(f"wrote {results}")


def _merged(old: str, sections: list[str], stamp: str) -> str:
    """``old`` with each new section in place of the one under the same ``## `` heading (new
    headings go at the end), the stamp under each new heading."""
    parts = old.split("\n## ")
    head, known = parts[0], ["## " + part.rstrip("\n") + "\n" for part in parts[1:]]
    for section in sections:
        heading, _, body = section.partition("\n")
        stamped = f"{heading}\n\n{stamp}\n{body}"
        index = next((i for i, part in enumerate(known) if part.partition("\n")[0] == heading), len(known))
        known[index : index + 1] = [stamped]
    return head.rstrip("\n") + "\n\n" + "\n".join(known)


if __name__ == "__main__":
    main(sys.argv[1:])
