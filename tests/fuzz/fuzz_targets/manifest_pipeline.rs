//! The manifest pipeline up to the plugin call: any bytes, as one or two
//! manifest files, through the size, encoding and shape checks, the HCL
//! parser, the core spec, the lossless body encoding, and the JSON a
//! plugin's validate would receive. Nothing may panic, hang or allocate
//! without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voodu_model::ManifestSource;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Split in two files at the first form feed, so cross-file checks run.
    let (first, second) = text.split_once('\u{c}').unwrap_or((text, ""));
    let sources = [
        ManifestSource {
            path: "a.vd".into(),
            text: first.into(),
        },
        ManifestSource {
            path: "b.vd".into(),
            text: second.into(),
        },
    ];
    let parsed = voodu_manifest::parse_manifests(&sources);
    for workload in &parsed.workloads {
        // What validate would send: the core spec and each block as JSON.
        let core = serde_json::to_value(&workload.core).expect("a core spec is JSON");
        let _ = serde_json::to_vec(&core).expect("and serialises");
        for block in &workload.plugin_blocks {
            let _ = serde_json::to_vec(&block.block).expect("a block is JSON");
        }
    }
    for diagnostic in &parsed.diagnostics {
        let _ = diagnostic.to_string();
    }
});
