//! The filter's life cycle: configurations refused before anything is
//! loaded, the limit changed at run time, a tokio socket attached and
//! detached, and a socket that keeps its filter when the handle is dropped.

use super::*;

#[test]
fn bad_configurations_are_typed_errors_before_anything_is_loaded() {
    let e = KernelFilter::load(Classifier::builder(0)).unwrap_err();
    assert!(matches!(e, weir_hhh::kernel::KernelError::Config(_)), "{e}");
    let e = KernelFilter::load(
        Classifier::builder(1).shape(Shape::try_new(9, 64, Layout::Rows).unwrap()),
    )
    .unwrap_err();
    assert!(
        matches!(e, weir_hhh::kernel::KernelError::Unsupported(_)),
        "{e}"
    );
    assert!(!e.is_permission_denied());
}

#[test]
fn kernel_filter_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<KernelFilter>();
}

#[test]
fn limit_changes_at_run_time() {
    let Some(mut filter) = load_or_skip(
        "limit_changes_at_run_time",
        Classifier::builder(1000).seed(1),
    ) else {
        return;
    };
    let t =
        FourTuple::from_socket_addrs("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
    let frame = ethernet_frame(&udp_packet(&t, b"x"));
    // 100 packets 1 ms apart: 1000 pps at most, never over 1000.
    let run = |f: &mut KernelFilter, start: u64| {
        (0..100u64)
            .filter(|k| {
                !f.test_run_at(&frame, start + k * 1_000_000, Some(u32::MAX))
                    .unwrap()
                    .passed()
            })
            .count()
    };
    assert_eq!(run(&mut filter, 1_000_000_000), 0);
    filter.set_limit(10).unwrap();
    assert_eq!(filter.limit(), FixedRate::from_per_second(10));
    assert!(run(&mut filter, 2_000_000_000) > 50);
    assert!(filter.set_limit(0).is_err());
    assert_eq!(filter.limit(), FixedRate::from_per_second(10));
    assert_eq!(filter.level_windows()[4], Duration::from_millis(1600));
    let e = KernelFilter::load(Classifier::builder(0)).unwrap_err();
    assert!(matches!(e, weir_hhh::kernel::KernelError::Config(_)), "{e}");
    let e = KernelFilter::load(
        Classifier::builder(1).shape(Shape::try_new(9, 64, Layout::Rows).unwrap()),
    )
    .unwrap_err();
    assert!(
        matches!(e, weir_hhh::kernel::KernelError::Unsupported(_)),
        "{e}"
    );
}

/// The filter attaches to a tokio socket as well (any `AsFd`), counts what
/// it drops there, and detaching restores plain delivery.
#[test]
fn attaches_to_and_detaches_from_a_tokio_socket() {
    let test = "attaches_to_and_detaches_from_a_tokio_socket";
    let Some(filter) = load_or_skip(test, Classifier::builder(10)) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    /// Everything that arrives until the socket is quiet for 100 ms.
    async fn drain(socket: &tokio::net::UdpSocket) -> u64 {
        let mut buf = [0u8; 8];
        let mut got = 0;
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(100), socket.recv_from(&mut buf)).await
        {
            got += 1;
        }
        got
    }
    runtime.block_on(async {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = socket.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        filter.attach(&socket).unwrap();
        // 200 packets within a few milliseconds against 10 pps.
        for _ in 0..200 {
            tx.send_to(b"x", to).unwrap();
        }
        let got = drain(&socket).await;
        let stats = filter.stats().unwrap();
        assert_eq!(stats.levels.total(), 200, "{stats:?}");
        assert_eq!(got, stats.levels.passed(), "{stats:?}");
        assert!(stats.levels.dropped() > 150, "{stats:?}");
        KernelFilter::detach(&socket).unwrap();
        for _ in 0..50 {
            tx.send_to(b"x", to).unwrap();
        }
        assert_eq!(drain(&socket).await, 50);
        assert_eq!(filter.stats().unwrap().levels.total(), 200);
    });
}

/// The socket holds an attached filter: dropping the `KernelFilter` (the
/// handle) leaves the socket filtered at the last limit, as its docs say;
/// only a detach lifts it.
#[test]
fn dropping_the_handle_keeps_the_socket_filtered() {
    let test = "dropping_the_handle_keeps_the_socket_filtered";
    let Some(filter) = load_or_skip(test, Classifier::builder(10)) else {
        return;
    };
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    server
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let to = server.local_addr().unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    filter.attach(&server).unwrap();
    drop(filter);
    let flood = |n: usize| {
        for _ in 0..n {
            client.send_to(b"x", to).unwrap();
        }
        let mut buf = [0u8; 8];
        let mut got = 0;
        while server.recv_from(&mut buf).is_ok() {
            got += 1;
        }
        got
    };
    // 200 packets within a few milliseconds against 10 pps.
    let got = flood(200);
    assert!(
        got < 100,
        "{got} of 200 delivered after the handle was dropped"
    );
    KernelFilter::detach(&server).unwrap();
    assert_eq!(flood(50), 50);
}
