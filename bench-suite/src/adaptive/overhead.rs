//! In-process cost per request of the layers, no sockets.

use super::CAPACITY;
use crate::contest;
use crate::report::{Report, Table};
use axum::body::Body;
use std::num::NonZeroUsize;
use weir_rate::adaptive::{Gradient2, KeyedAdaptiveLimiter};
use weir_rate::http::{AdaptiveInflightLayer, GlobalKey, InflightLayer};

/// In-process cost per request of the layers, around a service that
/// answers at once.
pub(super) fn overhead(report: &mut Report) {
    let requests = report.scale().pick(200_000, 1_000_000);
    let hello = tower::service_fn(|_: http::Request<Body>| {
        std::future::ready(Ok::<_, std::convert::Infallible>(http::Response::new(
            Body::empty(),
        )))
    });
    let limiter = || KeyedAdaptiveLimiter::new(Gradient2::default(), NonZeroUsize::MIN);
    let acc = || {
        let limit = tower_acc::ConcurrencyLimitLayer::new(tower_acc::Gradient2::default());
        tower::ServiceBuilder::new()
            .layer(tower::load_shed::LoadShedLayer::new())
            .layer(limit)
            .service(hello)
    };
    let names = [
        "bare service",
        "InflightLayer (static)",
        "AdaptiveInflightLayer (weir Gradient2)",
        "tower-acc Gradient2 + LoadShed",
    ];
    let request = || http::Request::new(Body::empty());
    // Interleaved rounds, so drifts in the machine's speed hit all alike.
    let runs = contest::rotate(
        report,
        "in-process cost",
        names.len(),
        5,
        |layer, _| match layer {
            0 => crate::http::time_service(hello, requests, request),
            1 => crate::http::time_service(
                tower::Layer::layer(&InflightLayer::new(GlobalKey, CAPACITY), hello),
                requests,
                request,
            ),
            2 => crate::http::time_service(
                tower::Layer::layer(&AdaptiveInflightLayer::new(GlobalKey, limiter()), hello),
                requests,
                request,
            ),
            _ => crate::http::time_service(acc(), requests, request),
        },
    );
    let medians: Vec<f64> = contest::spreads(&runs, |x| *x)
        .iter()
        .map(|s| s.median)
        .collect();
    let mut table = Table::new("layer | ns per request (median of 5) | over the bare service");
    for (name, ns) in names.iter().zip(&medians) {
        table.row(format!("{name} | {ns:.0} | {:+.0} ns", ns - medians[0]));
    }
    report.text(
        "In-process cost per request (no sockets): a service that answers at once, called \
         through each layer on a current-thread runtime; the adaptive layers also read the \
         clock twice and feed the algorithm once per request.",
    );
    report.table(&table);
}
