//! CSV: one line per size, the JSON row fields as columns.

use std::io::{self, Write};

use super::{SimFormat, SimReport};

/// Comma-separated values with a header line.
pub struct Csv;

impl SimFormat for Csv {
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        let mut w = ::csv::Writer::from_writer(out);
        for row in r.rows {
            w.serialize(row).map_err(io::Error::other)?;
        }
        w.flush()
    }
}
