//! A worker's round keeps to its budget and time cap the way the kernel's `net_rx_action`
//! does, over receive queues and RPS backlogs alike, and nothing starves.
//!
//! The expected per-queue counts are worked out by hand from the rules: each unit (a
//! receive queue, a backlog source) gives up to `weight` = 64 frames, the round's frames
//! add up to at most `budget` = 300, the check comes before every unit but the round's
//! first, and a cut-short round counts one `time_squeeze` and makes the next round resume
//! where it stopped, with receive and backlog phases swapping order.

use netbatch_datapath::Worker;
use netbatch_datapath::rps::{RpsParams, RpsPolicy};
use netbatch_engine::Mode;
use netbatch_scenarios::{Lab, LabSpec, PEER, Team, frames, port};
use netbatch_stack::GraphOptions;
use netbatch_stack::host::HostParams;
use netbatch_wire::ethernet::MacAddr;

/// A unicast MAC that is none of the lab's: frames to it are dropped by L2 (other host),
/// which keeps the graph's part of the work trivial and every frame countable.
const ELSEWHERE: MacAddr = MacAddr([2, 0, 0, 0, 9, 9]);

/// `n` ports, port `i` owning 198.51.100.(16 i + 1)/28.
fn spec(n: usize) -> LabSpec {
    LabSpec {
        routes6: Vec::new(),
        neighbours6: Vec::new(),
        ports: (0..n)
            .map(|i| {
                port(
                    &format!("eth{i}"),
                    MacAddr([2, 0, 0, 0, i as u8, 1]),
                    &format!("198.51.100.{}/28", 16 * i + 1),
                )
            })
            .collect(),
        routes: vec![],
        neighbours: vec![],
        params: HostParams::default(),
        graph: GraphOptions::default(),
    }
}

/// `n` IPv4 frames of `flows` distinct flows, to a MAC that is not ours.
fn frames_elsewhere(n: usize, flows: u16) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let sport = 1000 + (i as u16 % flows);
            frames::udp(
                PEER,
                ELSEWHERE,
                "192.0.2.7",
                "192.0.2.9",
                sport,
                7,
                64,
                b"x",
            )
        })
        .collect()
}

fn set_time_cap(w: &mut Worker, ns: u64) {
    let p = w.params();
    w.set_params(netbatch_datapath::PollParams {
        time_cap_ns: ns,
        ..p
    });
}

