//! The subcommands' drivers and what they share; `main.rs` holds the flags.

pub(crate) mod common;
pub(crate) mod logs;
pub(crate) mod plan;
pub(crate) mod simulate;
pub(crate) mod sweep;
pub(crate) mod ui;
pub(crate) mod validate;
