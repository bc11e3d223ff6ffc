//! Noisy-neighbour episodes as they happen: the live finder as an engine sink (first in the
//! run's sinks, so the others see what it found), and the log of episode starts and ends
//! (`--events FILE|-`, and the recording's episodes file) as another.

use cachescope_engine::{Flow, OutputError, Row, Sink};
pub use cachescope_report::live::FinderSink;
use cachescope_sinks::noisy::SharedBoard;
use std::io::Write;

/// A file made at its first write (a run without an episode leaves none): in the output
/// directory, so as its other files are, never following a symlink, never over a file, 0640.
pub struct LazyFile {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
}

impl LazyFile {
    pub fn new(path: std::path::PathBuf) -> LazyFile {
        LazyFile { path, file: None }
    }
}

impl Write for LazyFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let f = match &mut self.file {
            Some(f) => f,
            // As the recorder makes its Parquet files: 0640, O_NOFOLLOW, never over a file.
            None => self.file.insert(cachescope_sinks::parquet::new_file(&self.path, true)?),
        };
        f.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().map_or(Ok(()), |f| f.flush())
    }
}

/// One JSON object per episode start and end, each a line, flushed as it is written.
pub struct EventsSink {
    board: SharedBoard,
    cursor: u64,
    out: Box<dyn Write + Send>,
    /// Where, for messages.
    what: String,
    failed: Option<String>,
    /// A failure is the run's loss (exit 4: the recording's episodes file beside rows that
    /// did reach their files), not a failed output (exit 1: `--events`, asked for).
    beside_rows: bool,
    lost: Option<String>,
}

impl EventsSink {
    /// `--events`: a failure to write is the run's failure.
    pub fn new(board: SharedBoard, out: Box<dyn Write + Send>, what: String) -> EventsSink {
        EventsSink { board, cursor: 0, out, what, failed: None, beside_rows: false, lost: None }
    }

    /// The recording's episodes file: a failure to write is a loss, said at the end.
    pub fn beside_rows(board: SharedBoard, out: Box<dyn Write + Send>, what: String) -> EventsSink {
        EventsSink { beside_rows: true, ..EventsSink::new(board, out, what) }
    }

    fn drain(&mut self) {
        if self.failed.is_some() {
            return;
        }
        let (events, next) = self.board.lock().map(|b| b.events_since(self.cursor)).unwrap_or_default();
        if events.is_empty() {
            return;
        }
        self.cursor = next;
        let mut text = String::new();
        for e in events {
            if let Ok(line) = serde_json::to_string(&e) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        if let Err(e) = self.out.write_all(text.as_bytes()).and_then(|()| self.out.flush()) {
            self.failed = Some(format!("writing episode events to {}: {e}", self.what));
        }
    }
}

impl Sink for EventsSink {
    fn rows(&mut self, _rows: &[Row]) -> Flow {
        self.drain();
        Flow::Continue
    }

    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        self.drain();
        match self.failed.take() {
            Some(why) if self.beside_rows => {
                self.lost = Some(why);
                Ok(Vec::new())
            }
            Some(why) => Err(OutputError(why)),
            None => Ok(Vec::new()),
        }
    }

    fn losses(&self) -> Option<String> {
        self.lost.clone()
    }
}
