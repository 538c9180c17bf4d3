"""The Python benchmarks' one timer: median milliseconds of repeated calls
(machines here are shared and noisy; every figure that matters is a ratio
of two medians taken in one run)."""
import time


def median_ms(fn, reps, warm=3):
    """Median ms of |reps| calls of fn() after |warm| unmeasured ones."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return 1e3 * ts[len(ts) // 2]
