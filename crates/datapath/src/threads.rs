//! Several workers, each on its own thread (pinned to a core when asked), sharing the
//! buffer pool, the routes, the sockets and the RPS fabric.
//!
//! A worker thread polls; when a round finds nothing to do it keeps polling for
//! `idle_spin` (busy polling, as NAPI busy-poll does), then sleeps until another worker
//! kicks it, a frame arrives on a kernel-backed port it receives from (it sleeps in
//! `poll` on their descriptors and an eventfd for kicks), or a millisecond passes (its
//! timers), so an idle datapath burns no cores.
//! Stopping: every worker finishes its round and stops receiving; then each processes
//! what other workers had already sent it; then the threads end and hand their workers
//! back for counters and the final clean-up (every buffer back in the pool).
//!
//! A port that stops working (its interface went away) stops the datapath: its worker
//! records the port's fault, which [`Datapath::faults`] reports, and raises the stop flag.
//!
//! The control plane reaches a running worker only through its mailbox ([`Remote`]): a
//! job (a closure over the worker) waits there until the worker's loop is between rounds,
//! where no packet is inside the graph; the worker tests one flag per loop and never
//! waits for the control plane. That is how counters are read, tables switched and
//! traces armed while traffic flows.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::rps::Fabric;
use crate::worker::Worker;

/// How the worker threads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunParams {
    /// Busy polling after the last work before sleeping, in ns.
    pub idle_spin_ns: u64,
    /// Core of each worker (by index); empty: not pinned.
    pub cores: Vec<usize>,
}

impl Default for RunParams {
    fn default() -> Self {
        Self {
            idle_spin_ns: 50_000,
            cores: Vec::new(),
        }
    }
}

/// Running workers.
#[derive(Debug)]
pub struct Datapath {
    fabric: Arc<Fabric>,
    stop: Arc<AtomicBool>,
    faults: Arc<Mutex<Vec<String>>>,
    threads: Vec<JoinHandle<Worker>>,
    remote: Remote,
}

/// A job for a worker, run between two of its rounds.
type Job = Box<dyn FnOnce(&mut Worker) + Send>;

/// One worker's mailbox: jobs wait here; the flag tells the worker there are some. A
/// cache line of its own: the worker reads the flag every loop.
#[derive(Default)]
#[repr(align(64))]
struct Mailbox {
    pending: AtomicBool,
    jobs: Mutex<Vec<Job>>,
}

impl Mailbox {
    /// Runs what waits (the worker's side: one relaxed load when nothing does).
    #[inline]
    fn serve(&self, w: &mut Worker) {
        if !self.pending.load(Ordering::Acquire) {
            return;
        }
        self.pending.store(false, Ordering::Release);
        let jobs = match self.jobs.lock() {
            Ok(mut j) => std::mem::take(&mut *j),
            Err(_) => return,
        };
        for job in jobs {
            job(w);
        }
    }
}

/// Why a job did not give its answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The worker did not reach the end of a round in time.
    #[error("worker {0} did not answer within {1:?}")]
    Timeout(usize, Duration),
    /// The worker stopped before running the job.
    #[error("worker {0} has stopped")]
    Stopped(usize),
}

/// The control plane's handle on running workers: posts jobs to their mailboxes and
/// collects the answers. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct Remote {
    boxes: Arc<Vec<Mailbox>>,
    fabric: Arc<Fabric>,
}

impl core::fmt::Debug for Remote {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Remote")
            .field("workers", &self.boxes.len())
            .finish()
    }
}

/// How long a worker may take to reach the end of its round (a round is capped at a
/// few milliseconds; a sleeping worker is kicked).
pub const REMOTE_TIMEOUT: Duration = Duration::from_secs(2);

impl Remote {
    /// Workers reached.
    pub fn workers(&self) -> usize {
        self.boxes.len()
    }

