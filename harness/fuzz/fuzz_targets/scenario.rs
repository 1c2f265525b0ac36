//! Any bytes through the scenario parser and validator (`scenario::parse`,
//! the function `locklab validate` and every run use): it must return
//! scenarios or errors with a location inside the text, never panic, hang or
//! exhaust memory. Seeded from scenarios/ and the invalid fixtures (`just fuzz`).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errors) = locklab::scenario::parse(Path::new("fuzz.yaml"), text) {
        assert!(!errors.is_empty(), "an error result without errors");
        // YAML's line breaks: \n, \r\n and a lone \r (YAML 1.2 §5.4); one
        // more line for an error at the very end.
        let breaks = text.replace("\r\n", "\n").chars().filter(|&c| c == '\n' || c == '\r').count();
        let lines = breaks as u64 + 2;
        for e in &errors {
            assert!(e.pos.line >= 1 && e.pos.column >= 1, "position {:?} for {}", e.pos, e.message);
            assert!(e.pos.line <= lines, "line {} of a {lines}-line text: {}", e.pos.line, e.message);
            assert!(!e.message.is_empty(), "an empty message at {:?}", e.pos);
        }
    }
});
