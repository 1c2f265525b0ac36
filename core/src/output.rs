//! Stdout for every command: a reader that went away is not an error.

use std::io::Write;

use anyhow::{Context, Result};

/// Writes `text` to stdout. A reader that went away (`locklab list | head -1`)
/// is not an error; any other write failure is.
///
/// # Errors
/// Writing or flushing stdout failed (other than a broken pipe).
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(()),
    }
}
