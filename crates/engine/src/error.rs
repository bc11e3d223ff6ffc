//! How a part of a run (the cache backend, the container source, the PMU source) fails. The
//! engine and the CLI decide by the variant; the words are for people.

/// What a part's operation returns.
pub type PartResult<T = ()> = Result<T, PartError>;

/// A failure of one of the engine's parts.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    /// What the part reads went away under the run (resctrl unmounted, the module's device
    /// gone): the run ends, and the CLI says the facility is unavailable (exit 3), as it would
    /// at the start.
    #[error("{0}")]
    Gone(String),
    /// One container could not be attached: its cgroup vanished meanwhile, or the kernel
    /// refused its group or its tasks. It waits (as a lost group, retried at upkeep) and the run goes on.
    #[error("container {id}: {why}")]
    Container { id: String, why: String },
    /// Anything else the kernel or a device refused, or answered in a form it does not
    /// document: the run ends (exit 1, after the run's summary).
    #[error("{0}")]
    Failed(String),
}

impl PartError {
    /// [`PartError::Failed`] from anything printable.
    pub fn failed(e: impl std::fmt::Display) -> PartError {
        PartError::Failed(e.to_string())
    }

    /// [`PartError::Gone`] from anything printable.
    pub fn gone(e: impl std::fmt::Display) -> PartError {
        PartError::Gone(e.to_string())
    }

    /// [`PartError::Container`]: `id`'s own trouble, from anything printable.
    pub fn container(id: &str, why: impl std::fmt::Display) -> PartError {
        PartError::Container { id: id.to_string(), why: why.to_string() }
    }

    /// The same failure with what was being done in front of its words.
    pub fn context(self, what: impl std::fmt::Display) -> PartError {
        match self {
            PartError::Gone(w) => PartError::Gone(format!("{what}: {w}")),
            PartError::Container { id, why } => PartError::Container { id, why: format!("{what}: {why}") },
            PartError::Failed(w) => PartError::Failed(format!("{what}: {w}")),
        }
    }
}
