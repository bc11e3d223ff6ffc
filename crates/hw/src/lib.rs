//! Pure hardware logic for cachescope.
//!
//! Nothing in this crate performs I/O or contains `unsafe`: it turns register values into
//! meaning (CPUID enumeration, MSR layouts, counter arithmetic) so that every rule can be
//! tested exhaustively against recorded data. Access to real registers lives in
//! `cachescope-platform` behind the traits defined here.
#![forbid(unsafe_code)]

pub mod cpuid;
pub mod cpulist;
pub mod mbm_cf;
pub mod msr;

pub use cpuid::{CpuInfo, CpuidError, CpuidSnapshot, CpuidSource, Regs, Vendor};
