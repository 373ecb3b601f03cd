//! Moves at checkpoints (issue #43): a job that saves its state every so often and not at a stop
//! loses the work since its last save whenever its workers change. [`Saves`] follows a job's
//! saves from the checkpoint ages it reports, and says when a change should wait for the next:
//! the live allocator and the teams' simulator both ask it, and hold such a job at what it has
//! (neither more nor fewer workers) unless a guarantee needs its workers. Only a job that says
//! it saves on a schedule (`JobSpec::checkpoint_every_s`) is ever held: one that saves at its
//! stop reports an age of 0 at every report, and its reports would otherwise read as saves a
//! second apart.

/// The longest interval between a job's saves that a change of its workers waits for, by
/// default (`[scheduler] save_wait_max_ms`): a job that saves less often moves when planned.
pub const DEFAULT_MAX_WAIT_S: f64 = 1800.0;

/// Two readings of a save this far apart (seconds) are the same save (reports lag).
const SAME_SAVE_S: f64 = 1.0;

/// What the scheduler knows of one job's saves.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Saves {
    /// When it last saved, as its latest checkpoint age says.
    last_s: Option<f64>,
    /// Seconds between its last two saves seen.
    interval_s: Option<f64>,
    /// It saved since the last decision that could move it.
    fresh: bool,
    /// It said it saves on a schedule, and not at its stop.
    declared: bool,
}

impl Saves {
    /// A job that says it saves every `every_s` (`JobSpec::checkpoint_every_s`), until two
    /// saves seen say otherwise.
    pub fn every(every_s: Option<f64>) -> Saves {
        let mut saves = Saves::default();
        saves.declare(every_s);
        saves
    }

    /// The interval it declared (a new bid may declare one), kept until saves are measured.
    pub fn declare(&mut self, every_s: Option<f64>) {
        let every_s = every_s.filter(|s| s.is_finite() && *s > 0.0);
        self.declared = every_s.is_some();
        if self.interval_s.is_none() {
            self.interval_s = every_s;
        }
    }

    /// A report at `now_s` says the job saved `age_s` ago.
    pub fn observe(&mut self, now_s: f64, age_s: f64) {
        if !(age_s.is_finite() && age_s >= 0.0 && now_s.is_finite()) {
            return;
        }
        let at = now_s - age_s;
        match self.last_s {
            Some(last) if at <= last + SAME_SAVE_S => {}
            Some(last) => {
                (self.interval_s, self.last_s, self.fresh) = (Some(at - last), Some(at), true);
            }
            None => self.last_s = Some(at),
        }
    }

    /// Its workers changed at `now_s` (a restart resumes from a save): the next interval is
    /// counted from here, and the change it waited for is made.
    pub fn restarted(&mut self, now_s: f64) {
        self.last_s = Some(now_s);
        self.fresh = false;
    }

    /// Whether it saved (or restarted, which resumes from a save) at `t` or after.
    pub fn saved_since(&self, t: f64) -> bool {
        self.last_s.is_some_and(|last| last >= t)
    }

    /// Whether it said it saves on a schedule (and not at its stop).
    pub fn on_schedule(&self) -> bool {
        self.declared
    }

    /// A decision that could have moved it was taken: a save seen before it no longer frees it.
    pub fn decided(&mut self) {
        self.fresh = false;
    }

    /// Whether a change of its workers at `now_s` should wait for its next save: it said it
    /// saves on a schedule, at most `max_wait_s` apart (as declared, or as two saves seen say),
    /// it has not saved since the last decision, and it is still saving on time (its last save,
    /// or restart, within twice its interval: a job that stopped saving is not waited for).
    pub fn waits(&self, now_s: f64, max_wait_s: f64) -> bool {
        match (self.last_s, self.interval_s) {
            (Some(last), Some(interval)) => {
                self.declared && !self.fresh && interval <= max_wait_s && now_s - last <= 2.0 * interval
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_waits_between_saves_and_moves_right_after_one() {
        let mut s = Saves::every(Some(900.0));
        s.observe(10.0, 10.0);
        // Reports with the same save, lagging a little, are one save.
        s.observe(30.0, 29.5);
        assert!(s.waits(30.0, 900.0));
        s.observe(600.0, 0.0);
        assert!(!s.waits(601.0, 900.0), "it just saved: free to move at this decision");
        s.decided();
        assert!(s.waits(605.0, 900.0), "between saves");
        s.observe(1200.0, 2.0);
        assert!(!s.waits(1203.0, 900.0), "saved again");
        s.decided();
        assert!(s.waits(1203.0, 900.0));
        assert!(!s.waits(1198.0 + 2.0 * 598.0 + 1.0, 900.0), "it stopped saving: not waited for");
        assert!(!s.waits(1203.0, 500.0), "saves further apart than the longest wait");
    }

    /// A job that saves at its stop (`slaq.elastic` with a checkpoint directory) reports an age
    /// of 0 every time: its reports a second apart look like saves, but it declared no schedule
    /// and is never held. Nor is one whose ages grow between saves without a declaration.
    #[test]
    fn a_job_that_declared_no_schedule_never_waits() {
        let mut s = Saves::default();
        for k in 0..20 {
            s.observe(f64::from(k) * 1.5, 0.0);
            s.decided();
            assert!(!s.waits(f64::from(k) * 1.5 + 0.2, 1800.0));
        }
        let mut s = Saves::default();
        s.observe(0.0, 0.0);
        s.observe(100.0, 0.0);
        s.decided();
        assert!(!s.waits(150.0, 1800.0));
    }

    #[test]
    fn a_declared_interval_holds_from_the_first_report_until_saves_are_measured() {
        let mut s = Saves::every(Some(600.0));
        assert!(!s.waits(5.0, 900.0), "no report yet");
        s.observe(5.0, 5.0);
        assert!(s.waits(5.0, 900.0));
        s.observe(700.0, 100.0);
        s.decided();
        s.observe(1000.0, 0.0);
        assert!(!s.waits(1000.0, 900.0));
        s.decided();
        assert!(s.waits(1500.0, 900.0), "measured: 400 s");
        assert!(!s.waits(1801.0, 900.0), "two measured intervals passed without a save");
        assert_eq!(Saves::every(Some(f64::NAN)), Saves::default());
    }

    #[test]
    fn a_restart_counts_the_next_interval_from_itself() {
        let mut s = Saves::every(Some(100.0));
        s.observe(0.0, 0.0);
        s.observe(100.0, 0.0);
        s.decided();
        assert!(s.waits(150.0, 900.0));
        s.restarted(150.0);
        assert!(s.waits(200.0, 900.0), "interval kept, counted from the restart");
        s.observe(250.0, 0.0);
        assert!(!s.waits(251.0, 900.0));
    }

    #[test]
    fn bad_ages_are_ignored() {
        let mut s = Saves::default();
        for age in [f64::NAN, -1.0, f64::INFINITY] {
            s.observe(10.0, age);
        }
        assert_eq!(s, Saves::default());
    }
}
