//! RPS and RFS across two workers never reorder a flow, and lose nothing.
//!
//! Numbered datagrams of many flows arrive on worker 0 and are spread over both workers
//! (RPS), under each policy, while the test changes the RPS map and moves flows between
//! workers the way RFS does (an application reading them elsewhere), at moments of its
//! choosing: the workers are stepped from the test's thread in a seeded random order, so
//! packets of a flow are often still waiting in the old worker's ring when the flow is
//! asked to move. Every socket is read in between, and every flow's numbers must come out
//! in order, each once. Then the same traffic on real threads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use netbatch_datapath::apps::App;
use netbatch_datapath::apps::sink::UdpSink;
use netbatch_datapath::rps::{RpsParams, RpsPolicy};
use netbatch_datapath::threads::{Datapath, RunParams};
use netbatch_engine::Mode;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::{LabSpec, PEER, Team, US, frames, ip, port};
use netbatch_stack::GraphOptions;
use netbatch_stack::dissect::hash_frame;
use netbatch_stack::host::HostParams;
use netbatch_stack::udp::datagram;
use netbatch_stack::udp::socket::UdpSocket;
use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};

const PORTS: [u16; 4] = [5001, 5002, 5003, 5004];

/// The tests of this file run one at a time (one of them measures the CPU time the
/// process uses).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn spec() -> LabSpec {
    LabSpec {
        routes6: Vec::new(),
        neighbours6: Vec::new(),
        ports: vec![port("eth0", US, "198.51.100.1/24")],
        routes: vec![],
        neighbours: vec![StaticNeighbour {
            iface: 0,
            ip: ip("198.51.100.2"),
            mac: PEER,
        }],
        params: HostParams::default(),
        graph: GraphOptions::default(),
    }
}

/// Flow `f`: a source address and port, one of the four destination ports.
fn flow(f: u32) -> (String, u16, u16) {
    (
        format!("198.51.100.{}", 2 + f % 50),
        1000 + (f / 50) as u16,
        PORTS[(f % 4) as usize],
    )
}

/// Datagram `seq` of flow `f`: the payload is the flow and the number.
fn frame(f: u32, seq: u32) -> Vec<u8> {
    let (src, sport, dport) = flow(f);
    let mut payload = f.to_be_bytes().to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    frames::udp(PEER, US, &src, "198.51.100.1", sport, dport, 64, &payload)
}

/// A small seeded generator (xorshift64*), so every schedule can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Reads every socket; per flow, the numbers must follow on from what was read before.
/// Binds a socket on each of `ports` (the table is shared: any worker's host will do).
fn bind(team: &Team, ports: &[u16]) -> Vec<Arc<UdpSocket>> {
    ports
        .iter()
        .map(|&p| {
            team.workers[0]
                .host
                .sockets
                .open(ip("0.0.0.0"), p, 1 << 16)
                .unwrap()
                .1
        })
        .collect()
}

fn read_all(team: &Team, socks: &[Arc<UdpSocket>], next: &mut BTreeMap<u32, u32>) -> u64 {
    let mut got = Vec::new();
    for s in socks {
        s.recv_batch(&mut got, usize::MAX);
    }
    for p in &got {
        let v = team.pool().get(p);
        let d = datagram(&v).expect("a datagram");
        let f = u32::from_be_bytes(d.payload[..4].try_into().unwrap());
        let seq = u32::from_be_bytes(d.payload[4..8].try_into().unwrap());
        let want = next.entry(f).or_insert(0);
        assert_eq!(seq, *want, "flow {f} out of order");
        *want += 1;
    }
    let n = got.len() as u64;
    team.pool().cache().free_all(&mut got);
    n
}

fn stepped(policy: RpsPolicy, mode: Mode, seed: u64) {
    let params = RpsParams {
        policy,
        max_backlog: 4096,
        flow_log: 6, // few flow slots: flows share them, as they do in a busy kernel
        rfs_log: 10,
        symmetric: false,
        forwards: Vec::new(),
    };
    let mut team = Team::new(
        &spec(),
        mode,
        vec![vec![0], vec![]],
        vec![vec![0, 1]],
        Some(params),
    );
    let socks = bind(&team, &PORTS);
    let t = Toeplitz::new(&MS_KEY);
    let flows = 200u32;
    let per_flow = 30u32;
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut sent = vec![0u32; flows as usize];
    let mut next = BTreeMap::new();
    let mut read = 0u64;
    let total = u64::from(flows * per_flow);
    let mut moves = 0;
    while read < total {
        // Some traffic arrives: a burst of random flows' next datagrams.
        for _ in 0..rng.below(150) {
            let f = rng.below(u64::from(flows)) as u32;
            if sent[f as usize] < per_flow {
                team.feed(0, 0, [frame(f, sent[f as usize])]);
                sent[f as usize] += 1;
            }
        }
        // Workers run in a random order, each a random number of rounds.
        for _ in 0..rng.below(4) + 1 {
            let w = rng.below(2) as usize;
            team.step(w);
        }
        // The map changes, or an application starts reading some flows elsewhere.
        match rng.below(10) {
            0 => team.fabric.set_map(0, vec![rng.below(2) as u16]),
            1 => team.fabric.set_map(0, vec![0, 1]),
            2 | 3 => {
                for _ in 0..rng.below(20) {
                    let f = rng.below(u64::from(flows)) as u32;
                    let h = hash_frame(&frame(f, 0), &t);
                    team.fabric.record_flow(h, rng.below(2) as usize);
                    moves += 1;
                }
            }
            _ => {}
        }
        if rng.below(3) == 0 {
            read += read_all(&team, &socks, &mut next);
        }
        // Once everything was sent, let the workers finish.
        if sent.iter().all(|&s| s == per_flow) {
            team.settle();
            read += read_all(&team, &socks, &mut next);
        }
    }
    assert_eq!(read, total, "every datagram read once");
    assert!(moves > 0);
    let a = team.acct();
    assert_eq!(a.dropped, 0, "nothing dropped: {a:?}");
    assert!(a.handed_off > 0, "worker 1 got its share: {a:?}");
    // The test read the sockets itself: those datagrams were delivered.
    let mut a0 = team.workers[0].acct;
    a0.delivered += read;
    team.workers[0].acct = a0;
    team.assert_conserved();
    team.stop_and_check_pool();
}

