//! The plugin: registration, then the runtime's calls answered until it shuts the plugin down
//! or closes the socket. [`Session`] is the protocol without I/O; [`run`] gives it a socket.

use crate::api::{self, Request, Response, Status};
use crate::wire::{self, Stream, WireError, PLUGIN_CONN, RUNTIME_CONN, TYPE_REQUEST, TYPE_RESPONSE};
use prost::Message;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// What the plugin does with the runtime's events. The runtime waits for each call to return
/// (for at most its request timeout, 2 s by default in containerd), so be quick.
pub trait Handler {
    /// The container's first process exists, in the container's cgroup, and has not run the
    /// container's program yet.
    fn start_container(&mut self, pod: &api::PodSandbox, container: &api::Container);
    /// The runtime said who it is.
    fn configured(&mut self, _runtime: &str, _version: &str) {}
}

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The runtime asked the plugin to shut down.
    Shutdown,
    /// The runtime closed the socket (it stopped, or restarts).
    Closed,
}

#[derive(Debug, thiserror::Error)]
pub enum NriError {
    #[error("the NRI socket {path}: {source}")]
    Connect { path: PathBuf, source: io::Error },
    #[error("the NRI socket: {0}")]
    Io(#[from] io::Error),
    #[error("NRI: {0}")]
    Wire(#[from] WireError),
    #[error("NRI: a {what} that does not decode: {source}")]
    Decode { what: &'static str, source: prost::DecodeError },
    #[error("NRI: the runtime refused the plugin: {0}")]
    Refused(String),
    #[error("NRI: plugin index {0:?} is not two digits")]
    BadIndex(String),
    #[error("NRI: {0} on the plugin's connection (the runtime should only call it)")]
    Unexpected(&'static str),
}

fn decode<M: Message + Default>(what: &'static str, b: &[u8]) -> Result<M, NriError> {
    M::decode(b).map_err(|source| NriError::Decode { what, source })
}

/// One connection to a runtime, as a protocol: bytes in, bytes out.
pub struct Session<'h> {
    plugin: Stream,
    runtime: Stream,
    registered: bool,
    handler: &'h mut dyn Handler,
}

/// The one call the plugin makes: RegisterPlugin, on stream 1 of the runtime's connection.
const REGISTER_STREAM: u32 = 1;

impl<'h> Session<'h> {
    /// A session and what to send first: the registration of `name` at index `idx`.
    pub fn start(name: &str, idx: &str, handler: &'h mut dyn Handler) -> Result<(Session<'h>, Vec<u8>), NriError> {
        if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NriError::BadIndex(idx.to_string()));
        }
        let reg = api::RegisterPluginRequest { plugin_name: name.to_string(), plugin_idx: idx.to_string() };
        let req = Request {
            service: api::RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: reg.encode_to_vec(),
            timeout_nano: 0,
        };
        let msg = wire::ttrpc_message(REGISTER_STREAM, TYPE_REQUEST, &req.encode_to_vec())?;
        let s = Session { plugin: Stream::default(), runtime: Stream::default(), registered: false, handler };
        Ok((s, wire::mux_frames(RUNTIME_CONN, &msg)))
    }

    /// Whether the runtime accepted the registration.
    pub fn registered(&self) -> bool {
        self.registered
    }

    /// A frame's payload from connection `conn`: what to send back, and whether the session
    /// ended. Frames on connections other than NRI's two are ignored, as the runtime does.
    pub fn feed(&mut self, conn: u32, bytes: &[u8], out: &mut Vec<u8>) -> Result<Option<Ended>, NriError> {
        match conn {
            RUNTIME_CONN => {
                self.runtime.push(bytes);
                while let Some(m) = self.runtime.next_message()? {
                    if m.kind != TYPE_RESPONSE || m.stream != REGISTER_STREAM {
                        continue;
                    }
                    let r: Response = decode("RegisterPlugin response", &m.payload)?;
                    match r.status {
                        Some(s) if s.code != 0 => return Err(NriError::Refused(s.message)),
                        _ => self.registered = true,
                    }
                }
            }
            PLUGIN_CONN => {
                self.plugin.push(bytes);
                while let Some(m) = self.plugin.next_message()? {
                    if m.kind != TYPE_REQUEST {
                        return Err(NriError::Unexpected("a response"));
                    }
                    let req: Request = decode("request", &m.payload)?;
                    let (reply, ended) = self.call(&req)?;
                    let msg = wire::ttrpc_message(m.stream, TYPE_RESPONSE, &reply.encode_to_vec())?;
                    out.extend(wire::mux_frames(PLUGIN_CONN, &msg));
                    if ended {
                        return Ok(Some(Ended::Shutdown));
                    }
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// The runtime's call `req`: the reply, and whether the plugin is to stop.
    fn call(&mut self, req: &Request) -> Result<(Response, bool), NriError> {
        let ok = |payload: Vec<u8>| Response { status: None, payload };
        if req.service != api::PLUGIN_SERVICE {
            return Ok((unimplemented(req), false));
        }
        Ok(match req.method.as_str() {
            "Configure" => {
                let c: api::ConfigureRequest = decode("Configure", &req.payload)?;
                self.handler.configured(&c.runtime_name, &c.runtime_version);
                let events = 1 << (api::EVENT_START_CONTAINER - 1);
                (ok(api::ConfigureResponse { events }.encode_to_vec()), false)
            }
            "Synchronize" => {
                let s: api::SynchronizeRequest = decode("Synchronize", &req.payload)?;
                (ok(api::SynchronizeResponse { more: s.more }.encode_to_vec()), false)
            }
            "StateChange" => {
                let e: api::StateChangeEvent = decode("StateChange", &req.payload)?;
                if e.event == api::EVENT_START_CONTAINER {
                    if let (Some(p), Some(c)) = (&e.pod, &e.container) {
                        self.handler.start_container(p, c);
                    }
                }
                (ok(Vec::new()), false)
            }
            // Not asked for; an empty reply changes nothing.
            "CreateContainer" | "UpdateContainer" | "StopContainer" => (ok(Vec::new()), false),
            "Shutdown" => (ok(Vec::new()), true),
            _ => (unimplemented(req), false),
        })
    }
}

fn unimplemented(req: &Request) -> Response {
    let message = format!("{}/{} is not a method of this plugin", req.service, req.method);
    Response { status: Some(Status { code: api::UNIMPLEMENTED, message }), payload: Vec::new() }
}

/// Connects to the runtime's NRI socket, registers as `name` at index `idx` (two digits: the
/// order among the runtime's plugins), and serves `handler` until the runtime ends it.
pub fn run(socket: &Path, name: &str, idx: &str, handler: &mut dyn Handler) -> Result<Ended, NriError> {
    let (mut s, hello) = Session::start(name, idx, handler)?;
    let mut sock =
        UnixStream::connect(socket).map_err(|source| NriError::Connect { path: socket.to_path_buf(), source })?;
    sock.write_all(&hello)?;
    let mut reader = sock.try_clone()?;
    let mut out = Vec::new();
    loop {
        let Some((conn, bytes)) = wire::read_frame(&mut reader)? else { return Ok(Ended::Closed) };
        out.clear();
        let ended = s.feed(conn, &bytes, &mut out)?;
        sock.write_all(&out)?;
        if let Some(e) = ended {
            return Ok(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Seen {
        started: Vec<(String, String, u32)>,
        runtime: String,
    }

    impl Handler for Seen {
        fn start_container(&mut self, pod: &api::PodSandbox, c: &api::Container) {
            self.started.push((pod.name.clone(), c.name.clone(), c.pid));
        }
        fn configured(&mut self, runtime: &str, version: &str) {
            self.runtime = format!("{runtime} {version}");
        }
    }

    /// The runtime's call `method` with `payload` on stream `stream`, as frames.
    fn call(stream: u32, method: &str, payload: Vec<u8>) -> Vec<u8> {
        let r = Request { service: api::PLUGIN_SERVICE.into(), method: method.into(), payload, timeout_nano: 0 };
        let m = wire::ttrpc_message(stream, TYPE_REQUEST, &r.encode_to_vec()).unwrap();
        wire::mux_frames(PLUGIN_CONN, &m)
    }

    /// Replies in `out`, decoded: (stream, status code, payload).
    fn replies(out: &[u8]) -> Vec<(u32, i32, Vec<u8>)> {
        let mut r = out;
        let mut s = Stream::default();
        let mut v = Vec::new();
        while let Some((conn, b)) = wire::read_frame(&mut r).unwrap() {
            assert_eq!(conn, PLUGIN_CONN);
            s.push(&b);
            while let Some(m) = s.next_message().unwrap() {
                assert_eq!(m.kind, TYPE_RESPONSE);
                let resp = Response::decode(m.payload.as_slice()).unwrap();
                v.push((m.stream, resp.status.map_or(0, |s| s.code), resp.payload));
            }
        }
        v
    }

    /// Feeds `frames` to `s` one frame at a time; what it sent back, and how it ended.
    fn feed_all(s: &mut Session, frames: &[u8]) -> (Vec<u8>, Option<Ended>) {
        let mut r = frames;
        let mut out = Vec::new();
        while let Some((conn, b)) = wire::read_frame(&mut r).unwrap() {
            if let Some(e) = s.feed(conn, &b, &mut out).unwrap() {
                return (out, Some(e));
            }
        }
        (out, None)
    }

    #[test]
    fn a_runtimes_session_from_registration_to_shutdown() {
        let mut seen = Seen::default();
        let (mut s, hello) = Session::start("cachescope", "10", &mut seen).unwrap();
        // The registration: a request to the runtime's service on its connection.
        let (conn, b) = wire::read_frame(&mut hello.as_slice()).unwrap().unwrap();
        assert_eq!(conn, RUNTIME_CONN);
        let mut st = Stream::default();
        st.push(&b);
        let m = st.next_message().unwrap().unwrap();
        let r = Request::decode(m.payload.as_slice()).unwrap();
        assert_eq!((m.stream, r.service.as_str(), r.method.as_str()), (1, api::RUNTIME_SERVICE, "RegisterPlugin"));
        // The runtime accepts.
        let ok = wire::ttrpc_message(1, TYPE_RESPONSE, &Response::default().encode_to_vec()).unwrap();
        let mut out = Vec::new();
        assert_eq!(s.feed(RUNTIME_CONN, &ok, &mut out).unwrap(), None);
        assert!(s.registered() && out.is_empty());
        // Configure, a split Synchronize, one event of each kind, an unknown method, Shutdown.
        let conf = api::ConfigureRequest {
            runtime_name: "containerd".into(),
            runtime_version: "2.1.9".into(),
            ..Default::default()
        };
        let pod = api::PodSandbox { name: "web-0".into(), namespace: "shop".into(), ..Default::default() };
        let ctr = api::Container { name: "app".into(), pid: 4242, ..Default::default() };
        let ev = |event| {
            api::StateChangeEvent { event, pod: Some(pod.clone()), container: Some(ctr.clone()) }.encode_to_vec()
        };
        let frames = [
            call(1, "Configure", conf.encode_to_vec()),
            call(3, "Synchronize", api::SynchronizeRequest { more: true, ..Default::default() }.encode_to_vec()),
            call(5, "Synchronize", api::SynchronizeRequest::default().encode_to_vec()),
            call(7, "StateChange", ev(4)),
            call(9, "StateChange", ev(api::EVENT_START_CONTAINER)),
            call(11, "Frobnicate", Vec::new()),
            call(13, "Shutdown", Vec::new()),
            call(15, "StateChange", ev(api::EVENT_START_CONTAINER)),
        ]
        .concat();
        let (out, ended) = feed_all(&mut s, &frames);
        assert_eq!(ended, Some(Ended::Shutdown));
        let r = replies(&out);
        assert_eq!(
            r.iter().map(|x| x.0).collect::<Vec<_>>(),
            [1, 3, 5, 7, 9, 11, 13],
            "a reply per call until Shutdown"
        );
        assert_eq!(api::ConfigureResponse::decode(r[0].2.as_slice()).unwrap().events, 1 << 5, "StartContainer only");
        assert!(api::SynchronizeResponse::decode(r[1].2.as_slice()).unwrap().more, "more echoed");
        assert!(!api::SynchronizeResponse::decode(r[2].2.as_slice()).unwrap().more);
        assert_eq!(r[5].1, api::UNIMPLEMENTED);
        assert_eq!(seen.runtime, "containerd 2.1.9");
        assert_eq!(
            seen.started,
            [("web-0".to_string(), "app".to_string(), 4242)],
            "one StartContainer, before Shutdown"
        );
    }

    #[test]
    fn a_refusal_or_a_bad_index_is_an_error() {
        let mut seen = Seen::default();
        assert!(matches!(Session::start("cs", "1", &mut seen), Err(NriError::BadIndex(_))));
        let (mut s, _) = Session::start("cs", "10", &mut seen).unwrap();
        let no =
            Response { status: Some(Status { code: 2, message: "invalid plugin index".into() }), payload: Vec::new() };
        let m = wire::ttrpc_message(1, TYPE_RESPONSE, &no.encode_to_vec()).unwrap();
        let e = s.feed(RUNTIME_CONN, &m, &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("refused the plugin: invalid plugin index"), "{e}");
    }
}
