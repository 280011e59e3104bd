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

`--instructions` counts instead of timing: each router runs twice under valgrind's
callgrind (4 KiB pages; instruction counts do not depend on the page size), and the
instructions between the two runs are divided by the frames between them, as
scripts/instructions does for netbatch alone. The report splits each count into the
frames' source and sink (netbatch's generator; l3fwd's pcap and null drivers), the
router's own code, and the rest (the DPDK libraries, libc, the dynamic linker):

  sudo python3 bench/peers.py --instructions
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
    frames, tsc = l3fwd_count(args, l3fwd, huge, [], args.seconds)
    return tsc / frames


def l3fwd_count(args, l3fwd: str, huge: str, prefix: list, seconds: float):
    """Runs l3fwd (under `prefix`, e.g. valgrind) for `seconds` after its main loop
    starts; (frames, TSC ticks) from its counter."""
    work = Path(args.work)
    eal = ["-l", str(args.core), "-n", "1", "--no-pci", "--file-prefix",
           f"nbpeers{os.getpid()}", "--log-level", "lib.eal:error"]
    eal += ["--no-huge", "-m", "1024"] if huge == "off" else ["--huge-dir", str(HUGE_DIR)]
    cmd = prefix + [l3fwd] + eal + [
        f"--vdev=net_pcap0,rx_pcap={work / 'ip4-forward.pcap'},infinite_rx=1",
        "--vdev=net_null0", "--",
        "-p", "0x3", f"--config=(0,0,{args.core})", "-P", "--parse-ptype", "--lookup=lpm",
        f"--rule_ipv4={work / 'l3fwd-v4.cfg'}", f"--rule_ipv6={work / 'l3fwd-v6.cfg'}",
    ]
    log = work / "l3fwd.log"
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + (600 if prefix else 60)
        while "entering main loop" not in log.read_text():
            if p.poll() is not None:
                raise Failure(f"l3fwd exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise Failure(f"l3fwd did not start in time:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        time.sleep(seconds)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120 if prefix else 30)
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
    return frames, tsc


def self_costs(path: Path) -> dict:
    """Instructions executed in each (object, function) of a callgrind output, its own
    lines only (a call's cost is the callee's). The format: `ob=`/`fn=` name the
    object and function the cost lines after them belong to, `(id) name` the first
    time and `(id)` after (the first time may be a call's `cob=`/`cfn=`); the line after
    `calls=` is the call's inclusive cost."""
    names = {"ob": {}, "fn": {}}
    cur = {"ob": "?", "fn": "?"}
    costs = {}
    skip = False
    for line in path.read_text(errors="replace").splitlines():
        if skip:
            skip = False
            continue
        key, eq, rest = line.partition("=")
        if eq and key in ("cob", "cfn"):
            m = re.match(r"\((\d+)\) (.*)", rest)
            if m:
                names[key[1:]][m.group(1)] = m.group(2)
            continue
        if eq and key in ("ob", "fn"):
            m = re.match(r"\((\d+)\)(?: (.*))?", rest)
            if m:
                if m.group(2) is not None:
                    names[key][m.group(1)] = m.group(2)
                cur[key] = names[key].get(m.group(1), rest)
            else:
                cur[key] = rest
            continue
        if eq and key == "calls":
            skip = True
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                k = (cur["ob"], cur["fn"])
                costs[k] = costs.get(k, 0) + int(parts[1])
    return costs


def callgrind(args, tag: str):
    out = Path(args.work) / f"cg.{tag}"
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"], out


def per_frame(a: dict, b: dict, frames: int, part) -> dict:
    """Instructions per frame between two runs' self costs, summed by `part(ob, fn)`."""
    parts = {}
    for k in set(a) | set(b):
        name = part(*k)
        parts[name] = parts.get(name, 0) + b.get(k, 0) - a.get(k, 0)
    return {name: n / frames for name, n in parts.items()}


def netbatch_part(ob: str, fn: str) -> str:
    if "GenPort" in fn:
        return "source and sink"
    return "router" if ob.endswith("/netbatch") or fn == "?" else "other"


def short_name(ob: str, fn: str) -> str:
    """A netbatch function as its implementing type: `<a::b::EthInput as ...>::process`
    becomes `EthInput::process`."""
    m = re.match(r"<(?:[\w:]+::)?(\w+)(?:<[^>]*>)? as .+>::(\w+)$", fn)
    if m:
        return f"{m.group(1)}::{m.group(2)}"
    return re.sub(r"^.*?(\w+::\w+)$", r"\1", re.sub(r"<.*>", "", fn))


