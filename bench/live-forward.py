#!/usr/bin/env python3
"""Forwarding rate of netbatch against the Linux kernel, on veth pairs between namespaces.

    h1 (192.0.2.2) ── veth ── [ r1   router   r2 ] ── veth ── h2 (198.51.100.2)
                               192.0.2.1  198.51.100.1      (namespace r)

The router in namespace r is, in turn:

  af_xdp     netbatch with two af_xdp ports (worker pinned to CPU 1)
  af_packet  netbatch with two af_packet ports (worker pinned to CPU 1)
  kernel     the kernel's own IPv4 forwarding, its receive work moved to CPU 1 by RPS

`netbatch flood` in h1, pinned to CPU 0, sends 64 UDP flows of small frames as fast as
it can for --seconds to a socket in h2 that never reads (so h2 drops them without ICMP).
Each kind runs --repeat times, the kinds alternating, each run on a freshly built
topology. Run as root from anywhere:

    python3 bench/live-forward.py [--seconds 5] [--size 64] [--repeat 3] [--json out.json]

What is measured, per run:
  offered    frames the sender put onto h1's link (what the router was offered);
  forwarded  the increase of h2's interface rx_packets over the flood, per second of flood;
  loss       1 - forwarded/offered;
  refused    sends the sender's own socket refused (EAGAIN): with the kernel as router,
             frames queued for CPU 1 stay charged to the sender's send buffer, so this is
             back-pressure, not loss; such frames are not offered;
  cpu0/cpu1  busy share of each CPU over the flood (/proc/stat), netbatch's frames per
             list, its counters and drops, the four interfaces' counters, softnet drops.
A run during which other processes (not this benchmark's) used more than 5% of a CPU is
marked disturbed and run again (at most 6 times in all); medians leave disturbed runs
out when undisturbed ones exist. Every raw number goes to --json.

Only the TEST-NET ranges of RFC 5737 are used, only inside namespaces this script creates
and removes (also on failure and Ctrl-C).
"""

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BINARY = REPO / "target" / "release" / "netbatch"
KINDS = ["af_xdp", "af_packet", "kernel"]
H1_ADDR, R1_ADDR = "192.0.2.2", "192.0.2.1"
H2_ADDR, R2_ADDR = "198.51.100.2", "198.51.100.1"
SENDER_CPU, ROUTER_CPU = 0, 1
# A run is disturbed when processes other than its own used more than this share of one
# CPU over the flood; it is run again, at most MAX_RETRIES times in all.
FOREIGN_LIMIT = 0.05
MAX_RETRIES = 6
# The UDP port netbatch flood sends to; h2 has a socket bound to it that never reads, so
# its kernel drops the flood at the socket instead of answering each datagram with a
# (rate-limited, but routed first) ICMP port unreachable on the router's CPU.
SINK_PORT = 9
SINK = (
    "import socket, time\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)\n"
    f"s.bind(('{H2_ADDR}', {SINK_PORT}))\n"
    "time.sleep(100000)\n"
)


class Failure(Exception):
    """A step of the benchmark went wrong; the message says which."""


