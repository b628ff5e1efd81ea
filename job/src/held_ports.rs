//! Loopback rendezvous ports held bound from the moment
//! [`free_port`](crate::free_port) names one until a rank 0 of this
//! process listens on it.
//!
//! A port found free and let go can be taken by anyone before rank 0
//! binds it; a job of thread ranks (tests, tools) then fails with
//! "Address already in use". So the port stays bound here, by a socket
//! that does not listen: rank 0 in this process takes that very socket and
//! listens on it. A rank 0 in another process (`sode-run`'s children) can
//! still bind and listen on the port, because the held socket allows
//! address reuse once bound and never listens; a stranger that binds
//! without address reuse cannot.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrIn,
};

/// Ports named by `free_port` and not yet listened on in this process.
static HELD: Mutex<BTreeMap<u16, OwnedFd>> = Mutex::new(BTreeMap::new());

/// Binds 127.0.0.1:`port` (0 for any) for this process, or says why not:
/// a port that anything else has bound, or that a closed connection still
/// holds, is refused. Returns the port bound.
pub(crate) fn hold(port: u16) -> io::Result<u16> {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // Bound first without address reuse: the bind fails on any socket of
    // the port, a lingering closed connection included.
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)),
    )?;
    // Then reuse allowed, so that a rank 0 in another process may bind it.
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    let bound = nix::sys::socket::getsockname::<SockaddrIn>(fd.as_raw_fd())?.port();
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(bound, fd);
    Ok(bound)
}

/// The listener for a rendezvous at `addr` when `addr` is a port this
/// process holds: the held socket, now listening (and no longer held).
/// `None` for any other address.
pub(crate) fn take(addr: SocketAddr) -> Option<io::Result<TcpListener>> {
    if addr.ip() != Ipv4Addr::LOCALHOST {
        return None;
    }
    let fd = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&addr.port())?;
    Some(
        listen(&fd, Backlog::MAXCONN)
            .map(|()| TcpListener::from(fd))
            .map_err(io::Error::from),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_is_refused_to_strangers_and_taken_by_its_rendezvous() {
        let port = crate::free_port().unwrap();
        // A stranger binding without address reuse is refused.
        let stranger = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let at = SockaddrIn::from(std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
        assert!(bind(stranger.as_raw_fd(), &at).is_err());
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let listener = take(addr).unwrap().unwrap();
        assert!(take(addr).is_none(), "taken twice");
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert_eq!(accepted.peer_addr().unwrap(), client.local_addr().unwrap());
    }

    #[test]
    fn a_held_port_can_be_listened_on_by_another_socket_allowing_reuse() {
        // As a rank 0 in a child process does.
        let port = hold(0).unwrap();
        let other = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        let client = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (accepted, _) = other.accept().unwrap();
        assert_eq!(accepted.peer_addr().unwrap(), client.local_addr().unwrap());
    }
}
