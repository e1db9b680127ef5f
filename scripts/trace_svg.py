#!/usr/bin/env python3
"""Draws a weft trace (Chrome trace-event JSON from weft_trace_end or WEFT_TRACE)
as a self-contained HTML page with one SVG timeline, for viewing offline and for
the screenshot in docs/observability.md:

    scripts/trace_svg.py TRACE.json OUT.html [--title TEXT]
    chromium --headless --no-sandbox --disable-gpu --screenshot=docs/trace-failure.png \
        --window-size=1400,800 file://$PWD/OUT.html

One row per track (the scheduler, then each stream slot), a box per launch or
copy coloured by outcome (ran, failed, skipped), cross-stream waits as grey
arrows and a failure's chain as red arrows, the scheduler's instants as ticks,
and the workers' occupancy as a step plot underneath. Perfetto
(https://ui.perfetto.dev) shows the same file with every argument; this page
needs no network and no JavaScript."""
import html
import json
import sys

COLORS = {"ran": "#4e79a7", "failed": "#e15759", "skipped": "#f28e2b", "poisoned": "#7f3c8d"}


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    title = "weft trace"
    if "--title" in argv:
        title = argv[argv.index("--title") + 1]
    with open(argv[1]) as f:
        trace = json.load(f)
    evs = trace["traceEvents"]
    names = {}
    for e in evs:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[e["tid"]] = e["args"]["name"]
    slices = [e for e in evs if e["ph"] == "X"]
    if not slices:
        sys.stderr.write("no slices in the trace\n")
        return 1
    t0 = min(e["ts"] for e in slices)
    t1 = max(e["ts"] + e["dur"] for e in slices)
    tids = sorted({e["tid"] for e in slices})
    sched = [t for t in names if names[t] == "scheduler"]
    rows = sched + tids
    W, left, right, top, rowh = 1360, 110, 20, 56, 56
    occ_h = 60
    H = top + rowh * len(rows) + occ_h + 70
    span = max(t1 - t0, 1e-3)

    def x(ts):
        return left + (ts - t0) / span * (W - left - right)

    def y(tid):
        return top + rows.index(tid) * rowh

    out = []
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
               f'font-family="sans-serif" font-size="11">')
    out.append('<defs><marker id="ar" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
               'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
               'fill="context-stroke"/></marker></defs>')
    out.append(f'<text x="{left}" y="22" font-size="15" font-weight="bold">{html.escape(title)}</text>')
    lx = left
    for k, c in COLORS.items():
        out.append(f'<rect x="{lx}" y="32" width="12" height="12" fill="{c}"/>'
                   f'<text x="{lx + 16}" y="42">{k}</text>')
        lx += 90
    out.append(f'<line x1="{lx}" y1="38" x2="{lx + 26}" y2="38" stroke="#c00" stroke-width="1.6" '
               f'marker-end="url(#ar)"/><text x="{lx + 30}" y="42">failure chain</text>')
    lx += 120
    out.append(f'<line x1="{lx}" y1="38" x2="{lx + 26}" y2="38" stroke="#888" stroke-width="1.2" '
               f'marker-end="url(#ar)"/><text x="{lx + 30}" y="42">cross-stream wait</text>')
    for i, tid in enumerate(rows):
        yy = y(tid)
        out.append(f'<rect x="{left}" y="{yy}" width="{W - left - right}" height="{rowh - 4}" '
                   f'fill="{"#f4f4f4" if i % 2 else "#fafafa"}"/>')
        out.append(f'<text x="8" y="{yy + rowh / 2}">{html.escape(names.get(tid, str(tid)))}</text>')
    # ticks: the time axis in µs
    axis_y = top + rowh * len(rows) + occ_h + 20
    for k in range(11):
        ts = t0 + span * k / 10
        out.append(f'<line x1="{x(ts)}" y1="{top - 6}" x2="{x(ts)}" y2="{axis_y - 10}" '
                   f'stroke="#ddd"/><text x="{x(ts) - 14}" y="{axis_y + 4}">{ts - t0:.0f} µs</text>')
    # the scheduler's instants
    for e in evs:
        if e["ph"] == "i" and e.get("tid") in sched and t0 <= e["ts"] <= t1:
            yy = y(e["tid"])
            col = "#59a14f" if e.get("cat") == "memory" else "#999"
            out.append(f'<line x1="{x(e["ts"])}" y1="{yy + 8}" x2="{x(e["ts"])}" '
                       f'y2="{yy + rowh - 12}" stroke="{col}"><title>{html.escape(e["name"])}'
                       f'</title></line>')
    # slices: stacked a little when they overlap on one track (interleaving)
    for e in slices:
        yy = y(e["tid"])
        xs, xe = x(e["ts"]), max(x(e["ts"] + e["dur"]), x(e["ts"]) + 3)
        oc = e.get("args", {}).get("outcome", "ran")
        col = COLORS.get(oc, "#aaa")
        tip = f'{e["name"]} ({oc})'
        if "failure" in e.get("args", {}):
            tip += f' failure #{e["args"]["failure"]}'
        out.append(f'<rect x="{xs:.1f}" y="{yy + 8}" width="{xe - xs:.1f}" height="{rowh - 20}" '
                   f'fill="{col}" stroke="#333" stroke-width="0.4"><title>{html.escape(tip)}'
                   f'</title></rect>')
        if xe - xs > 6 * len(e["name"]) + 4:
            out.append(f'<text x="{xs + 3:.1f}" y="{yy + rowh / 2 + 2}" fill="white">'
                       f'{html.escape(e["name"])}</text>')
    # labels of the failed and skipped ones, above their boxes
    for e in slices:
        oc = e.get("args", {}).get("outcome")
        if oc in ("failed", "skipped"):
            yy = y(e["tid"])
            out.append(f'<text x="{x(e["ts"]):.1f}" y="{yy + 6}" font-size="9" fill="#333" '
                       f'transform="rotate(-12 {x(e["ts"]):.1f} {yy + 6})">'
                       f'{html.escape(e["name"])}</text>')
    # flows
    starts = {}
    for e in evs:
        if e["ph"] == "s":
            starts[e["id"]] = e
    for e in evs:
        if e["ph"] != "f" or e["id"] not in starts:
            continue
        s = starts[e["id"]]
        red = s.get("cat") == "failure"
        ys, yf = y(s["tid"]) + rowh / 2, y(e["tid"]) + rowh / 2
        if ys == yf:
            ys -= 10
            yf -= 10
        out.append(f'<line x1="{x(s["ts"]):.1f}" y1="{ys}" x2="{x(e["ts"]):.1f}" y2="{yf}" '
                   f'stroke="{"#c00" if red else "#888"}" stroke-width="{1.6 if red else 1.0}" '
                   f'marker-end="url(#ar)" opacity="0.85"/>')
    # the workers' occupancy
    oy = top + rowh * len(rows) + 8
    out.append(f'<text x="8" y="{oy + occ_h / 2}">workers busy</text>')
    pts = [(e["ts"], e["args"]["tasks running"]) for e in evs
           if e["ph"] == "C" and e["name"] == "workers busy"]
    peak = max([p[1] for p in pts] + [1])
    path, last = [], 0
    for ts, v in pts:
        if ts < t0 or ts > t1:
            last = v
            continue
        yv = oy + occ_h - 6 - (occ_h - 12) * last / peak
        path.append(f"L{x(ts):.1f},{yv:.1f}")
        last = v
        yv = oy + occ_h - 6 - (occ_h - 12) * v / peak
        path.append(f"L{x(ts):.1f},{yv:.1f}")
    if path:
        out.append(f'<path d="M{left},{oy + occ_h - 6} ' + " ".join(path) +
                   f'" fill="none" stroke="#4e79a7"/>')
    out.append(f'<text x="{W - right - 90}" y="{oy + 10}">peak {peak}</text>')
    other = trace.get("otherData", {})
    out.append(f'<text x="{left}" y="{H - 10}" fill="#555">{len(slices)} tasks; '
               f'{other.get("events_dropped", 0)} events dropped; µs since the recording began'
               f'</text>')
    out.append("</svg>")
    # The failure's chain as a table: what failed, what each skip needed.
    rows_t = []
    for e in slices:
        a = e.get("args", {})
        if a.get("outcome") in ("failed", "skipped"):
            why = a.get("error") or a.get("skipped_because", "")
            rows_t.append(f'<tr><td>{a.get("launch", "")}</td><td>{html.escape(e["name"])}</td>'
                          f'<td>{html.escape(names.get(e["tid"], ""))}</td><td>{a["outcome"]}</td>'
                          f'<td>#{a.get("failure", "")}</td><td>{html.escape(why)}</td></tr>')
    table = ""
    if rows_t:
        table = ('<table style="font:11px sans-serif;margin:0 0 0 110px;border-collapse:collapse" '
                 'border="1" cellpadding="2"><tr><th>launch</th><th>kernel</th><th>track</th>'
                 '<th>outcome</th><th>failure</th><th>error / skipped because</th></tr>'
                 + "".join(rows_t[:16]) + "</table>")
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"/><title>"
            + html.escape(title) + "</title></head><body style=\"margin:0\">"
            + "\n".join(out) + table + "</body></html>\n")
    with open(argv[2], "w") as f:
        f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
