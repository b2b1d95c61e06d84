//! Reports of an import's progress, in bytes into the file.

/// Bytes between two reports of an import's progress: often enough for a
/// bar to move smoothly, rare enough to cost nothing next to the reading.
const PROGRESS_STEP: u64 = 1 << 20;

/// Reports an import's progress (bytes into the file) to a callback in steps
/// of at least [`PROGRESS_STEP`], never going backwards or repeating itself.
pub(super) struct ByteProgress<'a> {
    report: &'a mut dyn FnMut(u64),
    last: Option<u64>,
}

impl<'a> ByteProgress<'a> {
    pub(super) fn new(report: &'a mut dyn FnMut(u64)) -> Self {
        ByteProgress { report, last: None }
    }

    /// `at` bytes reached: reported if a step further than the last report.
    pub(super) fn step(&mut self, at: u64) {
        if self.last.is_none_or(|last| at >= last + PROGRESS_STEP) {
            self.last = Some(at);
            (self.report)(at);
        }
    }

    /// `at` bytes reached at the end of a phase: reported unless already.
    pub(super) fn reached(&mut self, at: u64) {
        if self.last.is_none_or(|last| at > last) {
            self.last = Some(at);
            (self.report)(at);
        }
    }
}
