//! How a command fails: the exit codes of docs/cli.md, and writing to stdout.

/// An error that knows its exit status.
#[derive(Debug)]
pub enum CliError {
    /// Bad usage or bad input: exit 2.
    Input(anyhow::Error),
    /// The requested backend or facility is unavailable on this host: exit 3.
    Unavailable(anyhow::Error),
    /// An output could not be written (stdout refused a write, a disk filled up): exit 1.
    Output(anyhow::Error),
    /// The run failed partway: the kernel or a device refused what the backend, the container
    /// source or the PMU source asked while the facility was still there: exit 1.
    Failed(anyhow::Error),
    /// The run finished and its files too, but accepted rows never reached them: exit 4.
    Losses(anyhow::Error),
    /// Whoever read stdout stopped reading (`report | head`): a filter's quiet end, exit 0.
    Closed,
}

impl CliError {
    /// Bad usage or input, from anything printable (one line).
    pub fn input(e: impl std::fmt::Display) -> CliError {
        CliError::Input(anyhow::anyhow!("{e}"))
    }

    /// The backend or facility is unavailable, from anything printable (one line).
    pub fn unavailable(e: impl std::fmt::Display) -> CliError {
        CliError::Unavailable(anyhow::anyhow!("{e}"))
    }

    /// An output failed, from anything printable (one line).
    pub fn output(e: impl std::fmt::Display) -> CliError {
        CliError::Output(anyhow::anyhow!("{e}"))
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Closed => 0,
            CliError::Output(_) | CliError::Failed(_) => 1,
            CliError::Input(_) => 2,
            CliError::Unavailable(_) => 3,
            CliError::Losses(_) => 4,
        }
    }

    /// The line to say, if any.
    pub fn message(&self) -> Option<String> {
        let (CliError::Input(e)
        | CliError::Unavailable(e)
        | CliError::Output(e)
        | CliError::Failed(e)
        | CliError::Losses(e)) = self
        else {
            return None;
        };
        // `{:#}` joins the context chain on one line.
        Some(bounded(&format!("{e:#}").replace('\n', " ")))
    }
}

/// The most characters a reason takes: its start names the culprit (a parser may quote a
/// whole input line: a 200,000-deep TOML array made an 800 KB "line"), its end says why.
pub const MAX_REASON: usize = 600;

/// `s` cut to [`MAX_REASON`] characters: its start and end, and how much was left out between.
pub fn bounded(s: &str) -> String {
    let n = s.chars().count();
    if n <= MAX_REASON {
        return s.to_string();
    }
    let (head, tail) = (MAX_REASON * 2 / 3, MAX_REASON / 4);
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!("{start} … ({} characters left out) … {end}", n - head - tail)
}

/// Write `text` to stdout and flush: a reader that went away ends the command quietly
/// ([`CliError::Closed`]), any other failure is [`CliError::Output`].
pub fn print_out(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(stdout_error)
}

/// What a failed write to stdout means for the command.
pub fn stdout_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::Closed
    } else {
        CliError::output(format!("writing to stdout: {e}"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_reason_keeps_its_start_and_end() {
        let long = format!("deep.toml: parse error: {} at the end", "[".repeat(800_000));
        let b = super::bounded(&long);
        assert!(b.chars().count() < super::MAX_REASON + 60, "{}", b.len());
        assert!(b.starts_with("deep.toml: parse error: [[") && b.ends_with("[[ at the end"), "{b}");
        assert!(b.contains(&format!("({} characters left out)", long.len() - 400 - 150)), "{b}");
        assert_eq!(super::bounded("short"), "short");
    }
}
