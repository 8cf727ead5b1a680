//! Tests of discovery against the fake host.
