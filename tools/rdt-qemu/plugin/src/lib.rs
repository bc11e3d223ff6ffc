//! The cache model behind QEMU's `-device rdt` (tools/rdt-qemu): a TCG plugin that sees the
//! guest's memory accesses and keeps, per emulated L3 domain, a set-associative cache whose
//! lines carry the RMID of the vCPU that filled them. The device (the QEMU patch) owns the
//! counters and answers IA32_QM_CTR from them; this crate fills them in.
//!
//! [`model`] is the cache, [`pmu`] the private cache in front of it that decides what the
//! device's PMU calls an L3 reference, and [`decode`] recognises the flushes and non-temporal
//! stores it must see, all pure and tested here; `glue` (built only into the plugin) is the
//! part that talks to QEMU.

pub mod decode;
pub mod link;
pub mod model;
pub mod pmu;

#[cfg(not(test))]
mod glue;
