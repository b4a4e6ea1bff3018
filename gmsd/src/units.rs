// SPDX-License-Identifier: GPL-2.0-only
//! Durations as people read them in logs and messages (`250 ms`, `1.0 s`, `80 µs`).

use std::fmt;
use std::time::Duration;

/// A [`Duration`] as it displays for people: whole µs below a millisecond (`80 µs`), whole
/// ms below a second (`250 ms`), else seconds with one decimal (`1.0 s`, `12.5 s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d < Duration::from_millis(1) {
            write!(f, "{} µs", d.as_micros())
        } else if d < Duration::from_secs(1) {
            write!(f, "{} ms", d.as_millis())
        } else {
            write!(f, "{:.1} s", d.as_secs_f64())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let h = |d| Human(d).to_string();
        assert_eq!(h(Duration::from_micros(80)), "80 µs");
        assert_eq!(h(Duration::from_millis(250)), "250 ms");
        assert_eq!(h(Duration::from_nanos(1_000_797_716)), "1.0 s");
        assert_eq!(h(Duration::from_millis(12_500)), "12.5 s");
        assert_eq!(h(Duration::ZERO), "0 µs");
    }
}
