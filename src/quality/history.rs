//! A job's loss history for people to look at (the page of `slaq serve`, issue #45), apart
//! from the predictor's window, which keeps only what the fit needs. Every point is kept until
//! `capacity`, then every other one, and so on: a long job keeps its whole shape in bounded
//! memory, its first and newest points always. Where each generation of its processes first
//! reported is kept apart (the newest [`MAX_STARTS`]), so thinning never hides a restart.
//!
//! Pure: the caller passes each point's wall-clock time.

use std::collections::VecDeque;
use std::num::NonZeroU64;

/// Generation starts a history remembers.
pub const MAX_STARTS: usize = 64;

/// Points a history keeps unless told otherwise (8 KB a job at most; the predictor's window
/// is 96).
pub const DEFAULT_CAPACITY: usize = 256;

/// One loss report, as the history keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistoryPoint {
    pub iter: u64,
    pub loss: f64,
    /// When the scheduler took it (ms since the Unix epoch); `None` for points restored from a
    /// saved predictor, whose times were not saved. (Non-zero: a point is 32 bytes.)
    pub at_ms: Option<NonZeroU64>,
    /// The job's workers (as the scheduler allocated them) when it came.
    pub workers: u32,
}

/// Where a generation of the job's processes first reported.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct GenerationStart {
    pub generation: u64,
    pub iter: u64,
    pub at_ms: Option<u64>,
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct LossHistory {
    points: Vec<HistoryPoint>,
    capacity: usize,
    /// One point in `stride` is kept for good; the newest is kept until the next comes.
    stride: u64,
    /// Points since the last one kept for good.
    since_kept: u64,
    /// The last point is the newest, kept only until the next comes.
    provisional: bool,
    starts: VecDeque<GenerationStart>,
    /// Points pushed in all.
    seen: u64,
}

impl Default for LossHistory {
    fn default() -> Self {
        LossHistory::new(DEFAULT_CAPACITY)
    }
}

impl LossHistory {
    /// A history of at most `capacity` points (at least 4).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(4);
        LossHistory {
            points: Vec::new(),
            capacity,
            stride: 1,
            since_kept: 0,
            provisional: false,
            starts: VecDeque::new(),
            seen: 0,
        }
    }

    /// Adds the newest point (iterations increase: the caller has refused the others), and
    /// notes `generation`'s start if it is new.
    pub fn push(&mut self, point: HistoryPoint, generation: Option<u64>) {
        if let Some(generation) = generation
            && self.starts.back().is_none_or(|s| generation > s.generation)
        {
            if self.starts.len() == MAX_STARTS {
                self.starts.pop_front();
            }
            let at_ms = point.at_ms.map(NonZeroU64::get);
            self.starts.push_back(GenerationStart { generation, iter: point.iter, at_ms });
        }
        self.seen += 1;
        if self.provisional {
            self.points.pop();
        }
        self.since_kept += 1;
        self.provisional = self.since_kept < self.stride;
        if !self.provisional {
            self.since_kept = 0;
        }
        self.points.push(point);
        if self.points.len() > self.capacity {
            self.thin();
        }
    }

    /// Keeps every other point (the first among them), and the newest.
    fn thin(&mut self) {
        let newest = self.points.pop();
        let mut index = 0usize;
        self.points.retain(|_| {
            index += 1;
            index % 2 == 1
        });
        self.stride *= 2;
        self.points.extend(newest);
    }

    /// The points kept, oldest first.
    pub fn points(&self) -> &[HistoryPoint] {
        &self.points
    }

    /// Where each generation first reported, oldest first (the newest [`MAX_STARTS`]).
    pub fn generation_starts(&self) -> impl Iterator<Item = &GenerationStart> {
        self.starts.iter()
    }

    /// Points pushed in all (kept or not).
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Bytes this history holds on the heap at most.
    pub fn max_bytes(&self) -> usize {
        (self.capacity + 1) * size_of::<HistoryPoint>() + MAX_STARTS * size_of::<GenerationStart>()
    }
}

/// Points of the predicted next minute in a [`JobCurve`].
const FORECAST_POINTS: usize = 24;

/// What the page draws for a job: its history (column by column, as the chart takes it), the
/// predictor's chosen curve over the points it was fitted to, and the next minute it predicts
/// at the job's current workers.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct JobCurve {
    /// Points reported in all (the history keeps `iter.len()` of them).
    pub seen: u64,
    pub iter: Vec<u64>,
    pub loss: Vec<f64>,
    pub at_ms: Vec<Option<u64>>,
    pub workers: Vec<u32>,
    pub generations: Vec<GenerationStart>,
    /// The candidate the predictor chose for the next minute (`None` before it has one).
    pub model: Option<&'static str>,
    /// The chosen curve at each history point from the first point of the predictor's window.
    pub fit_iter: Vec<u64>,
    pub fit_loss: Vec<f64>,
    /// The next minute at its current workers: from its newest iteration on.
    pub forecast_iter: Vec<f64>,
    pub forecast_loss: Vec<f64>,
    /// Predicted seconds per iteration at its current workers.
    pub seconds_per_iter: Option<f64>,
}

