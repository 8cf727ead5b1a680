#!/usr/bin/env python3
"""Assembles docs/benchmarks.md from one `bench/run.sh` run (issues 8 and 18).

Input: the run's directory with machine.env, knobs.env, peers.jsonl (the peers' tarballs and commits),
figures.jsonl (one JSON object per headline figure: key, label, unit, median, min, max, n; or unit "text" and
text for an outcome in words) and each benchmark's markdown (agent.md, scheduler.md, extender.md, wipe.md,
fleet.md). Output on stdout: the summary first (issue 18's targets: measure | localpv | reference | ratio | target |
verdict, a missed target saying "missed"), then the machine with its load average, the peers' commits, and every
absolute figure with its spread and the command that measured it. A figure the summary needs that the recorded
run lacks is never guessed: its row says "not measured" and the page lists it under the summary.
"""

import json
import sys
from pathlib import Path

PEER_REF = "sig-storage-local-static-provisioner"
PEER_TOPOLVM = "topolvm"


class Missing(Exception):
    pass


def load(out):
    figures = {}
    for line in (out / "figures.jsonl").read_text().splitlines():
        if line.strip():
            f = json.loads(line)
            figures[f["key"]] = f
    peers = {}
    for line in (out / "peers.jsonl").read_text().splitlines():
        if line.strip():
            p = json.loads(line)
            peers[p["peer"]] = p
    env = {}
    for name in ("machine.env", "knobs.env"):
        path = out / name
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition("=")
                env[key] = value
    return figures, peers, env


def num(v):
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if v < 1 else f"{v:.2f}"


def show(f):
    """'254 ms (120-621, n=100)': median first, then the spread."""
    if f["unit"] == "text":
        return f["text"]
    text = f"{num(f['median'])} {f['unit']}"
    if f["n"] > 1 and f["min"] != f["max"]:
        text += f" ({num(f['min'])}-{num(f['max'])}, n={f['n']})"
    return text


class Summary:
    def __init__(self, figures, peers):
        self.figures = figures
        self.peers = peers
        self.missing = []
        self.ratios = []
        self.targets = []

    def get(self, key):
        f = self.figures.get(key)
        if f is None:
            self.missing.append(key)
            raise Missing(key)
        return f

    def peer_note(self, peer):
        p = self.peers.get(peer)
        if p is None:
            return "not recorded"
        return f"commit {p['commit']}"

    def has(self, *keys):
        return all(k in self.figures for k in keys)

    def ratio_row(self, what, ours_key, theirs, ratio, target, verdict):
        try:
            ours = show(self.get(ours_key))
        except Missing:
            ours = "missing"
        self.ratios.append((what, ours, theirs, ratio, target, verdict))

    def target_row(self, issue, what, key, measured, passed):
        try:
            f = self.get(key)
        except Missing:
            self.targets.append((issue, what, "missing", "**not measured**"))
            return
        self.targets.append((issue, what, measured(f), "pass" if passed(f) else "**missed**"))

    def med(self, key):
        return self.get(key)["median"]


def build_summary(figures, peers, env):
    s = Summary(figures, peers)
    agent_rows(s, env)
    scheduler_rows(s)
    extender_rows(s)
    wipe_rows(s)
    fleet_rows(s)
    target_rows(s)
    return s


# ---- scheduler throughput and extender rows (benches/scheduler.rs, benches/extender_live/) ----

EXT_PEERS = {"topolvm": ("nodes", "TopoLVM's topolvm-scheduler"), "openlocal": ("nodenames", "open-local's extender")}
# NB: these rows say "not measured" when the recorded run predates them (no floor, no peers' extenders), instead of
# failing like the rest of the summary: the parts are rerun with LOCALPV_BENCH_PARTS="scheduler extender".
RERUN = 'not in the recorded run: `LOCALPV_BENCH_PARTS="scheduler extender" bench/run.sh`'


def figs(s, *keys):
    """The figures `keys`, or None when the recorded run has not all of them."""
    found = [s.figures.get(k) for k in keys]
    return None if any(f is None for f in found) else found


def ext_sizes(s):
    """The request sizes the extender part measured (100, 1,000, 5,000 at full size; fewer when run smaller)."""
    return sorted({int(k.split(".")[3]) for k in s.figures if k.startswith("extender.live.filter_p50.")})


