#!/usr/bin/env python3
"""A long soak of `netbatch run` as an operator runs it, with its memory, descriptors,
threads and counters sampled throughout.

    h1 192.0.2.2 ── r1 (af_xdp)  [ netbatch, 2 workers ] r2 (af_xdp)   ── h2 198.51.100.2
                                                          r3 (af_packet) ── h3 203.0.113.2

Load, all of it bounded in count and time, all of it inside namespaces this script
creates and removes (also on failure and Ctrl-C), TEST-NET and RFC 2544 addresses only:
  - a UDP flood from h1 at --rate frames/s (`netbatch flood`, 64 flows) to 198.18.0.1,
    routed to h2, whose socket never reads (its kernel drops at the socket);
  - iperf3 (TCP, 5 s) from h1 to h3 every minute;
  - ping from h1 to h2 and h3 every second;
  - every 10 s: `show runtime`, `show counters`, GET /metrics, `trace add --count 3`
    and `trace show`;
  - every 30 s: a route added and deleted, a rule added and deleted, a reload;
    a malformed request, a 200 KiB request and a client that sends nothing;
  - every 5 min: 200 clients at once, each asking `show runtime`;
  - at --flap-at seconds: h2's end of r2's link down for 5 s, then up again;
  - at the end: SIGKILL, then a restart on the same configuration, then a clean stop.

Every 10 s the router's RSS, open descriptors and threads are read from /proc, and the
conservation law (rx + originated = tx + delivered + dropped + held) is checked on its
counters. At the end every frame the hosts sent is accounted for: each host interface's
tx_packets against netbatch's port counters and the kernel's (both veth ends' drops).

Run as root from the repository (the release binary must be built):

    python3 bench/soak.py [--minutes 30] [--rate 100000] [--json soak.json]

The summary (RSS at 5, 15 and 30 minutes, descriptor and thread ranges, conservation,
the frame accounting) is printed and, with --json, written with every sample.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import Failure, sh

REPO = Path(__file__).resolve().parent.parent
BINARY = REPO / "target" / "release" / "netbatch"
METRICS = "127.0.0.1:9434"


class Soak:
    def __init__(self, args, workdir):
        self.args = args
        self.dir = Path(workdir)
        tag = f"s{os.getpid() % 100000}"
        self.ns = {n: f"nb{tag}-{n}" for n in ["h1", "h2", "h3", "r"]}
        self.dev = {
            "h1": f"nb{tag}a", "h2": f"nb{tag}b", "h3": f"nb{tag}c",
            "r1": f"nb{tag}r1", "r2": f"nb{tag}r2", "r3": f"nb{tag}r3",
        }
        self.sock = self.dir / "ctl.sock"
        self.proc = None
        self.children = []
        self.samples = []
        self.events = []
        self.errors = []
        self.stop = threading.Event()
        self.flood_sent = 0
        self.flood_not_sent = 0

    # Topology.
    def ex(self, n, cmd, timeout=60, check=True):
        return sh(["ip", "netns", "exec", self.ns[n], "sh", "-c", cmd], timeout, check)

    def build(self):
        self.remove()
        for n in self.ns.values():
            sh(["ip", "netns", "add", n])
        d, ns = self.dev, self.ns
        # The af_xdp links have two queues (one per worker).
        q = ["numrxqueues", "2", "numtxqueues", "2"]
        sh(["ip", "link", "add", d["h1"], "netns", ns["h1"], *q, "type", "veth",
            "peer", "name", d["r1"], "netns", ns["r"], *q])
        sh(["ip", "link", "add", d["h2"], "netns", ns["h2"], *q, "type", "veth",
            "peer", "name", d["r2"], "netns", ns["r"], *q])
        sh(["ip", "link", "add", d["h3"], "netns", ns["h3"], "type", "veth",
            "peer", "name", d["r3"], "netns", ns["r"]])
        quiet = ("sysctl -qw net.ipv6.conf.all.disable_ipv6=1; "
                 "sysctl -qw net.ipv6.conf.default.disable_ipv6=1; ip link set lo up")
        for n in ns:
            self.ex(n, quiet)
        for r in ["r1", "r2", "r3"]:
            self.ex("r", f"ip link set {d[r]} up")
        self.ex("h1", f"ip link set {d['h1']} up; ip addr add 192.0.2.2/24 dev {d['h1']}; "
                      f"ip route add default via 192.0.2.1; ethtool -K {d['h1']} tx off >/dev/null")
        self.ex("h2", f"ip link set {d['h2']} up; ip addr add 198.51.100.2/24 dev {d['h2']}; "
                      f"ip route add default via 198.51.100.1; ip addr add 198.18.0.1/32 dev lo; "
                      f"ethtool -K {d['h2']} tx off >/dev/null")
        self.ex("h3", f"ip link set {d['h3']} up; ip addr add 203.0.113.2/24 dev {d['h3']}; "
                      f"ip route add default via 203.0.113.1")
        (self.dir / "routes.txt").write_text("198.18.0.0/24 via 198.51.100.2\n")
        self.write_config("")

    def write_config(self, extra):
        d = self.dev
        cfg = f"""
