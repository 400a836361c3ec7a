//! A user rule file (TOML) on arbitrary text: loading it is an error with a message, or rules that
//! build an engine and analyse a short log. Never a panic.
#![no_main]

use epdoctor::log::Input;
use epdoctor::rules::{schema, Engine, Options};
use libfuzzer_sys::fuzz_target;

const LOG: &str =
    "vm:1:2 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0\n\
vm:1:2 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 1000 - Abort COMPLETE\n";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(rules) = schema::parse_rule_file("fuzz.toml", text) else { return };
    if let Ok(engine) = Engine::new(rules) {
        let input = Input::Memory { name: "log".into(), text: LOG.into() };
        let _ = engine.analyze(&[input], &Options { evidence: 3, ..Default::default() });
    }
});