def sh(argv, timeout=30, check=True):
    """Runs argv; returns its stdout. Raises Failure with stderr when it fails."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"{' '.join(map(str, argv))}: timed out after {timeout} s") from e
    if check and p.returncode != 0:
        raise Failure(f"{' '.join(map(str, argv))}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def stop_process(p, grace=10.0):
    """Stops a child we started: SIGTERM, then SIGKILL after `grace` seconds."""
    if p is None or p.poll() is not None:
        return
    try:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    except ProcessLookupError:
        pass


def cpu_times():
    """Per-CPU jiffies from /proc/stat: {cpu: {field: value}}."""
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts[0].startswith("cpu") and parts[0] != "cpu":
                out[int(parts[0][3:])] = dict(zip(names, map(int, parts[1:9])))
    return out


def cpu_use(before, after):
    """Per-CPU share of time (percent) in user, system, softirq and idle between samples."""
    use = {}
    for cpu, a in after.items():
        b = before.get(cpu)
        if b is None:
            continue
        d = {k: a[k] - b[k] for k in a}
        total = sum(d.values()) or 1
        use[cpu] = {
            "user": round(100.0 * (d["user"] + d["nice"]) / total, 1),
            "system": round(100.0 * d["system"] / total, 1),
            "softirq": round(100.0 * (d["softirq"] + d["irq"]) / total, 1),
            "idle": round(100.0 * (d["idle"] + d["iowait"]) / total, 1),
            "steal": round(100.0 * d["steal"] / total, 1),
        }
    return use


def softnet():
    """Per-CPU (processed, dropped, time_squeeze) from /proc/net/softnet_stat."""
    rows = []
    with open("/proc/net/softnet_stat") as f:
        for line in f:
            v = [int(x, 16) for x in line.split()]
            rows.append((v[0], v[1], v[2]))
    return rows


def all_cpu_seconds():
    """CPU seconds of every user process, its reaped children included:
    ({pid: (start tick, comm, seconds)}, now in ticks since boot).

    Kernel threads are left out (they run the softirq work of the runs themselves)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        now = float(f.read().split()[0]) * tick
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        pid, ppid = int(d), int(fields[1])
        if pid == 2 or ppid == 2:
            continue
        total = sum(int(x) for x in fields[11:15]) / tick
        out[pid] = (int(fields[19]), head.split("(", 1)[1], total)
    return out, now


def foreign_cpu(before, after, ours):
    """CPU seconds used between two `all_cpu_seconds` by processes not in `ours`, and the
    three largest users."""
    (procs0, t0), (procs1, _) = before, after
    used = []
    for pid, (start, comm, t) in procs1.items():
        if pid in ours:
            continue
        prev = procs0.get(pid)
        if prev and prev[0] == start:
            d = t - prev[2]
        elif start >= t0:
            d = t  # started during the window
        else:
            d = 0.0  # unreadable before: unknown, not counted
        if d > 0:
            used.append((d, f"{comm}[{pid}]"))
    used.sort(reverse=True)
    return round(sum(d for d, _ in used), 2), [f"{n} {d:.2f}s" for d, n in used[:3]]


