//! `Array.prototype.sort` exactly as V8 runs it: TimSort (runs, binary
//! insertion, merges with galloping), with the specification's rule that a
//! comparator answering NaN means "equal". pi sorts tree children with
//! `new Date(a).getTime() - new Date(b).getTime()`, which is NaN for an
//! invalid date: such a comparator is not a consistent order, so only V8's
//! own sequence of comparisons gives pi's order. A port of the algorithm in
//! V8's `third_party/v8/builtins/array-sort.tq`.

/// Galloping starts after this many wins in a row.
const MIN_GALLOP: usize = 7;

struct Sorter<'a, T, F> {
    a: &'a mut [T],
    cmp: F,
    min_gallop: usize,
    runs: Vec<(usize, usize)>,
}

/// Sorts `items` in place as V8's `items.sort(cmp)` would.
pub(crate) fn v8_sort<T: Clone>(items: &mut [T], cmp: impl Fn(&T, &T) -> f64) {
    let n = items.len();
    if n < 2 {
        return;
    }
    let mut s = Sorter {
        a: items,
        cmp: |x: &T, y: &T| {
            let v = cmp(x, y);
            // SortCompare: NaN counts as +0.
            if v.is_nan() {
                0.0
            } else {
                v
            }
        },
        min_gallop: MIN_GALLOP,
        runs: Vec::new(),
    };
    let min_run = min_run_length(n);
    let (mut low, mut remaining) = (0, n);
    while remaining != 0 {
        let mut run = s.count_and_make_run(low, low + remaining);
        if run < min_run {
            let forced = min_run.min(remaining);
            s.binary_insertion_sort(low, low + run, low + forced);
            run = forced;
        }
        s.runs.push((low, run));
        s.merge_collapse();
        low += run;
        remaining -= run;
    }
    s.merge_force_collapse();
}

fn min_run_length(mut n: usize) -> usize {
    let mut r = 0;
    while n >= 64 {
        r |= n & 1;
        n >>= 1;
    }
    n + r
}