# Percent by which a run with an extender may beat the run it is compared with before the pair is called noise.
NOISE = 2.0


def scheduler_rows(s):
    """kube-scheduler throughput: NodeNames against in-tree, Nodes against the no-op extender (the floor). The
    rows are named by the figures' own labels, which carry the sizes the scheduler part ran with."""
    for mode, floor_key, target in (("nodenames", None, "overhead <= 2%"),
                                    ("nodes", "noop_nodes", "within 2 points of the floor")):
        key = f"scheduler.pods_per_second.{mode}"
        what = s.figures.get(key, {}).get("label", f"kube-scheduler throughput with the extender ({mode})")
        if floor_key is None:
            f = figs(s, "scheduler.pods_per_second.intree", f"scheduler.overhead_percent.{mode}")
            if f:
                intree, o = f
                ratio = f"{o['median']:+.1f}% overhead ({num(o['min'])} .. {num(o['max'])})"
                theirs, verdict = f"in-tree rules only: {show(intree)}", "pass" if o["median"] <= 2.0 else "**missed**"
                if o["median"] < -NOISE:
                    # An extender only adds work: a run with it faster than in-tree measured the machine's noise.
                    verdict = "inconclusive (faster than in-tree: noise larger than the effect)"
        else:
            f = figs(s, f"scheduler.pods_per_second.{floor_key}", f"scheduler.points_over_floor.{mode}",
                     f"scheduler.overhead_percent.{mode}", f"scheduler.overhead_percent.{floor_key}")
            if f:
                floor, p, o, fo = f
                ratio = (f"{p['median']:+.1f} points over the floor ({num(p['min'])} .. {num(p['max'])}); "
                         f"{o['median']:+.1f}% vs in-tree, the floor {fo['median']:+.1f}%")
                theirs = f"no-op extender, same mode (the protocol floor): {show(floor)}"
                verdict = "pass" if p["median"] <= 2.0 else "**missed**"
                if fo["median"] < -NOISE or p["median"] < -NOISE:
                    verdict = "inconclusive (the floor or the extender faster than in-tree: noise larger than the effect)"
        if not f:
            ratio, theirs, verdict = "-", RERUN, "**not measured**"
        s.ratio_row(what, key, theirs, ratio, target, verdict)


def extender_rows(s):
    """localpv's extender (as deployed) against each peer in the form its chart uses, on identical bodies."""
    sizes = ext_sizes(s)
    for peer, (form, name) in EXT_PEERS.items():
        form_name = "NodeNames" if form == "nodenames" else "Nodes"
        if not sizes:
            s.ratios.append((f"extender filter p50 and p99, 100 to 5,000 nodes, {form_name}, against {name}",
                             "not measured", RERUN, "-", "(no target)", "**not measured**"))
            continue
        for size in sizes:
            for q in ("p50", "p99"):
                key = f"extender.live.filter_{q}.{size}.{form}.fits.{{}}"
                f = figs(s, key.format("localpv"), key.format(peer), f"extender.live.filter_ok.{size}.{form}.fits.{peer}")
                ratio, other = "-", "missing"
                if f:
                    ours, theirs, ok = f
                    ratio = (f"{theirs['median'] / ours['median']:.1f}x as fast" if ok["median"] == 100
                             else "the peer answers an error (see its table)")
                    other = f"{name}: {show(theirs)}"
                s.ratio_row(f"extender filter {q}, {size:,} nodes, {form_name}, 8Gi claim", key.format("localpv"),
                            other, ratio, "(no target)", "-")
        f = figs(s, "extender.live.rss_idle.localpv", f"extender.live.rss_idle.{peer}")
        if f:
            ours, theirs = f
            s.ratio_row(ours["label"].replace("localpv resident", "extender resident"), "extender.live.rss_idle.localpv",
                        f"{name}: {show(theirs)}", f"{ours['median'] / theirs['median']:.2f}x the peer's", "(no target)",
                        "-")


