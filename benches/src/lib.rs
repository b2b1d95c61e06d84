//! sessiontree's benchmark harness, outside the product: the workload
//! generator ([`gen`]), the measured operations over every backend ([`ops`]),
//! the naive SQL designs they are compared with ([`naive`]), and the bench
//! report ([`report`]) with its peers and whole-process figures ([`peers`],
//! the Node binding's bench run from [`node_binding`]).
//! The `sessiontree-bench` binary runs the report and
//! the generator; `cargo bench` runs the criterion benches over [`ops`].

pub mod avail;
pub mod gen;
pub mod gen_command;
pub mod home;
pub mod naive;
pub mod node_binding;
pub mod ops;
pub mod peers;
pub mod pi16;
pub mod report;
pub mod stats_command;
pub mod team;

use serde_json::Value;

/// The median of `samples` (the mean of the middle two for an even count;
/// NaN for none).
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    let m = samples.len() / 2;
    match samples.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => samples[m],
        _ => (samples[m - 1] + samples[m]) / 2.0,
    }
}

/// What a command has to say: JSON for `--json`, text otherwise.
#[derive(Debug)]
pub struct Report {
    /// The JSON form.
    pub json: Value,
    /// The readable form.
    pub text: String,
}

impl Report {
    /// A report of both forms.
    pub fn new(json: Value, text: String) -> Self {
        Report { json, text }
    }
}
