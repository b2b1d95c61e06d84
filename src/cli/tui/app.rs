//! The browser's state and what each key does, apart from drawing: the
//! screens (the list, with a session's tree and an entry read in full stacked over it),
//! a prompt or confirmation over them, and a status line. Writes go through
//! the library calls the `name`, `label`, `move`, `fork`, `delete` and
//! `export` commands make.

use super::list::ListState;
use super::reader::ReaderState;
use super::tree::{ReadSession, TreeState};
use sessiontree::archive::SessionArchive;
use sessiontree::layout::export_path;
use sessiontree::repo::archive::ArchiveRepo;
use sessiontree::repo::ForkOptions;
use sessiontree::rules::ForkPosition;
use sessiontree::{Error, Result, SessionMetadata};
use std::path::PathBuf;
use std::sync::Arc;

/// A key, as the state machine hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Control and a character.
    Ctrl(char),
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Tab.
    Tab,
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
    /// Arrow left.
    Left,
    /// Arrow right.
    Right,
    /// Page up.
    PageUp,
    /// Page down.
    PageDown,
    /// Home.
    Home,
    /// End.
    End,
}

/// A screen stacked over the list.
pub enum Screen {
    /// A session's tree.
    Tree(Box<TreeState>),
    /// An entry in full.
    Reader(ReaderState),
}

/// The screen on top, to draw.
pub enum Top<'a> {
    /// The session list.
    List(&'a ListState),
    /// A session's tree.
    Tree(&'a TreeState),
    /// An entry in full.
    Reader(&'a ReaderState),
}

/// What a prompt's text is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A new name for a session.
    Rename(String),
    /// A label for an entry of the open session.
    Label(String),
    /// A search within the open session.
    Search,
}

/// What a confirmation is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    /// Deleting a session.
    Delete(String),
}

/// A prompt or a question over the screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Modal {
    /// A line of text to type.
    Prompt {
        /// What it is for.
        ask: Ask,
        /// What is typed so far.
        text: String,
    },
    /// y/n.
    Confirm {
        /// What it is for.
        what: Confirm,
        /// The question.
        question: String,
    },
}

/// The browser.
pub struct App {
    archive: Arc<dyn SessionArchive>,
    /// The session list, under every other screen.
    list: ListState,
    /// The screens over the list, the top one shown.
    pub screens: Vec<Screen>,
    /// A prompt or confirmation, if one is open.
    pub modal: Option<Modal>,
    /// The help overlay is open.
    pub help: bool,
    /// The status line: what the last action did, or its error.
    pub status: String,
    /// Leave the loop.
    pub quit: bool,
    /// A pi file written to resume in pi, once the browser has closed.
    pub resume: Option<PathBuf>,
    /// pi's sessions directory (resume writes there).
    pub pi_dir: PathBuf,
    /// Rows of the body (the screen less header, status and footer).
    pub body_rows: usize,
    /// Columns of the screen.
    pub columns: usize,
    /// The whole shape of the open tree's session, being read on another
    /// thread (a very large session's takes a while): the tree shows a
    /// window of its active path meanwhile.
    pub opening: Option<Opening>,
}

/// A session's whole shape being read, for the tree open over a window of it.
pub struct Opening {
    /// Its id.
    pub id: String,
    /// The text filter's query to arm in it.
    query: Option<String>,
    reading: std::thread::JoinHandle<Result<ReadSession>>,
}

impl App {
    /// A browser over `archive`, at its session list.
    pub fn new(archive: Arc<dyn SessionArchive>, pi_dir: PathBuf) -> Result<Self> {
        let list = ListState::new(&*archive)?;
        Ok(App {
            archive,
            list,
            screens: Vec::new(),
            modal: None,
            help: false,
            status: String::new(),
            quit: false,
            resume: None,
            pi_dir,
            body_rows: 20,
            columns: 80,
            opening: None,
        })
    }

    /// The archive.
    pub fn archive(&self) -> &dyn SessionArchive {
        &*self.archive
    }

