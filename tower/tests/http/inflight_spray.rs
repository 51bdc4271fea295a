//! Key spraying must not make `InflightLayer` refuse an honest client: a
//! client under its limit is admitted however many other keys are busy.
#![cfg(not(loom))]

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::{Layer, Service};
use weir_tower::{InflightLayer, PeerAddr, PeerIp};

const LIMIT: u32 = 10;

fn request(ip: IpAddr) -> Request<()> {
    let mut req = Request::new(());
    req.extensions_mut()
        .insert(PeerAddr(SocketAddr::new(ip, 4000)));
    req
}

/// The /64s of one /48: 2001:db8:1:n::/64.
fn sprayed(n: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, n, 0, 0, 0, 1))
}

/// An honest client elsewhere.
fn honest(n: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 2, n, 0, 0, 0, 1))
}

/// A service that never answers: every request it takes stays in flight
/// until its future is dropped.
#[derive(Clone)]
struct Hang;

impl Service<Request<()>> for Hang {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Pending<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::pending()
    }
}

/// The status a request gets at once, or `None` while it is in flight.
fn status_now<F, B>(future: &mut F) -> Option<StatusCode>
where
    F: Future<Output = Result<Response<B>, Infallible>> + Unpin,
{
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(future).poll(&mut cx) {
        Poll::Ready(Ok(response)) => Some(response.status()),
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => None,
    }
}

#[test]
fn a_sprayed_48_does_not_refuse_fresh_clients() {
    let layer = InflightLayer::new(PeerIp::new(), LIMIT);
    let mut service = layer.layer(Hang);
    // 65 536 keys holding 3 requests each, all admitted (3 < 10).
    let mut held = Vec::with_capacity(3 << 16);
    for n in 0..=u16::MAX {
        for _ in 0..3 {
            let mut future = service.call(request(sprayed(n)));
            assert_eq!(
                status_now(&mut future),
                None,
                "a sprayed key under its limit"
            );
            held.push(future);
        }
    }
    // 1000 fresh clients, one request each: none is over its limit.
    let refused = (0..1000)
        .filter(|&n| {
            let mut future = service.call(request(honest(n)));
            status_now(&mut future).is_some()
        })
        .count();
    assert_eq!(refused, 0, "fresh clients refused because of others' load");
    // And an honest client gets exactly its limit, no less, no more.
    let mut own = Vec::new();
    for _ in 0..LIMIT {
        let mut future = service.call(request(honest(7)));
        assert_eq!(status_now(&mut future), None);
        own.push(future);
    }
    let mut over = service.call(request(honest(7)));
    assert_eq!(status_now(&mut over), Some(StatusCode::SERVICE_UNAVAILABLE));
    // Memory follows what is in flight: an entry per busy key, none after.
    assert_eq!(layer.keys_in_flight(), (1 << 16) + 1);
    assert_eq!(layer.in_flight(&PeerIp::new().key_for(sprayed(9))), 3);
    drop(held);
    drop(own);
    assert_eq!(layer.keys_in_flight(), 0);
    assert_eq!(layer.in_flight(&PeerIp::new().key_for(honest(7))), 0);
}
