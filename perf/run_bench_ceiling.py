"""run_bench_ceiling - perf/run-bench --ceiling: a relay's loss-free ceiling (issue 11 item 4)
and the ping beside the load at a fraction of it against the idle ping (item 5).

The ceiling is the highest paced rate at which a short run loses under LOSS_FREE_PCT of its
packets, delivers at least DELIVERED_MIN of the offered rate, and the generator kept up (no
gen-fell-behind / gen-cpu-bound: then the generator, not the relay, was the limit). Search: one
unpaced run first (its delivered rate U brackets the answer), then at most `steps` paced runs,
the first at 0.8 U, each one halving the bracket [highest good, lowest bad] (until a run fails,
the upper end is the larger of UPPER_OF_UNPACED x U and GROW x the highest pass: an unpaced
flood overruns a relay's queues at rates it carries loss-free when paced), stopping early once
a failed run's bracket is narrower than `resolution` of its lower end. Each run is a fresh
relay (run-bench's one()).
"""

# issue 11: "loss-free" is a loss under 0.01 %
LOSS_FREE_PCT = 0.01
# a paced run that delivers less than this share of its offered rate did not carry it
DELIVERED_MIN = 0.97
# the first paced try, as a share of the unpaced run's delivered rate
FIRST_OF_UNPACED = 0.8
# an overloaded (unpaced) relay spends CPU on what it drops: a paced rate somewhat above what it
# delivered unpaced may still pass, so the bracket starts above U
UPPER_OF_UNPACED = 1.2
# while every run passes, the untested upper end is at least this many times the highest pass
GROW = 1.5
# the generator processes busy for more than this share of the CPUs they may use: they, not
# the relay, were the limit (two processes pinned to one core show neither as CPU-bound alone)
GEN_BUSY_MAX = 0.9
# the "idle" point of the latency comparison: a few packets a second beside the probes (the
# generator needs some bulk load; 0 would mean unpaced)
IDLE_MBPS = 0.1
# item 5's target: under load at most this many times the idle round trip, p50 and p99
LATENCY_RATIO_TARGET = 1.5


def round_rate(r):
    """Rates the summary can show: whole Mbit/s, tens above 200."""
    return max(1, int(round(r / 10.0) * 10 if r >= 200 else round(r)))


def judge(res, rate):
    """(ok, why not) for one ceiling run's result (a run-bench JSON or {"failed": msg})."""
    if res.get("failed"):
        return False, f"the run failed: {res['failed']}"
    for flag in ("gen_fell_behind", "gen_cpu_bound"):
        if res.get(flag):
            return False, f"the generator was the limit ({flag.replace('_', '-')})"
    cpus, busy = res.get("harness_gen_cpus"), res.get("gen_cpu_s", 0) / res["window_s"]
    if cpus and busy > GEN_BUSY_MAX * cpus:
        return False, f"the generator was the limit ({busy:.2f} of its {cpus} CPU(s) busy)"
    if res["loss_pct"] >= LOSS_FREE_PCT:
        return False, f"loss {res['loss_pct']:.3f} %"
    if rate and res["delivered_mbps"] < DELIVERED_MIN * rate:
        return False, f"delivered {res['delivered_mbps']:.1f} Mbit/s only"
    return True, None


def step_record(rate, res, ok, why):
    return {"offered_mbps": rate, "delivered_mbps": res.get("delivered_mbps"),
            "loss_pct": res.get("loss_pct"), "ok": ok, "why_not": why,
            "cpu_s_per_gb": (res.get("relay") or {}).get("cpu_s_per_gb")}


