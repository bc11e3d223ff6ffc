#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cachescope_fuzz::recover(data));
