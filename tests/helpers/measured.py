"""Which test modules have the processes they start measured by coverage.

Coverage follows the processes a test starts (``patch = ["subprocess"]`` in pyproject.toml puts
``COVERAGE_PROCESS_CONFIG`` in the environment) at about 0.7 s of CPU per Python process here,
most of it while torch imports (a 20-step tinycnn run of the trainer: 4.5/5.1 and 4.0/4.7 s of
CPU without and with it, interleaved). Most of those processes run lines that the tests in this
process, or another module's processes, run too. ``tests/conftest.py`` therefore measures the
processes of the modules below only; the others start theirs unmeasured.

Chosen by ``python scripts/coverage_of_processes.py`` (2026-12-06 at b3aa2c0, every trainer
process now leaving through ``os._exit`` with coverage saving first): the modules whose processes
add the most lines that nothing else reaches, greedily, until each adds fewer than 9, less
``test_sweep_vary`` (34 processes for 19 lines). ``test_why_faster`` left the list that day: its
runs' lines were the DDP ranks', which other modules' ranks now reach too, since a rank's coverage
is saved at ``os._exit``. They are 10 of 40 modules, and their processes are 269 of the 519 that
the process tiers start. Together they reach all but 58 of the 17,906 lines that measuring every
process reaches; each package stays within 2.0 points of its coverage with every process measured
(``lab/cli`` 91.7% against 93.7%, ``lab/engine/supervise`` 93.5% against 94.2%). A new module
whose processes alone reach some code belongs here; the floors in
``scripts/coverage_by_package.py`` say when one is missing.
"""

MEASURED_PROCESSES = frozenset(
    {
        "test_health_runs",
        "test_slurm_cluster",
        "test_queue",
        "test_noise_floor",
        "test_events_cli",
        "test_linkcheck",
        "test_engine_cli",
        "test_engine_runs",
        "test_script_config",
        "test_password",
    }
)
