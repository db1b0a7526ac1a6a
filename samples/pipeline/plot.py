"""The run as a picture: throughput and commit latency over time, crashes and recoveries
marked, the times the coordinator was down shaded and left undrawn."""

from __future__ import annotations

from pathlib import Path

from .watch import Event, Sample

__all__ = ["NO_PLOT", "outages", "plot_or_say", "plot_run", "with_gaps"]

# matplotlib is the ``demo`` extra's only package: without it the run is the same, unplotted.
NO_PLOT = "no plot: matplotlib is not installed (pip install 'ambrosia-py[demo]')"


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


def outages(events: list[Event], end: float) -> list[tuple[float, float]]:
    """The spans the coordinator was not running: from each "down" event to the next
    "up" one (or ``end``)."""
    spans = []
    began: float | None = None
    for event in events:
        if event.kind == "down" and began is None:
            began = event.t
        elif event.kind == "up" and began is not None:
            spans.append((began, event.t))
            began = None
    if began is not None:
        spans.append((began, end))
    return spans


def with_gaps(points: list[tuple[float, float]],
              spans: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The points as x and y for a line drawn nowhere across ``spans``: a point inside
    one is left out, and NaN breaks the line wherever it would cross one (a rate sampled
    on both sides of an outage would otherwise be drawn straight through it)."""
    xs: list[float] = []
    ys: list[float] = []
    last: float | None = None
    for t, y in points:
        if any(a <= t <= b for a, b in spans):
            continue
        if last is not None and any(last < b and t > a for a, b in spans):
            xs.append((last + t) / 2)
            ys.append(float("nan"))
        xs.append(t)
        ys.append(y)
        last = t
    return xs, ys


def plot_run(path: Path, samples: list[Sample], latencies: list[tuple[float, float]],
             events: list[Event], title: str) -> Path:
    """Write a PNG to ``path``: lines applied and committed per second (top) and each
    batch's commit latency (bottom). The times the coordinator was down (a crash or the
    upgrade, to its recovery) are shaded and the rates are not drawn through them; each
    event is a labelled vertical line."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    end = max((s.t for s in samples), default=0.0)
    spans = outages(events, end)
    applied = _rates([(s.t, s.applied) for s in samples if s.applied is not None])
    committed = _rates([(s.t, s.committed) for s in samples])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    try:
        if applied:
            top.plot(*with_gaps(applied, spans), label="lines applied by the coordinator /s")
        if committed:
            top.plot(*with_gaps(committed, spans), label="lines committed to the sink /s")
        top.set_ylabel("lines per second")
        # Above the plot, not over its last seconds.
        top.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=8,
                   frameon=False)
        fig.suptitle(title)
        if latencies:
            bottom.plot(*with_gaps(latencies, spans), "o-", color="tab:green",
                        label="commit latency of each batch")
            bottom.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=8,
                          frameon=False)
        bottom.set_ylabel("seconds")
        bottom.set_xlabel("seconds since the start")
        for axis in (top, bottom):
            axis.grid(alpha=0.3)
            for a, b in spans:
                axis.axvspan(a, b, color="tab:red", alpha=0.12, linewidth=0)
            for event in events:
                style = ":" if event.kind == "up" else "--"
                color = "tab:green" if event.kind == "up" else "tab:red"
                axis.axvline(event.t, color=color, linestyle=style, linewidth=1)
        for i, event in enumerate(events):
            # Staggered heights: crashes and recoveries often come seconds apart.
            top.annotate(event.label, (event.t, 0.97 - 0.09 * (i % 4)),
                         xycoords=("data", "axes fraction"), va="top", ha="left",
                         fontsize=8, color="tab:green" if event.kind == "up" else "tab:red",
                         bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def plot_or_say(path: Path, samples: list[Sample], latencies: list[tuple[float, float]],
                events: list[Event], title: str) -> str:
    """``plot_run``, and the line that says where the plot is, or ``NO_PLOT``."""
    try:
        png = plot_run(path, samples, latencies, events, title)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] != "matplotlib":
            raise
        return NO_PLOT
    return f"plot of throughput and commit latency, crashes marked: {png}"