impl JobCurve {
    /// The view of `history` and `predictor` (refitted by its owner) for a job on `workers`,
    /// predicting `ahead_s` seconds past its newest point.
    pub fn new(history: &LossHistory, predictor: &super::JobPredictor, workers: u32, ahead_s: f64) -> JobCurve {
        let points = history.points();
        let mut view = JobCurve {
            seen: history.seen(),
            iter: points.iter().map(|p| p.iter).collect(),
            loss: points.iter().map(|p| p.loss).collect(),
            at_ms: points.iter().map(|p| p.at_ms.map(NonZeroU64::get)).collect(),
            workers: points.iter().map(|p| p.workers).collect(),
            generations: history.generation_starts().copied().collect(),
            ..JobCurve::default()
        };
        let seconds = predictor.time_curve().seconds(workers.max(1));
        let (Some(last), Some((from, _))) = (predictor.last_iter(), predictor.window().next()) else { return view };
        let ahead = if seconds.is_finite() && seconds > 0.0 { ahead_s / seconds } else { 0.0 };
        let Some((candidate, model)) = predictor.choose(ahead.max(1.0)) else { return view };
        view.model = Some(candidate.name());
        view.seconds_per_iter = Some(seconds).filter(|s| s.is_finite() && *s > 0.0);
        view.fit_iter = view.iter.iter().copied().filter(|&k| k >= from).collect();
        view.fit_loss = view.fit_iter.iter().map(|&k| model.eval(k as f64)).collect();
        if ahead > 0.0 {
            let step = ahead / (FORECAST_POINTS - 1) as f64;
            view.forecast_iter = (0..FORECAST_POINTS).map(|i| last as f64 + step * i as f64).collect();
            view.forecast_loss = view.forecast_iter.iter().map(|&k| model.eval(k)).collect();
        }
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn point(iter: u64) -> HistoryPoint {
        HistoryPoint { iter, loss: 1.0 / iter as f64, at_ms: NonZeroU64::new(iter * 10), workers: 1 }
    }

    #[test]
    fn a_point_is_32_bytes() {
        assert_eq!(size_of::<HistoryPoint>(), 32);
    }

    #[test]
    fn keeps_every_point_up_to_its_capacity() {
        let mut h = LossHistory::new(16);
        for k in 1..=16 {
            h.push(point(k), Some(1));
        }
        assert_eq!(h.points().iter().map(|p| p.iter).collect::<Vec<_>>(), (1..=16).collect::<Vec<_>>());
    }

    #[test]
    fn generation_starts_are_kept_whatever_is_thinned() {
        let mut h = LossHistory::new(8);
        for k in 1..=1000u64 {
            h.push(point(k), Some(k / 100 + 1));
        }
        let starts: Vec<_> = h.generation_starts().map(|s| (s.generation, s.iter)).collect();
        assert_eq!(starts[0], (1, 1));
        assert_eq!(starts[1], (2, 100));
        assert_eq!(starts.len(), 11);
        // An older generation's report (a straggler) starts nothing.
        h.push(point(1001), Some(3));
        assert_eq!(h.generation_starts().count(), 11);
    }

    #[test]
    fn a_curve_shows_the_fit_over_the_window_and_the_next_minute() {
        let mut predictor = super::super::JobPredictor::new(Default::default());
        let mut h = LossHistory::new(64);
        for k in 1..=200u64 {
            predictor.observe(k, 2.0 * (-0.02 * k as f64).exp() + 0.5).unwrap();
            predictor.observe_time(2, 0.5);
            h.push(HistoryPoint { iter: k, loss: 2.0 * (-0.02 * k as f64).exp() + 0.5, at_ms: None, workers: 2 }, None);
        }
        predictor.refit();
        let view = JobCurve::new(&h, &predictor, 2, 60.0);
        assert_eq!((view.iter.len(), view.seen), (h.points().len(), 200));
        assert!(view.model.is_some());
        let from = predictor.window().next().unwrap().0;
        assert!(view.fit_iter.iter().all(|&k| k >= from) && !view.fit_iter.is_empty());
        assert_eq!(view.fit_iter.len(), view.fit_loss.len());
        // The fit follows the points it was fitted to.
        for (k, fitted) in view.fit_iter.iter().zip(&view.fit_loss) {
            let i = view.iter.iter().position(|i| i == k).unwrap();
            assert!((fitted - view.loss[i]).abs() < 0.01, "at {k}: {fitted} against {}", view.loss[i]);
        }
        // A minute at 0.5 s an iteration is 120 iterations past the newest.
        assert_eq!(view.forecast_iter.len(), FORECAST_POINTS);
        assert_eq!(view.forecast_iter[0], 200.0);
        assert!((view.forecast_iter[FORECAST_POINTS - 1] - 320.0).abs() < 1.0, "{:?}", view.forecast_iter.last());
        assert!(view.forecast_loss.windows(2).all(|w| w[1] <= w[0]));
        // No points: no fit.
        let empty =
            JobCurve::new(&LossHistory::default(), &super::super::JobPredictor::new(Default::default()), 1, 60.0);
        assert!(empty.model.is_none() && empty.iter.is_empty() && empty.forecast_iter.is_empty());
    }

    proptest! {
        #[test]
        fn bounded_ordered_and_ends_kept(capacity in 4usize..64, n in 1u64..2000) {
            let mut h = LossHistory::new(capacity);
            for k in 1..=n {
                h.push(point(k), None);
                let p = h.points();
                prop_assert!(p.len() <= capacity);
                prop_assert_eq!(p[0].iter, 1);
                prop_assert_eq!(p[p.len() - 1].iter, k);
                prop_assert!(p.windows(2).all(|w| w[0].iter < w[1].iter));
            }
            prop_assert_eq!(h.seen(), n);
            // Thinned evenly: no gap between kept points is more than twice the stride.
            let p = h.points();
            let widest = p.windows(2).map(|w| w[1].iter - w[0].iter).max().unwrap_or(0);
            prop_assert!(widest <= 2 * h.stride, "gap {} with stride {}", widest, h.stride);
            if n as usize <= capacity {
                prop_assert_eq!(p.len(), n as usize);
            } else {
                prop_assert!(p.len() > capacity / 2 - 1, "{} of {}", p.len(), capacity);
            }
        }
    }
}
