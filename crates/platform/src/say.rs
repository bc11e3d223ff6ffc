//! One line for the person running cachescope, on stderr, that never stops the run: a closed
//! or full stderr (`record 2>&1 | head`, a terminal that went away) loses the line, not the
//! recording. `eprintln!` panics there.

use std::fmt;
use std::io::Write;

/// Write `cachescope: ARGS` and a newline to stderr; errors are dropped.
pub fn line(args: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "cachescope: {args}");
}

/// `say!("...", args)`: [`line`] with `format!` arguments.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::line(format_args!($($arg)*))
    };
}
