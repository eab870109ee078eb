//! Running a system tool from a test, its failure told as text.

#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Stdio};

/// Runs `program` with `args` and waits; the error names the command and
/// what it printed.
pub fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
