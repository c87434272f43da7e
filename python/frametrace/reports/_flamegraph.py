"""A self-contained SVG flame graph."""
from __future__ import annotations

import os
import re
import zlib
from typing import Any, Mapping, Optional

from .._output import open_output
from ._pass import (PathLike, _display, _ms, _Paths, _shared_idents, _source, _thread_label,
                    _thread_names)


_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_FRAME_H = 16
_FONT = 11
_CHAR_W = _FONT * 0.6
_PAD = 10
_TOP = 44
_MIN_PX = 0.1


def _xml(text: str) -> str:
    text = _XML_INVALID.sub("\ufffd", text)
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _color(name: str, kind: str) -> str:
    h = zlib.crc32(name.encode("utf-8", "surrogatepass"))
    a, b, c = h & 0xFF, (h >> 8) & 0xFF, (h >> 16) & 0xFF
    if kind == "c":  # C functions: blues
        return f"rgb({60 + a % 50},{150 + b % 60},{200 + c % 50})"
    if kind == "py":  # Python functions: flamegraph.pl's warm palette
        return f"rgb({205 + a % 50},{b % 230},{c % 55})"
    return "rgb(200,200,200)"  # all, threads


# Click a frame to zoom in on it (its callees fill the width, its callers
# span it); click "all" to zoom out.  Labels are cut as _label() cuts them.
_ZOOM_SCRIPT = """<script type="text/ecmascript"><![CDATA[
(function () {
  var PAD = %(pad)s, INNER = %(inner).2f, CHAR_W = %(char_w).2f;
  var frames = Array.prototype.slice.call(document.querySelectorAll("g.f"));
  function label(text, px) {
    var fits = Math.floor((px - 4) / CHAR_W);
    if (fits < 3) return "";
    return text.length <= fits ? text : text.slice(0, fits - 2) + "..";
  }
  function place(g, x, w) {
    var rect = g.querySelector("rect"), text = g.querySelector("text");
    g.style.display = w > 0 ? "" : "none";
    rect.setAttribute("x", x.toFixed(2));
    rect.setAttribute("width", w.toFixed(2));
    if (text) {
      text.setAttribute("x", (x + 3).toFixed(2));
      text.textContent = label(g.getAttribute("data-n"), w);
    }
  }
  function zoom(target) {
    var tl = +target.getAttribute("data-l"), tx = +target.getAttribute("data-x"),
        tw = +target.getAttribute("data-w"), scale = INNER / tw, eps = 1e-6;
    frames.forEach(function (g) {
      var l = +g.getAttribute("data-l"), x = +g.getAttribute("data-x"),
          w = +g.getAttribute("data-w");
      if (l < tl) {  // a caller: spans the width if it encloses the target
        place(g, PAD, x <= tx + eps && x + w >= tx + tw - eps ? INNER : 0);
      } else if (x >= tx - eps && x + w <= tx + tw + eps) {
        place(g, PAD + (x - tx) * scale, w * scale);
      } else {
        place(g, 0, 0);
      }
    });
  }
  frames.forEach(function (g) {
    g.style.cursor = "pointer";
    g.addEventListener("click", function () { zoom(g); });
  });
  // Search: the frames whose name matches turn magenta, and the share of
  // the traced time they cover (nested matches counted once) is shown.
  var searchButton = document.getElementById("search"),
      matched = document.getElementById("matched");
  function search(term) {
    var re = null;
    if (term) {
      try { re = new RegExp(term); } catch (e) { matched.textContent = "bad pattern"; return; }
    }
    var spans = [];
    frames.forEach(function (g) {
      var rect = g.querySelector("rect"), hit = re !== null && +g.getAttribute("data-l") >= 2
          && re.test(g.getAttribute("data-n"));
      rect.setAttribute("fill", hit ? "rgb(230,0,230)" : g.getAttribute("data-c"));
      if (hit) spans.push([+g.getAttribute("data-x"), +g.getAttribute("data-w")]);
    });
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var covered = 0, end = -Infinity;
    spans.forEach(function (s) {
      var from = Math.max(s[0], end), to = s[0] + s[1];
      if (to > from) covered += to - from;
      end = Math.max(end, to);
    });
    matched.textContent = re === null ? "" : "matched: " + (covered / INNER * 100).toFixed(1) + "%%";
    searchButton.textContent = re === null ? "search" : "reset search";
    return covered / INNER;
  }
  searchButton.addEventListener("click", function () {
    if (searchButton.textContent !== "search") { search(""); return; }
    var term = window.prompt("Frames whose name matches (a regular expression):", "");
    if (term) search(term);
  });
  // f.svg#s=PATTERN opens with that search made.
  var given = /[#&]s=([^&]*)/.exec(window.location.hash);
  if (given) search(decodeURIComponent(given[1]));
  // The root ("all") is at the bottom: a tall graph opens there.
  window.scrollTo(0, document.documentElement.scrollHeight);
})();
]]></script>
"""