impl<T: Clone, F: Fn(&T, &T) -> f64> Sorter<'_, T, F> {
    fn c(&self, x: &T, y: &T) -> f64 {
        (self.cmp)(x, y)
    }

    fn binary_insertion_sort(&mut self, low: usize, start: usize, high: usize) {
        let mut start = if low == start { start + 1 } else { start };
        while start < high {
            let pivot = self.a[start].clone();
            let (mut left, mut right) = (low, start);
            while left < right {
                let mid = left + ((right - left) >> 1);
                if self.c(&pivot, &self.a[mid]) < 0.0 {
                    right = mid;
                } else {
                    left = mid + 1;
                }
            }
            self.a[left..=start].rotate_right(1);
            start += 1;
        }
    }

    fn count_and_make_run(&mut self, low_arg: usize, high: usize) -> usize {
        let low = low_arg + 1;
        if low == high {
            return 1;
        }
        let mut run = 2;
        let descending = self.c(&self.a[low], &self.a[low - 1]) < 0.0;
        let mut previous = low;
        for idx in low + 1..high {
            let order = self.c(&self.a[idx], &self.a[previous]);
            let stop = if descending {
                order >= 0.0
            } else {
                order < 0.0
            };
            if stop {
                break;
            }
            previous = idx;
            run += 1;
        }
        if descending {
            self.a[low_arg..low_arg + run].reverse();
        }
        run
    }

    fn invariant(&self, n: usize) -> bool {
        if n < 2 {
            return true;
        }
        self.runs[n - 2].1 > self.runs[n - 1].1 + self.runs[n].1
    }

    fn merge_collapse(&mut self) {
        while self.runs.len() > 1 {
            let mut n = self.runs.len() - 2;
            if !self.invariant(n + 1) || !self.invariant(n) {
                if self.runs[n - 1].1 < self.runs[n + 1].1 {
                    n -= 1;
                }
                self.merge_at(n);
            } else if self.runs[n].1 <= self.runs[n + 1].1 {
                self.merge_at(n);
            } else {
                break;
            }
        }
    }

    fn merge_force_collapse(&mut self) {
        while self.runs.len() > 1 {
            let mut n = self.runs.len() - 2;
            if n > 0 && self.runs[n - 1].1 < self.runs[n + 1].1 {
                n -= 1;
            }
            self.merge_at(n);
        }
    }

    fn merge_at(&mut self, i: usize) {
        let (mut base_a, mut len_a) = self.runs[i];
        let (base_b, mut len_b) = self.runs[i + 1];
        self.runs[i].1 = len_a + len_b;
        self.runs.remove(i + 1);
        let key_right = self.a[base_b].clone();
        let k = gallop_right(&self.cmp, self.a, &key_right, base_a, len_a, 0);
        base_a += k;
        len_a -= k;
        if len_a == 0 {
            return;
        }
        let key_left = self.a[base_a + len_a - 1].clone();
        len_b = gallop_left(&self.cmp, self.a, &key_left, base_b, len_b, len_b - 1);
        if len_b == 0 {
            return;
        }
        if len_a <= len_b {
            self.merge_low(base_a, len_a, base_b, len_b);
        } else {
            self.merge_high(base_a, len_a, base_b, len_b);
        }
    }

    fn merge_low(&mut self, base_a: usize, mut len_a: usize, base_b: usize, mut len_b: usize) {
        let temp: Vec<T> = self.a[base_a..base_a + len_a].to_vec();
        let mut dest = base_a;
        let mut ct = 0;
        let mut cb = base_b;
        self.a[dest] = self.a[cb].clone();
        dest += 1;
        cb += 1;
        // The labels of V8's code: where the merge ends.
        enum End {
            Succeed,
            CopyB,
        }
        let end = 'merge: {
            len_b -= 1;
            if len_b == 0 {
                break 'merge End::Succeed;
            }
            if len_a == 1 {
                break 'merge End::CopyB;
            }
            let mut min_gallop = self.min_gallop;
            loop {
                let mut wins_a = 0;
                let mut wins_b = 0;
                loop {
                    if self.c(&self.a[cb], &temp[ct]) < 0.0 {
                        self.a[dest] = self.a[cb].clone();
                        dest += 1;
                        cb += 1;
                        wins_b += 1;
                        len_b -= 1;
                        wins_a = 0;
                        if len_b == 0 {
                            break 'merge End::Succeed;
                        }
                        if wins_b >= min_gallop {
                            break;
                        }
                    } else {
                        self.a[dest] = temp[ct].clone();
                        dest += 1;
                        ct += 1;
                        wins_a += 1;
                        len_a -= 1;
                        wins_b = 0;
                        if len_a == 1 {
                            break 'merge End::CopyB;
                        }
                        if wins_a >= min_gallop {
                            break;
                        }
                    }
                }
                min_gallop += 1;
                let mut first = true;
                while wins_a >= MIN_GALLOP || wins_b >= MIN_GALLOP || first {
                    first = false;
                    min_gallop = min_gallop.saturating_sub(1).max(1);
                    self.min_gallop = min_gallop;
                    let key = self.a[cb].clone();
                    wins_a = gallop_right(&self.cmp, &temp, &key, ct, len_a, 0);
                    if wins_a > 0 {
                        self.a[dest..dest + wins_a].clone_from_slice(&temp[ct..ct + wins_a]);
                        dest += wins_a;
                        ct += wins_a;
                        len_a -= wins_a;
                        if len_a == 1 {
                            break 'merge End::CopyB;
                        }
                        if len_a == 0 {
                            break 'merge End::Succeed;
                        }
                    }
                    self.a[dest] = self.a[cb].clone();
                    dest += 1;
                    cb += 1;
                    len_b -= 1;
                    if len_b == 0 {
                        break 'merge End::Succeed;
                    }
                    let key = temp[ct].clone();
                    wins_b = gallop_left(&self.cmp, self.a, &key, cb, len_b, 0);
                    if wins_b > 0 {
                        for k in 0..wins_b {
                            self.a[dest + k] = self.a[cb + k].clone();
                        }
                        dest += wins_b;
                        cb += wins_b;
                        len_b -= wins_b;
                        if len_b == 0 {
                            break 'merge End::Succeed;
                        }
                    }
                    self.a[dest] = temp[ct].clone();
                    dest += 1;
                    ct += 1;
                    len_a -= 1;
                    if len_a == 1 {
                        break 'merge End::CopyB;
                    }
                }
                min_gallop += 1;
                self.min_gallop = min_gallop;
            }
        };
        match end {
            End::Succeed => {
                if len_a > 0 {
                    self.a[dest..dest + len_a].clone_from_slice(&temp[ct..ct + len_a]);
                }
            }
            End::CopyB => {
                for k in 0..len_b {
                    self.a[dest + k] = self.a[cb + k].clone();
                }
                self.a[dest + len_b] = temp[ct].clone();
            }
        }
    }

    fn merge_high(&mut self, base_a: usize, mut len_a: usize, base_b: usize, mut len_b: usize) {
        let temp: Vec<T> = self.a[base_b..base_b + len_b].to_vec();
        // Cursors may step one below their run's start: kept as signed.
        let mut dest = (base_b + len_b - 1) as isize;
        let mut ct = len_b as isize - 1;
        let mut ca = (base_a + len_a - 1) as isize;
        let at = |i: isize| i as usize;
        self.a[at(dest)] = self.a[at(ca)].clone();
        dest -= 1;
        ca -= 1;
        enum End {
            Succeed,
            CopyA,
        }
        let end = 'merge: {
            len_a -= 1;
            if len_a == 0 {
                break 'merge End::Succeed;
            }
            if len_b == 1 {
                break 'merge End::CopyA;
            }
            let mut min_gallop = self.min_gallop;
            loop {
                let mut wins_a = 0;
                let mut wins_b = 0;
                loop {
                    if self.c(&temp[at(ct)], &self.a[at(ca)]) < 0.0 {
                        self.a[at(dest)] = self.a[at(ca)].clone();
                        dest -= 1;
                        ca -= 1;
                        wins_a += 1;
                        len_a -= 1;
                        wins_b = 0;
                        if len_a == 0 {
                            break 'merge End::Succeed;
                        }
                        if wins_a >= min_gallop {
                            break;
                        }
                    } else {
                        self.a[at(dest)] = temp[at(ct)].clone();
                        dest -= 1;
                        ct -= 1;
                        wins_b += 1;
                        len_b -= 1;
                        wins_a = 0;
                        if len_b == 1 {
                            break 'merge End::CopyA;
                        }
                        if wins_b >= min_gallop {
                            break;
                        }
                    }
                }
                min_gallop += 1;
                let mut first = true;
                while wins_a >= MIN_GALLOP || wins_b >= MIN_GALLOP || first {
                    first = false;
                    min_gallop = min_gallop.saturating_sub(1).max(1);
                    self.min_gallop = min_gallop;
                    let key = temp[at(ct)].clone();
                    let k = gallop_right(&self.cmp, self.a, &key, base_a, len_a, len_a - 1);
                    wins_a = len_a - k;
                    if wins_a > 0 {
                        dest -= wins_a as isize;
                        ca -= wins_a as isize;
                        for j in (0..wins_a).rev() {
                            self.a[at(dest + 1) + j] = self.a[at(ca + 1) + j].clone();
                        }
                        len_a -= wins_a;
                        if len_a == 0 {
                            break 'merge End::Succeed;
                        }
                    }
                    self.a[at(dest)] = temp[at(ct)].clone();
                    dest -= 1;
                    ct -= 1;
                    len_b -= 1;
                    if len_b == 1 {
                        break 'merge End::CopyA;
                    }
                    let key = self.a[at(ca)].clone();
                    let k = gallop_left(&self.cmp, &temp, &key, 0, len_b, len_b - 1);
                    wins_b = len_b - k;
                    if wins_b > 0 {
                        dest -= wins_b as isize;
                        ct -= wins_b as isize;
                        self.a[at(dest + 1)..at(dest + 1) + wins_b]
                            .clone_from_slice(&temp[at(ct + 1)..at(ct + 1) + wins_b]);
                        len_b -= wins_b;
                        if len_b == 1 {
                            break 'merge End::CopyA;
                        }
                        if len_b == 0 {
                            break 'merge End::Succeed;
                        }
                    }
                    self.a[at(dest)] = self.a[at(ca)].clone();
                    dest -= 1;
                    ca -= 1;
                    len_a -= 1;
                    if len_a == 0 {
                        break 'merge End::Succeed;
                    }
                }
                min_gallop += 1;
                self.min_gallop = min_gallop;
            }
        };
        match end {
            End::Succeed => {
                if len_b > 0 {
                    let d = at(dest - (len_b as isize - 1));
                    self.a[d..d + len_b].clone_from_slice(&temp[..len_b]);
                }
            }
            End::CopyA => {
                dest -= len_a as isize;
                ca -= len_a as isize;
                for j in (0..len_a).rev() {
                    self.a[at(dest + 1) + j] = self.a[at(ca + 1) + j].clone();
                }
                self.a[at(dest)] = temp[at(ct)].clone();
            }
        }
    }
}

