"""The run as a picture: throughput and commit latency over time, crashes marked."""

from __future__ import annotations

from pathlib import Path

from .watch import Event, Sample

__all__ = ["plot_run"]


def _rates(points: list[tuple[float, int]], window: float = 2.0) -> list[tuple[float, float]]:
    """Lines per second over a sliding window of ``window`` seconds, from cumulative
    counts."""
    rates = []
    start = 0
    for t, count in points:
        while points[start][0] < t - window:
            start += 1
        t0, c0 = points[start]
        if t > t0:
            rates.append((t, (count - c0) / (t - t0)))
    return rates


def plot_run(path: Path, samples: list[Sample], latencies: list[tuple[float, float]],
             events: list[Event], title: str) -> Path:
    """Write a PNG to ``path``: lines applied and committed per second (top) and each
    batch's commit latency (bottom), with a labelled vertical line at each event."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    applied = _rates([(s.t, s.applied) for s in samples if s.applied is not None])
    committed = _rates([(s.t, s.committed) for s in samples])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    try:
        if applied:
            top.plot(*zip(*applied, strict=True), label="lines applied by the coordinator /s")
        if committed:
            top.plot(*zip(*committed, strict=True), label="lines committed to the sink /s")
        top.set_ylabel("lines per second")
        top.legend(loc="lower right")
        top.set_title(title)
        if latencies:
            bottom.plot(*zip(*latencies, strict=True), "o-", color="tab:green",
                        label="commit latency of each batch")
            bottom.legend(loc="upper right")
        bottom.set_ylabel("seconds")
        bottom.set_xlabel("seconds since the start")
        for axis in (top, bottom):
            axis.grid(alpha=0.3)
            for event in events:
                axis.axvline(event.t, color="tab:red", linestyle="--", linewidth=1)
        for i, event in enumerate(events):
            # Staggered heights: crashes and recoveries often come seconds apart.
            top.annotate(event.label, (event.t, 0.97 - 0.09 * (i % 4)),
                         xycoords=("data", "axes fraction"), va="top", ha="left",
                         fontsize=8, color="tab:red",
                         bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path
