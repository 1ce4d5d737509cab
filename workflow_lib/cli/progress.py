"""Progress lines for long jobs: done, rate and ETA at a steady interval."""

import logging
import time


class Progress:
    """Log `done` of `total` (when known) every `interval` seconds, with rate and ETA."""

    def __init__(self, log: logging.Logger, what: str, interval: float, total: int | None = None, done_before: int = 0):
        """`done_before`: counted as done but not by this process (a resumed job); not in the rate."""
        self.log, self.what, self.total, self.interval, self.done_before = log, what, total, interval, done_before
        self.start = self.last = time.monotonic()

    def due(self) -> bool:
        """True once per interval: time to log a line."""
        now = time.monotonic()
        if now - self.last < self.interval:
            return False
        self.last = now
        return True

    def update(self, done: float, extra: str = "", fraction: float | None = None) -> None:
        if self.due():
            self.log.info(self.line(done, extra, fraction))

    def line(self, done: float, extra: str = "", fraction: float | None = None) -> str:
        """`done` may be fractional (epochs); `fraction` (of the input read, when the total count
        is unknown) gives the ETA."""
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = (done - self.done_before) / elapsed
        count = f"{done:,.2f}" if isinstance(done, float) else f"{done:,}"
        figure = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"  # three significant digits below 100: 0.0123 epochs/s
        text = f"{count} {self.what}" + (f" of {self.total:,}" if self.total else "") + f", {figure}/s"
        if self.total:
            fraction = done / self.total
            eta = (self.total - done) / rate if rate > 0 else None
        else:
            eta = elapsed * (1 - fraction) / fraction if fraction else None
        if fraction is not None and 0 < fraction < 1 and eta is not None:
            text += f", {fraction:.0%} done, ETA {eta:,.0f} s"
        return text + (f", {extra}" if extra else "")


def setup_logging() -> logging.Logger:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    return logging.getLogger("workflow")
