//! weir-rate (being built).
