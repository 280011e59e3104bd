//! systemd's service notification protocol (`sd_notify(3)`), for a unit of
//! `Type=notify`: one datagram of `KEY=VALUE` lines to the Unix socket named by
//! `$NOTIFY_SOCKET` (a path, or an abstract name when it starts with `@`). Without that
//! variable (not started by systemd) nothing is sent.
//!
//! netbatch says `READY=1` once its ports, workers, control socket and metrics serve,
//! `RELOADING=1` when it starts re-reading its configuration and `READY=1` when the
//! reload is done (applied or refused: it serves either way), and `STOPPING=1` when it
//! starts to stop. Each comes with a `STATUS=` line that `systemctl status` shows.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;

/// The variable systemd names its socket in.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` (`READY=1`, `STATUS=...`, lines joined by `\n`) to systemd, if it
/// asked (`$NOTIFY_SOCKET`). Returns whether it was sent; a failure is logged at debug
/// level (the service manager's problem, not the datapath's).
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os(NOTIFY_SOCKET).filter(|p| !p.is_empty()) else {
        return false;
    };
    match send(path.as_bytes(), state) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(target: "netbatch::notify", "sd_notify to {}: {e}", path.to_string_lossy());
            false
        }
    }
}

fn send(path: &[u8], state: &str) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    match path.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            sock.send_to(state.as_bytes(), std::ffi::OsStr::from_bytes(path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a service manager receives: the datagram as sent, on a path socket and on
    /// an abstract one (the two forms `$NOTIFY_SOCKET` takes).
    #[test]
    fn a_datagram_reaches_the_socket_systemd_names() {
        let dir = tempfile::Builder::new()
            .prefix("netbatch-notify-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str().as_bytes(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("netbatch-notify-test-{}", std::process::id());
        let abs = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&abs).unwrap();
        send(format!("@{name}").as_bytes(), "STOPPING=1").unwrap();
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}