    /// The screen on top.
    pub fn screen(&self) -> Top<'_> {
        match self.screens.last() {
            None => Top::List(&self.list),
            Some(Screen::Tree(t)) => Top::Tree(t),
            Some(Screen::Reader(r)) => Top::Reader(r),
        }
    }

    /// The list (always at the bottom).
    pub fn list(&self) -> &ListState {
        &self.list
    }

    fn list_mut(&mut self) -> &mut ListState {
        &mut self.list
    }

    /// The open tree, if the top screen is one (or a reader over one).
    pub fn tree(&self) -> Option<&TreeState> {
        self.screens.iter().rev().find_map(|s| match s {
            Screen::Tree(t) => Some(&**t),
            _ => None,
        })
    }

    fn tree_mut(&mut self) -> Option<&mut TreeState> {
        self.screens.iter_mut().rev().find_map(|s| match s {
            Screen::Tree(t) => Some(&mut **t),
            _ => None,
        })
    }

    /// Sizes the screens to the terminal and reads what they will show (the
    /// list's rows and preview, the tree's visible previews). Called before
    /// every draw.
    pub fn prepare(&mut self, columns: usize, rows: usize) -> Result<()> {
        self.columns = columns;
        self.body_rows = rows.saturating_sub(3).max(1);
        let body = self.body_rows;
        let archive = Arc::clone(&self.archive);
        match self.screens.last_mut() {
            None => {
                let l = &mut self.list;
                l.height = body;
                l.fill(&*archive)?;
                l.load_preview(&*archive)?;
            }
            Some(Screen::Tree(t)) => {
                if t.height != body {
                    t.height = body;
                    t.step(0);
                }
                t.prepare()?;
            }
            Some(Screen::Reader(r)) => r.fit(columns, body),
        }
        Ok(())
    }

    /// Handles one key. An error leaves the state as it was before the
    /// failed step and is for the status line.
    pub fn key(&mut self, key: Key) -> Result<()> {
        if key == Key::Ctrl('c') {
            self.quit = true;
            return Ok(());
        }
        if self.help {
            self.help = false;
            return Ok(());
        }
        if let Some(modal) = self.modal.take() {
            return self.modal_key(modal, key);
        }
        self.status.clear();
        let page = self.body_rows.max(2) as isize - 1;
        match self.screens.last_mut() {
            None => self.list_key(key, page),
            Some(Screen::Tree(_)) => self.tree_key(key, page),
            Some(Screen::Reader(r)) => {
                match key {
                    Key::Up | Key::Char('k') => r.scroll_by(-1),
                    Key::Down | Key::Char('j') | Key::Enter => r.scroll_by(1),
                    Key::PageUp | Key::Char('b') => r.scroll_by(-page),
                    Key::PageDown | Key::Char(' ') => r.scroll_by(page),
                    Key::Home | Key::Char('g') => r.jump(false),
                    Key::End | Key::Char('G') => r.jump(true),
                    Key::Char('?') => self.help = true,
                    Key::Esc | Key::Char('q') | Key::Left => {
                        self.screens.pop();
                    }
                    _ => {}
                }
                Ok(())
            }
        }
    }

    fn list_key(&mut self, key: Key, page: isize) -> Result<()> {
        let archive = Arc::clone(&self.archive);
        let a = &*archive;
        let l = self.list_mut();
        if l.editing {
            match key {
                Key::Char(c) => {
                    l.filter.push(c);
                    l.refilter(a)?;
                }
                Key::Backspace => {
                    l.filter.pop();
                    l.refilter(a)?;
                }
                Key::Enter | Key::Down | Key::Tab => l.editing = false,
                Key::Esc => {
                    l.editing = false;
                    l.filter.clear();
                    l.refilter(a)?;
                }
                _ => {}
            }
            return Ok(());
        }
        match key {
            Key::Char('/') => l.editing = true,
            Key::Up | Key::Char('k') => l.step(a, -1)?,
            Key::Down | Key::Char('j') => l.step(a, 1)?,
            Key::PageUp => l.step(a, -page)?,
            Key::PageDown => l.step(a, page)?,
            Key::Home | Key::Char('g') => l.step(a, isize::MIN / 2)?,
            Key::End | Key::Char('G') => l.end(a)?,
            Key::Enter | Key::Right => self.open_selected()?,
            Key::Char('r') => {
                if let Some(s) = l.current() {
                    let id = s.metadata.id.clone();
                    let text = s
                        .name
                        .as_ref()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default();
                    self.modal = Some(Modal::Prompt {
                        ask: Ask::Rename(id),
                        text,
                    });
                }
            }
            Key::Char('d') => {
                if let Some(s) = l.current() {
                    let (id, count) = (s.metadata.id.clone(), s.entry_count);
                    self.ask_delete(&id, count);
                }
            }
            Key::Char('p') => {
                if let Some(s) = l.current() {
                    let id = s.metadata.id.clone();
                    self.resume_in_pi(&id)?;
                }
            }
            Key::Char('?') => self.help = true,
            Key::Esc if !l.filter.is_empty() => {
                l.filter.clear();
                l.refilter(a)?;
            }
            Key::Esc | Key::Char('q') => self.quit = true,
            _ => {}
        }
        Ok(())
    }

    /// Opens the selected session's tree at once over a window of its
    /// active path (bounded reads: [`TreeState::open_window`]) and starts
    /// reading its whole shape on another thread, to fill in side branches
    /// (and, under a text filter, search the filter's words within it): see
    /// [`App::poll_open`].
    pub fn open_selected(&mut self) -> Result<()> {
        let l = self.list();
        let Some(s) = l.current() else {
            return Ok(());
        };
        let id = s.metadata.id.clone();
        let query = l.hit(&id).and_then(|_| super::list::text_query(&l.filter));
        let tree = TreeState::open_window(self.archive(), &id, self.body_rows)?;
        if tree.partial {
            self.status = format!("reading the whole tree of {} entries…", tree.total);
        }
        self.screens.push(Screen::Tree(Box::new(tree)));
        let archive = Arc::clone(&self.archive);
        let reading = {
            let id = id.clone();
            std::thread::spawn(move || TreeState::read(&*archive, &id))
        };
        self.opening = Some(Opening { id, query, reading });
        Ok(())
    }

    /// Opens the session being read once it is read (`wait`: waits for it).
    pub fn poll_open(&mut self, wait: bool) -> Result<()> {
        if !self
            .opening
            .as_ref()
            .is_some_and(|o| wait || o.reading.is_finished())
        {
            return Ok(());
        }
        let Some(o) = self.opening.take() else {
            return Ok(());
        };
        if self.status.starts_with("reading the whole tree") {
            self.status.clear();
        }
        let read = o
            .reading
            .join()
            .map_err(|_| Error::Unknown(format!("reading session {} failed", o.id)))??;
        let archive = Arc::clone(&self.archive);
        let Some(tree) = self.tree_mut().filter(|t| t.id == o.id) else {
            return Ok(());
        };
        tree.fill_in(read);
        if let Some(q) = o.query {
            let hits = tree.arm_search(&*archive, &q)?;
            self.status = format!("{hits} hits for {q} in this session: n / N to go to them");
        }
        Ok(())
    }

    fn tree_key(&mut self, key: Key, page: isize) -> Result<()> {
        let Some(Screen::Tree(t)) = self.screens.last_mut() else {
            return Ok(());
        };
        match key {
            Key::Up | Key::Char('k') => t.step(-1),
            Key::Down | Key::Char('j') => t.step(1),
            Key::PageUp => t.step(-page),
            Key::PageDown => t.step(page),
            Key::Home | Key::Char('g') => t.step(isize::MIN / 2),
            Key::End | Key::Char('G') => t.step(isize::MAX / 2),
            Key::Char(' ') | Key::Tab => t.toggle(),
            Key::Right => t.unfold(),
            Key::Left => t.fold_or_up(),
            Key::Char('l') => t.go_to_leaf(),
            Key::Char('n') => t.next_hit(true),
            Key::Char('N') => t.next_hit(false),
            Key::Enter => {
                if let Some(id) = t.current_id() {
                    let e = t
                        .storage()
                        .entry(&id)?
                        .ok_or_else(|| Error::EntryNotFound(id.clone()))?;
                    self.screens.push(Screen::Reader(ReaderState::new(&e)));
                }
            }
            Key::Char('/') => {
                self.modal = Some(Modal::Prompt {
                    ask: Ask::Search,
                    text: String::new(),
                })
            }
            Key::Char('L') => {
                if let Some(id) = t.current_id() {
                    let text = t
                        .storage()
                        .label(&id)?
                        .map(|l| l.to_string_lossy())
                        .unwrap_or_default();
                    self.modal = Some(Modal::Prompt {
                        ask: Ask::Label(id),
                        text,
                    });
                }
            }
            Key::Char('r') => {
                let id = t.id.clone();
                let text = t
                    .storage()
                    .session_name()?
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                self.modal = Some(Modal::Prompt {
                    ask: Ask::Rename(id),
                    text,
                });
            }
            Key::Char('m') => {
                if let Some(entry) = t.current_id() {
                    let id = t.id.clone();
                    let report = crate::cli::write::move_in(
                        self.archive.open_storage(&id)?,
                        Some(&entry),
                        None,
                    )?;
                    self.status = report.text.trim_end().to_owned();
                    self.after_write(&id)?;
                }
            }
            Key::Char('f') => {
                if let Some(entry) = t.current_id() {
                    let id = t.id.clone();
                    let new_id = self.fork(&id, &entry)?;
                    self.status =
                        format!("forked at {entry} into {new_id} (listed in the sessions)");
                    let l = self.list_mut();
                    l.total += 1;
                    let a = Arc::clone(&self.archive);
                    self.list_mut().refilter(&*a)?;
                }
            }
            Key::Char('d') => {
                let id = t.id.clone();
                let count = t.total as i64;
                self.ask_delete(&id, count);
            }
            Key::Char('p') => {
                let id = t.id.clone();
                self.resume_in_pi(&id)?;
            }
            Key::Char('?') => self.help = true,
            Key::Esc | Key::Char('q') => {
                // The tree is closed: its shape is no longer wanted.
                self.opening = None;
                self.screens.pop();
            }
            _ => {}
        }
        Ok(())
    }

    fn ask_delete(&mut self, id: &str, entries: i64) {
        self.modal = Some(Modal::Confirm {
            what: Confirm::Delete(id.to_owned()),
            question: format!(
                "Delete session {id} ({entries} entries) from the archive? pi's files are not touched. y/N"
            ),
        });
    }

    fn modal_key(&mut self, modal: Modal, key: Key) -> Result<()> {
        match modal {
            Modal::Confirm { what, question } => match key {
                Key::Char('y') | Key::Char('Y') => match what {
                    Confirm::Delete(id) => self.delete(&id),
                },
                Key::Char('n') | Key::Char('N') | Key::Esc | Key::Enter | Key::Char('q') => {
                    self.status = "nothing deleted".into();
                    Ok(())
                }
                _ => {
                    self.modal = Some(Modal::Confirm { what, question });
                    Ok(())
                }
            },
            Modal::Prompt { ask, mut text } => {
                match key {
                    Key::Char(c) => text.push(c),
                    Key::Backspace => {
                        text.pop();
                    }
                    Key::Esc => return Ok(()),
                    Key::Enter => return self.answer(ask, &text),
                    _ => {}
                }
                self.modal = Some(Modal::Prompt { ask, text });
                Ok(())
            }
        }
    }

    fn answer(&mut self, ask: Ask, text: &str) -> Result<()> {
        match ask {
            Ask::Rename(id) => {
                let report = crate::cli::write::name_in(self.archive.open_storage(&id)?, text)?;
                self.status = report.text.trim_end().to_owned();
                self.after_write(&id)
            }
            Ask::Label(entry) => {
                let Some(id) = self.tree().map(|t| t.id.clone()) else {
                    return Ok(());
                };
                let report =
                    crate::cli::write::label_in(self.archive.open_storage(&id)?, &entry, text)?;
                self.status = report.text.trim_end().to_owned();
                self.after_write(&id)
            }
            Ask::Search => {
                let archive = Arc::clone(&self.archive);
                if let Some(t) = self.tree_mut() {
                    let found = t.search(&*archive, text)?;
                    let hits = t.search.as_ref().map_or(0, |s| s.1.len());
                    self.status = if found {
                        format!("{hits} hits for {text}: n / N for the next or previous")
                    } else {
                        format!("no hits for {text}")
                    };
                }
                Ok(())
            }
        }
    }

    /// After a write to session `id`: its tree read again, the list's rows
    /// read again (names, counts).
    fn after_write(&mut self, id: &str) -> Result<()> {
        let archive = Arc::clone(&self.archive);
        if let Some(t) = self.tree_mut().filter(|t| t.id == id) {
            t.reload(&*archive)?;
        }
        let l = self.list_mut();
        let selected = l.selected;
        l.refilter(&*archive)?;
        let l = self.list_mut();
        l.selected = selected;
        l.fill(&*archive)?;
        Ok(())
    }

    /// Deletes session `id` (as `delete` does) and goes back to the list.
    fn delete(&mut self, id: &str) -> Result<()> {
        self.archive.delete_session(id)?;
        self.screens.clear();
        self.list_mut().forget(id);
        self.status = format!("deleted {id}");
        Ok(())
    }

    /// Forks `id` at `entry` (with it), as `fork --position at` does; the new id.
    fn fork(&mut self, id: &str, entry: &str) -> Result<String> {
        let mut repo = ArchiveRepo::new(Arc::clone(&self.archive));
        let source = SessionMetadata {
            id: id.to_owned(),
            ..SessionMetadata::default()
        };
        let options = ForkOptions {
            entry_id: Some(entry.to_owned()),
            position: ForkPosition::At,
            ..ForkOptions::default()
        };
        Ok(crate::cli::write::forked(&mut repo, &source, &options)?.0)
    }

    /// Writes session `id` as pi's file in pi's sessions directory (as
    /// `export` does, never overwriting a differing file) and closes the
    /// browser, to print (or run) `pi --session FILE`.
    fn resume_in_pi(&mut self, id: &str) -> Result<()> {
        let dir = self.pi_dir.clone();
        let (path, _) =
            self.archive
                .export_session(id, &|m| export_path(&dir, m), false, &mut |_| {})?;
        self.resume = Some(path);
        self.quit = true;
        Ok(())
    }
}
