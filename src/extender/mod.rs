//! (module being written)

pub mod decide;
pub mod labels;
pub mod metrics;
pub mod model;
pub mod score;
pub mod server;
pub mod snapshot;
pub mod verbs;
pub mod wire;

#[cfg(test)]
mod fixtures;
