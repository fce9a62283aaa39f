"""A dependency-free progress bar on stderr, for models large enough to wait for."""
import sys
import time


def progress_bar(items, label, enabled=None, width=30, total=None):
    """Yield the items, drawing a bar; enabled=None means 'only on a terminal'. With `total`
    (how many there are) the items are taken one at a time, not listed first."""
    if total is None:
        items = list(items)
        total = len(items)
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled or not total:
        yield from items
        return
    start, last = time.monotonic(), 0.0
    for i, item in enumerate(items, 1):
        yield item
        now = time.monotonic()
        if now - last > 0.1 or i == total:
            last = now
            done = int(width * i / total)
            sys.stderr.write(f"\r{label} [{'#' * done}{'.' * (width - done)}] {i}/{total} "
                             f"{now - start:5.1f}s")
            sys.stderr.flush()
    sys.stderr.write("\n")


def stage_printer(label):
    """A callback printing one line per finished stage on stderr: `label: stage 0.12 s`."""
    def show(stage, seconds):
        sys.stderr.write(f"{label}: {stage} {seconds:.2f} s\n")
        sys.stderr.flush()
    return show
