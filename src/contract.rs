//! Whose rules a session follows. Two programs wrote the sessions pi users
//! have, over the same JSONL entries: pi-agent-core 0.83.0's SDK `Session`
//! (`leaf` entries move the leaf; the [`crate::rules`] and [`crate::context`]
//! modules) and pi-coding-agent 1.6.0's `SessionManager`, the pi app (the leaf
//! is the last entry; the `app` module). Each session is answered by
//! the rules of the program that writes it.

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// The contract a session follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Contract {
    /// pi-coding-agent 1.6.0's `SessionManager` (the pi app): every session
    /// file a pi user has. The default for anything without SDK-only entries.
    #[default]
    App,
    /// pi-agent-core 0.83.0's `SessionStorage`/`Session` (the SDK): sessions
    /// created through the SDK contract, or holding `leaf` /
    /// `active_tools_change` entries.
    Sdk,
}

impl Contract {
    /// Both contracts, the default first.
    pub const ALL: [Contract; 2] = [Contract::App, Contract::Sdk];

    /// The name used on the command line, in `ls --json` and in the archive: `app` or `sdk`.
    pub fn as_str(self) -> &'static str {
        match self {
            Contract::App => "app",
            Contract::Sdk => "sdk",
        }
    }

    /// Entry types only the SDK writes: a session holding one follows the SDK's rules.
    pub fn is_sdk_only_type(entry_type: &str) -> bool {
        matches!(entry_type, "leaf" | "active_tools_change")
    }

    /// The contract a session's entry types imply: the SDK's if any is SDK-only, else the app's.
    pub fn detect<'t>(entry_types: impl IntoIterator<Item = &'t str>) -> Contract {
        if entry_types.into_iter().any(Contract::is_sdk_only_type) {
            Contract::Sdk
        } else {
            Contract::App
        }
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Contract {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "app" => Ok(Contract::App),
            "sdk" => Ok(Contract::Sdk),
            other => Err(Error::Usage(format!(
                "unknown contract {other:?}: expected \"app\" (pi-coding-agent's SessionManager) or \"sdk\" (pi-agent-core's SessionStorage)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_only_entry_types_decide() {
        assert_eq!(
            Contract::detect(["message", "label", "compaction"]),
            Contract::App
        );
        assert_eq!(Contract::detect(["message", "leaf"]), Contract::Sdk);
        assert_eq!(Contract::detect(["active_tools_change"]), Contract::Sdk);
        assert_eq!(Contract::detect([]), Contract::App);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for c in Contract::ALL {
            assert_eq!(c.as_str().parse::<Contract>().unwrap(), c);
        }
        let err = "pi".parse::<Contract>().unwrap_err();
        assert!(err.to_string().contains("\"pi\""), "{err}");
    }
}
