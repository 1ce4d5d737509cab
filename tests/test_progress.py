"""Progress lines of long jobs: at a steady interval, never late, with done, rate and ETA."""

import hashlib
import logging
import re
import time

from workflow_lib.cli.progress import Progress


class Timed(logging.Handler):
    """Keeps each message with the monotonic time it was logged at."""

    def __init__(self):
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record):
        self.lines.append((time.monotonic(), record.getMessage()))


def run(items: int, interval: float) -> tuple[Progress, list[tuple[float, bool, float]], Timed]:
    """Hash 256 KiB per item, checking for a progress line after each: each check's time (just
    before it), whether it logged a line, and the time the progress counts the last line from."""
    handler, log = Timed(), logging.getLogger(f"test_progress_{interval}")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    progress = Progress(log, "blocks", total=items, interval=interval)
    block, checks = bytes(range(256)) * 1024, []
    try:
        for done in range(1, items + 1):
            hashlib.sha256(block).digest()
            before, lines = time.monotonic(), len(handler.lines)
            progress.update(done, f"{done * 256} KiB hashed")
            checks.append((before, len(handler.lines) > lines, progress.last))
    finally:
        log.removeHandler(handler)
    return progress, checks, handler


def test_lines_at_a_steady_interval_never_late():
    interval = 0.01
    progress, checks, handler = run(600, interval)
    times = iter(t for t, _ in handler.lines)
    assert len(handler.lines) >= 3, "the work takes several intervals"
    previous, counted_from = progress.start, progress.start
    for before, logged, last in checks:
        # never late: a check one interval after the previous line logs one
        assert logged or before < previous + interval
        if logged:
            # never more often than the interval (as the progress clock saw it: a loaded machine
            # may delay a line on its way to the handler)
            assert last - counted_from >= interval
            previous, counted_from = next(times), last
    done = []
    for _, line in handler.lines:
        # a line that falls on the last block (a loaded machine) has no ETA left to give
        match = re.fullmatch(r"([\d,]+) blocks of 600, ([\d,.]+)/s(, \d+% done, ETA [\d,]+ s)?, \d+ KiB hashed", line)
        assert match and (match[3] or match[1] == "600"), line
        done.append(int(match[1].replace(",", "")))
        assert float(match[2].replace(",", "")) > 0
    assert done == sorted(done)


def test_no_line_before_the_interval():
    _, checks, handler = run(20, 60.0)
    assert handler.lines == [] and not any(logged for _, logged, _ in checks)


def test_fractional_counts_small_rates_and_eta_from_the_input_read():
    started = time.monotonic()
    epochs = Progress(logging.getLogger("test"), "epochs", total=200, interval=1)
    time.sleep(0.05)
    line = epochs.line(0.25, "validation loss 0.6931")
    elapsed = time.monotonic() - started
    # 0.25 epochs in 0.05 s or a little more: a few epochs/s, three significant digits, not 0
    rate = re.fullmatch(r"0\.25 epochs of 200, ([\d.]+)/s, 0% done, ETA [\d,]+ s, validation loss 0\.6931", line)[1]
    assert 0.25 / elapsed * 0.99 <= float(rate) <= 5.0

    started = time.monotonic()
    records = Progress(logging.getLogger("test"), "records", interval=10)  # total unknown: the share of the input read
    time.sleep(0.05)
    eta = float(re.search(r"25% done, ETA ([\d,]+) s", records.line(1000, fraction=0.25))[1])
    assert 0.15 - 0.5 <= eta <= 3 * (time.monotonic() - started) + 0.5  # three times the first quarter's time
    finished = records.line(4000, fraction=1.0)
    assert finished.startswith("4,000 records, ") and "ETA" not in finished
