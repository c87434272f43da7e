"""The ranks report's heat map: ranks (rows) x steps (columns), each cell
coloured by the rank's step duration against the step's median, as a
standalone SVG."""
from __future__ import annotations

import os
from typing import Any
from xml.sax.saxutils import escape

from .._output import open_output
from ._pass import PathLike

CELL = 14  # px, shrunk to keep a long job's map about WIDTH wide
WIDTH = 1400
LEFT = 70
TOP = 40


def _colour(ratio: float) -> str:
    """White at the median, red at twice it and above, blue at half."""
    if ratio >= 1:
        k = min(ratio - 1, 1.0)
        return f"rgb(255,{round(255 * (1 - k))},{round(255 * (1 - k))})"
    k = min(1 - ratio, 0.5) * 2
    return f"rgb({round(255 * (1 - k))},{round(255 * (1 - k))},255)"


def heatmap_svg(report: Any) -> str:
    steps, ranks = report.steps, report.ranks
    cw = max(2, min(CELL, WIDTH // max(len(steps), 1)))
    ch = max(2, min(CELL, WIDTH // max(len(ranks), 1)))
    width = LEFT + cw * max(len(steps), 1) + 20
    height = TOP + ch * max(len(ranks), 1) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<text x="{LEFT}" y="16" font-size="12">step duration per rank, against the '
           f'step\'s median (white: median, red: 2x, blue: 0.5x)</text>']
    for row, rank in enumerate(ranks):
        if row % max(1, len(ranks) // 40) == 0:
            out.append(f'<text x="{LEFT - 4}" y="{TOP + row * ch + ch - 1}" '
                       f'text-anchor="end">rank {rank}</text>')
    for col, s in enumerate(steps):
        x = LEFT + col * cw
        if col % max(1, len(steps) // 20) == 0:
            out.append(f'<text x="{x + cw / 2}" y="{TOP - 4}" text-anchor="middle">'
                       f'{s.step}</text>')
        for row, rank in enumerate(ranks):
            y = TOP + row * ch
            dur = s.durations.get(rank)
            if dur is None:
                fill, tip = "#ccc", f"rank {rank}, step {s.step}: did not run"
            else:
                ratio = dur / s.median_ns if s.median_ns else 1.0
                fill = _colour(ratio)
                tip = (f"rank {rank}, step {s.step}: {dur / 1e6:.3f} ms, "
                       f"{ratio:.2f}x the median")
            out.append(f'<rect class="cell" x="{x}" y="{y}" width="{cw}" height="{ch}" '
                       f'fill="{fill}" stroke="#fff" stroke-width="0.5">'
                       f'<title>{escape(tip)}</title></rect>')
    out.append(f'<text x="{LEFT}" y="{height - 12}">steps</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_heatmap(report: Any, path: PathLike) -> str:
    with open_output(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(heatmap_svg(report))
    return os.fspath(path)
