//! Training an archive's zstd dictionary from sample entry text: zstd's
//! full search for `compact` and migrations, an accelerated fastCover for
//! an import's first dictionary.

use super::blob::blob_ranges;
use super::frame::LEVEL;
use zstd::zstd_safe;

/// Training needs at least this much sample text to beat no dictionary.
pub const MIN_TRAINING_BYTES: usize = 256 << 10;
/// Sample text read to train a dictionary from a whole archive (`compact`,
/// the migration); training takes ~0.05 s per MB.
pub const TRAINING_BUDGET: usize = 8 << 20;
/// Sample text read from the files of an import to train an archive's first
/// dictionary: an eighth of [`TRAINING_BUDGET`], half of what it was, for half
/// the training time (the import's fixed cost) at 0.7 % more archive on a
/// generated 20,000-entry session and ~3 % on pi's real files (`compact`
/// retrains on the whole archive).
pub const IMPORT_TRAINING_BUDGET: usize = 1 << 20;
/// A single sample is cut to this length (many short samples teach more
/// than a few long ones).
pub const SAMPLE_LIMIT: usize = 16 << 10;
/// The largest dictionary trained. Only a whole-archive training
/// ([`TRAINING_BUDGET`] ÷ 20 ≈ 410 KB) reaches past zstd's recommended
/// 112 KB: on the generated 100,000-entry session that is 1.1 % smaller
/// at level 12 and, at level 18, 3.7 % (42.27 → 40.70 MB), with
/// no cold-resume cost measurable; pi's real files stay the same size
/// (their larger dictionary takes what their entries save).
pub const MAX_DICTIONARY: usize = 512 << 10;

/// How hard a training looks for a good dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Training {
    /// zstd's parameter search (`ZDICT_trainFromBuffer`: five fastCover
    /// builds, each scored by compressing held-out samples): for `compact`
    /// and the migration, where 8 MB of samples get a dictionary 1.2 %
    /// better on held-out entries for 0.5 s more.
    Search,
    /// One fastCover build with the parameters the search settles on for
    /// session text (k = [`QUICK_SEGMENT`], d = 8), accelerated
    /// ([`QUICK_ACCEL`]): a fifth of the time, for
    /// an import's first dictionary (a fresh 1,000-entry import went from
    /// 124 to 64 ms) and for an archive filled by appends, which waits for
    /// it. Its dictionaries compress within about 2 % of the search's:
    /// held-out lines of pi's real files −1.8 % (+1.0 % unaccelerated);
    /// imported archives, real files +0.8 %, generated sessions −0.6 to
    /// +0.9 % (unaccelerated; see [`QUICK_ACCEL`] for its own cost).
    Quick,
}

/// The segment size ([`Training::Quick`]) zstd's search picks on pi
/// sessions, real and generated, at the end of its range [50, 2000].
pub const QUICK_SEGMENT: u32 = 1998;

/// fastCover's acceleration ([`Training::Quick`]): frequencies counted at
/// every fourth position, and the entropy tables fitted on a quarter of the
/// samples instead of compressing all of them. A first dictionary from
/// pi's 1 MB real file: 99.9 → 61.5 M instructions (its import into a new
/// archive 34.7 → 28.3 ms); the archives it makes, pi's real files +0.9 %
/// and +1.1 %, a generated 10,000-entry session −0.3 % (accelerations 2 to
/// 8 all landed within ±1.7 %).
pub const QUICK_ACCEL: u32 = 4;

/// Trains a dictionary from sample entry texts; `None` when there is too
/// little text or zstd cannot find one.
pub fn train(samples: &[Vec<u8>], training: Training) -> Option<Vec<u8>> {
    let total: usize = samples.iter().map(Vec::len).sum();
    if total < MIN_TRAINING_BYTES || samples.len() < 16 {
        return None;
    }
    let size = (total / 20).clamp(16 << 10, MAX_DICTIONARY);
    match training {
        Training::Search => zstd::dict::from_samples(samples, size).ok(),
        Training::Quick => train_fast_cover(samples, size),
    }
}

/// One `ZDICT_trainFromBuffer_fastCover` build, which zstd's safe wrappers
/// do not offer (they run the search).
#[allow(unsafe_code)]
pub(super) fn train_fast_cover(samples: &[Vec<u8>], capacity: usize) -> Option<Vec<u8>> {
    use zstd_safe::zstd_sys;
    let sizes: Vec<usize> = samples.iter().map(Vec::len).collect();
    let flat = samples.concat();
    let count = u32::try_from(samples.len()).ok()?;
    // Zero is zstd's "the default" for every parameter not set.
    let params = zstd_sys::ZDICT_fastCover_params_t {
        k: QUICK_SEGMENT,
        d: 8,
        // A 2^18-entry frequency table, not zstd's default 2^20: its 4 MB
        // were most of a training's time (22 → 13 ms on pi's real files, the
        // same compression within 0.1 %).
        f: 18,
        steps: 0,
        nbThreads: 0,
        splitPoint: 0.0,
        accel: QUICK_ACCEL,
        shrinkDict: 0,
        shrinkDictMaxRegression: 0,
        zParams: zstd_sys::ZDICT_params_t {
            compressionLevel: LEVEL,
            notificationLevel: 0,
            dictID: 0,
        },
    };
    let mut dict = vec![0u8; capacity];
    // SAFETY: `dict` is writable for `capacity` bytes; `flat` holds exactly
    // the sum of `sizes` bytes (it is their concatenation) and `sizes` has
    // `count` elements; zstd keeps no pointer past the call.
    let written = unsafe {
        zstd_sys::ZDICT_trainFromBuffer_fastCover(
            dict.as_mut_ptr().cast(),
            capacity,
            flat.as_ptr().cast(),
            sizes.as_ptr(),
            count,
            params,
        )
    };
    // SAFETY: a pure function of its argument.
    if unsafe { zstd_sys::ZDICT_isError(written) } != 0 {
        return None;
    }
    dict.truncate(written);
    Some(dict)
}

/// A sample for training: the text as it will be compressed (blobs cut out,
/// cut to [`SAMPLE_LIMIT`]).
pub fn training_sample(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len().min(SAMPLE_LIMIT));
    let mut from = 0;
    for r in blob_ranges(text) {
        out.extend_from_slice(&text.as_bytes()[from..r.start]);
        from = r.end;
    }
    out.extend_from_slice(&text.as_bytes()[from..]);
    out.truncate(SAMPLE_LIMIT);
    out
}
