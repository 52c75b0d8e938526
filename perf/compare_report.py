"""compare_report - perf/compare's report: tables with ratios (report.txt, report.json) and one
plot per figure (CPU-s/GB, ping p50, ping p99 under load: compare_<figure>.svg, and .png where
gnuplot has the cairo terminal), from the sections' run-bench summaries and the idle section.

Ratios: "÷ best peer" is hderp's figure over the best (lowest) of the other relays except the
floor at that point; "÷ floor" is hderp's over the floor's (how far hderp is from one sendmsg per
packet). Below 1 hderp is cheaper or faster. A figure from a point whose generator was the limit,
or with loss, carries a note.
"""
import json
import os
import subprocess

FLOOR = "floor"
SELF = "hderp"
LOSS_NOTE_PCT = 0.01  # run-bench's loss-free threshold (run_bench_ceiling.LOSS_FREE_PCT)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDE = 5  # a figure whose values span more than this factor is plotted on a log scale
FIGURES = (("cpu", "relay_cpu_s_per_gb_mean", "relay CPU-seconds per GB delivered"),
           ("p50", "load_rtt_p50_us_mean", "ping/echo round trip under load, p50 (µs)"),
           ("p99", "load_rtt_p99_us_mean", "ping/echo round trip under load, p99 (µs)"))


def relay_order(names):
    """hderp first, the floor last, the peers between in their first-seen order."""
    seen = list(dict.fromkeys(names))
    return ([SELF] if SELF in seen else []) + [n for n in seen if n not in (SELF, FLOOR)] + \
        ([FLOOR] if FLOOR in seen else [])


def load_points(out, meta):
    """{(kind, transport, rate, shards): {relay: summary row}} for the client and batched
    sections, and {(transport, shards): {relay: ceiling}} for the ceiling sections."""
    points, ceilings = {}, {}
    for sec in meta["sections"]:
        path = os.path.join(out, sec["dir"], "summary.json")
        if not os.path.exists(path):
            continue
        s = json.load(open(path))
        for r in s["points"]:
            if sec["kind"] != "ceiling":
                key = (sec["kind"], sec["transport"], r["offered_mbps"], r["shards"])
                points.setdefault(key, {})[r["relay"]] = r
        for c in s.get("ceilings") or []:
            ceilings.setdefault((sec["transport"], c["shards"]), {})[c["relay"]] = c
    return points, ceilings


def ratio(v, ref):
    return v / ref if v is not None and ref else None


def best_peer(vals):
    """The lowest value of the relays other than hderp and the floor, or None."""
    peers = [v for n, v in vals.items() if n not in (SELF, FLOOR) and v is not None]
    return min(peers) if peers else None


def fnum(v, kind):
    if v is None:
        return "–"
    if kind == "x":
        return f"{v:.2f}x"
    if kind == "us":
        return f"{v:,.0f}"
    if kind == "mbps":
        return f"{v:,.0f}"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def notes_of(row):
    if row is None:
        return []
    out = [f for f in row.get("flags", []) if f != "probes-lost"]
    if "probes-lost" in row.get("flags", []):
        out.append("probes-lost")
    if row.get("loss_pct_mean") is not None and row["loss_pct_mean"] > LOSS_NOTE_PCT:
        out.append(f"loss {row['loss_pct_mean']:.3f} %")
    return out


def point_figures(rows, relays):
    """{figure: {"vals": {relay: v}, "best": v, "x_best": r, "x_floor": r}} for one point."""
    out = {}
    for fig, key, _ in FIGURES:
        vals = {n: (rows.get(n) or {}).get(key) for n in relays}
        best = best_peer(vals)
        out[fig] = {"vals": vals, "best_peer": best, "x_best": ratio(vals.get(SELF), best),
                    "x_floor": ratio(vals.get(SELF), vals.get(FLOOR))}
    return out


