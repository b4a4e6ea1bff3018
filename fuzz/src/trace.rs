// SPDX-License-Identifier: GPL-2.0-only
//! Target `trace`: NIC trace files (`trapeze_vnic::trace`) of any bytes, read back and
//! reported (`trapeze-nic trace-report`).
//!
//! The input is split into up to three files (its first byte says how many). Each is
//! parsed: either an error that names the file, or the node and its records — as many as
//! the file holds whole records after its header, each written back (`Record::to_bytes`,
//! what the NIC's `EventLog` writes) and parsed again to the same records. The traces
//! that parsed then go through the round-trip report and its text, which must not panic
//! whatever the timestamps, sequence numbers and kinds.

use trapeze_vnic::trace::{self, Record, Report, RECORD_BYTES};

pub fn fuzz(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else { return };
    let n = 1 + n as usize % 3;
    let per = rest.len().div_ceil(n).max(1);
    let mut traces = Vec::new();
    for (i, file) in rest.chunks(per).enumerate() {
        let name = format!("trace-{i}");
        match trace::parse(file, &name) {
            Err(e) => assert!(e.to_string().contains(&name), "an error that does not name the file: {e}"),
            Ok((node, recs)) => {
                assert_eq!(recs.len(), (file.len() / RECORD_BYTES).saturating_sub(1), "records lost or made up");
                let mut again = file[..RECORD_BYTES].to_vec();
                again.extend(recs.iter().flat_map(Record::to_bytes));
                let back = trace::parse(&again, &name).expect("a trace written back parses");
                assert_eq!(back, (node, recs.clone()), "a trace changed through its bytes");
                traces.push((node, recs));
            }
        }
    }
    let text = Report::new(&traces).text();
    assert!(!text.is_empty());
}