def _label(text: str, px: float) -> str:
    fits = int((px - 4) / _CHAR_W)
    if fits < 3:
        return ""
    return text if len(text) <= fits else text[:fits - 2] + ".."


def write_flamegraph_svg(trace: Any, path: PathLike, *, title: str = "frametrace",
                         width: int = 1200,
                         thread_names: Optional[Mapping[Any, str]] = None) -> str:
    """Writes a flame graph of the trace as a self-contained SVG (no external
    font, script or link: it opens in any browser or viewer; in a browser, a
    click on a frame zooms in on it, a click on "all" zooms out, "search"
    highlights the frames whose name matches a regular expression and says
    what share of the time they cover (``f.svg#s=PATTERN`` opens with that
    search made), and a tall graph opens scrolled to its root); returns the
    path.

    Events with the same call path on a thread merge into one frame; a
    frame's width is its inclusive time (the sum of the durations of its
    events), its children sit on top of it, left to right in the order they
    were first called.  All threads are merged in one graph: the bottom frame
    "all" is the traced time (the sum of the root durations of every
    thread), above it one frame per thread (its name, or ``thread <id>``;
    the tooltip gives both), then that thread's roots.  Each frame carries a ``<title>`` tooltip:
    name and file:line, inclusive time, share of the traced time, self time,
    calls, and whether it was capped at the tracer's stop.  Frames narrower
    than 0.1 px are not drawn (nor, then, anything above them).  Python
    frames are warm colors, C frames blue.
    """
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, not {type(title).__name__}")
    if isinstance(width, bool) or not isinstance(width, int):
        raise TypeError(f"width must be an int (pixels), not {type(width).__name__}")
    if width < 100:
        raise ValueError(f"width must be >= 100 pixels, got {width}")
    _trace, evs, default_names = _source(trace)
    names = _thread_names(default_names, thread_names)
    paths = _Paths(evs)
    shared = _shared_idents(paths.idents)
    first_child, next_sibling = paths.first_child, paths.next_sibling
    traced = sum(paths.threads.values())
    roots_of: dict[Any, list[int]] = {tid: [] for tid in paths.threads}
    for p, pp in enumerate(paths.parents):
        if pp < 0:
            roots_of[paths.info[p][4]].append(p)

    inner = width - 2 * _PAD
    scale = inner / traced if traced > 0 else 0.0
    frames: list[tuple[int, float, float, str, str, str]] = []  # level, x, w, label, tip, fill

    def tip(text: str, total: int, self_ns: Optional[int], calls: Optional[int],
            capped: bool) -> str:
        share = total / traced * 100 if traced else 0.0
        parts = [f"{text}", f"{_ms(total)} ms, {share:.2f}% of traced time"]
        if self_ns is not None:
            parts[-1] += f"; self {_ms(max(self_ns, 0))} ms; {calls} call{'s' if calls != 1 else ''}"
        if capped:
            parts.append("capped: still running at the tracer's stop")
        return "\n".join(parts)

    max_level = 0
    if traced > 0:
        frames.append((0, _PAD, inner, "all", tip("all threads", traced, None, None, False), ""))
        x_ns = 0
        for tid, roots in roots_of.items():
            tsum = paths.threads[tid]
            w = tsum * scale
            if w >= _MIN_PX:
                tl = _thread_label(tid, paths.idents, shared, names)
                # The name where it has one (the thread's id is in the tooltip).
                shown = tl.rsplit(" (thread ", 1)[0] if tl.endswith(")") else tl
                frames.append((1, _PAD + x_ns * scale, w, shown, tip(tl, tsum, None, None, False),
                               ""))
                max_level = max(max_level, 1)
                todo = []
                x = x_ns
                for r in roots:
                    todo.append((r, x, 2))
                    x += paths.totals[r]
                while todo:
                    p, x, level = todo.pop()
                    total = paths.totals[p]
                    w = total * scale
                    if w < _MIN_PX:
                        continue
                    info = paths.info[p]
                    frames.append((level, _PAD + x * scale, w, info[0],
                                   tip(_display(*info[:4]), total, paths.selfs[p],
                                       paths.calls[p], paths.capped[p]),
                                   _color(info[0], info[3])))
                    max_level = max(max_level, level)
                    cx = x
                    k = first_child[p]
                    while k >= 0:
                        todo.append((k, cx, level + 1))
                        cx += paths.totals[k]
                        k = next_sibling[k]
            x_ns += tsum

    height = _TOP + (max_level + 1) * _FRAME_H + _PAD + 14
    base = height - _PAD - 14  # bottom of level 0
    out = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">\n',
        "<style>text{font-family:monospace;font-size:%dpx;fill:#000}"
        " .f rect{stroke:#fff;stroke-width:0.5}"
        " .f:hover rect{stroke:#000;stroke-width:1}"
        " .h{font-size:%dpx;text-anchor:middle}</style>\n" % (_FONT, _FONT + 6),
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fdfdf6"/>\n',
        f'<text class="h" x="{width / 2:.1f}" y="22">{_xml(title)}</text>\n',
        f'<text x="{_PAD}" y="38">{len(evs)} events, {_ms(traced)} ms traced (each thread\'s '
        f'outermost calls, summed); width: inclusive time; hover a frame for details</text>\n',
    ]
    if frames:
        out.append(f'<text id="search" x="{width - _PAD}" y="22" text-anchor="end" '
                   f'style="cursor:pointer;fill:#06c">search</text>\n'
                   f'<text id="matched" x="{width - _PAD}" y="38" text-anchor="end"></text>\n')
    if not frames:
        out.append(f'<text x="{_PAD}" y="{base - 2}">(no events)</text>\n')
    for level, fx, fw, label, tiptext, fill in frames:
        fy = base - (level + 1) * _FRAME_H
        text = _label(label, fw)
        color = fill or _color(label, "")
        out.append(
            f'<g class="f" data-l="{level}" data-n="{_xml(label)}" data-x="{fx:.2f}" '
            f'data-w="{fw:.2f}" data-c="{color}"><title>{_xml(tiptext)}</title>'
            f'<rect x="{fx:.2f}" y="{fy}" width="{fw:.2f}" height="{_FRAME_H - 1}" rx="2" '
            f'fill="{color}"/>'
            + (f'<text x="{fx + 3:.2f}" y="{fy + _FRAME_H - 4}">{_xml(text)}</text>' if text else "")
            + "</g>\n")
    if frames:
        out.append(_ZOOM_SCRIPT % {"pad": _PAD, "inner": inner, "char_w": _CHAR_W})
    out.append("</svg>\n")
    path = os.fspath(path)
    with open_output(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(out)
    return path