route_files = ["routes.txt"]

[datapath]
mode = "list"
idle_spin_us = 50
workers = 2

[[port]]
name = "r1"
kind = "af_xdp"
interface = "{d['r1']}"
addresses = ["192.0.2.1/24"]
rx_workers = [0, 1]

[[port]]
name = "r2"
kind = "af_xdp"
interface = "{d['r2']}"
addresses = ["198.51.100.1/24"]
rx_workers = [0, 1]

[[port]]
name = "r3"
kind = "af_packet"
interface = "{d['r3']}"
addresses = ["203.0.113.1/24"]
rx_workers = [0]

[control]
socket = "{self.sock}"
trace_keep = 100

[metrics]
listen = "{METRICS}"
{extra}"""
        (self.dir / "router.toml").write_text(cfg)

    def remove(self):
        for n in self.ns.values():
            subprocess.run(["ip", "netns", "del", n], capture_output=True)

    # The router.
    def start(self):
        log = open(self.dir / "router.log", "a")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns["r"], str(BINARY), "run",
             str(self.dir / "router.toml"), "--stats-json", str(self.dir / "stats.json")],
            stdout=log, stderr=log)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Failure(f"netbatch exited: {(self.dir / 'router.log').read_text()[-3000:]}")
            if self.sock.exists() and self.ctl("show", "runtime")[0]:
                return
            time.sleep(0.1)
        raise Failure("netbatch did not start")

    def pid(self):
        """netbatch's own pid (ip netns exec execs it, so the child is it)."""
        return self.proc.pid

    def ctl(self, *argv, timeout=30):
        """One request on the control socket: (ok, text, data)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(str(self.sock))
            s.sendall((json.dumps({"argv": list(argv)}) + "\n").encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            v = json.loads(buf)
            return v["ok"], v["text"], v["data"]
        except (OSError, ValueError) as e:
            return False, f"{e}", None
        finally:
            s.close()

    def must(self, *argv):
        ok, text, data = self.ctl(*argv)
        if not ok:
            self.errors.append(f"{' '.join(argv)}: {text.strip()}")
        return data

    # Samples.
    def sample(self, t0):
        pid = self.pid()
        status = Path(f"/proc/{pid}/status").read_text()
        field = lambda k: int(next(l.split()[1] for l in status.splitlines() if l.startswith(k)))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        ok, _, c = self.ctl("show", "counters")
        s = {"t": round(time.time() - t0, 1), "rss_kb": field("VmRSS:"),
             "threads": field("Threads:"), "fds": fds}
        if ok and c:
            t = c["totals"]
            lhs = t["rx_packets"] + t["originated_packets"]
            rhs = t["tx_packets"] + t["delivered_packets"] + t["dropped_packets"] + t["held_packets"]
            s.update({"rx": t["rx_packets"], "tx": t["tx_packets"], "dropped": t["dropped_packets"],
                      "held": t["held_packets"], "conserved": lhs == rhs, "imbalance": lhs - rhs,
                      "drops": t["drops"]})
        else:
            s["conserved"] = None
        self.samples.append(s)
        return s

    # Load.
    def flood_loop(self, end):
        mac = self.ex("r", f"cat /sys/class/net/{self.dev['r1']}/address").strip()
        while not self.stop.is_set() and time.time() < end:
            secs = min(60.0, end - time.time())
            if secs < 1:
                break
            out = self.ex("h1", f"{BINARY} flood --interface {self.dev['h1']} --dst-mac {mac} "
                                f"--src 192.0.2.2 --dst 198.18.0.1 --rate {self.args.rate} "
                                f"--seconds {secs:.1f} --json", timeout=secs + 60, check=False)
            try:
                r = json.loads(out)
                self.flood_sent += r.get("sent", 0)
                self.flood_not_sent += r.get("not_sent", 0)
            except ValueError:
                self.errors.append(f"flood: {out[-300:]}")

    def every(self, period, end, what):
        nxt = time.time()
        while not self.stop.is_set() and time.time() < end:
            try:
                what()
            except Exception as e:  # noqa: BLE001 - a load step's failure is recorded
                self.errors.append(f"{what.__name__}: {e}")
            nxt += period
            self.stop.wait(max(0.0, nxt - time.time()))

    def observe(self):
        self.must("show", "runtime")
        # The endpoint listens in namespace r.
        code = self.ex("r", f"curl -s -o /dev/null -w '%{{http_code}}' http://{METRICS}/metrics",
                       check=False)
        if code.strip() != "200":
            self.errors.append(f"metrics: HTTP {code.strip()}")
        self.must("trace", "add", "--count", "3")
        self.must("trace", "show")

    def churn(self):
        k = (int(time.time()) // 30) % 200 + 1
        self.must("route", "add", f"198.19.{k}.0/24", "via", "198.51.100.2")
        self.must("route", "del", f"198.19.{k}.0/24")
        self.must("rule", "add", "forward", "proto", "udp", "dport", "9999", "action", "drop")
        self.must("rule", "del", "forward", "0")
        ok, text, _ = self.ctl("reload")
        if not ok:
            self.errors.append(f"reload: {text.strip()}")
        # Hostile clients: refused, and serving goes on.
        for payload in [b"garbage\n", b'{"argv": ["' + b"x" * (200 << 10) + b'"]}\n', None]:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(str(self.sock))
                if payload:
                    try:
                        s.sendall(payload)
                    except OSError:
                        pass
                reply = s.recv(65536)
                if b'"ok":false' not in reply:
                    self.errors.append(f"hostile request answered {reply[:100]!r}")
            except OSError as e:
                self.errors.append(f"hostile client: {e}")
            finally:
                s.close()

    def crowd(self):
        results = []

        def one():
            results.append(self.ctl("show", "runtime")[0])

        ts = [threading.Thread(target=one) for _ in range(200)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        if results.count(True) != 200:
            self.errors.append(f"crowd: {results.count(True)} of 200 answered")

    def iperf(self):
        out = self.ex("h1", "iperf3 -c 203.0.113.2 -t 5 -J", timeout=60, check=False)
        try:
            bps = json.loads(out)["end"]["sum_received"]["bits_per_second"]
            self.events.append({"t": time.time(), "iperf3_mbps": round(bps / 1e6, 1)})
        except (ValueError, KeyError):
            self.errors.append(f"iperf3: {out[-300:]}")

    def counters(self):
        """Interface counters of every veth end, by device."""
        out = {}
        for n, devs in [("h1", ["h1"]), ("h2", ["h2"]), ("h3", ["h3"]), ("r", ["r1", "r2", "r3"])]:
            for d in devs:
                text = self.ex(n, "cd /sys/class/net/%s/statistics && grep . rx_packets tx_packets "
                                  "rx_dropped tx_dropped" % self.dev[d])
                out[d] = {l.split(":")[0]: int(l.split(":")[1]) for l in text.split()}
        return out

    def run(self):
        a = self.args
        self.build()
        sink = subprocess.Popen(["ip", "netns", "exec", self.ns["h2"], "python3", "-c",
                                 "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                                 "s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,1)\n"
                                 "s.bind(('198.18.0.1',9))\ntime.sleep(1e6)\n"])
        server = subprocess.Popen(["ip", "netns", "exec", self.ns["h3"], "iperf3", "-s"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.children += [sink, server]
        self.start()
        self.ex("h1", "ping -c 2 -W 1 198.51.100.2 >/dev/null; ping -c 2 -W 1 203.0.113.2 >/dev/null",
                check=False)
        before = self.counters()
        c0 = self.ctl("show", "counters")[2]
        t0 = time.time()
        end = t0 + a.minutes * 60
        pings = [subprocess.Popen(["ip", "netns", "exec", self.ns["h1"], "ping", "-q", "-i", "1",
                                   "-w", str(int(a.minutes * 60)), dst],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for dst in ["198.51.100.2", "203.0.113.2"]]
        self.children += pings
        loops = [
            threading.Thread(target=self.flood_loop, args=(end,)),
            threading.Thread(target=self.every, args=(10, end, self.observe)),
            threading.Thread(target=self.every, args=(30, end, self.churn)),
            threading.Thread(target=self.every, args=(60, end, self.iperf)),
            threading.Thread(target=self.every, args=(300, end, self.crowd)),
        ]
        for t in loops:
            t.start()
        flapped = False
        while time.time() < end:
            s = self.sample(t0)
            print(json.dumps({k: s.get(k) for k in ["t", "rss_kb", "fds", "threads", "conserved"]}),
                  flush=True)
            if s["conserved"] is False:
                self.errors.append(f"conservation broken at {s['t']} s: {s['imbalance']}")
            if not flapped and time.time() - t0 >= a.flap_at:
                flapped = True
                self.ex("h2", f"ip link set {self.dev['h2']} down")
                time.sleep(5)
                # A link going down takes its routes: h2's way back is restored.
                self.ex("h2", f"ip link set {self.dev['h2']} up; "
                              f"ip route replace default via 198.51.100.1")
                self.events.append({"t": round(time.time() - t0, 1), "flap": "h2 down 5 s"})
            time.sleep(max(0.0, 10 - (time.time() - t0) % 10))
        self.stop.set()
        for t in loops:
            t.join(120)
        ping_text = [p.communicate(timeout=30)[0] for p in pings]
        time.sleep(2)
        last = self.sample(t0)
        after = self.counters()
        c1 = self.ctl("show", "counters")[2]
        links = self.ctl("show", "links")[2]
        # SIGKILL, then a restart on the same configuration, then a clean stop.
        os.kill(self.pid(), signal.SIGKILL)
        self.proc.wait(10)
        self.start()
        restarted = self.ctl("show", "runtime")[0]
        self.proc.send_signal(signal.SIGTERM)
        clean = self.proc.wait(30) == 0
        return self.summary(before, after, c0, c1, links, ping_text, restarted, clean, last)

    def summary(self, before, after, c0, c1, links, ping_text, restarted, clean, last):
        d = {k: {f: after[k][f] - before[k][f] for f in after[k]} for k in after}
        port = lambda c, name, f: next(p[f] for p in c["totals"]["ports"] if p["name"] == name)
        dp = lambda name, f: port(c1, name, f) - port(c0, name, f)
        # Into netbatch: what each host sent reached the router's end (or that end's
        # kernel dropped it), and there netbatch received it or its port dropped it.
        # (A host's tx_dropped are frames its own kernel dropped before the wire, not in
        # its tx_packets; the router end's rx_dropped is the kernel's view of the frames
        # the port could not take, XSK rings full: the same frames as the port's
        # rx_dropped.)
        into = {}
        for h, r in [("h1", "r1"), ("h2", "r2"), ("h3", "r3")]:
            sent = d[h]["tx_packets"]
            nb_rx, nb_dropped = dp(r, "rx_packets"), dp(r, "rx_dropped")
            into[h] = {"host_sent": sent, "netbatch_rx": nb_rx, "port_rx_dropped": nb_dropped,
                       "router_end_rx_dropped": d[r]["rx_dropped"],
                       "host_tx_dropped_before_the_wire": d[h]["tx_dropped"],
                       "unaccounted": sent - nb_rx - nb_dropped}
        # Out of netbatch: what it sent arrived, or the kernel dropped it.
        out = {}
        for r, h in [("r1", "h1"), ("r2", "h2"), ("r3", "h3")]:
            sent = dp(r, "tx_packets")
            kernel = d[r]["tx_dropped"] + d[h]["rx_dropped"]
            booked = dp(r, "tx_kernel_dropped")
            out[r] = {"netbatch_sent": sent, "kernel_tx_dropped_booked": booked,
                      "host_received": d[h]["rx_packets"], "kernel_dropped": kernel,
                      "unaccounted": sent + booked - d[h]["rx_packets"] - kernel}
        at = lambda m: min(self.samples, key=lambda s: abs(s["t"] - m * 60))
        rss = {f"{m}_min_kb": at(m)["rss_kb"] for m in [1, 5, 15, 30] if m <= self.args.minutes}
        return {
            "minutes": self.args.minutes,
            "rate": self.args.rate,
            "rss": rss,
            "rss_spread_5_to_end_kb": max(s["rss_kb"] for s in self.samples if s["t"] >= 300)
            - min(s["rss_kb"] for s in self.samples if s["t"] >= 300)
            if self.args.minutes >= 5 else None,
            "fds": [min(s["fds"] for s in self.samples), max(s["fds"] for s in self.samples)],
            "threads": [min(s["threads"] for s in self.samples),
                        max(s["threads"] for s in self.samples)],
            "samples": len(self.samples),
            "conserved_in_every_sample": all(s["conserved"] for s in self.samples),
            "flood": {"sent": self.flood_sent, "not_sent": self.flood_not_sent},
            "into_netbatch": into,
            "out_of_netbatch": out,
            "drops": c1["totals"]["drops"],
            "links": links,
            "pings": [t.strip().splitlines()[-2:] for t in ping_text],
            "iperf3": self.events,
            "restart_after_sigkill": restarted,
            "clean_stop": clean,
            "errors": self.errors[:50],
            "error_count": len(self.errors),
            "last": last,
        }

    def cleanup(self):
        self.stop.set()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for c in self.children:
            if c.poll() is None:
                c.kill()
                c.wait()
        self.remove()


def main():
    global BINARY
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--rate", type=int, default=100000)
    p.add_argument("--flap-at", type=float, default=600, help="seconds into the soak")
    p.add_argument("--json", type=Path)
    p.add_argument("--binary", type=Path, default=BINARY,
                   help="the netbatch binary (default: the release build)")
    a = p.parse_args()
    BINARY = a.binary.resolve()
    if os.geteuid() != 0:
        sys.exit("run as root: the soak creates namespaces and veth pairs")
    if not BINARY.exists():
        sys.exit(f"{BINARY} missing: cargo build --release -p netbatch")
    with tempfile.TemporaryDirectory(prefix="netbatch-soak-") as d:
        os.chmod(d, 0o755)
        s = Soak(a, d)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            result = s.run()
        finally:
            s.cleanup()
        result["samples_all"] = s.samples
        if a.json:
            a.json.write_text(json.dumps(result, indent=1))
        brief = {k: v for k, v in result.items() if k not in ("samples_all", "last")}
        print(json.dumps(brief, indent=1))


if __name__ == "__main__":
    main()
