//! Replays, on the stable toolchain and without libFuzzer, every committed fuzz input through
//! the same code the fuzz targets run (`nanolet::fuzzing`): the seed corpus
//! (`fuzz/seeds/<target>/`) and the inputs a fuzzer once crashed on
//! (`fuzz/regressions/<target>/`, where `scripts/fuzz` tells you to put them). A panic here is
//! a regression of a fixed fuzz finding.

use std::path::Path;

#[test]
fn every_seed_and_past_crash_input_runs_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut total = 0;
    for (name, target) in nanolet::fuzzing::targets() {
        let mut inputs = 0;
        for dir in ["seeds", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("dir entry").path();
                let data = std::fs::read(&path).expect("input");
                let run = std::panic::catch_unwind(|| target(&data));
                assert!(run.is_ok(), "{name}: {} panics", path.display());
                inputs += 1;
            }
        }
        assert!(
            inputs > 0,
            "{name}: no committed seeds in fuzz/seeds/{name}"
        );
        total += inputs;
    }
    println!("{total} fuzz inputs replayed");
}
