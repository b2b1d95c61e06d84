//! The session list: sessions by last activity, newest first (the
//! archive's listing order, as `ls`), read from the archive one page
//! at a time as the view needs them, filtered as the user types (name, cwd
//! and id in the rows read; message text through the archive's search
//! index), with a preview of the selected session read on demand.

use sessiontree::archive::SessionArchive;
use sessiontree::listing::{ListQuery, SearchFilter, SessionSummary};
use sessiontree::preview::preview_in;
use sessiontree::{EntryType, Result};
use std::collections::HashMap;

/// Rows asked of the archive at a time.
pub const PAGE: usize = 200;
/// Search hits read for a text filter (each names its session).
const HITS: usize = 500;
/// Snippets of text hits kept per session, best first.
const SNIPPETS: usize = 3;
/// Messages a preview shows, from the leaf up.
const PREVIEW_MESSAGES: usize = 4;
/// Entries a preview walks up from the leaf at most, looking for messages.
const PREVIEW_WALK: usize = 40;

/// What the preview pane shows of one session.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    /// The session it is of.
    pub id: String,
    /// When the leaf entry was written (the last activity on the active path).
    pub last_activity: Option<String>,
    /// The last messages of the active path, oldest first, one line each.
    pub messages: Vec<String>,
}

/// The list screen's state.
#[derive(Debug, Default)]
pub struct ListState {
    /// The filter text.
    pub filter: String,
    /// Whether keys go to the filter.
    pub editing: bool,
    /// The rows read so far (those the filter keeps).
    pub rows: Vec<SessionSummary>,
    /// Sessions the filter's words hit in message text: id → snippet.
    hits: HashMap<String, Vec<String>>,
    /// Listing rows read so far (filtered or not): the next page's offset.
    next_offset: usize,
    /// Every row has been read.
    pub exhausted: bool,
    /// Sessions in the archive (unfiltered).
    pub total: u64,
    /// The selected row.
    pub selected: usize,
    /// The first row on screen.
    pub top: usize,
    /// Rows on screen.
    pub height: usize,
    /// The selected session's preview, once read.
    pub preview: Option<Preview>,
    /// Listing pages read (for the tests: paging, not reading everything).
    pub pages_read: usize,
}

impl ListState {
    /// A list over `archive`, its first page not yet read.
    pub fn new(archive: &dyn SessionArchive) -> Result<Self> {
        Ok(ListState {
            total: archive.count(&ListQuery::default())?,
            height: 20,
            ..Default::default()
        })
    }

    /// Starts over with the current filter: drops the rows read, asks the
    /// search index for the filter's words, and reads what the screen needs.
    pub fn refilter(&mut self, archive: &dyn SessionArchive) -> Result<()> {
        self.rows.clear();
        self.next_offset = 0;
        self.exhausted = false;
        self.selected = 0;
        self.top = 0;
        self.preview = None;
        self.hits.clear();
        if let Some(query) = text_query(&self.filter) {
            // A query the index refuses just finds no text.
            if let Ok(hits) = archive.search_page(&query, &SearchFilter::default(), HITS, 0) {
                for h in hits {
                    let snippets = self.hits.entry(h.session_id).or_default();
                    if snippets.len() < SNIPPETS {
                        snippets.push(format!("{} {}", h.entry_id, h.snippet));
                    }
                }
            }
        }
        self.fill(archive)
    }

    /// Whether a row passes the filter: every word of it is in the name,
    /// cwd or id (any case), or the session's text matched.
    fn keeps(&self, s: &SessionSummary) -> bool {
        if self.filter.trim().is_empty() || self.hits.contains_key(&s.metadata.id) {
            return true;
        }
        let hay = format!(
            "{} {} {}",
            s.name
                .as_ref()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            s.metadata.cwd.as_deref().unwrap_or(""),
            s.metadata.id
        )
        .to_lowercase();
        self.filter
            .to_lowercase()
            .split_whitespace()
            .all(|w| hay.contains(w))
    }

