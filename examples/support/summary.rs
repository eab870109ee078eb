//! The summary a gallery example ends with: `summary`, then one indented
//! line per figure, the last one `final: …: VERDICT` (what CI greps).

use std::fmt;

/// The lines of a summary; `Display` prints it after a blank line.
#[derive(Debug, Default)]
pub(crate) struct Summary(Vec<String>);

impl Summary {
    #[must_use]
    pub(crate) fn line(mut self, line: impl Into<String>) -> Self {
        self.0.push(line.into());
        self
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\nsummary")?;
        for line in &self.0 {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

/// The verdict of a final line: `word`, or `NOT word`.
pub(crate) fn verdict(ok: bool, word: &str) -> String {
    if ok {
        word.to_owned()
    } else {
        format!("NOT {word}")
    }
}
