#!/usr/bin/env python3
"""netbatch's ip4-forward beside DPDK's l3fwd (LPM) on the same work, in memory, one core.

Both routers get the same routes (the bench's generated table, 10,000 by default) and
the same 1,024 flows of 64-byte UDP frames, and run on the same pinned core, taking
turns: netbatch as `netbatch bench --scenario ip4-forward` (frames from its in-memory
generator), l3fwd as built by bench/dpdk/build-l3fwd (Debian's DPDK 22.11 example with a
frame counter) reading the frames from a `net_pcap` port with `infinite_rx=1` and
sending them to a `net_null` port. Each run gives TSC ticks per frame; the report gives
medians, min-max and the ratio of the medians, per page size (`--huge-pages on,off`:
netbatch's `--huge-pages`, l3fwd on 2 MiB hugetlbfs pages or with `--no-huge`).

What each does per frame differs, and the report says so: netbatch checks the IPv4
header (checksum, RFC 1812), resolves the next hop through a neighbour table, updates
the checksum and counts every drop; l3fwd (LPM, x86 path) checks the version, length and
TTL (`rfc1812_process` without the checksum), looks up the port, rewrites the MAC
addresses from a per-port table, and parses packet types in software (`--parse-ptype`:
these ports set none). Each source copies every frame into a buffer of the router's
pool (netbatch's generator, the pcap driver's infinite receive).

Needs root (huge pages, hugetlbfs), DPDK from Debian (scripts/setup installs `dpdk`, `dpdk-dev`,
`libdpdk-dev`, `dpdk-doc`, `pkg-config`). DPDK is always started with `--no-pci`, so it
never touches this machine's devices.

  sudo python3 bench/peers.py --repeat 7 --seconds 2 --json peers.json
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "target" / "release" / "netbatch"
HUGE = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
HUGE_DIR = Path("/dev/hugepages")
# 2 MiB pages l3fwd needs (its mbuf pool and LPM tables) plus netbatch's pool.
HUGE_PAGES = 768


class Failure(Exception):
    pass


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def reserve_huge_pages():
    """Reserves HUGE_PAGES 2 MiB pages and mounts hugetlbfs where DPDK looks; returns
    how to put both back."""
    before = int(HUGE.read_text())
    if before < HUGE_PAGES:
        HUGE.write_text(f"{HUGE_PAGES}\n")
    got = int(HUGE.read_text())
    if got < HUGE_PAGES:
        HUGE.write_text(f"{before}\n")
        raise Failure(f"only {got} of {HUGE_PAGES} 2 MiB pages could be reserved")
    mounted = subprocess.run(["mountpoint", "-q", str(HUGE_DIR)]).returncode == 0
    if not mounted:
        HUGE_DIR.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "hugetlbfs", "nodev", str(HUGE_DIR)])

    def restore():
        if not mounted:
            subprocess.run(["umount", str(HUGE_DIR)])
        HUGE.write_text(f"{before}\n")

    return restore


def render_l3fwd_rules(work: Path):
    """l3fwd's LPM rule files from the exported routes: every route out of port 1
    (net_null), as every generated route leaves netbatch by gen1."""
    v4 = []
    for line in (work / "ip4-forward.routes").read_text().splitlines():
        prefix = line.split()[0]
        v4.append(f"R{prefix} 1")
    (work / "l3fwd-v4.cfg").write_text("\n".join(v4) + "\n")
    # l3fwd wants both files; no IPv6 frame is sent.
    (work / "l3fwd-v6.cfg").write_text("R2001:db8::/32 1\n")
    return len(v4)


def netbatch_run(args, huge: str) -> float:
    out = Path(args.work) / "nb.json"
    cmd = [
        "taskset", "-c", str(args.core), str(args.binary), "bench", "--scenario", "ip4-forward",
        "--modes", "list", "--dispatch", "buckets", "--repeat", "1",
        "--seconds", str(args.seconds), "--routes", str(args.routes),
        "--huge-pages", huge, "--no-profile", "--json", str(out),
    ]
    run(cmd)
    r = json.loads(out.read_text())["results"][0]
    return float(r["cycles_per_packet"])


def l3fwd_run(args, l3fwd: str, huge: str) -> float:
    work = Path(args.work)
    eal = ["-l", str(args.core), "-n", "1", "--no-pci", "--file-prefix",
           f"nbpeers{os.getpid()}", "--log-level", "lib.eal:error"]
    eal += ["--no-huge", "-m", "1024"] if huge == "off" else ["--huge-dir", str(HUGE_DIR)]
    cmd = [l3fwd] + eal + [
        f"--vdev=net_pcap0,rx_pcap={work / 'ip4-forward.pcap'},infinite_rx=1",
        "--vdev=net_null0", "--",
        "-p", "0x3", f"--config=(0,0,{args.core})", "-P", "--parse-ptype", "--lookup=lpm",
        f"--rule_ipv4={work / 'l3fwd-v4.cfg'}", f"--rule_ipv6={work / 'l3fwd-v6.cfg'}",
    ]
    log = work / "l3fwd.log"
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while "entering main loop" not in log.read_text():
            if p.poll() is not None:
                raise Failure(f"l3fwd exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise Failure(f"l3fwd did not start within 60 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        time.sleep(args.seconds)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = log.read_text()
    m = re.search(r"l3fwd-count lcore=\d+ frames=(\d+) tsc=(\d+) tsc_hz=(\d+)", text)
    if not m:
        raise Failure(f"l3fwd printed no count:\n{text[-3000:]}")
    frames, tsc = int(m.group(1)), int(m.group(2))
    if frames == 0:
        raise Failure(f"l3fwd received no frame:\n{text[-3000:]}")
    # Every frame it received must have left by port 1 (the routes' port): otherwise it
    # would be timed on work it did not do.
    sent = {int(p): int(o) for p, o in re.findall(r"l3fwd-port port=(\d+) ipackets=\d+ opackets=(\d+)", text)}
    if sent.get(1, 0) < frames * 0.999:
        raise Failure(f"l3fwd forwarded {sent.get(1, 0)} of {frames} frames:\n{text[-3000:]}")
    return tsc / frames


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "all": xs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per router and page size")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds per run")
    ap.add_argument("--routes", type=int, default=10000, help="generated routes")
    ap.add_argument("--core", type=int, default=1, help="the core both run on")
    ap.add_argument("--huge-pages", default="on", help="on, off or on,off")
    ap.add_argument("--no-build", action="store_true", help="use the built binaries")
    ap.add_argument("--binary", type=Path, default=BINARY,
                    help="the netbatch binary (default: the release build)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("peers.py: needs root (huge pages, hugetlbfs)")
    pages = args.huge_pages.split(",")
    if not set(pages) <= {"on", "off"}:
        sys.exit("peers.py: --huge-pages takes on, off or on,off")
    if not args.no_build and args.binary == BINARY:
        subprocess.run(["cargo", "build", "--release", "-p", "netbatch"], cwd=ROOT, check=True)
    l3fwd = run([str(ROOT / "bench" / "dpdk" / "build-l3fwd")]).stdout.strip().splitlines()[-1]
    restore = reserve_huge_pages() if "on" in pages else (lambda: None)
    try:
        with tempfile.TemporaryDirectory(prefix="nb-peers-") as work:
            args.work = work
            run([str(args.binary), "bench", "--export-peer", work, "--routes", str(args.routes)])
            n = render_l3fwd_rules(Path(work))
            res = {pg: {"netbatch": [], "l3fwd": []} for pg in pages}
            for rep in range(args.repeat):
                for pg in pages:
                    # Take turns, and let each go first in every other repetition.
                    order = ["netbatch", "l3fwd"] if rep % 2 == 0 else ["l3fwd", "netbatch"]
                    for who in order:
                        c = netbatch_run(args, pg) if who == "netbatch" else l3fwd_run(args, l3fwd, pg)
                        res[pg][who].append(c)
                        print(f"rep {rep + 1} huge pages {pg:3} {who:9} {c:7.1f} TSC ticks/frame",
                              flush=True)
    finally:
        restore()
    print(f"\nIPv4 forwarding in memory, {n} routes, 1,024 flows of 64-byte frames, core {args.core}, "
          f"medians of {args.repeat} alternating runs of {args.seconds} s")
    print(f"{'huge pages':10} {'router':9} {'TSC/frame':>10} {'min-max':>15}")
    summary = {}
    for pg in pages:
        s = {who: spread(xs) for who, xs in res[pg].items()}
        summary[pg] = s
        for who in ("netbatch", "l3fwd"):
            x = s[who]
            print(f"{pg:10} {who:9} {x['median']:10.1f} {x['min']:7.1f}-{x['max']:<7.1f}")
        ratio = s["netbatch"]["median"] / s["l3fwd"]["median"]
        s["netbatch_over_l3fwd"] = ratio
        print(f"{pg:10} netbatch/l3fwd: {ratio:.2f}x the TSC ticks per frame")
    if args.json:
        args.json.write_text(json.dumps({
            "routes": n, "seconds": args.seconds, "repeat": args.repeat, "core": args.core,
            "summary": summary,
        }, indent=1))


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(f"peers.py: {e}")
