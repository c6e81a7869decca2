//! JSON: the resolved scenario, the profile, the communicator and one object per row.

use std::io::{self, Write};

use super::{SimFormat, SimReport, ValidationFormat, ValidationReport};

/// Pretty-printed JSON.
pub struct Json;

impl SimFormat for Json {
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        super::write_json(r, out)
    }
}

impl ValidationFormat for Json {
    fn write_validation(&self, r: &ValidationReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        super::write_json(r, out)
    }
}
