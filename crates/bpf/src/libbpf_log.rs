//! libbpf's own diagnostics. By default libbpf writes them raw to stderr, several lines for one
//! expected refusal (an unprivileged user, a kernel without BPF) beside the one line cachescope
//! says about it. They are kept here instead (the last few), and an error from libbpf carries
//! the line among them that says why.

use libbpf_rs::PrintLevel;
use std::sync::{Mutex, Once};

/// Lines kept between two [`take`]s; older ones are dropped.
const KEEP: usize = 16;

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Route libbpf's output here (once per process) and forget what was kept before.
pub(crate) fn capture() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((PrintLevel::Warn, keep)));
    });
    take();
}

fn keep(_: PrintLevel, msg: String) {
    let Ok(mut lines) = LINES.lock() else { return };
    if lines.len() >= KEEP {
        lines.remove(0);
    }
    let line = msg.trim().trim_start_matches("libbpf: ");
    if !line.is_empty() {
        lines.push(line.to_string());
    }
}

/// What libbpf said since the last call, oldest first.
pub(crate) fn take() -> Vec<String> {
    LINES.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default()
}

/// The line that says why: the first that reports an error, else the first.
pub(crate) fn reason(lines: Vec<String>) -> Option<String> {
    let why = lines.iter().position(|l| l.to_ascii_lowercase().contains("error")).unwrap_or(0);
    lines.into_iter().nth(why)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_line_that_says_why_is_kept() {
        let said = [
            "Failed to bump RLIMIT_MEMLOCK (err = -1), you might need to do it explicitly!",
            "Error in bpf_object__probe_loading():Operation not permitted(1).",
            "failed to load object 'attrib_bpf'",
        ];
        let lines = said.iter().map(|s| s.to_string()).collect();
        assert_eq!(super::reason(lines).as_deref(), Some(said[1]));
        assert_eq!(super::reason(vec!["one".into(), "two".into()]).as_deref(), Some("one"));
        assert_eq!(super::reason(Vec::new()), None);
    }
}