/// Where `key` goes in the sorted `a[base..base + len]`, before equal
/// elements (V8's `GallopLeft`), starting the search at `hint`.
fn gallop_left<T>(
    cmp: &impl Fn(&T, &T) -> f64,
    a: &[T],
    key: &T,
    base: usize,
    len: usize,
    hint: usize,
) -> usize {
    let mut last = 0usize;
    let mut ofs = 1usize;
    if cmp(&a[base + hint], key) < 0.0 {
        let max = len - hint;
        while ofs < max {
            if cmp(&a[base + hint + ofs], key) >= 0.0 {
                break;
            }
            last = ofs;
            ofs = (ofs << 1) + 1;
        }
        ofs = ofs.min(max);
        last += hint;
        ofs += hint;
    } else {
        let max = hint + 1;
        while ofs < max {
            if cmp(&a[base + hint - ofs], key) < 0.0 {
                break;
            }
            last = ofs;
            ofs = (ofs << 1) + 1;
        }
        ofs = ofs.min(max);
        let tmp = last;
        // `hint - ofs` may be -1 in V8; `last + 1` below brings it back.
        last = (hint + 1).wrapping_sub(ofs);
        ofs = hint - tmp;
        return bisect_left(cmp, a, key, base, last, ofs);
    }
    bisect_left(cmp, a, key, base, last + 1, ofs)
}

