"""Small self-contained SVG charts for the load-test pages (no plotting library needed)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 640, 260
PAD_L, PAD_R, PAD_T, PAD_B = 60, 130, 30, 40
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10.0 ** (len(str(int(value))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if step * exp >= value:
            return step * exp
    return value


def _frame(title: str, y_max: float, x_label: str, y_label: str) -> list[str]:
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{PAD_L}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<text x="{PAD_L + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text x="14" y="{PAD_T + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {PAD_T + plot_h / 2})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        v = y_max * i / 4
        y = PAD_T + plot_h - plot_h * i / 4
        out.append(
            f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{PAD_L - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{v:,.4g}</text>"
        )
    return out


def _legend(names: Sequence[str]) -> list[str]:
    x = WIDTH - PAD_R + 10
    return [
        f'<rect x="{x}" y="{PAD_T + 16 * i}" width="10" height="10" fill="{COLORS[i % 5]}"/>'
        f'<text x="{x + 14}" y="{PAD_T + 16 * i + 9}">{escape(name)}</text>'
        for i, name in enumerate(names)
    ]


def line_chart(
    series: dict[str, Sequence[float]], *, title: str, x_label: str, y_label: str
) -> str:
    """Lines over x = 0, 1, 2, ... (one per series), with a legend."""
    n = max((len(v) for v in series.values()), default=0)
    y_max = _nice_max(max((max(v) for v in series.values() if len(v)), default=0.0))
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
    out = _frame(title, y_max, x_label, y_label)
    for i, values in enumerate(series.values()):
        if not values:
            continue
        pts = " ".join(
            f"{PAD_L + plot_w * j / max(n - 1, 1):.1f},{PAD_T + plot_h - plot_h * v / y_max:.1f}"
            for j, v in enumerate(values)
        )
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="{COLORS[i % 5]}" stroke-width="1.5"/>'
        )
    for k in range(5):
        x = PAD_L + plot_w * k / 4
        out.append(
            f'<text x="{x:.1f}" y="{PAD_T + plot_h + 14}" text-anchor="middle">'
            f"{(n - 1) * k / 4 if n > 1 else 0:,.0f}</text>"
        )
    return "\n".join([*out, *_legend(list(series)), "</svg>"])


def bar_chart(
    groups: dict[str, dict[str, float]], *, title: str, y_label: str, limit: float | None = None
) -> str:
    """Grouped bars: one group per key of ``groups``, one bar per inner key; a dashed limit."""
    inner = list(dict.fromkeys(k for g in groups.values() for k in g))
    top = max((v for g in groups.values() for v in g.values()), default=0.0)
    y_max = _nice_max(max(top, limit or 0.0))
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
    out = _frame(title, y_max, "", y_label)
    slot = plot_w / max(len(groups), 1)
    bar = slot * 0.8 / max(len(inner), 1)
    for gi, (name, values) in enumerate(groups.items()):
        x0 = PAD_L + slot * gi + slot * 0.1
        for bi, key in enumerate(inner):
            v = values.get(key)
            if v is None:
                continue
            h = plot_h * v / y_max
            out.append(
                f'<rect x="{x0 + bar * bi:.1f}" y="{PAD_T + plot_h - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{COLORS[bi % 5]}"><title>{escape(name)} {escape(key)}: '
                f"{v:,.3f}</title></rect>"
            )
        out.append(
            f'<text x="{x0 + slot * 0.4:.1f}" y="{PAD_T + plot_h + 14}" text-anchor="middle">'
            f"{escape(name)}</text>"
        )
    if limit is not None:
        y = PAD_T + plot_h - plot_h * limit / y_max
        out.append(
            f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d62728" '
            f'stroke-dasharray="5,3"/><text x="{PAD_L + plot_w - 2}" y="{y - 3:.1f}" '
            f'text-anchor="end" fill="#d62728">limit {limit:g}</text>'
        )
    return "\n".join([*out, *_legend(inner), "</svg>"])