def extender_targets(s):
    """Issue 18: the extender as deployed (the Lease holder's clean-up and explanations running). The targets are
    set at 5,000 nodes and 50,000 PVs; a smaller run says what it measured."""
    sizes = ext_sizes(s) or [1000, 5000]
    top, mid = sizes[-1], min(sizes, key=lambda n: abs(n - 1000))
    rows = (
        (f"filter p99, {top:,} Nodes (target at 5,000), Lease holder's work running",
         f"extender.live.filter_p99.{top}.nodes.fits.localpv", "ms", 100.0),
        (f"filter p99, {mid:,} NodeNames (target at 1,000), Lease holder's work running",
         f"extender.live.filter_p99.{mid}.nodenames.fits.localpv", "ms", 5.0),
        ("memory idle, as deployed (target at 5,000 nodes and 50,000 PVs)", "extender.live.rss_idle.localpv", "MiB",
         200.0),
        ("memory peak over the run, inside the chart's 512 MiB limit", "extender.live.rss_peak.localpv", "MiB", 512.0),
        ("memory per cached PV", "extender.live.kb_per_pv.localpv", "KB", 1.5),
    )
    for what, key, unit, limit in rows:
        f = s.figures.get(key)
        if f is None:
            s.targets.append((18, f"extender {what} (<= {num(limit)} {unit})", RERUN, "**not measured**"))
            continue
        measured = f"{num(f['median'])} {f['unit']}" + (f" ({f['label']})" if unit != "ms" else "")
        s.targets.append((18, f"extender {what} (<= {num(limit)} {unit})", measured,
                          "pass" if f["median"] <= limit else "**missed**"))
def lsp(kind):
    return {"lsp_default": "reference, default period", "lsp_1s": "reference, 1 s period"}[kind]


def row18(s, what, target, ours, theirs, ratio, verdict):
    """One row of issue 18's table; `ours`, `theirs`, `ratio` and `verdict` are functions of the Summary that may
    raise Missing (then the row says so instead of guessing)."""
    try:
        cells = (ours(), theirs(), ratio(), target, verdict())
    except Missing:
        cells = ("missing", "missing", "-", target, "**not measured**")
    s.ratios.append((what,) + cells)


def faster(theirs, ours):
    if ours <= 0 or theirs <= 0:
        return "-"
    if theirs >= ours:
        return f"{theirs / ours:,.1f}x faster"
    return f"{ours / theirs:,.1f}x slower"


