//! weir-timeout (being built).
