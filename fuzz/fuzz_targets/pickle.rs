//! The Flight Recorder reader on arbitrary bytes: the pickle parser and the dump reader, then the
//! facts made from the dump. Besides "no panic, no hang": a hostile pickle (deep nesting, memo
//! copies that multiply memory) must end in an error at the reader's bounds, never an abort.
#![no_main]

use std::path::Path;

use epdoctor::flight::{self, pickle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = pickle::parse(data);
    if let Ok(dump) = flight::from_bytes(data, Path::new("nccl_trace_rank_3")) {
        assert!(parsed.is_ok(), "a dump read from bytes that do not parse");
        // Two copies of one dump as two ranks: the cross-rank facts run too.
        let mut other = dump.clone();
        other.rank = Some(dump.rank.unwrap_or(0) + 1);
        let _ = flight::lines(&[dump, other]);
    }
});
