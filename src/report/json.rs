//! JSON: the resolved scenario, the profile, the communicator and one object per row.

use std::io::{self, Write};

use super::{SimFormat, SimReport, ValidationFormat, ValidationReport};

/// Pretty-printed JSON.
pub struct Json;

impl SimFormat for Json {
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, r)?;
        writeln!(out)
    }
}

impl ValidationFormat for Json {
    fn write_validation(&self, r: &ValidationReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, r)?;
        writeln!(out)
    }
}
