//! `unclaim`: clears a session's writer claim by hand, for a claim whose
//! holder is gone but whose lease has not run out (a writer killed on
//! another machine, a row written by a clock far ahead). It names the
//! holder it removed, and refuses a running holder on this host unless
//! `--force`.

use super::db::Access;
use super::{Cli, Report};
use clap::Args;
use serde_json::json;
use sessiontree::backend::claim::ClaimState;
use sessiontree::Result;

/// Arguments of `unclaim`.
#[derive(Debug, Args)]
pub struct UnclaimArgs {
    /// The session (id or unique prefix) whose writer claim to clear.
    pub session: String,
    /// Clear it even from a process on this host that is still running (its
    /// next write then fails: it never interleaves with a new writer).
    #[arg(long)]
    pub force: bool,
}

/// `unclaim`: removes the claim in one write transaction and reports whose
/// it was; a session with no claim is reported as such (exit 0).
pub fn run(cli: &Cli, args: &UnclaimArgs) -> Result<Report> {
    let archive = super::db::open(cli, Access::Write)?;
    let id = archive.resolve_session(&args.session)?;
    Ok(match archive.clear_claim(&id, args.force)? {
        None => Report::new(
            json!({"session": id, "cleared": null}),
            format!("session {id} has no writer claim; nothing to clear\n"),
        ),
        Some(c) => {
            let h = &c.claim.holder;
            let note = match c.state {
                ClaimState::Live => "; if that writer still runs, its next write fails",
                _ => "",
            };
            Report::new(
                json!({"session": id, "cleared": {
                    "host": h.host, "pid": h.pid, "token": h.token,
                    "expiresMs": h.expires_ms, "storeNowMs": c.claim.now_ms,
                    "state": c.state.as_str(),
                }}),
                format!(
                    "cleared the writer claim of session {id}, held by {}{note}\n",
                    c.claim.describe()
                ),
            )
        }
    })
}
