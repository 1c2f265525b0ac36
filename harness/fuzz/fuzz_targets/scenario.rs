//! Any bytes through the scenario parser and validator (`scenario::parse`,
//! the function `locklab validate` and every run use; `load_file` for bytes
//! that are not UTF-8): it must return scenarios or errors on a line inside
//! the text, never panic (overflow checks are on: `cargo fuzz run -a`), hang
//! or exhaust memory. Seeded from scenarios/ and the invalid fixtures (`just fuzz`).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        // Bytes that are not UTF-8 go through the file loader, which places
        // the first bad byte; it must not panic either.
        let path = std::env::temp_dir().join(format!("locklab-fuzz-{}.yaml", std::process::id()));
        if std::fs::write(&path, data).is_ok() {
            let errors = locklab::scenario::load_file(&path).expect_err("bytes that are not UTF-8 loaded");
            assert!(errors[0].pos.line >= 1 && errors[0].pos.column >= 1, "{}", errors[0]);
            let _ = std::fs::remove_file(&path);
        }
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