def search(run, steps, resolution):
    """The ceiling of one relay and shard count. run(rate, tag) -> a run's JSON or {"failed"}.
    Returns the summary.json object (ceiling_mbps None when no paced run passed)."""
    out = {"ceiling_mbps": None, "limited_by": None, "generator_bound": False, "steps": [],
           "loss_free_pct": LOSS_FREE_PCT}
    u = run(0, "ceil-unpaced")
    ok, why = judge(u, 0)
    out["steps"].append(step_record(0, u, ok, why))
    if u.get("failed"):
        out["limited_by"] = f"the unpaced run failed: {u['failed']}"
        return out
    top = u["delivered_mbps"]
    out.update(unpaced_mbps=top, unpaced_loss_pct=u["loss_pct"])
    lo, hi, hi_why = 0, None, None
    rate = round_rate(FIRST_OF_UNPACED * top)
    for i in range(steps):
        res = run(rate, f"ceil{i}")
        ok, why = judge(res, rate)
        out["steps"].append(step_record(rate, res, ok, why))
        if ok:
            lo = rate
        else:
            hi, hi_why = rate, why
        upper = hi if hi is not None else max(UPPER_OF_UNPACED * top, GROW * lo)
        nxt = round_rate((lo + upper) / 2)
        if (hi is not None and hi - lo <= resolution * max(lo, 1)) or nxt in (lo, hi):
            break
        rate = nxt
    if lo:
        out["ceiling_mbps"] = lo
    out["generator_bound"] = bool(hi_why and hi_why.startswith("the generator"))
    out["limited_by"] = (f"{hi_why} at {fmt_rate(hi)} Mbit/s" if hi is not None else
                         f"nothing up to {fmt_rate(lo)} Mbit/s (every paced run passed: more "
                         "--ceiling-steps would go higher)")
    if out["generator_bound"]:
        out["limited_by"] += ": the relay's ceiling is at least the figure"
    return out


def latency_vs_idle(rows, name, shards, idle_rate, load_rate):
    """The ping round trip at load_rate against idle_rate, from the summary rows."""
    def row(rate):
        for r in rows:
            if (r["relay"], r["shards"], r["offered_mbps"]) == (name, shards, rate):
                return r
        return None
    idle, load = row(idle_rate), row(load_rate)
    out = {"idle_mbps": idle_rate, "load_mbps": load_rate, "target_ratio": LATENCY_RATIO_TARGET}
    for q in ("p50", "p99"):
        i = idle and idle.get(f"load_rtt_{q}_us_mean")
        v = load and load.get(f"load_rtt_{q}_us_mean")
        out[f"idle_{q}_us"], out[f"load_{q}_us"] = i, v
        out[f"{q}_ratio"] = round(v / i, 3) if i and v else None
    # the load point must itself be clean for its ping to mean anything
    out["load_loss_pct"] = load and load.get("loss_pct_mean")
    out["load_flags"] = load and load.get("flags")
    ratios = [out["p50_ratio"], out["p99_ratio"]]
    out["meets_target"] = None if None in ratios else max(ratios) <= LATENCY_RATIO_TARGET
    return out


def fmt_rate(v):
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:g}"


def summary_lines(ceilings):
    """The summary.txt lines of --ceiling."""
    lines = []
    for c in ceilings:
        head = f"ceiling {c['relay']} {c['shards']} shard(s)"
        if c["ceiling_mbps"] is None:
            lines.append(f"{head}: none found ({c['limited_by']})")
        else:
            lines.append(f"{head}: {fmt_rate(c['ceiling_mbps'])} Mbit/s loss-free (< "
                         f"{LOSS_FREE_PCT} %); limited by {c['limited_by']}")
        if c.get("unpaced_mbps") is not None:
            lines.append(f"    unpaced: {fmt_rate(c['unpaced_mbps'])} Mbit/s delivered, loss "
                         f"{c['unpaced_loss_pct']:.3f} %; {len(c['steps'])} runs: " +
                         ", ".join(f"{fmt_rate(s['offered_mbps']) if s['offered_mbps'] else 'unpaced'}"
                                   f"{'' if s['ok'] else ' x'}" for s in c["steps"]) +
                         " (x: not loss-free)")
        lat = c.get("latency")
        if lat:
            def q(k):
                return (f"{k} {fmt_rate(lat[f'load_{k}_us'])} / idle "
                        f"{fmt_rate(lat[f'idle_{k}_us'])} us = "
                        + (f"{lat[f'{k}_ratio']:.2f}x" if lat[f"{k}_ratio"] else "-"))
            verdict = {True: "met", False: "NOT met", None: "not measured"}[lat["meets_target"]]
            lines.append(f"    ping at {c['latency_fraction']:.0%} of it "
                         f"({fmt_rate(lat['load_mbps'])} Mbit/s): {q('p50')}, {q('p99')} "
                         f"(target <= {LATENCY_RATIO_TARGET}x: {verdict})")
            if (lat["load_loss_pct"] or 0) >= LOSS_FREE_PCT or lat["load_flags"]:
                lines.append(f"    (that point itself: loss {lat['load_loss_pct']} %, flags "
                             f"{','.join(lat['load_flags'] or []) or 'none'}: not the clean "
                             "load the ratio is meant for)")
    return lines