/// Six queues with 100 frames each: the first round takes 64 from each of queues 0-3 and
/// 44 from queue 4 (300 in all) and stops before queue 5 (one squeeze); the next round
/// starts at queue 5, so it is not starved.
#[test]
fn budget_cuts_the_round_and_the_next_round_resumes() {
    for mode in [Mode::List, Mode::Packet] {
        let mut lab = Lab::new(&spec(6), mode, netbatch_engine::Dispatch::Runs);
        for i in 0..6 {
            lab.feed(i, frames_elsewhere(100, 8));
        }
        let pending =
            |lab: &mut Lab| -> Vec<usize> { (0..6).map(|i| lab.port(i).rx_pending()).collect() };
        assert_eq!(lab.w.poll(lab.now()), 300, "{mode:?}");
        assert_eq!(pending(&mut lab), [36, 36, 36, 36, 56, 100], "{mode:?}");
        assert_eq!(lab.w.stats.time_squeeze, 1);
        // Queue 5 first (64), then 36 + 36 + 36 + 36 + 56 = 200: 264 < 300, no squeeze.
        assert_eq!(lab.w.poll(lab.now()), 264, "{mode:?}");
        assert_eq!(pending(&mut lab), [0, 0, 0, 0, 0, 36], "{mode:?}");
        assert_eq!(lab.w.stats.time_squeeze, 1);
        lab.run();
        assert_eq!(lab.w.acct.rx, 600);
        assert_eq!(lab.w.acct.dropped, 600, "every frame dropped as other-host");
        assert_eq!(lab.w.stats.processed, 600);
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// A time cap of zero lets each round poll exactly one unit: the queues take turns.
#[test]
fn time_cap_lets_queues_take_turns() {
    let mut lab = Lab::new(&spec(3), Mode::List, netbatch_engine::Dispatch::Buckets);
    set_time_cap(&mut lab.w, 0);
    for i in 0..3 {
        lab.feed(i, frames_elsewhere(10, 4));
    }
    for (round, left) in [[0, 10, 10], [0, 0, 10], [0, 0, 0]].iter().enumerate() {
        assert_eq!(lab.w.poll(lab.now()), 10, "round {round}");
        let now: Vec<usize> = (0..3).map(|i| lab.port(i).rx_pending()).collect();
        assert_eq!(&now[..], &left[..], "round {round}");
        assert_eq!(lab.w.stats.time_squeeze, round as u64 + 1);
    }
    lab.assert_conserved();
    lab.stop_and_check_pool();
}

/// With RPS, backlog and receive queue share the round: under a zero time cap worker 1
/// alternates between its own receive queue and the backlog worker 0 sent it, instead of
/// serving the queue until it is empty. Every frame is processed exactly once, on the
/// worker that ran it through its graph (worker 0 hands everything to worker 1).
#[test]
fn backlog_and_receive_queue_share_the_round() {
    let rps = RpsParams {
        policy: RpsPolicy::Direct,
        ..RpsParams::default()
    };
    // Worker 0 receives port 0, worker 1 port 1; RPS sends both ports' flows to worker 1.
    let mut team = Team::new(
        &spec(2),
        Mode::List,
        vec![vec![0], vec![1]],
        vec![vec![1], vec![1]],
        Some(rps),
    );
    team.feed(0, 0, frames_elsewhere(100, 16));
    team.feed(1, 1, frames_elsewhere(100, 16));
    // Worker 0: two rounds hand its 100 frames to worker 1 (64, then 36).
    assert_eq!(team.step(0), 64);
    assert_eq!(team.step(0), 36);
    set_time_cap(&mut team.workers[1], 0);
    let backlog = |t: &Team| t.workers[1].steer.as_ref().map_or(0, |s| s.backlog_len());
    assert_eq!(backlog(&team), 100);
    // (frames taken, receive queue left, backlog left, squeezes) after each round.
    let expect = [
        (64, 36, 100, 1), // receive queue (64), cut before the backlog
        (64, 36, 36, 2),  // backlog first: worker 0's ring (64), cut before the own one
        (36, 0, 36, 3),   // receive queue (36), cut before the backlog
        (36, 0, 0, 4),    // backlog (36), cut before the receive queue
    ];
    for (round, &(taken, rx_left, bl_left, squeezes)) in expect.iter().enumerate() {
        assert_eq!(team.step(1), taken, "round {round}");
        assert_eq!(team.port(1, 1).rx_pending(), rx_left, "round {round}");
        assert_eq!(backlog(&team), bl_left, "round {round}");
        assert_eq!(
            team.workers[1].stats.time_squeeze, squeezes,
            "round {round}"
        );
    }
    assert_eq!(
        team.workers[0].stats.processed, 0,
        "worker 0 ran nothing itself"
    );
    assert_eq!(team.workers[1].stats.processed, 200);
    assert_eq!(team.acct().dropped, 200);
    team.assert_conserved();
    team.stop_and_check_pool();
}

/// A core the process cannot run on is refused at start, naming the worker, rather than
/// the worker running unpinned.
#[test]
fn a_core_that_cannot_be_had_is_refused() {
    use netbatch_datapath::threads::{Datapath, RunParams};
    let mut team = Team::new(
        &spec(1),
        Mode::List,
        vec![vec![0], vec![0]],
        vec![vec![0, 1]],
        Some(RpsParams::default()),
    );
    let fabric = team.fabric.clone();
    let workers = core::mem::take(&mut team.workers);
    // No machine this runs on has a core 100000.
    let params = RunParams {
        cores: vec![0, 100_000],
        ..RunParams::default()
    };
    match Datapath::start(workers, fabric, &params) {
        Ok(_) => panic!("started with a core that does not exist"),
        Err(e) => assert!(
            e.to_string()
                .starts_with("worker 1: core 100000 does not exist"),
            "{e}"
        ),
    }
}
