//! The audit's progress, reported to an observer the caller installs on
//! its thread (the Python binding prints a line on stderr), and the time
//! budget that picks each site's token count.
//!
//! Like the cancellation hook of [`crate::engine::cancel`] the observer is
//! per thread and asked only on the thread that installed it, between the
//! audit's batches of tokens: it never sees a worker thread and cannot
//! change any bits.
//!
//! # The estimate of the time left
//!
//! A site's work is `tokens × d × samples` mask-units (norm sites) or
//! `rows × heads × coordinates × keys × samples` (the attention check) plus
//! `rows × heads × keys × E` (the attention closed forms' products): the
//! costs are linear in each factor. After `w` of the `W` units in
//! `t` seconds the time left is estimated as `t (W − w)/w`.

use std::cell::RefCell;
use std::time::Instant;

use crate::error::Error;

/// An observer of `(sites done, sites, fraction of the work done, seconds
/// left)`.
pub type Observer = Box<dyn Fn(usize, usize, f64, f64)>;

thread_local! {
    static OBSERVER: RefCell<Option<Observer>> = const { RefCell::new(None) };
}

/// Runs `body` with `observer` told the audit's progress on this thread;
/// the previous observer (if any) is restored afterwards.
pub fn with_progress<T>(observer: Observer, body: impl FnOnce() -> T) -> T {
    let previous = OBSERVER.with(|o| o.borrow_mut().replace(observer));
    let result = body();
    OBSERVER.with(|o| *o.borrow_mut() = previous);
    result
}

/// The work of a run of sites, and what is done of it.
#[derive(Debug, Clone)]
pub struct Progress {
    start: Instant,
    sites: usize,
    total: f64,
    done: f64,
    sites_done: usize,
}

impl Progress {
    /// A run of `sites` sites of `total` work units in all.
    pub fn new(sites: usize, total: f64) -> Progress {
        Progress {
            start: Instant::now(),
            sites,
            total,
            done: 0.0,
            sites_done: 0,
        }
    }

    /// Seconds since the run began.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Seconds per work unit so far (`None` before any work).
    pub fn seconds_per_unit(&self) -> Option<f64> {
        (self.done > 0.0).then(|| self.elapsed() / self.done)
    }

    /// `units` more work done (`site_finished`: and a site), told to the
    /// observer.
    pub fn advance(&mut self, units: f64, site_finished: bool) {
        self.done += units;
        self.sites_done += usize::from(site_finished);
        let fraction = if self.total > 0.0 {
            (self.done / self.total).min(1.0)
        } else {
            1.0
        };
        let left = self
            .seconds_per_unit()
            .map_or(f64::INFINITY, |s| s * (self.total - self.done).max(0.0));
        OBSERVER.with(|o| {
            if let Some(observer) = o.borrow().as_ref() {
                observer(self.sites_done, self.sites, fraction, left);
            }
        });
    }

    /// Lowers the run's total when a site is given less work than planned.
    pub fn replan(&mut self, planned: f64, given: f64) {
        self.total -= planned - given;
    }
}

/// Audits `sites` in order as one run: `plan(site)` is a site's planned
/// work (its share of the total the observer is told); with `seconds`, each
/// site is given the share of the time left that its plan is of the planned
/// work left. `audit(site, seconds given, progress)` returns the site's
/// audit and, when it stopped short of its plan, the work it did, which
/// replaces the plan in the total.
pub fn audit_in_turn<S, A>(
    sites: &[S],
    plan: impl Fn(&S) -> f64,
    seconds: Option<f64>,
    mut audit: impl FnMut(&S, Option<f64>, &mut Progress) -> Result<(A, Option<f64>), Error>,
) -> Result<Vec<A>, Error> {
    let planned: Vec<f64> = sites.iter().map(plan).collect();
    let mut left: f64 = planned.iter().sum();
    let mut progress = Progress::new(sites.len(), left);
    let mut audits = Vec::with_capacity(sites.len());
    for (site, plan) in sites.iter().zip(&planned) {
        let share = seconds.map(|s| (s - progress.elapsed()).max(0.0) * plan / left.max(1.0));
        let (a, done) = audit(site, share, &mut progress)?;
        if let Some(done) = done {
            progress.replan(*plan, done);
        }
        progress.advance(0.0, true);
        left -= plan;
        audits.push(a);
    }
    Ok(audits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn the_observer_sees_every_step_on_its_thread_only() {
        let seen = Rc::new(Cell::new((0, 0, 0.0)));
        let inner = Rc::clone(&seen);
        with_progress(
            Box::new(move |done, sites, fraction, _| inner.set((done, sites, fraction))),
            || {
                let mut p = Progress::new(2, 4.0);
                p.advance(1.0, false);
                assert_eq!(seen.get(), (0, 2, 0.25));
                p.advance(3.0, true);
            },
        );
        assert_eq!(seen.get(), (1, 2, 1.0));
        // Outside `with_progress` nothing is told.
        Progress::new(1, 1.0).advance(1.0, true);
        assert_eq!(seen.get(), (1, 2, 1.0));
    }

    /// The time split of `audit_in_turn`: with a budget of `T` seconds each
    /// site is given the share of the time left that its plan is of the
    /// planned work left (plans 1 and 3 of `T = 1000`: about 250, then
    /// about all that is left, ~1000 − 0, since the first site took no
    /// time), and a site that stops short of its plan lowers the total, so
    /// the observer's fraction still ends at 1. The bounds leave 1 s for
    /// the test's own elapsed time: no result depends on the clock beyond it.
    #[test]
    fn each_site_gets_its_plans_share_of_the_time_left_and_a_short_site_replans() {
        let last = Rc::new(Cell::new(0.0));
        let inner = Rc::clone(&last);
        let mut given = Vec::new();
        let audits = with_progress(
            Box::new(move |_, _, fraction, _| inner.set(fraction)),
            || {
                audit_in_turn(
                    &[1.0, 3.0],
                    |plan| *plan,
                    Some(1000.0),
                    |plan, share, progress| {
                        given.push(share.expect("a budget gives every site a share"));
                        // The first site stops at half its plan; the second does all of it.
                        let done = if *plan == 1.0 { 0.5 } else { *plan };
                        progress.advance(done, false);
                        Ok((*plan, (done < *plan).then_some(done)))
                    },
                )
            },
        )
        .expect("no site fails");
        assert_eq!(audits, vec![1.0, 3.0]);
        assert!(
            (249.0..=250.0).contains(&given[0]),
            "first share {}",
            given[0]
        );
        assert!(
            (999.0..=1000.0).contains(&given[1]),
            "second share {}",
            given[1]
        );
        assert_eq!(
            last.get(),
            1.0,
            "the short site's plan must leave the total"
        );
        // Without a budget no site is given a time.
        let shares = audit_in_turn(&[1.0], |p| *p, None, |_, share, _| Ok((share, None)))
            .expect("no site fails");
        assert_eq!(shares, vec![None]);
    }
}