def agent_rows(s, env):
    """Issue 18 point 1: the node agent against the reference provisioner, both measured by benches/agent.rs."""
    disks = int(env.get("LOCALPV_BENCH_DISKS", "1000"))
    burst = int(env.get("LOCALPV_BENCH_MOUNTS", "100"))
    pvs = int(env.get("LOCALPV_BENCH_OTHER_PVS", "10000"))
    a = lambda kind, m: f"agent.{kind}.{m}"
    ours = lambda m: lambda: show(s.get(a("localpv", m)))
    both = lambda m: lambda: "; ".join(f"{lsp(k)}: {show(s.get(a(k, m)))}" for k in ("lsp_default", "lsp_1s"))
    times = lambda m, kind="lsp_default": lambda: faster(s.med(a(kind, m)), s.med(a("localpv", m)))
    row18(s, f"mount -> PV created, median, {disks:,} disks already on the node", "<= 15 ms, p99 <= 50 ms",
          lambda: f"{show(s.get(a('localpv', 'one_created')))}; p99 {num(s.med(a('localpv', 'one_created_p99')))} ms",
          both("one_created"), times("one_created"),
          lambda: "pass" if s.med(a("localpv", "one_created")) <= 15 and s.med(a("localpv", "one_created_p99")) <= 50
          else "**missed**")
    row18(s, "same, against the reference provisioner's default period", ">= 200x",
          ours("one_created"), lambda: show(s.get(a("lsp_default", "one_created"))), times("one_created"),
          lambda: "pass" if s.med(a("lsp_default", "one_created")) >= 200 * s.med(a("localpv", "one_created"))
          else "**missed**")
    row18(s, "same, against the reference provisioner at `--discovery-period=1s`", "(no target)",
          ours("one_created"), lambda: show(s.get(a("lsp_1s", "one_created"))), times("one_created", "lsp_1s"),
          lambda: "-")
    row18(s, f"burst of {burst:,} mounts -> all PVs created", "(no target)",
          ours("burst_created"), both("burst_created"), times("burst_created"), lambda: "-")
    floor = s.figures.get(a("localpv", "start_floor"))
    row18(s, f"{disks:,} disks present at start -> all PVs created", "<= 1.5 s",
          lambda: show(s.get(a("localpv", "start_created")))
          + (f"; the API server's floor (the same PVs by a bare client): {show(floor)}" if floor else ""),
          both("start_created"), times("start_created"),
          lambda: "pass" if s.med(a("localpv", "start_created")) <= 1.5
          else "**missed**" + (f" (the floor alone: {num(floor['median'])} s)" if floor and floor["median"] > 1.5 else ""))
    row18(s, f"restart with {pvs:,} PVs in the cluster -> ready", "<= the reference's",
          ours("restart_ready"), both("restart_ready"), times("restart_ready"),
          lambda: "pass" if s.med(a("localpv", "restart_ready")) <= s.med(a("lsp_default", "restart_ready"))
          else "**missed**")
    row18(s, "requests per node-hour at steady state (writes)", "<= the reference's, 0 writes",
          lambda: f"{num(s.med(a('localpv', 'steady_total')))} ({num(s.med(a('localpv', 'steady_writes')))} writes)",
          lambda: "; ".join(f"{lsp(k)}: {num(s.med(a(k, 'steady_total')))} ({num(s.med(a(k, 'steady_writes')))} writes)"
                            for k in ("lsp_default", "lsp_1s")),
          lambda: ratio_of(s.med(a("localpv", "steady_total")), s.med(a("lsp_default", "steady_total")), "as many"),
          lambda: "pass" if s.med(a("localpv", "steady_total")) <= s.med(a("lsp_default", "steady_total"))
          and s.get(a("localpv", "steady_writes"))["max"] == 0 else "**missed**")
    row18(s, f"agent memory, {pvs:,} PVs of other nodes ({pvs // 10:,} in brackets)",
          "<= 1/4 of the reference's, flat in cluster size (within 10% or 2 MiB of the 1,000 figure)",
          lambda: f"{show(s.get(a('localpv', 'rss_large')))} ({show(s.get(a('localpv', 'rss_small')))})",
          lambda: "; ".join(f"{lsp(k)}: {show(s.get(a(k, 'rss_large')))} ({show(s.get(a(k, 'rss_small')))})"
                            for k in ("lsp_default", "lsp_1s")),
          lambda: ratio_of(s.med(a("localpv", "rss_large")), s.med(a("lsp_default", "rss_large")), "of the memory"),
          lambda: "pass" if s.med(a("localpv", "rss_large")) * 4 <= s.med(a("lsp_default", "rss_large"))
          and flat(s.med(a("localpv", "rss_small")), s.med(a("localpv", "rss_large"))) else "**missed**")
    recycled = sorted((int(k.split("_")[1]), k) for k in s.figures
                      if k.startswith("agent.localpv.recycle_") and k.endswith("_files"))
    for files, key in recycled:
        m = key.split(".")[-1]
        row18(s, f"Released -> Available, volume with {files:,} files", "(no target)",
              ours(m), both(m), times(m), lambda: "-")
    row18(s, "a bind mount (from outside the volume) inside a released volume", "never deleted through, never leaked",
          lambda: show(s.get(a("localpv", "bind_mount"))),
          lambda: "; ".join(f"{lsp(k)}: {show(s.get(a(k, 'bind_mount')))}" for k in ("lsp_default", "lsp_1s")),
          lambda: "-",
          lambda: "pass" if s.get(a("localpv", "bind_mount"))["text"].startswith("refused") else "**missed**")
    sizes = sorted(int(k.split("_")[2]) for k in s.figures
                   if k.startswith("agent.localpv.event_created_") and k.endswith("_disks"))
    if not sizes:
        sizes = [10, 1000, 5000]  # what benches/agent.rs measures by default; the row then says "not measured"
    cost = lambda n: s.get(f"agent.localpv.event_created_{n}_disks")
    row18(s, "discovery cost per mount event at " + ", ".join(f"{n:,}" for n in sizes) + " disks (mount -> PV created)",
          "flat: the largest within 2x of the smallest",
          lambda: " / ".join(num(cost(n)["median"]) for n in sizes) + " ms",
          lambda: "-",
          lambda: f"{cost(sizes[-1])['median'] / cost(sizes[0])['median']:.2f}x from {sizes[0]:,} to {sizes[-1]:,}",
          lambda: "pass" if cost(sizes[-1])["median"] <= 2 * cost(sizes[0])["median"] else "**missed**")