def object_and_name(ob: str, fn: str) -> str:
    """A DPDK function with its object (the drivers' functions have no symbols)."""
    return f"{Path(ob).name}:{fn}"


def l3fwd_part(ob: str, fn: str) -> str:
    if "librte_net_pcap" in ob or "librte_net_null" in ob:
        return "source and sink"
    return "router" if "l3fwd" in Path(ob).name else "other"


def count_instructions(args, l3fwd: str) -> dict:
    """Instructions per frame of both routers: two runs each, subtracted."""
    if subprocess.run(["sh", "-c", "command -v valgrind"], capture_output=True).returncode:
        raise Failure("--instructions needs valgrind (scripts/setup installs it)")
    res = {}
    # netbatch: N packets handle min(N, 200000) + N frames (the warm-up, then the run;
    # whole bursts of 64), counted only inside the measured runs, as scripts/instructions.
    costs = []
    for n in (100000, 300000):
        prefix, out = callgrind(args, f"nb{n}")
        run(prefix + ["--toggle-collect=*Bench>::run", str(args.binary), "bench", "--scenario",
                      "ip4-forward", "--modes", "list", "--dispatch", "buckets", "--repeat", "1",
                      "--packets", str(n), "--routes", str(args.routes), "--huge-pages", "off",
                      "--no-profile"])
        costs.append(self_costs(out))
    res["netbatch"] = per_frame(costs[0], costs[1], 299968, netbatch_part)
    res["netbatch_by_function"] = {
        k: v for k, v in per_frame(costs[0], costs[1], 299968, short_name).items() if v >= 0.5
    }
    # l3fwd runs until interrupted, and its counter gives the frames of each run. Only
    # its main loop is counted (the start-up calibrates the TSC by the clock, which
    # valgrind slows; the pattern names the loop only: its `.cold` part, matched too,
    # would toggle counting off again), and two runs are subtracted all the same.
    counted = []
    for secs in (4, 16):
        prefix, out = callgrind(args, f"l3fwd{secs}")
        frames, _ = l3fwd_count(args, l3fwd, "off", prefix + ["--toggle-collect=lpm_main_loop"], secs)
        counted.append((self_costs(out), frames))
    (a, fa), (b, fb) = counted
    if fb < fa + 1_000_000:
        raise Failure(f"l3fwd under valgrind forwarded {fa} then {fb} frames: too few between them")
    res["l3fwd"] = per_frame(a, b, fb - fa, l3fwd_part)
    res["l3fwd_by_function"] = {
        k: v for k, v in per_frame(a, b, fb - fa, object_and_name).items() if v >= 0.5
    }
    return res


def report_instructions(res: dict, n: int):
    print(f"\nIPv4 forwarding in memory, {n} routes, 1,024 flows of 64-byte frames: "
          "instructions per frame (callgrind, two runs subtracted)")
    cols = ("source and sink", "router", "other")
    print(f"{'router':9} {'total':>7} " + " ".join(f"{c:>15}" for c in cols))
    for who in ("netbatch", "l3fwd"):
        r = res[who]
        print(f"{who:9} {sum(r.values()):7.1f} " + " ".join(f"{r.get(c, 0.0):15.1f}" for c in cols))
    for who in ("netbatch", "l3fwd"):
        print(f"{who} by function:")
        for name, v in sorted(res[f"{who}_by_function"].items(), key=lambda kv: -kv[1]):
            print(f"  {name:56} {v:6.1f}")
    ratio = sum(res["netbatch"].values()) / sum(res["l3fwd"].values())
    print(f"netbatch/l3fwd: {ratio:.2f}x the instructions per frame")


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
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions per frame under callgrind instead of timing")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("peers.py: needs root (huge pages, hugetlbfs)")
    pages = args.huge_pages.split(",")
    if not set(pages) <= {"on", "off"}:
        sys.exit("peers.py: --huge-pages takes on, off or on,off")
    if not args.no_build and args.binary == BINARY:
        subprocess.run(["cargo", "build", "--release", "-p", "netbatch"], cwd=ROOT, check=True)
    l3fwd = run([str(ROOT / "bench" / "dpdk" / "build-l3fwd")]).stdout.strip().splitlines()[-1]
    if args.instructions:
        with tempfile.TemporaryDirectory(prefix="nb-peers-") as work:
            args.work = work
            run([str(args.binary), "bench", "--export-peer", work, "--routes", str(args.routes)])
            n = render_l3fwd_rules(Path(work))
            res = count_instructions(args, l3fwd)
        report_instructions(res, n)
        if args.json:
            args.json.write_text(json.dumps({"routes": n, "instructions_per_frame": res}, indent=1))
        return
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