#[test]
fn no_flow_is_reordered_while_maps_and_owners_change() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for policy in [RpsPolicy::Backlog, RpsPolicy::Direct, RpsPolicy::Deferred] {
        for mode in [Mode::List, Mode::Packet] {
            for seed in 1..=4 {
                stepped(policy, mode, seed);
            }
        }
    }
}

/// The same on real threads: worker 0 receives, both process, one sink per worker reads
/// two of the four sockets (each socket has one reader) and checks every flow's order.
#[test]
fn threads_keep_flows_in_order_and_give_every_buffer_back() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for policy in [RpsPolicy::Backlog, RpsPolicy::Direct, RpsPolicy::Deferred] {
        let params = RpsParams {
            policy,
            max_backlog: 1 << 14,
            ..RpsParams::default()
        };
        let mut team = Team::new(
            &spec(),
            Mode::List,
            vec![vec![0], vec![]],
            vec![vec![0, 1]],
            Some(params),
        );
        let progress = Arc::new(AtomicU64::new(0));
        for (w, ports) in [(0usize, &PORTS[..2]), (1, &PORTS[2..])] {
            let socks = bind(&team, ports);
            let sink = UdpSink::new(socks, 256, true)
                .with_rfs(team.fabric.clone(), w)
                .with_progress(progress.clone());
            team.workers[w].apps.push(Box::new(sink) as Box<dyn App>);
        }
        // The sink checks the first bytes of each payload as a per-flow counter: put the
        // number first.
        let flows = 300u32;
        let per_flow = 40u32;
        let mut input = Vec::new();
        for seq in 0..per_flow {
            for f in 0..flows {
                let (src, sport, dport) = flow(f);
                let payload = (u64::from(seq)).to_be_bytes();
                input.push(frames::udp(
                    PEER,
                    US,
                    &src,
                    "198.51.100.1",
                    sport,
                    dport,
                    64,
                    &payload,
                ));
            }
        }
        let total = input.len() as u64;
        team.feed(0, 0, input);
        let fabric = team.fabric.clone();
        let workers = core::mem::take(&mut team.workers);
        let dp = Datapath::start(workers, fabric, &RunParams::default()).unwrap();
        let t0 = std::time::Instant::now();
        while progress.load(Ordering::Relaxed) < total && t0.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        team.workers = dp.stop();
        let out_of_order: u64 = team
            .workers
            .iter()
            .flat_map(|w| w.apps.iter().flat_map(|a| a.counters()))
            .filter(|(k, _)| *k == "out_of_order")
            .map(|(_, v)| v)
            .sum();
        assert_eq!(
            progress.load(Ordering::Relaxed),
            total,
            "{policy:?}: all delivered"
        );
        assert_eq!(out_of_order, 0, "{policy:?}");
        let a = team.acct();
        assert!(
            a.handed_off > 0 && a.taken_over == a.handed_off,
            "{policy:?}: {a:?}"
        );
        team.assert_conserved();
        team.stop_and_check_pool();
    }
}

/// CPU time of this process so far (user + system), from /proc.
fn cpu_time() -> std::time::Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which may hold spaces) begin after the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    std::time::Duration::from_millis(ticks * 1000 / 100)
}

/// Idle workers sleep: two workers with nothing to do for half a second use a small
/// fraction of one core, not two busy-polling cores.
#[test]
fn idle_workers_sleep() {
    // The process's CPU time is measured: nothing else of this file may run meanwhile.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut team = Team::new(
        &spec(),
        Mode::List,
        vec![vec![0], vec![]],
        vec![vec![0, 1]],
        Some(RpsParams::default()),
    );
    let fabric = team.fabric.clone();
    let workers = core::mem::take(&mut team.workers);
    let dp = Datapath::start(workers, fabric, &RunParams::default()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let c0 = cpu_time();
    let t0 = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let used = cpu_time() - c0;
    let wall = t0.elapsed();
    team.workers = dp.stop();
    assert!(
        used.as_secs_f64() < 0.25 * wall.as_secs_f64(),
        "idle workers used {used:?} of CPU in {wall:?}"
    );
    team.stop_and_check_pool();
}
