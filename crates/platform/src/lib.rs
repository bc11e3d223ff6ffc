//! Host access for cachescope, each behind a narrow interface with an injectable root:
//! CPUID sources (the instruction, `/dev/cpu/N/cpuid`, recorded vector files), CPU and L3
//! topology from sysfs, and the mount table.

pub mod clock;
pub mod cpuid;
pub mod fsutil;
pub mod hash;
pub mod mountinfo;
pub mod msr;
pub mod say;
pub mod topology;
pub mod vector;

pub use cpuid::{DevCpuid, InstructionCpuid};
pub use msr::DevMsr;
pub use topology::{L3Domain, Topology, TopologyError};
pub use vector::{RecordedVector, VectorError};
