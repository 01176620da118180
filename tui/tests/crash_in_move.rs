//! A process lost in the middle of a move between processes, with chunks of its bins in
//! flight (`MEGAFLUX_FAILPOINT=move-shipping`: it exits once it sent part of its bins to
//! process 0, before the rest). Three loopback processes, `--replicas 2`, small chunks so
//! that every bin is several: the survivors exit 0 with the outputs and digest of the run
//! without the loss, the crash is reported once, and nobody panics on a bin that arrived in
//! part.

mod common;

use common::{CLUSTER_LIMIT, Cluster, REPLICATED_KEYCOUNT, survives_failpoints};

#[test]
fn a_process_lost_with_chunks_in_flight_changes_nothing() {
    // Bins of about 2.5 KiB cut into 1 KiB chunks, and at most a chunk's worth sent per
    // activation: the move of a process's bins spans many activations.
    let moving: &[&str] = &["--chunk-bytes", "1024", "--migrate", "all-at-once@1:pack:1"];
    let job = [REPLICATED_KEYCOUNT, moving].concat();
    let cluster = Cluster::of("crash-in-move", 3);
    let megaflux = env!("CARGO_BIN_EXE_megaflux").as_ref();
    // Under this plan process 1 sends many bins at the move's time, over several activations
    // (process 2 sent too few to reach the point when tried): it is the one lost.
    let victim = 1;
    let lost = survives_failpoints(
        megaflux,
        &cluster,
        &job,
        victim,
        &["move-shipping"],
        CLUSTER_LIMIT,
    );
    for s in lost {
        let crashes = s["crashes"].as_array().cloned().unwrap_or_default();
        assert_eq!(crashes.len(), 1, "{s}");
        assert_eq!(crashes[0]["processes"], serde_json::json!([victim]));
    }
}
