//! A plugin's side of NRI, the Node Resource Interface that containerd (1.7 and later, on by
//! default from 2.0) and CRI-O offer: a plugin connects to the runtime's socket, registers, and
//! is told of pod and container events, synchronously, before the runtime goes on. cachescope
//! asks for one event, StartContainer, which the runtime sends after the container's first
//! process exists (in its cgroup) and before that process runs the container's program.
//!
//! The protocol, as containerd's NRI (github.com/containerd/nri, api v1alpha1) speaks it:
//! - one Unix socket carries two byte streams, multiplexed ([`wire`]): connection 1 for the
//!   plugin's service (the runtime calls it), connection 2 for the runtime's (the plugin calls
//!   RegisterPlugin there);
//! - each stream carries ttrpc: a 10-byte header and a protobuf message ([`wire`], [`api`]).
//!
//! [`plugin::run`] does the I/O; everything else is pure.

pub mod api;
pub mod plugin;
pub mod wire;

pub use plugin::{run, Ended, Handler, NriError};
