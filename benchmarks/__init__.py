"""Benchmarks of hybrid-interop. Run all with ``python -m benchmarks`` (or
``./bootstrap.sh bench``); one with ``python -m benchmarks device``. Each writes
its section of benchmarks/RESULTS.md with the command, machine and date."""