def ratio_of(ours, theirs, what):
    if theirs == 0:
        return "-"
    return f"{ours / theirs:.2f}x {what}"


def flat(small, large):
    return large - small <= max(2.0, 0.1 * small)


# Issue 34's targets, per 1,000 agents: (measure, what, the most localpv may add as a fraction of the reference's).
FLEET_TARGETS = (
    ("per1000.apiserver_rss", "API server memory added", 0.5, "<= 1/2 of the reference's"),
    ("per1000.steady.apiserver_cpu", "API server CPU added, steady", 1.0, "<= the reference's"),
    ("per1000.restart.apiserver_cpu", "API server CPU added, rolling restart", 0.5, "<= 1/2 of the reference's"),
    ("per1000.restart.rps", "API server requests/s added, rolling restart", 0.5, "<= 1/2 of the reference's"),
)


def fleet_rows(s):
    """Issues 18 and 34 (benches/fleet.rs, `fleet.<localpv|localpv-narrow|reference>.<measure>`): what the agents add
    to the API server per 1,000 nodes. The chart's default is the narrow watch (`localpv-narrow`, admission policy
    in force); the wide watch (`localpv`) is what runs without the policy."""
    if not any(k.startswith("fleet.") for k in s.figures):
        return
    narrow = "localpv-narrow" if any(k.startswith("fleet.localpv-narrow.") for k in s.figures) else "localpv"
    targets = list(FLEET_TARGETS)
    # NB: the live heap after a forced collection, where the run measured it (from 2026-11-29), is what the agents
    # add; resident memory moves by tens of MiB with the collector's timing.
    heap = "per1000.apiserver_live_heap"
    if f"fleet.{narrow}.{heap}" in s.figures and f"fleet.reference.{heap}" in s.figures:
        targets[0] = (heap, "API server memory added (live heap after a forced collection)") + FLEET_TARGETS[0][2:]
    for m, what, most, target in targets:
        ours, wide, theirs = f"fleet.{narrow}.{m}", f"fleet.localpv.{m}", f"fleet.reference.{m}"

        def verdict(o=ours, t=theirs, most=most):
            # NB: a fleet that adds nothing (or less than the API server alone) passes any share of the reference's.
            return "pass" if s.med(o) <= max(0.0, most * s.med(t)) or s.med(o) <= 0 else "**missed**"

        row18(s, f"fleet, per 1,000 agents: {what} (localpv under the admission policy; without it "
                 f"{show_or_missing(s, wide)})",
              target, lambda k=ours: show(s.get(k)), lambda k=theirs: show(s.get(k)),
              lambda o=ours, t=theirs: ratio_of(s.med(o), s.med(t), "of the reference's"), verdict)
    # NB: rates during a rolling restart grow with its pace (an agent ready sooner restarts the fleet faster); the
    # totals per agent restarted are what a rollout costs whatever its pace.
    for measure, unit, what in (("apiserver_cpu", "cpu-s", "API server CPU-seconds"), ("rps", "requests", "requests")):
        def per_agent(k, measure=measure):
            extra = s.med(f"fleet.{k}.restart.{measure}") - s.med(f"fleet.{k}.baseline.{measure}")
            return max(extra, 0.0) * s.med(f"fleet.{k}.restart_secs") / s.med("fleet.nodes")
        row18(s, f"fleet: {what} per agent restarted (rolling restart; without the policy "
                 f"{per_agent_or_missing(s, per_agent, 'localpv', unit)})",
              "(no target: what a rollout costs at any pace)",
              lambda k=narrow, f=per_agent, u=unit: f"{num(f(k))} {u}",
              lambda f=per_agent, u=unit: f"{num(f('reference'))} {u}",
              lambda k=narrow, f=per_agent: ratio_of(f(k), f("reference"), "of the reference's"), lambda: "-")
    churn = lambda k: f"fleet.{k}.per1000.churn.bytes"
    row18(s, "fleet, per 1,000 agents: bytes sent while PVs of other nodes are created and deleted "
             f"(without the policy {show_or_missing(s, churn('localpv'))})",
          "flat in the PVs on other nodes (a narrow agent gets none of their events)",
          lambda: show(s.get(churn(narrow))), lambda: show(s.get(churn("reference"))),
          lambda: ratio_of(s.med(churn(narrow)), s.med(churn("reference")), "of the reference's"),
          lambda: "pass" if s.med(churn(narrow)) <= 0.01 * max(s.med(churn("localpv")), 1.0) else "**missed**")
    watches = lambda k: f"fleet.{k}.watches_per_agent"
    row18(s, f"fleet: watches each agent holds (without the policy {show_or_missing(s, watches('localpv'))})", "<= 2",
          lambda: show(s.get(watches(narrow))), lambda: show(s.get(watches("reference"))),
          lambda: ratio_of(s.med(watches(narrow)), s.med(watches("reference")), "of the reference's"),
          # NB: watches are whole; the per-agent figure is a difference of medians over samples where one of the
          # control plane's own watches may be re-opening (its baseline reads 99-100), so it is rounded.
          lambda: "pass" if round(s.med(watches(narrow))) <= 2 else "**missed**")


