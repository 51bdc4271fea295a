//! Every scenario against the in-process limiter.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_charges_the_bytes_streamed() {
    charges_the_bytes_streamed(in_process(10_000), 10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_generous_admission_is_partly_refunded() {
    a_generous_admission_is_partly_refunded(in_process(1000), 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_client_gone_mid_stream_pays_for_what_was_sent() {
    a_client_gone_mid_stream_pays_for_what_was_sent(in_process(1_000_000), 1_000_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_only_server_errors_count() {
    only_server_errors_count(in_process(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_settled_debt_denies_and_denials_settle_nothing() {
    settled_debt_denies_and_denials_settle_nothing(in_process(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_tokens_from_header_trailer_or_usage() {
    tokens_from_header_trailer_or_usage(in_process(1000), in_process(1000), 1000).await;
}
