//! weir-limits: counting traffic at the edge of a network service.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod clock;