def per_agent_or_missing(s, per_agent, kind, unit):
    try:
        return f"{num(per_agent(kind))} {unit}"
    except Missing:
        return "not measured"


def show_or_missing(s, key):
    f = s.figures.get(key)
    return show(f) if f else "not measured"


def wipe_rows(s):
    """Our wipe against `rm -rf --one-file-system`: a stand-in for a plain recursive delete, not the reference."""
    for key in sorted(k for k in s.figures if k.startswith("wipe.fs.") and k.endswith(".rm_rf")):
        base = key[: -len(".rm_rf")]
        ours_key = f"{base}.localpv_c2"
        if ours_key not in s.figures:
            continue
        ours, rm = s.figures[ours_key], s.figures[key]
        _, _, fs, files = base.split(".")
        s.ratio_row(
            f"wipe of {int(files):,} files on {fs}, 2 workers (the default)",
            ours_key,
            f"`rm -rf --one-file-system` (a stand-in, not the reference): {show(rm)}",
            f"{rm['median'] / ours['median']:.2f}x as fast",
            "at least as fast",
            "pass" if ours["median"] <= rm["median"] else "**missed**",
        )


def target_rows(s):
    extender_targets(s)
    s.target_row(
        8,
        "zero write requests at steady state (node agent, per node per hour)",
        "agent.localpv.steady_writes",
        lambda f: f"{num(f['median'])} writes/h",
        lambda f: f["max"] == 0,
    )
    s.target_row(
        3,
        "a new mount becomes a PV within a second (slowest of the one-by-one mounts)",
        "agent.localpv.one_created",
        lambda f: f"max {num(f['max'])} ms, median {num(f['median'])} ms",
        lambda f: f["max"] < 1000,
    )
    s.target_row(
        5,
        "p99 filter decision under 1 ms at 5,000 nodes with `NodeNames`",
        "extender.filter_p99_5000_nodenames_1claim_pure",
        lambda f: f"p99 {num(f['median'])} ms",
        lambda f: f["median"] < 1.0,
    )
    s.target_row(
        5,
        "decoding a 5,000-Node request under 50 ms (judged on p99)",
        "extender.decode_5000_nodes_p99",
        lambda f: f"p99 {num(f['median'])} ms",
        lambda f: f["median"] < 50.0,
    )


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


SECTIONS = (
    ("agent", "Node agent", "bench/agent.sh", "cargo bench --bench agent"),
    ("scheduler", "Scheduler throughput", "bench/scheduler.sh", "cargo bench --bench scheduler"),
    ("extender", "Scheduler extender", "bench/extender.sh", "cargo bench --bench extender"),
    ("wipe", "Safe wipe", "bench/wipe.sh", "examples/wipe_bench.rs"),
    ("failure", "A failing disk: detection and recovery", "bench/failure.sh", "tests/realnode/recovery.rs"),
    ("fleet", "Fleet simulation", "bench/fleet.sh", "cargo bench --bench fleet"),
)


