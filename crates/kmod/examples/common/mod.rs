//! What the kmod benchmarks share.

use cachescope_engine::{Change, Container, ContainerSource, PartResult};
use std::time::Duration;

/// The containers a benchmark follows, all started at its first poll.
pub struct Containers(pub Vec<Container>);

impl ContainerSource for Containers {
    fn poll(&mut self, _: Duration, out: &mut Vec<Change>) -> PartResult {
        out.extend(self.0.drain(..).map(Change::Started));
        Ok(())
    }
    fn describe(&self) -> String {
        "bench".into()
    }
}
