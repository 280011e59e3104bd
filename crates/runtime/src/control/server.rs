//! The control socket: a Unix stream socket `netbatch run` serves on its own thread.
//!
//! One request per connection: a JSON line `{"argv": ["show", "runtime"]}`, answered by
//! one JSON line `{"ok": true, "text": "...", "data": {...}}` ([`super::Reply`]).
//!
//! Who may connect: the socket file is mode 0600 (0660 with a configured group, owned by
//! that group), so the kernel refuses other users at `connect`; each accepted
//! connection's peer credentials (`SO_PEERCRED`) are checked again (root, our own user,
//! or a member of the group), so a socket file whose mode was changed by hand still
//! refuses them, with a reason.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Control, Reply};

/// The served socket; dropping it stops the thread and removes the file.
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Why the socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Another process serves this path.
    #[error(
        "control socket {0}: another netbatch is serving it (give this one another [control] name or socket)"
    )]
    InUse(PathBuf),
    /// Creating, binding or setting up the socket failed.
    #[error("control socket {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

impl Server {
    /// Serves `control` at `path`: mode 0600, or 0660 owned by group `gid`.
    pub fn start(control: Arc<Control>, path: &Path, gid: Option<u32>) -> Result<Self, ServeError> {
        let io = |e| ServeError::Io(path.to_path_buf(), e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(io)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
        }
        if path.exists() {
            // A live server answers; a file left by one that died does not.
            if UnixStream::connect(path).is_ok() {
                return Err(ServeError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(io)?;
        }
        let listener = UnixListener::bind(path).map_err(io)?;
        let mode = if gid.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
        if let Some(g) = gid {
            std::os::unix::fs::chown(path, None, Some(g)).map_err(io)?;
        }
        listener.set_nonblocking(true).map_err(io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("netbatch-control".into())
            .spawn(move || serve(&listener, &control, gid, &flag))
            .map_err(io)?;
        Ok(Self {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How often the accept loop looks at the stop flag.
const TICK: Duration = Duration::from_millis(20);

fn serve(l: &UnixListener, control: &Control, gid: Option<u32>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                if let Err(e) = one(s, control, gid) {
                    tracing::debug!(target: "netbatch::control", "control connection: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(e) => {
                tracing::warn!(target: "netbatch::control", "control socket accept: {e}");
                std::thread::sleep(TICK);
            }
        }
    }
}

/// Whether the peer may use the socket, or why not.
fn allowed(s: &UnixStream, gid: Option<u32>) -> Result<(), String> {
    let (pid, uid, pgid) = netbatch_ports::sys::peer_cred(s.as_raw_fd())
        .map_err(|e| format!("peer credentials: {e}"))?;
    if uid == 0 || uid == netbatch_ports::sys::euid() {
        return Ok(());
    }
    if let Some(g) = gid
        && (pgid == g || groups_of(pid).contains(&g))
    {
        return Ok(());
    }
    Err(format!(
        "permission denied: uid {uid} is not root, the datapath's user{}",
        gid.map(|g| format!(" or in group {g}")).unwrap_or_default()
    ))
}

/// The supplementary groups of process `pid` (`/proc/PID/status`, `Groups:`).
fn groups_of(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

fn one(s: UnixStream, control: &Control, gid: Option<u32>) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let reply = match allowed(&s, gid) {
        Err(why) => {
            tracing::warn!(target: "netbatch::control", "control socket: refused a client: {why}");
            Reply::err(why)
        }
        Ok(()) => {
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line)?;
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => match v["argv"].as_array() {
                    Some(a) => {
                        let argv: Vec<String> = a
                            .iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect();
                        tracing::debug!(target: "netbatch::control", "command: {}", argv.join(" "));
                        control.handle(&argv)
                    }
                    None => Reply::err("a request is {\"argv\": [words...]}"),
                },
                Err(e) => Reply::err(format!("request is not JSON: {e}")),
            }
        }
    };
    let mut w = &s;
    let out = json!({ "ok": reply.ok, "text": reply.text, "data": reply.data });
    writeln!(w, "{out}")?;
    w.flush()
}

/// The client's side: sends `argv` to the socket at `path` and returns the reply.
pub fn request(path: &Path, argv: &[String]) -> Result<Reply, String> {
    let s = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "{}: permission denied (the socket is for root, the datapath's user and its [control] group)",
            path.display()
        ),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => format!(
            "{}: no netbatch is serving here (is `netbatch run` running? --socket or --config names another)",
            path.display()
        ),
        _ => format!("{}: {e}", path.display()),
    })?;
    // A reload or a trace may take a few seconds on a busy datapath.
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut w = &s;
    writeln!(w, "{}", json!({ "argv": argv })).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_str(&line).map_err(|e| format!("{}: bad reply: {e}", path.display()))?;
    Ok(Reply {
        ok: v["ok"].as_bool().unwrap_or(false),
        text: v["text"].as_str().unwrap_or("").to_string(),
        data: v["data"].clone(),
    })
}
