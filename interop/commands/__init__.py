"""What the device-side subcommands of ``hybrid`` do (the command line itself is :mod:`hybrid_cli`).

* :mod:`interop.commands.demo` (with :mod:`~interop.commands.demo_compile`): ``hybrid demo``;
* :mod:`interop.commands.bench_ops`: ``hybrid bench ops`` (modelled op sweeps across kinds);
* :mod:`interop.commands.collective_tools`: ``hybrid bench collectives`` and
  ``hybrid check collectives`` (nccl-tests on the rack).
"""