def points_table(points):
    """(markdown lines, json rows) for the client and batched points."""
    relays = relay_order(n for rows in points.values() for n in rows)
    names = " / ".join(relays)
    head = (f"| load | transport | Mbit/s | shards | delivered Mbit/s {names} | "
            f"CPU-s/GB {names} | ÷ best peer | ÷ floor | "
            f"ping p50 µs {names} | ÷ best peer | ÷ floor | ping p99 µs {names} | ÷ best peer "
            "| ÷ floor | notes |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    rows_json = []
    order = {"client": 0, "batched": 1}
    for key in sorted(points, key=lambda k: (order.get(k[0], 9), k[1], k[2] or 1e9, k[3])):
        kind, transport, rate, shards = key
        rows = points[key]
        figs = point_figures(rows, relays)
        delivered = {n: (rows.get(n) or {}).get("delivered_mbps_mean") for n in relays}
        cells = [" / ".join(fnum(delivered[n], "mbps") for n in relays)]
        for fig, _, _ in FIGURES:
            f = figs[fig]
            unit = "cpu" if fig == "cpu" else "us"
            cells += [" / ".join(fnum(f["vals"][n], unit) for n in relays),
                      fnum(f["x_best"], "x"), fnum(f["x_floor"], "x")]
        notes = "; ".join(f"{n}: {', '.join(notes_of(rows.get(n)))}" for n in relays
                          if notes_of(rows.get(n)))
        lines.append(f"| {'client-like' if kind == 'client' else kind} | {transport} | "
                     f"{rate if rate else 'unpaced'} | {shards} | " + " | ".join(cells) +
                     f" | {notes} |")
        rows_json.append({"load": kind, "transport": transport, "offered_mbps": rate,
                          "shards": shards, "figures": figs, "delivered_mbps": delivered,
                          "notes": {n: notes_of(rows.get(n)) for n in relays}})
    return lines, rows_json, relays


def ceiling_cell(c):
    if not c or c.get("ceiling_mbps") is None:
        return "–"
    return ("≥" if c.get("generator_bound") else "") + fnum(c["ceiling_mbps"], "mbps")


def unpaced_cell(c):
    if not c or c.get("unpaced_mbps") is None:
        return "–"
    return f"{c['unpaced_mbps']:,.0f} ({c.get('unpaced_loss_pct', 0):.1f} %)"


def ceilings_table(ceilings):
    relays = relay_order(n for cs in ceilings.values() for n in cs)
    names = " / ".join(relays)
    lines = [f"| transport | shards | loss-free ceiling Mbit/s {names} | hderp ÷ best peer | "
             f"hderp ÷ floor | unpaced delivered Mbit/s (loss) {names} |",
             "|---|---|---|---|---|---|"]
    rows_json, limits = [], []
    for (transport, shards), cs in sorted(ceilings.items()):
        vals = {n: (cs.get(n) or {}).get("ceiling_mbps") for n in relays}
        best = max([v for n, v in vals.items() if n not in (SELF, FLOOR) and v] or [0]) or None
        x_best, x_floor = ratio(vals.get(SELF), best), ratio(vals.get(SELF), vals.get(FLOOR))
        limits += [f"- {transport}, {shards} shard(s), {n}: {cs[n].get('limited_by')}"
                   for n in relays if n in cs]
        lines.append(f"| {transport} | {shards} | "
                     + " / ".join(ceiling_cell(cs.get(n)) for n in relays)
                     + f" | {fnum(x_best, 'x')} | {fnum(x_floor, 'x')} | "
                     + " / ".join(unpaced_cell(cs.get(n)) for n in relays) + " |")
        rows_json.append({"transport": transport, "shards": shards, "ceiling_mbps": vals,
                          "x_best_peer": x_best, "x_floor": x_floor,
                          "unpaced": {n: [(cs.get(n) or {}).get("unpaced_mbps"),
                                          (cs.get(n) or {}).get("unpaced_loss_pct")]
                                      for n in relays}})
    return lines + ["", "What ended each search (the lowest rate that failed, and why):"] + \
        limits, rows_json


def idle_table(idle):
    lines = [f"| transport | relay | RSS idle, 2 conns (KiB) | RSS with {idle['n'] + 2:,} conns "
             "(KiB) | KiB per idle connection | anonymous KiB per connection | "
             "÷ hderp's | counted by |",
             "|---|---|---|---|---|---|---|---|"]
    own = {p["mode"]: p["kib_per_conn"] for p in idle["per_conn"] if p["relay"] == SELF}
    order = relay_order(p["relay"] for p in idle["per_conn"])
    for p in sorted(idle["per_conn"], key=lambda p: (p["mode"], order.index(p["relay"]))):
        anon = p["anon_kib_per_conn"]
        lines.append(f"| {p['mode']} | {p['relay']} | {p['rss0_kib']:,} | {p['rss_kib']:,} | "
                     f"{p['kib_per_conn']:.2f} | {'–' if anon is None else f'{anon:.2f}'} | "
                     f"{fnum(ratio(p['kib_per_conn'], own.get(p['mode'])), 'x')} | "
                     f"{p['counted_by']} |")
    return lines


def gnuplot(script, cwd):
    try:
        r = subprocess.run(["gnuplot"], input=script.encode(), capture_output=True, timeout=60,
                           cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return r.returncode == 0, r.stderr.decode(errors="replace").strip()


def plot_script(fig, title, cats, relays, wide, terminal, target):
    tics = ", ".join(f'"{c}" {i}' for i, c in enumerate(cats))
    series = ", ".join(f"'compare_{fig}-{i}.dat' using 1:2 with linespoints lw 1.5 pt {5 + i} "
                       f"ps 1.5 title '{n}'" for i, n in enumerate(relays))
    return (f"set terminal {terminal}\nset output '{target}'\nset title '{title}'\n"
            f"set xtics rotate by -35 ({tics}) font ',9'\nset xrange [-0.5:{len(cats) - 0.5}]\n"
            "set bmargin 9\nset rmargin 16\nset grid ytics mytics\n"
            "set key outside right top vertical box title 'relay'\n"
            + f"set ylabel '{'CPU-s/GB' if fig == 'cpu' else 'µs'}{' (log scale)' if wide else ''}'\n"
            + ("set logscale y\n" if wide else "set yrange [0:*]\n")
            + f"plot {series}\n")


def plots(out, rows_json, relays):
    """One figure per metric, one panel: x the load points (lines break between loads), one
    curve per relay, log y where the values span more than WIDE. Returns the files written."""
    pdir = os.path.join(out, "plots")
    os.makedirs(pdir, exist_ok=True)
    cats = [f"{r['load']} {r['transport']} {r['offered_mbps'] or 'unpaced'} Mbit/s, "
            f"{r['shards']} sh" for r in rows_json]
    files = []
    for fig, _, title in FIGURES:
        vals = [r["figures"][fig]["vals"].get(n) for r in rows_json for n in relays]
        vals = [v for v in vals if v]
        if not vals:
            continue
        for i, n in enumerate(relays):
            with open(os.path.join(pdir, f"compare_{fig}-{i}.dat"), "w") as f:
                prev = None
                for x, r in enumerate(rows_json):
                    group = (r["load"], r["transport"])
                    if prev is not None and group != prev:
                        f.write("\n")  # no line across two loads
                    prev = group
                    v = r["figures"][fig]["vals"].get(n)
                    if v:
                        f.write(f"{x} {v}\n")
        wide = max(vals) / min(vals) > WIDE
        ok, err = gnuplot(plot_script(fig, title, cats, relays, wide,
                                      "svg size 1100,620 dynamic background rgb 'white'",
                                      f"compare_{fig}.svg"), pdir)
        if not ok:
            files.append(f"compare_{fig}.svg: gnuplot failed: {err}")
            continue
        files.append(os.path.join(pdir, f"compare_{fig}.svg"))
        ok, _ = gnuplot(plot_script(fig, title, cats, relays, wide, "pngcairo size 1100,620",
                                    f"compare_{fig}.png"), pdir)
        if ok:
            files.append(os.path.join(pdir, f"compare_{fig}.png"))
    return files


def write(out, meta):
    """report.txt and report.json in out; returns the report's text."""
    points, ceilings = load_points(out, meta)
    lines = [f"# perf/compare {meta.get('started', '?')} .. {meta.get('finished', '?')}, "
             f"load average {' '.join(meta.get('load_before', []))} before, "
             f"{' '.join(meta.get('load_after', []))} after", ""]
    rep = {"points": [], "ceilings": [], "idle": meta.get("idle")}
    relays = []
    if points:
        t, rep["points"], relays = points_table(points)
        lines += ["CPU-s/GB and the ping round trip under load (÷: hderp over the best peer, "
                  "over the floor; below 1 hderp is cheaper or faster):", ""] + t + [""]
    if ceilings:
        t, rep["ceilings"] = ceilings_table(ceilings)
        lines += ["Loss-free paced ceiling (run-bench --ceiling, two generator processes; ≥: "
                  "the generator was the limit; ÷ above 1: hderp carries more) and the unpaced "
                  "flood:", ""] + t + [""]
    idle = meta.get("idle")
    if idle and idle.get("per_conn"):
        lines += [f"Memory per idle logged-in connection ({idle['n']:,} idle clients, 1 "
                  "shard, a fresh relay per count):", ""] + idle_table(idle) + [""]
    for sec in meta["sections"]:
        if sec["rc"] != 0:
            lines.append(f"note: {sec['name']}: run-bench exited {sec['rc']} (some runs "
                         f"failed): {sec['dir']}/summary.txt")
    for f in (idle or {}).get("failed", []):
        lines.append(f"note: idle: {f}")
    if rep["points"]:
        for f in plots(out, rep["points"], relays):
            lines.append(f"plot: {os.path.relpath(f, out) if f.startswith(out) else f}")
    for mode in ("plain", "TLS"):  # paths inside the repository relative to it
        lines.append(f"relays ({mode}): " + "; ".join(
            f"{n}: {c.replace(ROOT + os.sep, '')}"
            for n, c in meta.get(f"relays_{mode.lower()}", {}).items()))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "report.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    return text
