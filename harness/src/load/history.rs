//! The history of a load run and the checkers over it.
//!
//! Every critical section a worker completes is one [`Section`]: which worker
//! and backend ran it, on which key, and when it began and ended by the
//! server's clock (`clock_timestamp()`, read inside the section: after the
//! lock call returned and before the release). One server clock orders all of
//! them, so two sections on one key that an advisory lock kept apart cannot
//! overlap, whatever the clients' clocks say. Inside the section the worker
//! reads the key's counter row and writes it back plus one (a read-modify-write
//! that a second holder would break), and records the value it read.
//!
//! The checkers, each of which returns every violation it finds (with the
//! evidence, up to [`EVIDENCE`] examples, and the total count):
//! - [`mutual_exclusion`]: no two sections on one key overlap in time;
//! - [`lost_updates`]: each key's counter equals its number of completed
//!   sections, and no two sections read the same counter value;
//! - [`double_claims`]: no job of a queue is claimed by two workers.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// How many violations of one checker are kept as evidence (the count is
/// always complete).
pub const EVIDENCE: usize = 3;

/// One completed critical section, as recorded on the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// The worker (0-based) that ran it.
    pub worker: u32,
    /// The advisory lock key (the one-`bigint` form, as `pg_advisory_xact_lock(bigint)` takes it).
    pub key: i64,
    /// `pg_backend_pid()` of the connection it ran on.
    pub backend_pid: i32,
    /// Server clock at entry (after the lock was granted), µs since the Unix epoch.
    pub start_us: i64,
    /// Server clock at exit (before the lock was released), µs since the Unix epoch.
    pub end_us: i64,
    /// The key's counter as the section read it (it wrote this plus one).
    pub read: i64,
}

/// One claim of a job by a worker (the `FOR UPDATE SKIP LOCKED` queue).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The job's id.
    pub job: i64,
    /// The worker (0-based) that claimed it.
    pub worker: u32,
    /// `pg_backend_pid()` of the connection it ran on.
    pub backend_pid: i32,
    /// Server clock when the claim committed, µs since the Unix epoch.
    pub at_us: i64,
}

/// What one checker found: how many violations, and the first few.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict<T> {
    /// How many sections (or keys, or jobs) the checker looked at.
    pub checked: u64,
    /// How many violations it found.
    pub violations: u64,
    /// The first [`EVIDENCE`] of them.
    pub evidence: Vec<T>,
}

impl<T> Verdict<T> {
    fn new(checked: u64) -> Verdict<T> {
        Verdict {
            checked,
            violations: 0,
            evidence: Vec::new(),
        }
    }

    fn push(&mut self, v: T) {
        self.violations += 1;
        if self.evidence.len() < EVIDENCE {
            self.evidence.push(v);
        }
    }

    /// Whether no violation was found.
    pub fn holds(&self) -> bool {
        self.violations == 0
    }
}

/// Two critical sections on one key that overlapped in time: `second` began
/// before `first` ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlap {
    /// The section that began first.
    pub first: Section,
    /// The section that began while `first` ran.
    pub second: Section,
}

impl std::fmt::Display for Overlap {
    /// `on key K: worker A (backend P) from X to Y µs and worker B (backend
    /// Q) from X to Y µs` (server clock, µs since the Unix epoch).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b) = (&self.first, &self.second);
        write!(
            f,
            "on key {}: worker {} (backend {}) from {} to {} µs and worker {} (backend {}) from {} to {} µs",
            a.key, a.worker, a.backend_pid, a.start_us, a.end_us, b.worker, b.backend_pid, b.start_us, b.end_us
        )
    }
}

