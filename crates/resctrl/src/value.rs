//! What a resctrl `mon_data` file holds: a number, or one of the kernel's status words.

use cachescope_engine::Status;

/// One counter read. The kernel writes a decimal count of bytes, or a word saying why there is
/// none; each word is kept as such in the data, never turned into 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Bytes (occupancy now, or cumulative bytes for MBM events).
    Bytes(u64),
    /// The hardware reported an error (bad RMID or event).
    Error,
    /// No data yet (just created, or the RMID is not active on AMD).
    Unavailable,
    /// No hardware counter is assigned to this group and event (assignable counters, ABMC).
    Unassigned,
}

impl Value {
    /// Parse a file's contents; None for anything the kernel does not write.
    pub fn parse(text: &[u8]) -> Option<Value> {
        let t = std::str::from_utf8(text).ok()?.trim_end_matches(['\n', '\0']);
        match t {
            "Error" => Some(Value::Error),
            "Unavailable" => Some(Value::Unavailable),
            "Unassigned" => Some(Value::Unassigned),
            _ if !t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit()) => {
                t.parse().ok().map(Value::Bytes)
            }
            _ => None,
        }
    }

    pub fn bytes(self) -> Option<u64> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The row status of docs/data.md.
    pub fn status(self) -> Status {
        match self {
            Value::Bytes(_) => Status::Ok,
            Value::Error => Status::Error,
            Value::Unavailable => Status::Unavailable,
            Value::Unassigned => Status::Unassigned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kernel_words_and_numbers() {
        assert_eq!(Value::parse(b"123\n"), Some(Value::Bytes(123)));
        assert_eq!(Value::parse(b"0\n"), Some(Value::Bytes(0)));
        assert_eq!(Value::parse(b"18446744073709551615\n"), Some(Value::Bytes(u64::MAX)));
        assert_eq!(Value::parse(b"Error\n"), Some(Value::Error));
        assert_eq!(Value::parse(b"Unavailable\n"), Some(Value::Unavailable));
        assert_eq!(Value::parse(b"Unassigned\n"), Some(Value::Unassigned));
        for bad in [&b""[..], b"\n", b"-1\n", b"12 34\n", b"error\n", b"18446744073709551616\n", b"\xff"] {
            assert_eq!(Value::parse(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn numbers_round_trip(v: u64) {
            prop_assert_eq!(Value::parse(format!("{v}\n").as_bytes()), Some(Value::Bytes(v)));
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Value::parse(&b);
        }
    }
}
