//! A tokio UDP socket guarded by a [`Classifier`]: flood packets are read
//! and discarded inside [`GuardedUdpSocket::recv_from`], so the application
//! only ever sees datagrams that passed.
//!
//! The destination of a datagram is taken to be the socket's local address.
//! For a socket bound to a specific address that is exact; for one bound to
//! the unspecified address (`0.0.0.0`, `[::]`) every datagram looks sent to
//! that unspecified address, which only matters if the host serves several
//! addresses and you want them limited separately (bind one socket per
//! address then).
//!
//! Draining the socket in user space still costs a system call per flood
//! packet (the kernel filter, `weir_hhh::kernel` with feature `bpf`, drops
//! them before that), but the flood never reaches the application's queues or
//! work, and the classifier costs far less than the `recvfrom` that
//! delivered the packet.
//!
//! An echo server that floods cannot overwhelm:
//!
//! ```no_run
//! use std::sync::Arc;
//! use weir_hhh::Classifier;
//! use weir_hhh::udp::GuardedUdpSocket;
//!
//! # async fn serve() -> std::io::Result<()> {
//! let socket = tokio::net::UdpSocket::bind("127.0.0.1:5353").await?;
//! let guard = GuardedUdpSocket::try_new(socket, Arc::new(Classifier::try_new(1000).unwrap()))?;
//! let mut buf = [0u8; 1500];
//! loop {
//!     let (len, peer) = guard.recv_from(&mut buf).await?; // floods never get here
//!     // A sender can make its own reply fail (a spoofed source port 0 is
//!     // delivered but cannot be answered): skip it, never stop serving.
//!     let _ = guard.send_to(&buf[..len], peer).await;
//! }
//! # }
//! ```

use crate::classifier::{Classifier, Verdict};
use crate::random::{RandomSource, ThreadRandom};
use crate::tuple::FourTuple;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::UdpSocket;
use weir_limits::clock::{Clock, MonotonicClock};

/// A UDP socket whose receive side drops what its classifier drops.
///
/// ```
/// use std::sync::Arc;
/// use weir_hhh::Classifier;
/// use weir_hhh::udp::GuardedUdpSocket;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
/// let guard = GuardedUdpSocket::try_new(socket, Arc::new(Classifier::try_new(1_000)?))?;
/// let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
/// client.send_to(b"ping", guard.local_addr()).await?;
/// let mut buf = [0u8; 1500];
/// let (len, peer) = guard.recv_from(&mut buf).await?;
/// assert_eq!((&buf[..len], peer), (&b"ping"[..], client.local_addr()?));
/// assert_eq!(guard.classifier().stats().unlimited, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct GuardedUdpSocket<C = MonotonicClock, R = ThreadRandom> {
    socket: UdpSocket,
    local: SocketAddr,
    classifier: Arc<Classifier<C, R>>,
}

impl<C: Clock, R: RandomSource> GuardedUdpSocket<C, R> {
    /// Guard `socket` with `classifier` (which may be shared by several
    /// sockets and tasks).
    ///
    /// # Errors
    ///
    /// The socket's error if its local address cannot be read.
    pub fn try_new(socket: UdpSocket, classifier: Arc<Classifier<C, R>>) -> io::Result<Self> {
        let local = socket.local_addr()?;
        Ok(Self {
            socket,
            local,
            classifier,
        })
    }

    /// Receive the next datagram that passes the classifier; datagrams it
    /// drops are discarded silently.
    ///
    /// # Errors
    ///
    /// The socket's receive error.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.recv_from_inspect(buf, |_, _| {}).await
    }

    /// [`recv_from`](Self::recv_from), calling `on_verdict(peer, verdict)`
    /// for every datagram read (passed or dropped), e.g. to log drops.
    ///
    /// # Errors
    ///
    /// The socket's receive error.
    pub async fn recv_from_inspect(
        &self,
        buf: &mut [u8],
        mut on_verdict: impl FnMut(SocketAddr, &Verdict),
    ) -> io::Result<(usize, SocketAddr)> {
        loop {
            let (len, peer) = self.socket.recv_from(buf).await?;
            let verdict = self.check(peer);
            on_verdict(peer, &verdict);
            if verdict.is_pass() {
                return Ok((len, peer));
            }
        }
    }

    /// The verdict for a datagram from `peer` to this socket, now.
    #[inline]
    fn check(&self, peer: SocketAddr) -> Verdict {
        self.classifier
            .classify(&FourTuple::from_socket_addrs(peer, self.local))
    }

    /// Send a datagram (not limited).
    ///
    /// # Errors
    ///
    /// The socket's send error, including for targets a sender chose: a
    /// datagram from source port 0 (spoofed) is delivered, but a reply to
    /// it fails with `InvalidInput`. A serve loop should skip a failed
    /// reply rather than stop.
    pub async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        self.socket.send_to(buf, target).await
    }

    /// The socket's local address (the destination of every datagram it
    /// classifies).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The classifier.
    pub fn classifier(&self) -> &Arc<Classifier<C, R>> {
        &self.classifier
    }

    /// The underlying socket.
    pub fn get_ref(&self) -> &UdpSocket {
        &self.socket
    }

    /// Take the socket back.
    pub fn into_inner(self) -> UdpSocket {
        self.socket
    }
}