/// Mutual exclusion: no two sections on one key overlap. Sections are
/// compared by the server's clock; one that begins exactly when another ends
/// does not overlap it (the clock's resolution is 1 µs, and a release and
/// the next grant are separate events on the server).
///
/// Each violation is one section that began while an earlier one on its key
/// (the one of them that ends last) still ran.
pub fn mutual_exclusion(sections: &[Section]) -> Verdict<Overlap> {
    let mut verdict = Verdict::new(sections.len() as u64);
    let mut by_key: BTreeMap<i64, Vec<&Section>> = BTreeMap::new();
    for s in sections {
        by_key.entry(s.key).or_default().push(s);
    }
    for list in by_key.values_mut() {
        list.sort_by_key(|s| (s.start_us, s.end_us));
        // The section seen so far that ends last.
        let mut latest: Option<&Section> = None;
        for s in list.iter() {
            if let Some(l) = latest
                && s.start_us < l.end_us
            {
                verdict.push(Overlap {
                    first: l.clone(),
                    second: (*s).clone(),
                });
            }
            if latest.is_none_or(|l| s.end_us > l.end_us) {
                latest = Some(s);
            }
        }
    }
    verdict
}

/// A key whose counter disagrees with its history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostUpdate {
    /// The key.
    pub key: i64,
    /// Its counter after the run (0 for a key with no row).
    pub counter: i64,
    /// Its completed sections.
    pub sections: u64,
    /// Counter values that more than one section read (each such pair wrote
    /// the same value: one update lost), with the sections that read them.
    pub same_read: Vec<(i64, Vec<Section>)>,
}

/// Lost updates: each key's counter (`counters`, read after the run; a key
/// missing from it counts as 0) equals its number of completed sections.
/// Counters of keys no section touched must be 0. The evidence names the
/// counter values that two sections read.
pub fn lost_updates(sections: &[Section], counters: &BTreeMap<i64, i64>) -> Verdict<LostUpdate> {
    let mut by_key: BTreeMap<i64, Vec<&Section>> = BTreeMap::new();
    for s in sections {
        by_key.entry(s.key).or_default().push(s);
    }
    for key in counters.keys() {
        by_key.entry(*key).or_default();
    }
    let mut verdict = Verdict::new(by_key.len() as u64);
    for (key, list) in by_key {
        let counter = counters.get(&key).copied().unwrap_or(0);
        let mut reads: BTreeMap<i64, Vec<Section>> = BTreeMap::new();
        for s in &list {
            reads.entry(s.read).or_default().push((*s).clone());
        }
        let same_read: Vec<(i64, Vec<Section>)> = reads.into_iter().filter(|(_, v)| v.len() > 1).collect();
        if counter != list.len() as i64 || !same_read.is_empty() {
            verdict.push(LostUpdate {
                key,
                counter,
                sections: list.len() as u64,
                same_read,
            });
        }
    }
    verdict
}

/// A job claimed more than once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoubleClaim {
    /// The job.
    pub job: i64,
    /// Every claim of it, in the order of the server's clock.
    pub claims: Vec<Claim>,
}

