//! The messages cachescope exchanges, as protobuf structs with the field numbers of ttrpc's
//! request.proto and NRI's api.proto (package nri.pkg.api.v1alpha1). Only the fields read or
//! written here are declared: protobuf skips the rest, and an empty message is a valid reply
//! to any request whose response has nothing to say.

/// ttrpc's envelope of a call.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// ttrpc's envelope of a reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// google.rpc.Status: code 0 is success.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC's code for a method the server does not have.
pub const UNIMPLEMENTED: i32 = 12;

pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Two digits: the plugin's place among the runtime's plugins.
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    #[prost(string, tag = "1")]
    pub config: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureResponse {
    /// The events wanted: bit `event - 1` for each.
    #[prost(int32, tag = "2")]
    pub events: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    /// More of the runtime's state follows in another request.
    #[prost(bool, tag = "3")]
    pub more: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeResponse {
    /// Must echo the request's `more` (the runtime checks).
    #[prost(bool, tag = "2")]
    pub more: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StateChangeEvent {
    #[prost(int32, tag = "1")]
    pub event: i32,
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

/// api.proto's `Event`: the one cachescope asks for.
pub const EVENT_START_CONTAINER: i32 = 6;

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub uid: String,
    #[prost(string, tag = "4")]
    pub namespace: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    /// The container's first process, where the runtime knows it at the event (0 if not).
    #[prost(uint32, tag = "12")]
    pub pid: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainer {
    /// As the OCI spec has it: a cgroupfs path, or systemd's `slice:prefix:name`.
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn fields_are_where_nris_proto_puts_them() {
        // A StateChangeEvent as containerd encodes one: event 6; container {id "c1", name
        // "app", linux {cgroups_path "/k/c1"}, pid 42}, and an unknown field (13) skipped.
        let c =
            [&[0x0a, 2][..], b"c1", &[0x1a, 3], b"app", &[0x5a, 7, 0x2a, 5], b"/k/c1", &[0x60, 42, 0x6a, 0]].concat();
        let mut ev = vec![0x08, 6, 0x1a, c.len() as u8];
        ev.extend_from_slice(&c);
        let e = StateChangeEvent::decode(ev.as_slice()).unwrap();
        assert_eq!(e.event, EVENT_START_CONTAINER);
        let c = e.container.unwrap();
        assert_eq!((c.id.as_str(), c.name.as_str(), c.pid), ("c1", "app", 42));
        assert_eq!(c.linux.unwrap().cgroups_path, "/k/c1");
        // What the plugin sends: field 2 of ConfigureResponse, field 1 and 2 of registration.
        assert_eq!(ConfigureResponse { events: 32 }.encode_to_vec(), [0x10, 32]);
        let r = RegisterPluginRequest { plugin_name: "cs".into(), plugin_idx: "10".into() }.encode_to_vec();
        assert_eq!(r, [0x0a, 2, b'c', b's', 0x12, 2, b'1', b'0']);
    }
}