def process_cpu_seconds(pid):
    """User and system CPU seconds of a process, all threads (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return {"user": int(fields[11]) / tick, "system": int(fields[12]) / tick}


class Topology:
    """The namespaces, veth pairs and processes of one run; `close` removes them all."""

    def __init__(self, kind, tag, workdir):
        self.kind = kind
        self.ns = {n: f"nbf{tag}-{n}" for n in ("h1", "h2", "r")}
        self.dev = {
            "h1": f"nbf{tag}a",
            "r1": f"nbf{tag}r1",
            "r2": f"nbf{tag}r2",
            "h2": f"nbf{tag}b",
        }
        self.where = {"h1": "h1", "r1": "r", "r2": "r", "h2": "h2"}
        self.dir = workdir
        self.created = []
        # Long-lived idle processes, one per namespace: /proc/PID/net/dev shows that
        # namespace's interface counters without starting a process per reading.
        self.keepers = {}
        self.router = None
        self.router_log = None
        self.mac = {}

    def ex(self, n, cmd, timeout=30, check=True):
        """Runs a shell command in namespace n."""
        return sh(["ip", "netns", "exec", self.ns[n], "sh", "-c", cmd], timeout, check)

    def build(self):
        for n in ("h1", "h2", "r"):
            sh(["ip", "netns", "add", self.ns[n]])
            self.created.append(self.ns[n])
            self.ex(
                n,
                "sysctl -qw net.ipv6.conf.all.disable_ipv6=1; "
                "sysctl -qw net.ipv6.conf.default.disable_ipv6=1; ip link set lo up",
            )
        d, ns = self.dev, self.ns
        sh(["ip", "link", "add", d["h1"], "netns", ns["h1"], "type", "veth",
            "peer", "name", d["r1"], "netns", ns["r"]])
        sh(["ip", "link", "add", d["h2"], "netns", ns["h2"], "type", "veth",
            "peer", "name", d["r2"], "netns", ns["r"]])
        self.ex("r", f"ip link set {d['r1']} up; ip link set {d['r2']} up")
        self.ex("h1", f"ip addr add {H1_ADDR}/24 dev {d['h1']}; ip link set {d['h1']} up; "
                      f"ip route add default via {R1_ADDR}")
        self.ex("h2", f"ip addr add {H2_ADDR}/24 dev {d['h2']}; ip link set {d['h2']} up; "
                      f"ip route add default via {R2_ADDR}")
        for n in ("h1", "h2", "r"):
            idle = ["python3", "-c", SINK] if n == "h2" else ["sleep", "100000"]
            self.keepers[n] = subprocess.Popen(
                ["ip", "netns", "exec", ns[n], *idle],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        self.wait_for_sink()
        for dev in ("r1", "r2"):
            self.mac[dev] = self.ex("r", f"cat /sys/class/net/{d[dev]}/address").strip()
        self.ex("h1", f"ip neigh replace {R1_ADDR} lladdr {self.mac['r1']} "
                      f"dev {d['h1']} nud permanent")
        self.ex("h2", f"ip neigh replace {R2_ADDR} lladdr {self.mac['r2']} "
                      f"dev {d['h2']} nud permanent")
        if self.kind == "kernel":
            rps = f"/sys/class/net/{d['r1']}/queues/rx-0/rps_cpus"
            self.ex("r", f"ip addr add {R1_ADDR}/24 dev {d['r1']}; "
                         f"ip addr add {R2_ADDR}/24 dev {d['r2']}; "
                         f"sysctl -qw net.ipv4.ip_forward=1; "
                         f"echo {1 << ROUTER_CPU:x} > {rps}")
            got = self.ex("r", f"cat {rps}").strip().lstrip("0,")
            if got != f"{1 << ROUTER_CPU:x}":
                raise Failure(f"RPS on {d['r1']} reads back as {got!r}")
        else:
            if self.kind == "af_xdp":
                # AF_XDP frames carry no "checksum left to the device" mark, so the hosts
                # checksum in software (as the live test does).
                self.ex("h1", f"ethtool -K {d['h1']} tx off >/dev/null")
                self.ex("h2", f"ethtool -K {d['h2']} tx off >/dev/null")
            self.start_netbatch()

    def wait_for_sink(self):
        """Waits until h2's UDP sink socket is bound (it is h2's keeper process)."""
        deadline = time.monotonic() + 5
        port = f":{SINK_PORT:04X}"
        while time.monotonic() < deadline:
            with open(f"/proc/{self.keepers['h2'].pid}/net/udp") as f:
                if any(line.split()[1].endswith(port) for line in list(f)[1:]):
                    return
            if self.keepers["h2"].poll() is not None:
                break
            time.sleep(0.02)
        raise Failure(f"h2's UDP sink on port {SINK_PORT} did not come up")

    def config(self):
        """The netbatch configuration: two ports of this kind, the worker on ROUTER_CPU."""
        ports = ""
        for name, addr in (("r1", R1_ADDR), ("r2", R2_ADDR)):
            ports += (
                f'\n[[port]]\nname = "{name}"\nkind = "{self.kind}"\n'
                f'interface = "{self.dev[name]}"\naddresses = ["{addr}/24"]\n'
            )
        return (
            '[datapath]\nmode = "list"\nworkers = 1\n'
            f"cores = [{ROUTER_CPU}]\nidle_spin_us = 50\n" + ports
        )

    def start_netbatch(self):
        cfg = self.dir / "router.toml"
        cfg.write_text(self.config())
        self.stats_path = self.dir / "stats.json"
        log_path = self.dir / "router.log"
        self.router_log = log_path
        with open(log_path, "w") as log:
            self.router = subprocess.Popen(
                ["ip", "netns", "exec", self.ns["r"], str(BINARY), "run", str(cfg),
                 "--stats-json", str(self.stats_path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            text = log_path.read_text()
            if "port r2 up" in text:
                return
            if self.router.poll() is not None:
                time.sleep(0.1)
                raise Failure(f"netbatch ({self.kind}) exited with {self.router.returncode}:\n"
                              f"{log_path.read_text().strip()}")
            time.sleep(0.02)
        raise Failure(f"netbatch ({self.kind}) did not say 'port r2 up' within 15 s:\n"
                      f"{log_path.read_text().strip()}")

    def stop_netbatch(self):
        """Stops netbatch with SIGTERM; returns its counters (None if it wrote none)."""
        if self.router is None:
            return None
        p, self.router = self.router, None
        stop_process(p)
        if p.returncode != 0:
            raise Failure(f"netbatch ({self.kind}) ended with {p.returncode}:\n"
                          f"{self.router_log.read_text().strip()}")
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError) as e:
            raise Failure(f"netbatch ({self.kind}) counters: {e}") from e

    def warm_up(self):
        """One ping each way through the router (the router resolves both hosts)."""
        for n, dst in (("h1", H2_ADDR), ("h2", H1_ADDR)):
            for _ in range(3):
                out = self.ex(n, f"ping -c 1 -W 2 {dst}", check=False)
                if " 0% packet loss" in out:
                    break
            else:
                raise Failure(f"{self.kind}: no ping from {n} to {dst} through the router")

    def counters(self):
        """Interface counters of the four veth ends, read through /proc/PID/net/dev."""
        out = {}
        for dev, n in self.where.items():
            name = self.dev[dev]
            with open(f"/proc/{self.keepers[n].pid}/net/dev") as f:
                for line in f:
                    if line.strip().startswith(name + ":"):
                        v = [int(x) for x in line.split(":", 1)[1].split()]
                        out[dev] = {"rx_packets": v[1], "rx_dropped": v[3],
                                    "tx_packets": v[9], "tx_dropped": v[11]}
        return out

    def h2_rx(self):
        with open(f"/proc/{self.keepers['h2'].pid}/net/dev") as f:
            for line in f:
                if line.strip().startswith(self.dev["h2"] + ":"):
                    return int(line.split(":", 1)[1].split()[1])
        raise Failure("h2's interface is gone")

    def close(self):
        stop_process(self.router, grace=5)
        self.router = None
        for k in self.keepers.values():
            stop_process(k, grace=2)
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.created = []


def flood(topo, seconds, size):
    """Runs netbatch flood in h1 on SENDER_CPU; returns what it and the counters saw."""
    argv = ["taskset", "-c", str(SENDER_CPU), "ip", "netns", "exec", topo.ns["h1"],
            str(BINARY), "flood", "--interface", topo.dev["h1"], "--dst-mac",
            topo.mac["r1"], "--src", H1_ADDR, "--dst", H2_ADDR, "--seconds", str(seconds),
            "--size", str(size), "--json"]
    router_pid = topo.router.pid if topo.router else None
    procs0 = all_cpu_seconds()
    dev0, cpu0, soft0 = topo.counters(), cpu_times(), softnet()
    nb0 = process_cpu_seconds(router_pid) if router_pid else None
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ours = {os.getpid(), p.pid, router_pid, *(k.pid for k in topo.keepers.values())}
    samples = []
    try:
        while p.poll() is None:
            samples.append((time.monotonic() - t0, topo.h2_rx()))
            time.sleep(0.1)
        out, err = p.communicate(timeout=seconds + 30)
    finally:
        stop_process(p, grace=2)
    dev1, cpu1, soft1 = topo.counters(), cpu_times(), softnet()
    nb1 = process_cpu_seconds(router_pid) if router_pid else None
    foreign, foreign_top = foreign_cpu(procs0, all_cpu_seconds(), ours)
    if p.returncode != 0:
        raise Failure(f"flood exited with {p.returncode}: {err.strip()}")
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise Failure(f"flood printed no JSON: {out!r} {err!r}")
    sender = json.loads(lines[-1])
    time.sleep(0.3)
    late = topo.counters()
    forwarded = dev1["h2"]["rx_packets"] - dev0["h2"]["rx_packets"]
    # Offered: what went onto h1's link. The sender's refusals are not frames offered:
    # with the kernel as router they are its socket's send buffer pushing back (frames
    # queued for the router's CPU stay charged to it), EAGAIN, nothing lost.
    offered = sender["sent"]
    secs = sender["seconds"]
    # A steady-state rate from the samples, leaving out the first second and the last
    # half second (start-up, and the sender's end).
    steady = None
    inside = [s for s in samples if 1.0 <= s[0] <= seconds - 0.5]
    if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
        steady = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    delta = {dev: {k: dev1[dev][k] - dev0[dev][k] for k in dev1[dev]} for dev in dev1}
    return {
        "sender": sender,
        "offered_pps": offered / secs,
        "refused_pps": sender["not_sent"] / secs,
        "forwarded": forwarded,
        "forwarded_pps": forwarded / secs,
        "forwarded_pps_steady": steady,
        "arrived_after_end": late["h2"]["rx_packets"] - dev1["h2"]["rx_packets"],
        "loss_pct": 100.0 * (1 - forwarded / offered) if offered else None,
        "interfaces": delta,
        "cpu": cpu_use(cpu0, cpu1),
        "softnet": [
            {"cpu": i, "processed": b[0] - a[0], "dropped": b[1] - a[1],
             "time_squeeze": b[2] - a[2]}
            for i, (a, b) in enumerate(zip(soft0, soft1))
        ],
        "foreign_cpu_seconds": foreign,
        "foreign_top": foreign_top,
        "router_cpu_seconds": (
            {k: round(nb1[k] - nb0[k], 2) for k in nb0} if nb0 and nb1 else None
        ),
    }


def netbatch_summary(stats):
    """The counters of netbatch that say where packets went."""
    if not stats:
        return None
    t = stats.get("totals", {})
    ports = {
        p.get("name"): {k: p.get(k) for k in ("rx_packets", "rx_dropped", "rx_nobuf",
                                               "tx_packets", "tx_refused")}
        for p in t.get("ports", [])
    }
    rounds = sum(w.get("worker", {}).get("rounds", 0) for w in stats.get("workers", []))
    lists = [st for w in stats.get("workers", []) for st in w.get("stages", [])
             if st.get("name") == "ip4-forward"]
    calls = sum(st.get("calls", 0) for st in lists)
    return {
        "poll_rounds": rounds,
        # Frames per list through ip4-forward: with af_xdp near the burst (64) when the
        # worker has a queue to work through, a few when it keeps up with what arrives;
        # af_packet hands frames over a ring block at a time, so its lists are full anyway.
        "frames_per_list": (sum(st.get("packets", 0) for st in lists) / calls
                            if calls else None),
        "rx_packets": t.get("rx_packets"),
        "tx_packets": t.get("tx_packets"),
        "dropped_packets": t.get("dropped_packets"),
        "held_packets": t.get("held_packets"),
        "drops": t.get("drops", {}),
        "ports": ports,
    }


def one_run(kind, repeat, attempt, args, workdir):
    tag = f"{os.getpid() % 100000}{repeat}{KINDS.index(kind)}{attempt}"
    run_dir = workdir / f"{kind}-{repeat}-{attempt}"
    run_dir.mkdir()
    topo = Topology(kind, tag, run_dir)
    result = {"kind": kind, "repeat": repeat, "attempt": attempt}
    try:
        topo.build()
        topo.warm_up()
        result.update(flood(topo, args.seconds, args.size))
        if kind != "kernel":
            result["netbatch"] = netbatch_summary(topo.stop_netbatch())
            # What netbatch said: the ports' modes (native or generic XDP, copy or
            # zero-copy, ring sizes) and its counters at stop.
            result["netbatch_log"] = topo.router_log.read_text().splitlines()
    finally:
        topo.close()
        # Let the namespaces' teardown finish before the next run measures anything.
        time.sleep(0.5)
    return result


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_pps(x):
    return "-" if x is None else f"{x / 1e6:.3f} M"


def busy(run, cpu):
    """Percent of CPU `cpu` not idle over the flood."""
    c = run["cpu"].get(cpu) or run["cpu"].get(str(cpu))
    return None if c is None else round(100.0 - c["idle"], 1)


def summarize(runs, failures):
    summary = {}
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        # Runs that another process disturbed are kept in the raw numbers, left out of
        # the medians when undisturbed ones exist.
        clean = [r for r in mine if not r["disturbed"]]
        ok = clean or mine
        summary[kind] = {
            "runs": len(ok),
            "disturbed_runs_left_out": len(mine) - len(ok),
            "offered_pps": median([r["offered_pps"] for r in ok]),
            "refused_pps": median([r["refused_pps"] for r in ok]),
            "forwarded_pps": median([r["forwarded_pps"] for r in ok]),
            "forwarded_pps_all": [round(r["forwarded_pps"]) for r in ok],
            "forwarded_pps_steady": median([r["forwarded_pps_steady"] for r in ok]),
            "loss_pct": median([r["loss_pct"] for r in ok]),
            "cpu0_busy_pct": median([busy(r, SENDER_CPU) for r in ok]),
            "cpu1_busy_pct": median([busy(r, ROUTER_CPU) for r in ok]),
            "frames_per_list": median(
                [(r.get("netbatch") or {}).get("frames_per_list") for r in ok]),
            "errors": [f["error"] for f in failures if f["kind"] == kind],
        }
    base = summary["kernel"]["forwarded_pps"]
    for kind in ("af_xdp", "af_packet"):
        mine = summary[kind]["forwarded_pps"]
        summary[kind]["vs_kernel"] = mine / base if mine is not None and base else None
    return summary


def print_table(summary, args):
    print()
    print(f"IPv4 forwarding h1 -> r -> h2: {args.size}-byte frames, 64 UDP flows, "
          f"{args.seconds:g} s per run, medians of up to {args.repeat} runs")
    head = (f"{'router':<10} {'runs':>4} {'offered pps':>12} {'forwarded pps':>14} "
            f"{'loss %':>7} {'vs kernel':>9} {'refused pps':>12} {'cpu0 %':>7} "
            f"{'cpu1 %':>7} {'list':>5}")
    print(head)
    print("-" * len(head))
    for kind in KINDS:
        s = summary[kind]
        loss = "-" if s["loss_pct"] is None else f"{s['loss_pct']:.1f}"
        ratio = s.get("vs_kernel")
        ratio = "" if kind == "kernel" else ("-" if ratio is None else f"{ratio:.2f}")
        pct = lambda x: "-" if x is None else f"{x:.0f}"
        lst = "" if s["frames_per_list"] is None else f"{s['frames_per_list']:.1f}"
        print(f"{kind:<10} {s['runs']:>4} {fmt_pps(s['offered_pps']):>12} "
              f"{fmt_pps(s['forwarded_pps']):>14} {loss:>7} {ratio:>9} "
              f"{fmt_pps(s['refused_pps']):>12} {pct(s['cpu0_busy_pct']):>7} "
              f"{pct(s['cpu1_busy_pct']):>7} {lst:>5}")
    print()
    print("offered: frames onto h1's link; forwarded: frames h2's interface received, per "
          "second of flood;\nloss: 1 - forwarded/offered; refused: sends the sender's "
          "socket refused (not offered);\ncpu0 (sender) and cpu1 (netbatch's worker, "
          "busy polling included, or the RPS target): busy %;\nlist: netbatch's frames "
          "per list (af_xdp: a few = the worker keeps up; af_packet: whole ring blocks).")
    print()
    for kind in ("af_xdp", "af_packet"):
        r = summary[kind].get("vs_kernel")
        print(f"{kind}/kernel = {'-' if r is None else f'{r:.3f}'}")
    for kind in KINDS:
        if summary[kind]["disturbed_runs_left_out"]:
            print(f"{kind}: {summary[kind]['disturbed_runs_left_out']} run(s) disturbed "
                  f"by other processes left out of the medians")
        for e in summary[kind]["errors"]:
            lines = [ln for ln in e.strip().splitlines() if ln.strip()][:5]
            print(f"{kind} failed: " + "\n    ".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="flood duration per run")
    ap.add_argument("--size", type=int, default=64, help="frame size, FCS included")
    ap.add_argument("--repeat", type=int, default=3, help="runs per router kind")
    ap.add_argument("--json", type=Path, help="write every raw number here")
    ap.add_argument("--no-build", action="store_true", help="use the binary as it is")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("live-forward: run as root (it creates network namespaces)")
    missing = [t for t in ("ip", "taskset", "ethtool", "ping") if shutil.which(t) is None]
    if missing:
        sys.exit(f"live-forward: missing tools: {', '.join(missing)}")
    if (os.cpu_count() or 1) < 2:
        sys.exit("live-forward: needs two CPUs (sender on 0, router on 1)")
    if args.seconds < 1 or args.repeat < 1:
        sys.exit("live-forward: --seconds must be at least 1 and --repeat at least 1")

    # A SIGTERM ends the run the way Ctrl-C does: through the clean-up below.
    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    # Ctrl-C too, even when started with SIGINT ignored (as background jobs of scripts are).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    if not args.no_build:
        print("building: cargo build --release --locked -p netbatch", flush=True)
        b = subprocess.run(["cargo", "build", "--release", "--locked", "-p", "netbatch"],
                           cwd=REPO)
        if b.returncode != 0:
            sys.exit("live-forward: the build failed")
    if not BINARY.exists():
        sys.exit(f"live-forward: no binary at {BINARY}")

    runs, failures = [], []
    skip = set()
    retries_left = MAX_RETRIES
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="netbatch-live-forward-"))
    try:
        for rep in range(args.repeat):
            order = KINDS[rep % len(KINDS):] + KINDS[:rep % len(KINDS)]
            for kind in order:
                attempt = 0
                while kind not in skip:
                    print(f"run {rep + 1}/{args.repeat}: {kind:<9} ", end="", flush=True)
                    try:
                        r = one_run(kind, rep, attempt, args, workdir)
                    except Failure as e:
                        print("failed")
                        print(f"  {kind}: {e}", file=sys.stderr)
                        failures.append({"kind": kind, "repeat": rep, "error": str(e)})
                        if "did not say" in str(e) or "exited" in str(e):
                            # The router cannot start: trying again would only cost time.
                            skip.add(kind)
                        break
                    r["disturbed"] = r["foreign_cpu_seconds"] > FOREIGN_LIMIT * args.seconds
                    runs.append(r)
                    note = ""
                    if r["disturbed"]:
                        note = (f"  (disturbed: other processes used "
                                f"{r['foreign_cpu_seconds']:.2f} CPU s: "
                                f"{', '.join(r['foreign_top'])})")
                    print(f"offered {r['offered_pps'] / 1e6:.3f} Mpps, "
                          f"forwarded {r['forwarded_pps'] / 1e6:.3f} Mpps{note}", flush=True)
                    if not r["disturbed"] or retries_left == 0:
                        break
                    retries_left -= 1
                    attempt += 1
                    time.sleep(2)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaned up", file=sys.stderr)
        sys.exit(130)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    summary = summarize(runs, failures)
    if args.json:
        doc = {
            "settings": {"seconds": args.seconds, "size": args.size, "repeat": args.repeat,
                         "flows": 64, "sender_cpu": SENDER_CPU, "router_cpu": ROUTER_CPU,
                         "foreign_limit": FOREIGN_LIMIT, "kernel": platform.release(),
                         "cpus": os.cpu_count()},
            "summary": summary,
            "runs": runs,
            "failures": failures,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    print_table(summary, args)
    print(f"\n({time.monotonic() - started:.0f} s for the runs)")
    if args.json:
        print(f"raw numbers: {args.json}")


if __name__ == "__main__":
    main()