    /// The fabric that joins the workers.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Runs `f` on every worker between two of its rounds and returns the answers in
    /// worker order. Each worker runs it at its own round boundary (the workers are not
    /// stopped together).
    pub fn on_each<T: Send + 'static>(
        &self,
        f: impl Fn(usize, &mut Worker) -> T + Send + Sync + 'static,
    ) -> Result<Vec<T>, RemoteError> {
        let f = Arc::new(f);
        let mut waits = Vec::with_capacity(self.boxes.len());
        for (i, b) in self.boxes.iter().enumerate() {
            let (tx, rx) = mpsc::sync_channel(1);
            let f = f.clone();
            // A job the asker gave up on before it started must not run later: it would
            // change what the asker reported unchanged. Once started, it is waited for.
            let state = Arc::new(AtomicU8::new(JOB_WAITING));
            let seen = state.clone();
            let job: Job = Box::new(move |w| {
                if seen
                    .compare_exchange(
                        JOB_WAITING,
                        JOB_RUNNING,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    let _ = tx.send(f(i, w));
                }
            });
            if let Ok(mut j) = b.jobs.lock() {
                j.push(job);
            }
            b.pending.store(true, Ordering::Release);
            waits.push((rx, state));
        }
        self.fabric.wake_all();
        let deadline = Instant::now() + REMOTE_TIMEOUT;
        let mut out = Vec::with_capacity(waits.len());
        let mut failed = None;
        for (i, (rx, state)) in waits.into_iter().enumerate() {
            if failed.is_some() {
                // Cancel what has not started; wait for what has.
                if state
                    .compare_exchange(
                        JOB_WAITING,
                        JOB_CANCELLED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_err()
                {
                    let _ = rx.recv();
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(v) => out.push(v),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if state
                        .compare_exchange(
                            JOB_WAITING,
                            JOB_CANCELLED,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        failed = Some(RemoteError::Timeout(i, REMOTE_TIMEOUT));
                    } else {
                        // It started just now: its answer comes.
                        match rx.recv() {
                            Ok(v) => out.push(v),
                            Err(_) => failed = Some(RemoteError::Stopped(i)),
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => failed = Some(RemoteError::Stopped(i)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// Why the datapath could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A thread could not be created.
    #[error("starting worker {0}: {1}")]
    Spawn(usize, std::io::Error),
    /// A core to pin to does not exist.
    #[error("worker {0}: core {1} does not exist (cores 0 to {2})")]
    NoCore(usize, usize, usize),
}

/// A job's states: waiting in the mailbox, running (or run), cancelled by its asker.
const JOB_WAITING: u8 = 0;
const JOB_RUNNING: u8 = 1;
const JOB_CANCELLED: u8 = 2;

impl Datapath {
    /// Starts one thread per worker. `workers[i]` must hold the fabric's side `i`
    /// (or no RPS at all).
    pub fn start(
        workers: Vec<Worker>,
        fabric: Arc<Fabric>,
        params: &RunParams,
    ) -> Result<Self, StartError> {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        for (i, &c) in params.cores.iter().enumerate().take(workers.len()) {
            if !cores.iter().any(|id| id.id == c) {
                return Err(StartError::NoCore(i, c, cores.len().saturating_sub(1)));
            }
        }
        let n = workers.len();
        // Threads run on the monotonic clock; IP timestamps want UTC.
        let utc = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(0));
        let to_utc = utc.saturating_sub(netbatch_engine::time::mono_ns());
        let mut workers = workers;
        for w in &mut workers {
            w.host.clock_to_utc_ns = to_utc;
        }
        let barrier = Arc::new(Barrier::new(n));
        let stop = fabric.stop_flag();
        // A team may be started again after a stop.
        stop.store(false, Ordering::SeqCst);
        let mut threads = Vec::with_capacity(n);
        let faults = Arc::new(Mutex::new(Vec::new()));
        let remote = Remote {
            boxes: Arc::new((0..n).map(|_| Mailbox::default()).collect()),
            fabric: fabric.clone(),
        };
        for (i, w) in workers.into_iter().enumerate() {
            let core = params.cores.get(i).copied();
            let (fabric, barrier, stop) = (fabric.clone(), barrier.clone(), stop.clone());
            let faults = faults.clone();
            let boxes = remote.boxes.clone();
            let spin = params.idle_spin_ns;
            let t = std::thread::Builder::new()
                .name(format!("netbatch-w{i}"))
                .spawn(move || {
                    // A worker that cannot have the core it was given stops the datapath
                    // (a fault, reported like a port's) rather than run somewhere else.
                    if let Some(c) = core
                        && !core_affinity::set_for_current(core_affinity::CoreId { id: c })
                    {
                        if let Ok(mut f) = faults.lock() {
                            f.push(format!("worker {i}: could not pin it to core {c}"));
                        }
                        stop.store(true, Ordering::SeqCst);
                        fabric.wake_all();
                    }
                    let mailbox = &boxes[i];
                    run_worker(w, i, &fabric, &barrier, &stop, spin, &faults, mailbox)
                })
                .map_err(|e| StartError::Spawn(i, e))?;
            threads.push(t);
        }
        Ok(Self {
            fabric,
            stop,
            faults,
            threads,
            remote,
        })
    }

    /// The control plane's handle on the workers.
    pub fn remote(&self) -> Remote {
        self.remote.clone()
    }

    /// Faults of ports that stopped working (each names its port), in the order seen.
    pub fn faults(&self) -> Vec<String> {
        self.faults.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// The flag that stops the workers (for a signal handler).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Whether a stop was asked for.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Stops the workers and returns them, their backlogs processed, ready for
    /// [`Worker::shutdown`] (call it on every one: the first frees the shared sockets).
    pub fn stop(self) -> Vec<Worker> {
        self.stop.store(true, Ordering::SeqCst);
        self.fabric.wake_all();
        self.threads
            .into_iter()
            .map(|t| match t.join() {
                Ok(w) => w,
                Err(e) => std::panic::resume_unwind(e),
            })
            .collect()
    }
}

/// How often a worker looks for port faults.
const FAULT_CHECK_NS: u64 = 100_000_000;

#[allow(clippy::too_many_arguments)]
fn run_worker(
    mut w: Worker,
    me: usize,
    fabric: &Fabric,
    barrier: &Barrier,
    stop: &AtomicBool,
    spin_ns: u64,
    faults: &Mutex<Vec<String>>,
    mailbox: &Mailbox,
) -> Worker {
    fabric.register_thread(me);
    // A worker that receives from kernel-backed ports sleeps on their descriptors, so a
    // frame wakes it at once; an eventfd joins them for kicks from other workers.
    let mut fds: Vec<std::os::fd::RawFd> = w
        .rx_ports
        .iter()
        .filter_map(|&p| w.ports.get(usize::from(p)).and_then(|q| q.rx_fd()))
        .collect();
    if !fds.is_empty() {
        match netbatch_ports::sys::EventFd::new() {
            Ok(e) => {
                fds.push(e.fd());
                fabric.register_waker(me, e);
            }
            // Without one, the worker sleeps as a worker without such ports does.
            Err(_) => fds.clear(),
        }
    }
    let waker = fds.last().copied();
    let mut idle_since: Option<u64> = None;
    let mut next_check = 0;
    let mut last = netbatch_engine::time::mono_ns();
    let mut last_worked = false;
    while !stop.load(Ordering::Relaxed) {
        // Between rounds: nothing is inside the graph.
        mailbox.serve(&mut w);
        let now = netbatch_engine::time::mono_ns();
        if now >= next_check {
            next_check = now + FAULT_CHECK_NS;
            let mut seen: Vec<String> = w
                .ports
                .iter()
                .filter_map(|p| p.fault().map(str::to_string))
                .collect();
            if !seen.is_empty() {
                if let Ok(mut f) = faults.lock() {
                    seen.retain(|s| !f.contains(s));
                    f.extend(seen);
                }
                stop.store(true, Ordering::SeqCst);
                fabric.wake_all();
                break;
            }
        }
        // Busy and idle time (`show runtime`'s idle share): the time since the last
        // loop began goes to what that loop's round found (work or none).
        let took = now.saturating_sub(last);
        last = now;
        if last_worked {
            w.stats.busy_ns += took;
        } else {
            w.stats.idle_ns += took;
        }
        last_worked = w.poll(now) > 0;
        if last_worked {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert(now);
        if now.saturating_sub(since) < spin_ns {
            std::hint::spin_loop();
            continue;
        }
        if fabric.park_begin(me) {
            match waker {
                Some(_) => {
                    netbatch_ports::sys::wait_readable(&fds, 1);
                    fabric.clear_waker(me);
                }
                None => std::thread::park_timeout(Duration::from_millis(1)),
            }
            fabric.park_end(me);
        }
    }
    // Jobs that will not run are dropped: their askers learn at once that it stopped.
    if let Ok(mut j) = mailbox.jobs.lock() {
        j.clear();
    }
    // Nobody receives any more; what is in flight to this worker is processed.
    barrier.wait();
    loop {
        let now = netbatch_engine::time::mono_ns();
        let work = w.poll_drain(now);
        let left = w.steer.as_ref().map_or(0, crate::rps::Steer::backlog_len);
        if work == 0 && left == 0 {
            break;
        }
    }
    barrier.wait();
    w
}
