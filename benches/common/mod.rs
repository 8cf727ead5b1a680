//! What every benchmark binary shares. Each bench includes it with `mod common;` (cargo builds `benches/*.rs`
//! and `benches/*/main.rs` as targets, so this directory is not a benchmark of its own).

// NB: each benchmark uses a part of what is here.
#![allow(dead_code)]

pub mod figures;
pub mod objects;
pub mod process;