def render(out, figures, peers, env, s):
    p = []
    p.append("# Benchmarks\n")
    p.append(
        f"Generated by `bench/run.sh` on {env.get('started', '?')} (finished {env.get('finished', '?')}) at commit "
        f"{env.get('commit', '?')}. Every number on this page is that command's output; to change the page, run it "
        "again (as root, after the README's test command has built the binaries). The machines are shared and "
        "noisy, so every figure is a median with its spread (min-max) over the repeats named beside it, and the "
        "load average is recorded with each part.\n"
    )
    parts = [("peers", "Peers")] + [(name, title) for name, title, _, _ in SECTIONS]
    reruns = [f"{title} ({env[name + '_rerun']})" for name, title in parts if name + "_rerun" in env]
    if reruns:
        p.append(
            "Parts measured again later with `LOCALPV_BENCH_PARTS` (their figures replace the full run's, here and "
            "in the summary): " + "; ".join(reruns) + ".\n"
        )
    p.append("## Summary: issue 18's targets, side by side\n")
    p.append(
        "Each row measured in one run, localpv and the peer interleaved on the same control plane and the same kind "
        "of disks. The reference provisioner (sig-storage-local-static-provisioner) runs with its default discovery "
        "period (10 s, as operators run it) and with `--discovery-period=1s`; the ratio is against the default.\n"
    )
    p.append(table(("measure", "localpv", "reference", "ratio", "target", "verdict"), s.ratios) + "\n")
    if s.missing:
        p.append(
            "Not in the recorded run (its part has not run since the row was added; rerun it with "
            "`LOCALPV_BENCH_PARTS`): " + ", ".join(f"`{k}`" for k in sorted(set(s.missing))) + ".\n"
        )
    p.append("Earlier issues' targets:\n")
    p.append(table(("issue", "target", "measured", "verdict"), s.targets) + "\n")
    p.append("## Peers\n")
    p.append("Built by `bench/run.sh` from the source tarballs in `../shared/peers/` (binaries cached outside the "
             "repository, keyed by the tarball's SHA-256):\n")
    p.append(table(("peer", "what", "commit", "tarball SHA-256"),
                   [(x["peer"], x["what"], f"`{x['commit']}`", f"`{x['sha256'][:16]}...`") for x in peers.values()])
             + "\n")
    p.append("## Machine\n")
    loads = [f"{title}: {env[name + '_load']}" for name, title in parts if name + "_load" in env]
    rows = [
        ("CPU", f"{env.get('cpu', '?')}, {env.get('cores', '?')} cores"),
        ("memory", f"{env.get('memory_gib', '?')} GiB"),
        ("system", f"{env.get('os', '?')}, {env.get('kernel', '?')}"),
        ("toolchains", f"{env.get('rustc', '?')}; Go {env.get('go', '?')}"),
        ("control plane", f"Kubernetes {env.get('K8S_VERSION', '?')}, etcd {env.get('ETCD_VERSION', '?')} "
                          "(built by `scripts/k8s-bins.sh`, started by the test harness)"),
        ("load average (1, 5, 15 min)", f"{env.get('load_before', '?')} before, {env.get('load_after', '?')} after"
                                        + ("; before each part: " + "; ".join(loads) if loads else "")),
        ("knobs", ", ".join(f"`{k}={v}`" for k, v in sorted(env.items()) if k.startswith(("LOCALPV_BENCH_", "SIZES",
                  "EXT4", "REPS", "BLOCK_"))) or "defaults"),
        ("command", f"`{env.get('command', 'bench/run.sh')}`" + "".join(
            f"; then `{env[name + '_command']}`" for name, _ in parts if name + "_command" in env)),
    ]
    p.append(table(("", ""), rows) + "\n")
    p.append("## Absolute figures\n")
    for name, title, script, source in SECTIONS:
        p.append(f"### {title}\n")
        md = out / f"{name}.md"
        if not md.exists():
            p.append(f"Command: `{script}` ({source}). Not run in the recorded run.\n")
            continue
        secs = env.get(f"{name}_seconds")
        took = f", took {int(secs) // 60} min {int(secs) % 60} s" if secs else ""
        if f"{name}_rerun" in env:
            took += f"; rerun on {env[name + '_rerun']}"
        p.append(f"Command: `{script}` ({source}{took}). What it printed:\n")
        p.append(md.read_text().strip() + "\n")
    return "\n".join(p)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench/report.py <bench/run.sh output directory>")
    out = Path(sys.argv[1])
    figures, peers, env = load(out)
    s = build_summary(figures, peers, env)
    print(render(out, figures, peers, env, s))


if __name__ == "__main__":
    main()
