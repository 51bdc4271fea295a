//! A count owed in the trailers, over real HTTP: a raw TCP client that
//! hangs up at every frame boundary of a streamed answer is never charged
//! less than one that reads it to the end, trailers and all.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FRAMES: usize = 20;
const COUNT: u32 = 1000;
const CEILING: u32 = 4096;

/// `/tokens`: twenty frames a couple of milliseconds apart, as a model
/// generates them, then the count in the trailers (announced in the head).
fn token_stream() -> Router {
    Router::new().route(
        "/tokens",
        get(|| async {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(async move {
                for i in 0..FRAMES {
                    let token = Bytes::from(format!("token-{i:02} "));
                    if tx.send(Frame::data(token)).is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let mut trailers = HeaderMap::new();
                trailers.insert("x-tokens-used", HeaderValue::from(COUNT));
                let _ = tx.send(Frame::trailers(trailers));
            });
            // hyper sends only the trailer fields the head announces.
            let mut response = axum::response::Response::new(Body::new(Fed(rx)));
            response
                .headers_mut()
                .insert("trailer", HeaderValue::from_static("x-tokens-used"));
            response
        }),
    )
}

/// GET `/tokens` as `user` over a raw socket, reading until `frames`
/// tokens have arrived (`None`: to the end, trailers included), then
/// hanging up.
async fn read_then_hang_up(addr: SocketAddr, user: &str, frames: Option<usize>) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET /tokens HTTP/1.1\r\nhost: weir.test\r\nx-user: {user}\r\nte: trailers\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await.expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got);
        let head_read = text.contains("\r\n\r\n");
        let done = match frames {
            Some(n) => head_read && text.matches("token-").count() >= n,
            // The last chunk, then the trailer (the head names it too).
            None => text.contains("\r\n0\r\nx-tokens-used:") && text.ends_with("\r\n\r\n"),
        };
        if done {
            break;
        }
        let n = tokio::time::timeout(PATIENCE, socket.read(&mut buf))
            .await
            .expect("bytes in time")
            .expect("read");
        assert!(n > 0, "the server closed first: {text}");
        got.extend_from_slice(&buf[..n]);
    }
    drop(socket);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_up_at_any_frame_never_costs_less_than_reading_the_count() {
    const LIMIT: u32 = 1_000_000;
    let limiter = Arc::new(in_process(LIMIT));
    let tokens = HeaderName::from_static("x-tokens-used");
    let app = token_stream().layer(
        RateLimitLayer::shared(Arc::clone(&limiter), by_user())
            .settle(Settle::count_in(tokens, CEILING)),
    );
    let addr = serve(app).await;
    // What the key was charged once its response settled: anything but
    // its admission of 1, or that admission if nothing else comes within
    // two seconds (a settlement that kept it).
    let charge_of = async |user: String, frames: Option<usize>| {
        read_then_hang_up(addr, &user, frames).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let left = limiter.peek_n(&user, 0).expect("a peek").remaining();
            let charged = LIMIT - left;
            if charged != 1 || tokio::time::Instant::now() > deadline {
                return charged;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    assert_eq!(charge_of("to-the-end".to_owned(), None).await, COUNT);
    for frames in 0..=FRAMES {
        let cost = charge_of(format!("after-{frames}"), Some(frames)).await;
        assert!(
            cost == COUNT || cost == CEILING,
            "hung up after {frames} frames: charged {cost}, reading to the end {COUNT}"
        );
    }
}
