"""The command-line options of where per-rank work runs and what is stored (analyze and diff share them)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .errors import UsageError

if TYPE_CHECKING:  # the executors (concurrent.futures, multiprocessing) load when a command runs, not for --help
    from .executors import RunSettings

STORE_HELP = ("store of parsed tables (Parquet) to reuse; default .traceview/ beside the input when writable, "
              "else $XDG_CACHE_HOME/traceview (TRACEVIEW_CACHE_DIR overrides)")
NO_STORE_HELP = "write and read no store (parse every trace)"
JOBS_HELP = "processes parsing ranks at once (default: the number of cores; 1 = in this process)"
DASK_HELP = "address of a Dask distributed scheduler running the per-rank work (or TRACEVIEW_DASK_SCHEDULER)"
DASK_FILE_HELP = "Dask scheduler file (as written by `dask scheduler --scheduler-file`)"
SKIP_HELP = "analyze the rest when some ranks cannot be read (every format lists what was skipped and why)"
PROGRESS_HELP = "show progress on stderr even when it is not a terminal"


def settings(paths: list[Path], store: Optional[Path], no_store: bool, jobs: Optional[int], dask: Optional[str],
             dask_scheduler_file: Optional[Path], skip_bad_ranks: bool, progress: bool) -> RunSettings:
    if store is not None and no_store:
        raise UsageError(None, "--store and --no-store exclude each other")
    if jobs is not None and jobs < 1:
        raise UsageError(None, "--jobs must be 1 or more")
    if dask and dask_scheduler_file:
        raise UsageError(None, "--dask and --dask-scheduler-file exclude each other")
    from .executors import RunSettings, cores
    from .store import default_dir
    root = None if no_store else (store if store is not None else default_dir(list(paths)))
    return RunSettings(store=root, jobs=jobs if jobs is not None else cores(), dask=dask,
                       dask_scheduler_file=str(dask_scheduler_file) if dask_scheduler_file else None,
                       skip_bad_ranks=skip_bad_ranks, progress=progress, store_explicit=store is not None)