/// Double claims: no job is claimed twice (by two workers, or twice by one).
pub fn double_claims(claims: &[Claim]) -> Verdict<DoubleClaim> {
    let mut by_job: HashMap<i64, Vec<&Claim>> = HashMap::new();
    for c in claims {
        by_job.entry(c.job).or_default().push(c);
    }
    let mut verdict = Verdict::new(by_job.len() as u64);
    let mut jobs: Vec<_> = by_job.into_iter().filter(|(_, v)| v.len() > 1).collect();
    jobs.sort_by_key(|(job, _)| *job);
    for (job, mut list) in jobs {
        list.sort_by_key(|c| c.at_us);
        verdict.push(DoubleClaim {
            job,
            claims: list.into_iter().cloned().collect(),
        });
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(worker: u32, key: i64, start_us: i64, end_us: i64, read: i64) -> Section {
        Section {
            worker,
            key,
            backend_pid: 1000 + worker as i32,
            start_us,
            end_us,
            read,
        }
    }

    /// Sections that follow each other on every key: every checker holds.
    fn serial_history() -> (Vec<Section>, BTreeMap<i64, i64>) {
        let mut sections = Vec::new();
        let mut counters = BTreeMap::new();
        for key in 0..3 {
            for i in 0..10 {
                // Back to back: one ends exactly when the next begins.
                sections.push(s(i % 4, key, 100 * i as i64, 100 * (i as i64 + 1), i as i64));
            }
            counters.insert(key, 10);
        }
        (sections, counters)
    }

    #[test]
    fn a_serial_history_holds() {
        let (sections, counters) = serial_history();
        let me = mutual_exclusion(&sections);
        assert!(me.holds(), "{me:?}");
        assert_eq!(me.checked, 30);
        let lu = lost_updates(&sections, &counters);
        assert!(lu.holds(), "{lu:?}");
        assert_eq!(lu.checked, 3);
    }

    #[test]
    fn overlapping_sections_on_one_key_are_a_violation_with_both_as_evidence() {
        let (mut sections, _) = serial_history();
        // Worker 9 runs key 1 from 250 to 420 µs: across three others.
        let intruder = s(9, 1, 250, 420, 2);
        sections.push(intruder.clone());
        let me = mutual_exclusion(&sections);
        assert_eq!(me.violations, 3, "{me:?}");
        assert_eq!(me.evidence[0].first, s(2 % 4, 1, 200, 300, 2));
        assert_eq!(me.evidence[0].second, intruder);
        // The intruder ends last: the next two begin inside it.
        assert_eq!(me.evidence[1].first, intruder);
        assert_eq!(me.evidence[2].first, intruder);
        // Other keys are not affected.
        assert!(me.evidence.iter().all(|o| o.first.key == 1 && o.second.key == 1));
    }

    #[test]
    fn a_section_inside_a_long_one_is_seen_after_a_short_one_in_between() {
        // a: 0..1000; b: 10..20 (inside a); c: 500..600 (inside a, not b).
        let a = s(0, 7, 0, 1000, 0);
        let b = s(1, 7, 10, 20, 1);
        let c = s(2, 7, 500, 600, 2);
        let me = mutual_exclusion(&[a.clone(), b.clone(), c.clone()]);
        assert_eq!(me.violations, 2);
        assert_eq!((&me.evidence[0].first, &me.evidence[0].second), (&a, &b));
        assert_eq!((&me.evidence[1].first, &me.evidence[1].second), (&a, &c));
    }

    #[test]
    fn evidence_is_capped_and_the_count_is_not() {
        let sections: Vec<Section> = (0..10).map(|i| s(i, 5, 0, 100, 0)).collect();
        let me = mutual_exclusion(&sections);
        assert_eq!(me.violations, 9);
        assert_eq!(me.evidence.len(), EVIDENCE);
    }

    #[test]
    fn a_counter_short_of_its_sections_and_a_value_read_twice_are_lost_updates() {
        let (mut sections, mut counters) = serial_history();
        // Two sections of key 2 read 9 (they overlapped): the counter is 10,
        // though 11 sections completed.
        sections.push(s(3, 2, 950, 990, 9));
        let lu = lost_updates(&sections, &counters);
        assert_eq!(lu.violations, 1, "{lu:?}");
        let v = &lu.evidence[0];
        assert_eq!((v.key, v.counter, v.sections), (2, 10, 11));
        assert_eq!(v.same_read.len(), 1);
        assert_eq!(v.same_read[0].0, 9);
        assert_eq!(v.same_read[0].1.len(), 2);
        // A counter that moved without a section, on a key nobody locked.
        counters.insert(42, 1);
        let lu = lost_updates(&sections, &counters);
        assert_eq!(lu.violations, 2);
        assert!(
            lu.evidence
                .iter()
                .any(|v| v.key == 42 && v.sections == 0 && v.counter == 1)
        );
    }

    #[test]
    fn a_job_claimed_twice_is_a_double_claim() {
        let claim = |job, worker, at_us| Claim {
            job,
            worker,
            backend_pid: 2000 + worker as i32,
            at_us,
        };
        let once: Vec<Claim> = (0..50).map(|j| claim(j, (j % 4) as u32, j * 10)).collect();
        let v = double_claims(&once);
        assert!(v.holds(), "{v:?}");
        assert_eq!(v.checked, 50);
        let mut twice = once.clone();
        twice.push(claim(17, 3, 5));
        let v = double_claims(&twice);
        assert_eq!(v.violations, 1);
        assert_eq!(v.evidence[0].job, 17);
        // In server-clock order: the later claim (170 µs) second.
        assert_eq!(
            v.evidence[0].claims.iter().map(|c| c.at_us).collect::<Vec<_>>(),
            [5, 170]
        );
    }
}
