"""Time and peak resident memory of `prepare_data` (what `mhatrain train` runs before its first update), with
the resident set sampled through each stage (docs/performance.md, "Data preparation").

usage: python scripts/prepare_memory.py CHECKOUT CONFIG RUN_DIR CACHE_DIR [section.key=value ...]
CHECKOUT is the source tree whose mhatrain is measured (put first on sys.path), so two versions can be
compared with one script; CONFIG a config file; the overrides are --set values (e.g. data.local_dir=DIR).
"""

import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1])
try:  # the layout by role (prepare_data in training/prepare.py, before that in training/loop.py); then flat
    from mhatrain.core.config import load_config

    try:
        from mhatrain.training import prepare as preparing  # the module whose names prepare_data calls
    except ImportError:
        from mhatrain.training import loop as preparing
    prepare_data = preparing.prepare_data
except ImportError:
    from mhatrain.config import load_config
    from mhatrain.train import prepare_data

    from mhatrain import data as preparing


def resident_mib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def main(config_file: str, run_dir: str, cache_dir: str, overrides: list[str]) -> None:
    config = load_config(config_file, [f"data.cache_dir={cache_dir}", *overrides])
    stage, peaks, started = ["start"], {}, time.perf_counter()

    def sample() -> None:
        while True:
            peaks[stage[0]] = max(peaks.get(stage[0], 0), resident_mib())
            time.sleep(0.2)

    def log(message: str) -> None:
        print(
            f"{time.perf_counter() - started:7.1f}s  resident {resident_mib():6d} MiB  "
            f"peak since last line {peaks.get(stage[0], 0):6d} MiB  | {message}",
            flush=True,
        )
        stage[0] = message

    def staged(name, function):
        def wrapper(*args, **kwargs):
            log(f"{name} begins")
            result = function(*args, **kwargs)
            log(f"{name} done")
            return result

        return wrapper

    for name in ("load_split", "encode_corpus"):
        setattr(preparing, name, staged(name, getattr(preparing, name)))
    threading.Thread(target=sample, daemon=True).start()
    prepared = prepare_data(config, Path(run_dir), log=log)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"prepare_data {time.perf_counter() - started:.2f} s, peak {peak} MiB, {len(prepared.train)} training pairs")


if __name__ == "__main__":
    main(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
