//! A download cut short by a slow client: how far what `Settle::body_bytes`
//! charges runs ahead of what the client read, with the server's buffers
//! as the kernel sizes them and with the send buffer bounded on the
//! listener (the knob the layer's docs give).
//!
//! A frame counts as sent when hyper takes it from the body. Between that
//! and the client's read sit hyper's write queue, the server socket's send
//! buffer and the client socket's receive buffer, so the gap is at most
//! their sum. Here the client reads 128 KiB slowly through a small receive
//! buffer, then hangs up; the test prints both gaps and checks the bounded
//! one against the sum of the three buffers.

use super::*;
use tokio::net::{TcpSocket, TcpStream};

/// Bytes the client reads before it hangs up.
const READ: u64 = 128 * 1024;
/// The download: far more than any buffer on the way.
const FRAMES: usize = 1024;
const FRAME: usize = 16 * 1024;
/// hyper queues at most this many body frames while the socket is full.
const HYPER_QUEUE_FRAMES: u64 = 16;

/// Serve `app` on a listener whose accepted sockets inherit `send_buffer`
/// (or the kernel's autotuned default when `None`).
async fn serve_with_send_buffer(app: Router, send_buffer: Option<u32>) -> SocketAddr {
    let socket = TcpSocket::new_v4().expect("a socket");
    if let Some(size) = send_buffer {
        socket.set_send_buffer_size(size).expect("SO_SNDBUF");
    }
    socket
        .bind("127.0.0.1:0".parse().unwrap())
        .expect("bind loopback");
    let listener = socket.listen(64).expect("listen");
    let addr = listener.local_addr().expect("local addr");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// What one cut-short download was charged, beside what the client read.
struct Cut {
    read: u64,
    charged: u64,
    /// The server socket's send buffer as the kernel sized it.
    server_send_buffer: u64,
    /// The client socket's receive buffer as the kernel sized it.
    client_receive_buffer: u64,
}

/// Download `/download` through a client whose receive buffer is
/// `receive_buffer`, reading a frame a millisecond until [`READ`] bytes
/// have arrived, then hanging up; the settlement the server reports.
async fn cut_short(send_buffer: Option<u32>, receive_buffer: u32) -> Cut {
    let (settle, mut seen) = bytes_reported();
    let app = Router::new()
        .route("/download", get(|| async { streamed(FRAMES, FRAME, None) }))
        .layer(RateLimitLayer::new(in_process(u32::MAX), by_user()).settle(settle));
    let addr = serve_with_send_buffer(app, send_buffer).await;

    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(receive_buffer)
        .expect("SO_RCVBUF");
    let client_receive_buffer = u64::from(socket.recv_buffer_size().expect("SO_RCVBUF"));
    let stream: TcpStream = socket.connect(addr).await.expect("connect");
    let (mut body, sender, conn) = get_on(stream, "/download", "slow").await;
    let mut read = 0u64;
    while read < READ {
        let frame = tokio::time::timeout(PATIENCE, body.frame())
            .await
            .expect("a frame in time")
            .expect("the download goes on")
            .expect("a frame");
        read += frame.data_ref().map_or(0, |d| d.len() as u64);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Let the server fill every buffer on the way before hanging up.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(body);
    drop(sender);
    conn.abort();
    let _ = conn.await;

    let (charged, completed) = tokio::time::timeout(PATIENCE, seen.recv())
        .await
        .expect("settled once the server noticed")
        .expect("a settlement");
    assert!(!completed, "the download was cut, not finished");
    let server_send_buffer = match send_buffer {
        // Linux doubles what is asked for (its bookkeeping overhead).
        Some(size) => 2 * u64::from(size),
        None => 0,
    };
    Cut {
        read,
        charged,
        server_send_buffer,
        client_receive_buffer,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_short_download_is_charged_within_the_buffers_on_the_way() {
    const SEND_BUFFER: u32 = 64 * 1024;
    const RECEIVE_BUFFER: u32 = 16 * 1024;
    let autotuned = cut_short(None, RECEIVE_BUFFER).await;
    let bounded = cut_short(Some(SEND_BUFFER), RECEIVE_BUFFER).await;
    for (name, cut) in [("autotuned", &autotuned), ("SO_SNDBUF 64 KiB", &bounded)] {
        eprintln!(
            "{name}: read {} KiB, charged {} KiB, gap {} KiB",
            cut.read / 1024,
            cut.charged / 1024,
            (cut.charged - cut.read) / 1024,
        );
    }
    for cut in [&autotuned, &bounded] {
        assert!(cut.charged >= cut.read, "never less than the client read");
    }
    let bound = bounded.server_send_buffer
        + HYPER_QUEUE_FRAMES * FRAME as u64
        + bounded.client_receive_buffer;
    assert!(
        bounded.charged - bounded.read <= bound,
        "charged {} beyond what was read, more than the buffers on the way ({bound})",
        bounded.charged - bounded.read
    );
}