    /// Reads pages until the rows cover the screen (and one more row), or
    /// the listing ends.
    pub fn fill(&mut self, archive: &dyn SessionArchive) -> Result<()> {
        let needed = self.top + self.height.max(1) + 1;
        while self.rows.len() < needed.max(self.selected + 1) && !self.exhausted {
            let page = archive.list(&ListQuery {
                limit: Some(PAGE),
                offset: self.next_offset,
                by_activity: true,
                ..Default::default()
            })?;
            self.pages_read += 1;
            self.next_offset += page.len();
            self.exhausted = page.len() < PAGE;
            let kept: Vec<SessionSummary> = page.into_iter().filter(|s| self.keeps(s)).collect();
            self.rows.extend(kept);
        }
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
        Ok(())
    }

    /// The selected session's summary.
    pub fn current(&self) -> Option<&SessionSummary> {
        self.rows.get(self.selected)
    }

    /// Moves the selection by `delta` rows (reading pages as needed) and
    /// keeps it on screen.
    pub fn step(&mut self, archive: &dyn SessionArchive, delta: isize) -> Result<()> {
        let want = self.selected.saturating_add_signed(delta);
        self.selected = want;
        self.fill(archive)?;
        self.selected = want.min(self.rows.len().saturating_sub(1));
        self.scroll_to_selection();
        self.preview = None;
        Ok(())
    }

    /// To the last row: reads the rest of the listing (a page at a time).
    pub fn end(&mut self, archive: &dyn SessionArchive) -> Result<()> {
        self.step(archive, isize::MAX / 2)
    }

    fn scroll_to_selection(&mut self) {
        let h = self.height.max(1);
        if self.selected < self.top {
            self.top = self.selected;
        } else if self.selected >= self.top + h {
            self.top = self.selected + 1 - h;
        }
    }

    /// The text filter's snippet for a session, if its text matched.
    pub fn hit(&self, id: &str) -> Option<&str> {
        self.hits
            .get(id)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// The text filter's best snippets in a session (each after its entry id).
    pub fn snippets(&self, id: &str) -> &[String] {
        self.hits.get(id).map_or(&[], Vec::as_slice)
    }

    /// Reads the selected session's preview unless it is already read: the
    /// leaf's time and the last few messages, walking up from the leaf one
    /// entry at a time (never the whole path).
    pub fn load_preview(&mut self, archive: &dyn SessionArchive) -> Result<()> {
        let Some(s) = self.current() else {
            self.preview = None;
            return Ok(());
        };
        let id = s.metadata.id.clone();
        if self.preview.as_ref().is_some_and(|p| p.id == id) {
            return Ok(());
        }
        let cwd = s.metadata.cwd.clone();
        let storage = archive.open_storage(&id)?;
        let mut next = storage.leaf_id()?;
        let mut messages = Vec::new();
        let mut last_activity = None;
        for _ in 0..PREVIEW_WALK {
            let Some(eid) = next else { break };
            let Some(e) = storage.entry(&eid)? else { break };
            if last_activity.is_none() {
                last_activity = Some(e.timestamp().to_owned());
            }
            if *e.entry_type() == EntryType::Message {
                messages.push(preview_in(&e, 400, cwd.as_deref()));
                if messages.len() == PREVIEW_MESSAGES {
                    break;
                }
            }
            next = e.parent_id().map(str::to_owned);
        }
        messages.reverse();
        self.preview = Some(Preview {
            id,
            last_activity,
            messages,
        });
        Ok(())
    }

    /// Drops the session `id` (deleted) from the rows read.
    pub fn forget(&mut self, id: &str) {
        self.rows.retain(|s| s.metadata.id != id);
        self.total = self.total.saturating_sub(1);
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
        self.preview = None;
    }
}

/// The search-index query for a filter: each word of letters, digits and
/// `_` as a prefix (`word*`); other words are left to the name/cwd match.
/// `None` when no word qualifies.
pub fn text_query(filter: &str) -> Option<String> {
    let words: Vec<String> = filter
        .split_whitespace()
        .filter(|w| w.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .map(|w| format!("{w}*"))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}
