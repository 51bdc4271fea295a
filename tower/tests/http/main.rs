//! The layers over real loopback HTTP and real clients: hostile headers
//! and keys, the documented axum set-ups, forwarded client addresses,
//! in-flight sprays, waiting shapers, requests without a key, settling by
//! the response (in process and on Redis), and the example gateway.

mod all_of_headers;
mod attacks;
mod docs;
mod forwarded;
mod gateway;
mod http_loopback;
mod inflight_spray;
mod ratelimit_wait;
mod settle;
mod unkeyed;
mod warnings;
