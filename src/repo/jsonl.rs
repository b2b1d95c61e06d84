//! A directory of pi session files in pi's layout:
//! `<root>/--<encoded cwd>--/<createdAt>_<id>.jsonl`.

use super::{
    entries_to_fork, newest_first, CreateOptions, ForkOptions, SessionFields, SessionRepo,
};
use crate::backend::jsonl::{read_header, JsonlStorage};
use crate::entry::now_timestamp;
use crate::error::{Error, ErrorCode, Result};
use crate::layout::{check_session_id, encode_cwd, session_file_name};
use crate::session::Session;
use crate::storage::{Durability, SessionMetadata, SessionStorage};
use std::path::{Path, PathBuf};

/// pi's JSONL session repository.
#[derive(Debug, Clone)]
pub struct JsonlRepo {
    root: PathBuf,
    durability: Durability,
}

impl JsonlRepo {
    /// A repository rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>, durability: Durability) -> Self {
        JsonlRepo {
            root: root.into(),
            durability,
        }
    }

    /// The directory a working directory's sessions live in.
    pub fn session_dir(&self, cwd: &str) -> PathBuf {
        self.root.join(encode_cwd(cwd))
    }

    fn create_file(&self, fields: &SessionFields) -> Result<JsonlStorage> {
        check_session_id(&fields.id)?;
        let created_at = now_timestamp();
        let path = self
            .session_dir(&fields.cwd)
            .join(session_file_name(&created_at, &fields.id));
        JsonlStorage::create(&path, fields.header(&created_at), self.durability)
    }

    fn list_dir(&self, dir: &Path, out: &mut Vec<SessionMetadata>) -> Result<()> {
        let read = std::fs::read_dir(dir)
            .map_err(|e| Error::io(format!("Failed to list sessions in {}", dir.display()), e))?;
        for item in read {
            let item = item.map_err(|e| {
                Error::io(format!("Failed to list sessions in {}", dir.display()), e)
            })?;
            let path = item.path();
            let is_dir = item.file_type().is_ok_and(|t| t.is_dir());
            if is_dir || path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            match read_header(&path) {
                Ok(h) => out.push(SessionMetadata {
                    id: h.id,
                    created_at: h.timestamp,
                    cwd: Some(h.cwd),
                    path: Some(path.to_string_lossy().into_owned()),
                    parent_session: h.parent_session,
                    metadata: h.metadata,
                }),
                Err(e) if e.code() == ErrorCode::InvalidSession => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn path_of(session: &SessionMetadata) -> Result<PathBuf> {
    session
        .path
        .as_ref()
        .map(PathBuf::from)
        .ok_or_else(|| Error::SessionNotFound(session.id.clone()))
}

impl SessionRepo for JsonlRepo {
    type Storage = JsonlStorage;

    fn create(&mut self, options: &CreateOptions) -> Result<Session<JsonlStorage>> {
        // Created through the SDK contract: the storage follows its rules.
        let mut storage = self.create_file(&options.fields()?)?;
        storage.set_contract(crate::contract::Contract::Sdk);
        Ok(Session::new(storage))
    }

    fn open(&self, session: &SessionMetadata) -> Result<Session<JsonlStorage>> {
        let path = path_of(session)?;
        if !path.exists() {
            return Err(Error::SessionNotFound(path.display().to_string()));
        }
        JsonlStorage::open(&path, self.durability).map(Session::new)
    }

    fn list(&self, cwd: Option<&str>) -> Result<Vec<SessionMetadata>> {
        let mut out = Vec::new();
        match cwd {
            Some(cwd) => {
                let dir = self.session_dir(cwd);
                if dir.is_dir() {
                    self.list_dir(&dir, &mut out)?;
                }
            }
            None => {
                if !self.root.is_dir() {
                    return Ok(out);
                }
                let read = std::fs::read_dir(&self.root).map_err(|e| {
                    Error::io(
                        format!("Failed to list sessions root {}", self.root.display()),
                        e,
                    )
                })?;
                for item in read {
                    let item = item.map_err(|e| {
                        Error::io(
                            format!("Failed to list sessions root {}", self.root.display()),
                            e,
                        )
                    })?;
                    if item.file_type().is_ok_and(|t| t.is_dir()) {
                        self.list_dir(&item.path(), &mut out)?;
                    }
                }
            }
        }
        // The directory of a cwd can also hold another cwd's sessions (`/a/b`
        // and `/a-b` encode alike): the header decides.
        out.retain(|m| cwd.is_none_or(|c| m.cwd.as_deref() == Some(c)));
        // No creation order is recorded beyond the millisecond; generated ids
        // (UUIDv7) follow it, and the path keeps duplicate ids apart.
        Ok(newest_first(
            out.into_iter()
                .map(|m| {
                    let key = (m.id.clone(), m.path.clone());
                    (m, key)
                })
                .collect(),
        ))
    }

    fn delete(&mut self, session: &SessionMetadata) -> Result<()> {
        let path = path_of(session)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(
                format!("Failed to delete session {}", path.display()),
                e,
            )),
            _ => Ok(()),
        }
    }

    fn fork(
        &mut self,
        source: &SessionMetadata,
        options: &ForkOptions,
    ) -> Result<Session<JsonlStorage>> {
        let source_session = self.open(source)?;
        let storage = source_session.storage();
        let entries = entries_to_fork(storage, options.entry_id.as_deref(), options.position)?;
        let mut target = self.create_file(&options.inherit(&storage.metadata()?)?)?;
        // A fork follows its source's rules.
        target.set_contract(storage.contract()?);
        target.append_entries(&entries)?;
        Ok(Session::new(target))
    }
}
