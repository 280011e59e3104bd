#!/usr/bin/env python3
"""Forwarding rate of netbatch against the Linux kernel, on veth pairs between namespaces.

    h1 (192.0.2.2) ── veth ── [ r1   router   r2 ] ── veth ── h2 (198.51.100.2)
                               192.0.2.1  198.51.100.1      (namespace r)

The router in namespace r is, in turn:

  af_xdp     netbatch with two af_xdp ports (worker pinned to CPU 1)
  af_packet  netbatch with two af_packet ports (worker pinned to CPU 1)
  kernel     the kernel's own IPv4 forwarding

and, with --kinds naming them, the same with source NAT on r2 (each frame tracked and
translated: the flood is one-way, so every connection stays unreplied and no flow is
offloaded), so that NAT's cost is measured against forwarding on both sides:

  kernel_nat   the kernel with nftables `oifname r2 masquerade` (nf_conntrack, nf_nat)
  af_xdp_nat   netbatch's af_xdp with `[[nat.postrouting.rule]] out = "r2"
               action = "masquerade"` (connection tracking, nat stages)

and, with --kinds naming them, DPDK 22.11's l3fwd (LPM; Debian's example built by
bench/dpdk/build-l3fwd with a frame counter) on the same veth ends, on CPU 1, as shipped
(it polls without pause), its routes the two subnets and the hosts' MACs its next hops:

  l3fwd_af_xdp     with the af_xdp poll-mode driver (copy mode on veth, as netbatch's)
  l3fwd_af_packet  with the af_packet poll-mode driver

and, between two vhost-user sockets instead of veth (no namespace, no kernel in the
path), with `netbatch flood --via vhost_user` as source and sink (a virtio-net driver on
both sockets, one thread on CPU 0: 64 flows of UDP from 192.0.2.2 to 198.18.0.2 sent on
one, the other drained), the router the sockets' server on CPU 1:

  vhost_user   netbatch with two vhost_user ports (its worker pinned to CPU 1)
  l3fwd_vhost  l3fwd with two net_vhost ports on the same sockets, CPU 1

There offered is what the router took off the source's transmit queue, forwarded what
the sink's receive queue got, each over --seconds, and ns/fr the router process's CPU
time per frame forwarded.

Where the work lands. On veth a frame's receive work runs where it is scheduled: by
default inline on the sending CPU (veth hands it to the peer's backlog or NAPI on the
CPU that transmitted). Here every router's receive work runs on CPU 1, the router's:
r1 receives through veth's NAPI (the XDP program netbatch attaches turns it on for
af_xdp, GRO on r1 for the other two), in threaded mode, its kernel thread pinned to CPU 1;
h1 has transmit checksumming (and so TSO) off, which veth requires before it hands a
frame to NAPI. (AF_XDP busy polling, which would run r1's NAPI in netbatch's own calls,
needs a zero-copy socket on Linux 6.13 and later: veth's copy-mode sockets get no NAPI
to poll, so the NAPI thread and netbatch's worker share CPU 1.) So CPU 1 carries the router's receive (for af_xdp the XDP program, the
redirect and the copy into the pool), its forwarding and its transmit, and h2's receive
(r2's transmit runs h2's backlog on the transmitting CPU, the same for every kind: h2
drops the flood at a socket that never reads). CPU 0 carries only the source.

The source is `netbatch flood` in h1, pinned to CPU 0, sending 64 UDP flows of small
frames as fast as it can (or at --rate) for --seconds. By default (`--sender af_xdp`)
it writes generator frames into pool buffers and puts them on an XSK TX ring as they
are; `af_packet` (sendmmsg) is slower on the same CPU. `--sender xdp` has the kernel
make them: an XDP program run on live frames (BPF_PROG_TEST_RUN, as xdp-trafficgen)
gives each a UDP source port among 64 and redirects it into h1's veth, with no socket
buffer and no completion left for r1's CPU; but the kernel sends each run's frames
back to back, far faster than any router drains r1's 256-entry veth ring, so most are
dropped at that ring even at a low average --rate: the figures then measure the ring,
not the router (kept for experiments, not the default). Each kind runs --repeat times,
the kinds alternating, each run on a freshly built topology. Run as root from anywhere:

    python3 bench/live-forward.py [--seconds 5] [--size 64] [--repeat 3] [--json out.json]

What is measured, per run:
  offered    frames the source's kernel took: what was offered to the router (the source
             never waits: a send its socket refuses, a full TX ring or EAGAIN, is
             counted as refused and not retried; that is the source's own limit, its
             kernel's transmit path); frames r1's queue had no room for are dropped at
             h1's veth (h1 tx_dropped) and count as the router's loss;
  forwarded  the increase of h2's interface rx_packets over the flood, per second;
  loss       1 - forwarded/offered;
  cores      each CPU's busy share over the flood (/proc/stat: user, system, softirq),
             and the CPU seconds of the source, the router process (netbatch's worker),
             r1's NAPI thread and the ksoftirqd threads, so each core's work is named;
  also       netbatch's frames per list, counters and drops, the four interfaces'
             counters, softnet counters.
The source outran a router when the router forwarded clearly less than it was offered
(it dropped at its input what it had no time for) while its CPU was busy all along: the
table says so per kind.
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
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import Failure, sh

REPO = Path(__file__).resolve().parent.parent
BINARY = REPO / "target" / "release" / "netbatch"
# Where bench/dpdk/build-l3fwd puts DPDK's l3fwd (built when a run asks for an l3fwd kind).
L3FWD = REPO / "target" / "dpdk-l3fwd" / "l3fwd" / "build" / "l3fwd"
KINDS = ["af_xdp", "af_packet", "kernel", "kernel_nat", "af_xdp_nat", "l3fwd_af_xdp",
         "l3fwd_af_packet", "vhost_user", "l3fwd_vhost"]
# What --kinds runs by default; the DPDK peers (bench/dpdk/build-l3fwd) on request.
DEFAULT_KINDS = ["af_xdp", "af_packet", "kernel"]
# netbatch's kinds (its port kinds), DPDK l3fwd's (its poll-mode driver on the same veth).
NETBATCH_KINDS = ("af_xdp", "af_packet", "af_xdp_nat")
# Kinds that translate on r2, and the kind each is measured against (the same router
# without NAT): the ratio of the two is NAT's cost.
NAT_KINDS = {"kernel_nat": "kernel", "af_xdp_nat": "af_xdp"}
# The kernel's routers (its own forwarding, no process of ours).
KERNEL_KINDS = ("kernel", "kernel_nat")
# nftables' source NAT on r2 for kernel_nat (nft -f): Linux's nf_nat, the yardstick.
NFT_MASQUERADE = """table ip nbf_nat {{
  chain post {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname "{r2}" masquerade
  }}
}}
"""
L3FWD_PMD = {"l3fwd_af_xdp": "net_af_xdp", "l3fwd_af_packet": "net_af_packet"}
# Routers between two vhost-user sockets (no veth, no namespace): netbatch's vhost_user
# ports, or l3fwd's net_vhost ports, with netbatch's virtio-net driver as source and sink.
VHOST_KINDS = ("vhost_user", "l3fwd_vhost")
# The vhost-user peers' MACs: the sink's is the route's next hop; the source sends to the
# router's port (l3fwd takes any: it runs promiscuous).
VHOST_SINK_MAC, VHOST_SOURCE_MAC, VHOST_ROUTER_MAC = (
    "02:00:00:00:02:02", "02:00:00:00:01:01", "02:00:00:00:00:0a")
# The source's flows: UDP from h1's subnet to a benchmark address
# (RFC 2544's 198.18.0.0/15) routed out of the sink's port.
VHOST_DST = "198.18.0.2"
H1_ADDR, R1_ADDR = "192.0.2.2", "192.0.2.1"
H2_ADDR, R2_ADDR = "198.51.100.2", "198.51.100.1"
SENDER_CPU, ROUTER_CPU = 0, 1
# The source outran the router when it offered at least this much more than was forwarded.
OUTRUN_MARGIN = 1.05
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
    for pid, comm, fields in proc_stats():
        if pid == 2 or fields[1] == "2":
            continue
        total = sum(int(x) for x in fields[11:15]) / tick
        out[pid] = (int(fields[19]), comm, total)
    return out, now


def proc_stats():
    """(pid, comm, the fields after comm) of every process /proc/PID/stat still shows."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        yield int(d), head.split("(", 1)[1], tail.split()


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


def kernel_threads(prefix):
    """{pid: comm} of the kernel threads whose name starts with `prefix`."""
    return {pid: comm for pid, comm, fields in proc_stats()
            if fields[1] == "2" and comm.startswith(prefix)}


def cpu_seconds(pids):
    """Summed user + system CPU seconds of `pids` (those still there)."""
    total = 0.0
    for pid in pids:
        t = process_cpu_seconds(pid)
        if t:
            total += t["user"] + t["system"]
    return total


class Topology:
    """The namespaces, veth pairs and processes of one run; `close` removes them all."""

    def __init__(self, kind, tag, workdir, napi_nice=0, idle_spin_us=50):
        self.kind = kind
        self.napi_nice = napi_nice
        self.idle_spin_us = idle_spin_us
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
        # r1's NAPI kernel threads (threaded mode, pinned to ROUTER_CPU).
        self.napi = {}

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
        # veth hands a frame to the peer's NAPI only when the sender has no TSO, which
        # goes with transmit checksumming; AF_XDP frames carry no "checksum left to the
        # device" mark either, so the hosts checksum in software (as the live test does).
        self.ex("h1", f"ethtool -K {d['h1']} tx off >/dev/null")
        self.ex("h2", f"ethtool -K {d['h2']} tx off >/dev/null")
        # GRO turns veth's NAPI on (for af_xdp the XDP program would too; the same
        # switch for every kind).
        self.ex("r", f"ethtool -K {d['r1']} gro on >/dev/null")
        if self.kind in KERNEL_KINDS:
            self.ex("r", f"ip addr add {R1_ADDR}/24 dev {d['r1']}; "
                         f"ip addr add {R2_ADDR}/24 dev {d['r2']}; "
                         f"sysctl -qw net.ipv4.ip_forward=1")
            if self.kind == "kernel_nat":
                rules = self.dir / "nat.nft"
                rules.write_text(NFT_MASQUERADE.format(r2=d["r2"]))
                self.ex("r", f"nft -f {rules}")
        elif self.kind in L3FWD_PMD:
            self.start_l3fwd()
        else:
            self.start_netbatch()
        self.thread_napi("r1")

    def thread_napi(self, dev):
        """Puts dev's NAPI in threaded mode and pins its threads to ROUTER_CPU."""
        name = self.dev[dev]
        before = kernel_threads("napi/")
        self.ex("r", f"echo 1 > /sys/class/net/{name}/threaded")
        if self.ex("r", f"cat /sys/class/net/{name}/threaded").strip() != "1":
            raise Failure(f"threaded NAPI on {name} did not take")
        # Thread names are napi/<device>-<id>, cut to 15 characters.
        prefix = f"napi/{name}-"[:15]
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            new = {p: c for p, c in kernel_threads("napi/").items()
                   if p not in before and c.startswith(prefix)}
            if new:
                break
            time.sleep(0.02)
        else:
            raise Failure(f"no NAPI thread appeared for {name}")
        for pid in new:
            os.sched_setaffinity(pid, {ROUTER_CPU})
            if os.sched_getaffinity(pid) != {ROUTER_CPU}:
                raise Failure(f"NAPI thread {pid} of {name} not pinned to CPU {ROUTER_CPU}")
            if self.napi_nice:
                os.setpriority(os.PRIO_PROCESS, pid, self.napi_nice)
        self.napi = new

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
        kind = NAT_KINDS.get(self.kind, self.kind)
        for name, addr in (("r1", R1_ADDR), ("r2", R2_ADDR)):
            ports += (
                f'\n[[port]]\nname = "{name}"\nkind = "{kind}"\n'
                f'interface = "{self.dev[name]}"\naddresses = ["{addr}/24"]\n'
            )
        if self.kind in NAT_KINDS:
            ports += '\n[[nat.postrouting.rule]]\nout = "r2"\naction = "masquerade"\n'
        return (
            '[datapath]\nmode = "list"\nworkers = 1\n'
            f"cores = [{ROUTER_CPU}]\nidle_spin_us = {self.idle_spin_us}\n" + ports
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

    def start_l3fwd(self):
        """DPDK's l3fwd (LPM) in r on ROUTER_CPU, as shipped but for the frame counter
        bench/dpdk/build-l3fwd adds: its poll-mode driver (af_xdp or af_packet) on r1 and
        r2, h1's subnet out of port 0 and h2's out of port 1, the hosts' MACs as each
        port's next hop (it resolves nothing), 4 KiB pages (`--no-huge`) as netbatch's
        run here, `--no-pci` so that it touches no device of this machine. It polls its
        ports without pause, as shipped."""
        d = self.dev
        mac = {n: self.ex(n, f"cat /sys/class/net/{d[n]}/address").strip() for n in ("h1", "h2")}
        (self.dir / "v4.cfg").write_text(f"R{H1_ADDR.rsplit('.', 1)[0]}.0/24 0\n"
                                         f"R{H2_ADDR.rsplit('.', 1)[0]}.0/24 1\n")
        (self.dir / "v6.cfg").write_text("R2001:db8::/32 1\n")
        pmd = L3FWD_PMD[self.kind]
        cmd = ["ip", "netns", "exec", self.ns["r"], str(L3FWD), "-l", str(ROUTER_CPU), "-n", "1",
               "--no-pci", "--no-huge", "-m", "1024", "--file-prefix", self.ns["r"],
               "--log-level", "lib.eal:error",
               f"--vdev={pmd}0,iface={d['r1']}", f"--vdev={pmd}1,iface={d['r2']}", "--",
               "-p", "0x3", f"--config=(0,0,{ROUTER_CPU}),(1,0,{ROUTER_CPU})", "-P",
               "--parse-ptype", "--lookup=lpm", f"--rule_ipv4={self.dir / 'v4.cfg'}",
               f"--rule_ipv6={self.dir / 'v6.cfg'}",
               f"--eth-dest=0,{mac['h1']}", f"--eth-dest=1,{mac['h2']}"]
        log_path = self.dir / "router.log"
        self.router_log = log_path
        with open(log_path, "w") as log:
            self.router = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "entering main loop" not in log_path.read_text():
            if self.router.poll() is not None or time.monotonic() > deadline:
                raise Failure(f"l3fwd ({self.kind}) did not start:\n"
                              f"{log_path.read_text().strip()[-3000:]}")
            time.sleep(0.05)

    def stop_l3fwd(self):
        """Stops l3fwd with SIGINT; returns its counters (frames its loop received, each
        port's counters)."""
        p, self.router = self.router, None
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise Failure(f"l3fwd ({self.kind}) did not stop on SIGINT")
        text = self.router_log.read_text()
        m = re.search(r"l3fwd-count lcore=\d+ frames=(\d+)", text)
        ports = {int(g[0]): {"ipackets": int(g[1]), "opackets": int(g[2]), "imissed": int(g[3]),
                             "oerrors": int(g[4])}
                 for g in re.findall(r"l3fwd-port port=(\d+) ipackets=(\d+) opackets=(\d+) "
                                     r"imissed=(\d+) oerrors=(\d+)", text)}
        if not m or len(ports) != 2:
            raise Failure(f"l3fwd ({self.kind}) printed no counters:\n{text.strip()[-3000:]}")
        return {"frames": int(m.group(1)), "ports": ports}

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


def flood(topo, args):
    """Runs netbatch flood in h1 on SENDER_CPU; returns what it and the counters saw."""
    seconds, size = args.seconds, args.size
    argv = ["taskset", "-c", str(SENDER_CPU), "ip", "netns", "exec", topo.ns["h1"],
            str(BINARY), "flood", "--interface", topo.dev["h1"], "--dst-mac",
            topo.mac["r1"], "--src", H1_ADDR, "--dst", H2_ADDR, "--seconds", str(seconds),
            "--size", str(size), "--via", args.sender, "--json"]
    if args.rate:
        argv += ["--rate", str(args.rate)]
    router_pid = topo.router.pid if topo.router else None
    softirqd = {p: c for p, c in kernel_threads("ksoftirqd/").items()}
    procs0 = all_cpu_seconds()
    dev0, cpu0, soft0 = topo.counters(), cpu_times(), softnet()
    nb0 = process_cpu_seconds(router_pid) if router_pid else None
    napi0 = cpu_seconds(topo.napi)
    sirq0 = {c: cpu_seconds([p]) for p, c in softirqd.items()}
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    perf = None
    if args.perf:
        # The router's CPU, sampled from half a second into the flood to its last second.
        perf_data = topo.dir / "perf.data"
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-C", str(ROUTER_CPU), "-F", "999", "-o", str(perf_data),
             "--", "sleep", str(max(seconds - 1.0, 0.5))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ours = {os.getpid(), p.pid, router_pid, *(k.pid for k in topo.keepers.values())}
    if perf:
        ours.add(perf.pid)
    samples = []
    sender_cpu = None
    try:
        while p.poll() is None:
            samples.append((time.monotonic() - t0, topo.h2_rx()))
            # The source's own CPU time, read while it runs (its process is `ip`'s child).
            t = cpu_seconds(children(p.pid) | {p.pid})
            sender_cpu = t if t else sender_cpu
            time.sleep(0.1)
        out, err = p.communicate(timeout=seconds + 30)
    finally:
        stop_process(p, grace=2)
    elapsed = time.monotonic() - t0
    profile = None
    if perf:
        perf.wait(timeout=30)
        profile = perf_profile(topo.dir / "perf.data",
                               tasks(router_pid) if router_pid else set(), topo.napi)
    dev1, cpu1, soft1 = topo.counters(), cpu_times(), softnet()
    nb1 = process_cpu_seconds(router_pid) if router_pid else None
    napi1 = cpu_seconds(topo.napi)
    sirq1 = {c: cpu_seconds([p]) for p, c in softirqd.items()}
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
    # Offered: what the source's kernel took. Refused sends (a full TX ring, EAGAIN) are
    # not offered; frames r1's queue had no room for are (h1's tx_dropped): router loss.
    offered = sender["sent"]
    secs = sender["seconds"]
    # A steady-state rate from the samples, leaving out the first second and the last
    # half second (start-up, and the sender's end).
    steady = None
    inside = [s for s in samples if 1.0 <= s[0] <= seconds - 0.5]
    if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
        steady = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    delta = {dev: {k: dev1[dev][k] - dev0[dev][k] for k in dev1[dev]} for dev in dev1}
    use = cpu_use(cpu0, cpu1)
    share = lambda sec: None if sec is None else round(100.0 * sec / elapsed, 1)
    if "cpu_user_seconds" in sender:
        sender_cpu = sender["cpu_user_seconds"] + sender["cpu_system_seconds"]
    threads = {
        "source": share(sender_cpu),
        "router_process": (share(sum(nb1.values()) - sum(nb0.values()))
                           if nb0 and nb1 else None),
        "r1_napi_thread": share(napi1 - napi0) if topo.napi else None,
    }
    for c in sirq1:
        threads[c] = share(sirq1[c] - sirq0.get(c, 0.0))
    # CPU time spent on the router's work (its process, r1's NAPI thread, the router
    # CPU's ksoftirqd), per frame forwarded: what a core of its own would forward is the
    # inverse. Counted by the scheduler tick (4 ms), so it holds while other processes
    # share the CPU, up to what they cost in caches and switches.
    router_s = ((sum(nb1.values()) - sum(nb0.values()) if nb0 and nb1 else 0.0)
                + (napi1 - napi0)
                + sum(sirq1[c] - sirq0.get(c, 0.0) for c in sirq1
                      if c == f"ksoftirqd/{ROUTER_CPU}"))
    return {
        "sender": sender,
        "offered_pps": offered / secs,
        "refused_pps": sender["not_sent"] / secs,
        # Frames r1's receive queue had no room for (veth counts them on both ends).
        "input_dropped_pps": delta["h1"]["tx_dropped"] / secs,
        "forwarded": forwarded,
        "forwarded_pps": forwarded / secs,
        "forwarded_pps_steady": steady,
        "arrived_after_end": late["h2"]["rx_packets"] - dev1["h2"]["rx_packets"],
        "loss_pct": 100.0 * (1 - forwarded / offered) if offered else None,
        "outran": offered >= OUTRUN_MARGIN * forwarded,
        "interfaces": delta,
        "cpu": use,
        "cores": {
            cpu: {"busy": round(100.0 - c["idle"], 1), "user": c["user"],
                  "system": c["system"], "softirq": c["softirq"]}
            for cpu, c in use.items()
        },
        "threads_pct_of_a_cpu": threads,
        "router_cpu_seconds_all": round(router_s, 3),
        "router_cpu_profile": profile,
        "router_ns_per_frame": 1e9 * router_s / forwarded if forwarded else None,
        "source_ns_per_frame": (1e9 * sender_cpu / offered
                                if offered and sender_cpu else None),
        "napi_threads": {str(pid): comm for pid, comm in topo.napi.items()},
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


def perf_profile(data, router_tids, napi):
    """Where the router's CPU went, from `perf record` samples: the share of samples per
    thread (netbatch's threads, r1's NAPI thread, anything else by name) and the top
    symbols of the router's own threads, in % of all samples of the CPU."""
    try:
        out = sh(["perf", "report", "-i", str(data), "--no-children", "--stdio", "-g", "none",
                  "--sort", "pid,sym", "--percent-limit", "0.3"], timeout=120)
    except Failure as e:
        return {"error": str(e)}
    threads, symbols = {}, []
    for line in out.splitlines():
        parts = line.split(None, 1)
        if len(parts) < 2 or not parts[0].endswith("%"):
            continue
        pct = float(parts[0].rstrip("%"))
        # "  TID:COMM  [k] symbol" (a command name may hold spaces)
        tid_comm, _, sym = parts[1].partition("  ")
        tid_s, _, comm = tid_comm.strip().partition(":")
        try:
            tid = int(tid_s)
        except ValueError:
            continue
        who = ("napi" if tid in napi else "netbatch" if tid in router_tids
               else "other:" + comm.strip())
        threads[who] = round(threads.get(who, 0.0) + pct, 2)
        if not who.startswith("other"):
            symbols.append({"thread": who, "symbol": sym.strip(), "pct": pct})
    return {"threads_pct": threads, "top_symbols": symbols[:40]}


def tasks(pid):
    """The thread ids of process `pid` (none once it is gone)."""
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()


def children(pid):
    """The pids of `pid`'s descendants (the source runs under `taskset` and `ip netns`)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        out.update(kids)
        todo.extend(kids)
    return out


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


def vhost_run(kind, tag, run_dir, args):
    """One run of a router between two vhost-user sockets: the router (netbatch's two
    vhost_user ports, or l3fwd's two net_vhost ports, the socket servers, on ROUTER_CPU),
    and `netbatch flood --via vhost_user` on SENDER_CPU sending on socket a and draining
    socket b. Measured over the flood's --seconds: offered (what the router took off the
    source's queue), forwarded (what the sink got), the router's CPU seconds (its
    process) per frame forwarded."""
    a, b = run_dir / "a.sock", run_dir / "b.sock"
    router = log_path = stats_path = None
    try:
        log_path = run_dir / "router.log"
        if kind == "vhost_user":
            cfg = run_dir / "router.toml"
            cfg.write_text(
                '[datapath]\nmode = "list"\nworkers = 1\n'
                f"cores = [{ROUTER_CPU}]\nidle_spin_us = {args.idle_spin_us}\n"
                f'[control]\nsocket = "{run_dir / "ctl.sock"}"\n'
                f'[[port]]\nname = "r1"\nkind = "vhost_user"\nsocket = "{a}"\n'
                f'mac = "{VHOST_ROUTER_MAC}"\naddresses = ["{R1_ADDR}/24"]\n'
                f'[[port]]\nname = "r2"\nkind = "vhost_user"\nsocket = "{b}"\n'
                f'mac = "02:00:00:00:00:0b"\naddresses = ["{R2_ADDR}/24"]\n'
                f'[[neighbour.static]]\nip = "{H2_ADDR}"\nmac = "{VHOST_SINK_MAC}"\n'
                f'dev = "r2"\n'
                f'[[route]]\nprefix = "198.18.0.0/15"\nvia = "{H2_ADDR}"\n')
            stats_path = run_dir / "stats.json"
            with open(log_path, "w") as log:
                router = subprocess.Popen(
                    [str(BINARY), "run", str(cfg), "--stats-json", str(stats_path)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
            ready = lambda: "port r2 up" in log_path.read_text()
        else:
            (run_dir / "v4.cfg").write_text("R192.0.2.0/24 0\nR198.18.0.0/15 1\n")
            (run_dir / "v6.cfg").write_text("R2001:db8::/32 1\n")
            cmd = [str(L3FWD), "-l", str(ROUTER_CPU), "-n", "1", "--no-pci", "--no-huge",
                   "-m", "1024", "--file-prefix", f"nbvhl{os.getpid()}{tag}",
                   "--log-level", "lib.eal:error",
                   f"--vdev=net_vhost0,iface={a},queues=1",
                   f"--vdev=net_vhost1,iface={b},queues=1", "--",
                   "-p", "0x3", f"--config=(0,0,{ROUTER_CPU}),(1,0,{ROUTER_CPU})", "-P",
                   "--parse-ptype", "--lookup=lpm", f"--rule_ipv4={run_dir / 'v4.cfg'}",
                   f"--rule_ipv6={run_dir / 'v6.cfg'}", f"--eth-dest=1,{VHOST_SINK_MAC}"]
            with open(log_path, "w") as log:
                router = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT)
            ready = lambda: "entering main loop" in log_path.read_text()
        deadline = time.monotonic() + 30
        while not (ready() and a.exists() and b.exists()):
            if router.poll() is not None or time.monotonic() > deadline:
                raise Failure(f"{kind}: the router did not start (exited):\n"
                              f"{log_path.read_text().strip()[-3000:]}")
            time.sleep(0.05)
        # Source and sink: netbatch's virtio-net driver on both sockets, in one thread on
        # SENDER_CPU (two busy-polling peers sharing that CPU would take turns by the
        # scheduler's slices, and the router's transmit ring to the one not running
        # would overflow: that measured the scheduler, not the router).
        ours = {os.getpid(), router.pid}
        procs0, cpu0 = all_cpu_seconds(), cpu_times()
        r0 = process_cpu_seconds(router.pid)
        t0 = time.monotonic()
        source = subprocess.run(
            ["taskset", "-c", str(SENDER_CPU), str(BINARY), "flood", "--via", "vhost_user",
             "--socket", str(a), "--sink", str(b), "--src-mac", VHOST_SOURCE_MAC,
             "--dst-mac", VHOST_ROUTER_MAC, "--src", H1_ADDR, "--dst", VHOST_DST,
             "--flows", "64", "--size", str(args.size), "--seconds", str(args.seconds),
             "--json"],
            capture_output=True, text=True, timeout=args.seconds + 60)
        elapsed = time.monotonic() - t0
        if source.returncode != 0:
            raise Failure(f"{kind}: the vhost-user source failed:\n{source.stderr[-3000:]}")
        r1 = process_cpu_seconds(router.pid)
        cpu1 = cpu_times()
        foreign, foreign_top = foreign_cpu(procs0, all_cpu_seconds(), ours)
        flood_out = json.loads(source.stdout)
        offered, forwarded = flood_out["sent"], flood_out["received"]
        source_s = flood_out["cpu_user_seconds"] + flood_out["cpu_system_seconds"]
        if kind == "vhost_user":
            stop_process(router)
            stats = json.loads(stats_path.read_text())
            detail = {"netbatch": netbatch_summary(stats)}
        else:
            router.send_signal(signal.SIGINT)
            router.wait(timeout=20)
            text = log_path.read_text()
            ports = {int(g[0]): {"ipackets": int(g[1]), "opackets": int(g[2]),
                                 "imissed": int(g[3]), "oerrors": int(g[4])}
                     for g in re.findall(r"l3fwd-port port=(\d+) ipackets=(\d+) "
                                         r"opackets=(\d+) imissed=(\d+) oerrors=(\d+)",
                                         text)}
            detail = {"l3fwd": {"ports": ports}}
        router_s = (r1["user"] + r1["system"] - r0["user"] - r0["system"]) if r0 and r1 else 0
        share = lambda sec: round(100.0 * sec / elapsed, 1)
        use = cpu_use(cpu0, cpu1)
        secs = args.seconds
        return {
            **detail,
            "offered": offered,
            "forwarded": forwarded,
            "offered_pps": offered / secs,
            "refused_pps": 0.0,
            "input_dropped_pps": 0.0,
            "forwarded_pps": forwarded / secs,
            "forwarded_pps_steady": None,
            "loss_pct": 100.0 * (1 - forwarded / offered) if offered else None,
            "outran": offered >= OUTRUN_MARGIN * forwarded,
            "cpu": use,
            "cores": {cpu: {"busy": round(100.0 - c["idle"], 1), "user": c["user"],
                            "system": c["system"], "softirq": c["softirq"]}
                      for cpu, c in use.items()},
            "threads_pct_of_a_cpu": {"source": share(source_s),
                                     "router_process": share(router_s),
                                     "r1_napi_thread": None},
            "router_cpu_seconds_all": round(router_s, 3),
            "router_ns_per_frame": 1e9 * router_s / forwarded if forwarded else None,
            "source_ns_per_frame": 1e9 * source_s / offered if offered else None,
            "foreign_cpu_seconds": foreign,
            "foreign_top": foreign_top,
        }
    finally:
        stop_process(router, grace=5)


def one_run(kind, repeat, attempt, args, workdir):
    tag = f"{os.getpid() % 100000}{repeat}{KINDS.index(kind)}{attempt}"
    run_dir = workdir / f"{kind}-{repeat}-{attempt}"
    run_dir.mkdir()
    result = {"kind": kind, "repeat": repeat, "attempt": attempt}
    if kind in VHOST_KINDS:
        result.update(vhost_run(kind, tag, run_dir, args))
        return result
    topo = Topology(kind, tag, run_dir, napi_nice=args.napi_nice,
                    idle_spin_us=args.idle_spin_us)
    try:
        topo.build()
        topo.warm_up()
        result.update(flood(topo, args))
        if kind in L3FWD_PMD:
            result["l3fwd"] = topo.stop_l3fwd()
        elif kind not in KERNEL_KINDS:
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
        thread = lambda name: median(
            [(r.get("threads_pct_of_a_cpu") or {}).get(name) for r in ok])
        summary[kind] = {
            "runs": len(ok),
            "disturbed_runs_left_out": len(mine) - len(ok),
            "offered_pps": median([r["offered_pps"] for r in ok]),
            "refused_pps": median([r["refused_pps"] for r in ok]),
            "input_dropped_pps": median([r["input_dropped_pps"] for r in ok]),
            "forwarded_pps": median([r["forwarded_pps"] for r in ok]),
            "forwarded_pps_all": [round(r["forwarded_pps"]) for r in ok],
            "forwarded_pps_steady": median([r["forwarded_pps_steady"] for r in ok]),
            "loss_pct": median([r["loss_pct"] for r in ok]),
            "source_outran_router": all(r["outran"] for r in ok) if ok else None,
            "cpu0_busy_pct": median([busy(r, SENDER_CPU) for r in ok]),
            "cpu1_busy_pct": median([busy(r, ROUTER_CPU) for r in ok]),
            "cpu1_softirq_pct": median(
                [(r["cores"].get(ROUTER_CPU) or {}).get("softirq") for r in ok]),
            "source_cpu_pct": thread("source"),
            "router_process_cpu_pct": thread("router_process"),
            "r1_napi_thread_cpu_pct": thread("r1_napi_thread"),
            "frames_per_list": median(
                [(r.get("netbatch") or {}).get("frames_per_list") for r in ok]),
            "router_ns_per_frame": median([r.get("router_ns_per_frame") for r in ok]),
            # The profile of the run whose rate is the median (or the first).
            "profile": next((r.get("router_cpu_profile") for r in sorted(
                ok, key=lambda r: r["forwarded_pps"])[len(ok) // 2:]), None) if ok else None,
            "source_ns_per_frame": median([r.get("source_ns_per_frame") for r in ok]),
            "errors": [f["error"] for f in failures if f["kind"] == kind],
        }
    base = summary["kernel"]["forwarded_pps"]
    for kind in [k for k in KINDS if k != "kernel"]:
        mine = summary[kind]["forwarded_pps"]
        summary[kind]["vs_kernel"] = mine / base if mine is not None and base else None
    return summary


def print_table(summary, args, busy_machine):
    print()
    print(f"IPv4 forwarding h1 -> r -> h2: {args.size}-byte frames, 64 UDP flows, "
          f"{args.seconds:g} s per run, medians of up to {args.repeat} runs, source "
          f"{args.sender} on CPU {SENDER_CPU}, router on CPU {ROUTER_CPU}")
    head = (f"{'router':<15} {'runs':>4} {'offered':>8} {'forwarded':>9} "
            f"{'loss %':>6} {'vs kernel':>9} {'outran':>6} {'cpu0 %':>6} {'cpu1 %':>6} "
            f"{'napi %':>6} {'proc %':>6} {'ns/fr':>6} {'list':>5}")
    print(head)
    print("-" * len(head))
    pct = lambda x: "-" if x is None else f"{x:.0f}"
    mpps = lambda x: "-" if x is None else f"{x / 1e6:.3f}"
    for kind in KINDS:
        s = summary[kind]
        loss = "-" if s["loss_pct"] is None else f"{s['loss_pct']:.1f}"
        ratio = s.get("vs_kernel")
        ratio = "" if kind == "kernel" else ("-" if ratio is None else f"{ratio:.2f}")
        lst = "" if s["frames_per_list"] is None else f"{s['frames_per_list']:.1f}"
        outran = {True: "yes", False: "NO", None: "-"}[s["source_outran_router"]]
        print(f"{kind:<15} {s['runs']:>4} "
              f"{mpps(s['offered_pps']):>8} {mpps(s['forwarded_pps']):>9} {loss:>6} "
              f"{ratio:>9} {outran:>6} {pct(s['cpu0_busy_pct']):>6} "
              f"{pct(s['cpu1_busy_pct']):>6} {pct(s['r1_napi_thread_cpu_pct']):>6} "
              f"{pct(s['router_process_cpu_pct']):>6} {pct(s['router_ns_per_frame']):>6} "
              f"{lst:>5}")
    print()
    print("Mpps. offered: frames the source's kernel took; forwarded: frames h2's "
          "interface received;\nloss: 1 - forwarded/offered (r1's input drops included); "
          "outran: the router forwarded < 1/1.05 of\nwhat it was offered in every run "
          "(it was the bottleneck);\n"
          "cpu0 (source) and cpu1 (router): busy %; napi: r1's NAPI thread (the router's "
          "receive: XDP and redirect\nfor af_xdp, GRO and the kernel's input for the "
          "others), proc: the router's process (netbatch or l3fwd), each in % of a CPU;\nns/fr: CPU time of the "
          "router's work (its process, r1's NAPI thread, CPU 1's ksoftirqd) per frame "
          "forwarded;\nlist: netbatch's frames per list.")
    base = summary.get("kernel", {}).get("router_ns_per_frame")
    for kind in [k for k in KINDS if k != "kernel"]:
        mine = summary.get(kind, {}).get("router_ns_per_frame")
        if mine and base:
            print(f"{kind}: {mine:.0f} ns of CPU per frame against the kernel's "
                  f"{base:.0f}: {base / mine:.2f}x the kernel's rate on a core of its own")
    print()
    for kind in [k for k in KINDS if k != "kernel"]:
        r = summary[kind].get("vs_kernel")
        print(f"{kind}/kernel = {'-' if r is None else f'{r:.3f}'}")
    # NAT's cost: each translating router against itself without NAT, in this run.
    for nat, plain in NAT_KINDS.items():
        a, b = summary.get(nat), summary.get(plain)
        if not a or not b:
            continue
        ns = (a["router_ns_per_frame"] / b["router_ns_per_frame"]
              if a["router_ns_per_frame"] and b["router_ns_per_frame"] else None)
        rate = (a["forwarded_pps"] / b["forwarded_pps"]
                if a["forwarded_pps"] and b["forwarded_pps"] else None)
        print(f"NAT's cost, {nat} against {plain}: "
              f"{'-' if ns is None else f'{ns:.2f}x'} the CPU per frame, "
              f"{'-' if rate is None else f'{rate:.2f}x'} the rate")
    for kind in KINDS:
        if summary[kind]["disturbed_runs_left_out"]:
            print(f"{kind}: {summary[kind]['disturbed_runs_left_out']} run(s) disturbed "
                  f"by other processes left out of the medians")
        for e in summary[kind]["errors"]:
            lines = [ln for ln in e.strip().splitlines() if ln.strip()][:5]
            print(f"{kind} failed: " + "\n    ".join(lines))
    if args.perf:
        for kind in KINDS:
            prof = summary[kind].get("profile")
            if not prof or "threads_pct" not in prof:
                continue
            print(f"\n{kind}: CPU {ROUTER_CPU} samples by thread (%): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(
                      prof["threads_pct"].items(), key=lambda kv: -kv[1])[:6]))
            for e in prof["top_symbols"][:12]:
                print(f"  {e['pct']:5.2f} %  {e['thread']:<8} {e['symbol']}")
    if busy_machine:
        print("\nNOTE: other processes used the CPUs during every run of some kind "
              "(a busy machine): the figures are noisy, not for the README.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="flood duration per run")
    ap.add_argument("--size", type=int, default=64, help="frame size, FCS included")
    ap.add_argument("--repeat", type=int, default=3, help="runs per router kind")
    ap.add_argument("--rate", type=int, default=0,
                    help="frames per second the source offers (0: as fast as it can)")
    ap.add_argument("--json", type=Path, help="write every raw number here")
    ap.add_argument("--no-build", action="store_true", help="use the binary as it is")
    ap.add_argument("--perf", action="store_true",
                    help="sample the router's CPU with perf record during each flood "
                         "(top symbols per thread into the JSON)")
    ap.add_argument("--napi-nice", type=int, default=0,
                    help="nice value of r1's NAPI thread (the router's receive)")
    ap.add_argument("--idle-spin-us", type=int, default=50,
                    help="netbatch's busy polling before its worker sleeps (datapath.idle_spin_us)")
    ap.add_argument("--retries", type=int, default=MAX_RETRIES,
                    help="runs repeated in all because other processes disturbed them")
    ap.add_argument("--sender", choices=["xdp", "af_xdp", "af_packet"], default="af_xdp",
                    help="the source (netbatch flood --via): af_xdp, af_packet, or xdp "
                         "(live XDP frames redirected into h1's veth by the kernel: bursts "
                         "that overflow r1's ring, see above)")
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS),
                    help="routers to measure, comma-separated, of " + ", ".join(KINDS)
                         + " (the kernel is the baseline; the l3fwd kinds are DPDK's "
                         "l3fwd with that poll-mode driver, built by bench/dpdk/build-l3fwd)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("live-forward: run as root (it creates network namespaces)")
    needed = ("ip", "taskset", "ethtool", "ping") + (("perf",) if args.perf else ())
    missing = [t for t in needed if shutil.which(t) is None]
    if missing:
        sys.exit(f"live-forward: missing tools: {', '.join(missing)}")
    if (os.cpu_count() or 1) < 2:
        sys.exit("live-forward: needs two CPUs (sender on 0, router on 1)")
    if args.seconds < 1 or args.repeat < 1:
        sys.exit("live-forward: --seconds must be at least 1 and --repeat at least 1")
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        sys.exit(f"live-forward: --kinds takes {', '.join(KINDS)} (got {args.kinds!r})")
    if "kernel_nat" in kinds and shutil.which("nft") is None:
        sys.exit("live-forward: kernel_nat needs nft (nftables; scripts/setup installs it)")
    # Report the kinds run (and the kernel, the baseline, even when not run).
    KINDS[:] = [k for k in KINDS if k in kinds or k == "kernel"]

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
    if any(k in L3FWD_PMD or k == "l3fwd_vhost" for k in kinds) and (not args.no_build or not L3FWD.exists()):
        print("building: bench/dpdk/build-l3fwd", flush=True)
        b = subprocess.run([str(REPO / "bench" / "dpdk" / "build-l3fwd")], cwd=REPO,
                           stdout=subprocess.DEVNULL)
        if b.returncode != 0 or not L3FWD.exists():
            sys.exit("live-forward: building l3fwd failed (scripts/setup installs DPDK)")

    runs, failures = [], []
    skip = set()
    retries_left = args.retries
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="netbatch-live-forward-"))
    try:
        for rep in range(args.repeat):
            order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
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
                          f"forwarded {r['forwarded_pps'] / 1e6:.3f} Mpps, "
                          f"cpu0 {busy(r, SENDER_CPU)} % cpu1 {busy(r, ROUTER_CPU)} %"
                          f"{note}", flush=True)
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
    busy_machine = any(
        runs and all(r["disturbed"] for r in runs if r["kind"] == k)
        for k in KINDS if any(r["kind"] == k for r in runs))
    if args.json:
        doc = {
            "settings": {"seconds": args.seconds, "size": args.size, "repeat": args.repeat,
                         "flows": 64, "sender": args.sender, "sender_cpu": SENDER_CPU,
                         "router_cpu": ROUTER_CPU, "receive_work": "threaded NAPI of r1 "
                         "pinned to the router's CPU", "foreign_limit": FOREIGN_LIMIT,
                         "kernel": platform.release(), "cpus": os.cpu_count(),
                         "busy_machine": busy_machine},
            "summary": summary,
            "runs": runs,
            "failures": failures,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    print_table(summary, args, busy_machine)
    print(f"\n({time.monotonic() - started:.0f} s for the runs)")
    if args.json:
        print(f"raw numbers: {args.json}")


if __name__ == "__main__":
    main()
