"""keepstate benchmarks: ``make bench`` runs every ``bench/bench_*.py`` and writes RESULTS.md."""