fn bisect_left<T>(
    cmp: &impl Fn(&T, &T) -> f64,
    a: &[T],
    key: &T,
    base: usize,
    mut last: usize,
    mut ofs: usize,
) -> usize {
    while last < ofs {
        let m = last + ((ofs - last) >> 1);
        if cmp(&a[base + m], key) < 0.0 {
            last = m + 1;
        } else {
            ofs = m;
        }
    }
    ofs
}

/// Where `key` goes in the sorted `a[base..base + len]`, after equal
/// elements (V8's `GallopRight`), starting the search at `hint`.
fn gallop_right<T>(
    cmp: &impl Fn(&T, &T) -> f64,
    a: &[T],
    key: &T,
    base: usize,
    len: usize,
    hint: usize,
) -> usize {
    let mut last = 0usize;
    let mut ofs = 1usize;
    let (lo, hi);
    if cmp(key, &a[base + hint]) < 0.0 {
        let max = hint + 1;
        while ofs < max {
            if cmp(key, &a[base + hint - ofs]) >= 0.0 {
                break;
            }
            last = ofs;
            ofs = (ofs << 1) + 1;
        }
        ofs = ofs.min(max);
        lo = (hint + 1).wrapping_sub(ofs);
        hi = hint - last;
    } else {
        let max = len - hint;
        while ofs < max {
            if cmp(key, &a[base + hint + ofs]) < 0.0 {
                break;
            }
            last = ofs;
            ofs = (ofs << 1) + 1;
        }
        ofs = ofs.min(max);
        lo = last + hint + 1;
        hi = ofs + hint;
    }
    let (mut last, mut ofs) = (lo, hi);
    while last < ofs {
        let m = last + ((ofs - last) >> 1);
        if cmp(key, &a[base + m]) < 0.0 {
            ofs = m;
        } else {
            last = m + 1;
        }
    }
    ofs
}
