//! Round trips to the server, counted: a proxy between the client and the
//! test server (unix sockets) counts the client's `Sync` and `Query`
//! messages — each ends one exchange the client waits for, so their number
//! is the number of round trips, whatever the time they take.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A counting proxy in front of the test server; lives as long as its directory.
pub struct Proxy {
    _dir: tempfile::TempDir,
    count: Arc<AtomicU64>,
    /// The server's URL with its host replaced by the proxy's socket directory.
    pub url: String,
}

impl Proxy {
    /// A proxy in front of the server at `url` (`…?host=/socket/dir…`, port 5432).
    pub fn new(url: &str) -> Proxy {
        let (head, query) = url.split_once('?').expect("a URL with ?host=");
        let host = query
            .split('&')
            .find_map(|p| p.strip_prefix("host="))
            .expect("the test server listens on a unix socket (host=DIR)");
        let server = Path::new(host).join(".s.PGSQL.5432");
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = UnixListener::bind(dir.path().join(".s.PGSQL.5432")).expect("bind");
        let count = Arc::new(AtomicU64::new(0));
        let counted = count.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(upstream) = UnixStream::connect(&server) else {
                    return;
                };
                let counted = counted.clone();
                std::thread::spawn(move || relay(client, upstream, &counted));
            }
        });
        let rest: Vec<&str> = query
            .split('&')
            .filter(|p| !p.starts_with("host="))
            .collect();
        let mut url = format!("{head}?host={}", dir.path().display());
        for p in rest {
            url.push('&');
            url.push_str(p);
        }
        Proxy {
            _dir: dir,
            count,
            url,
        }
    }

    /// Round trips since the last call.
    pub fn take(&self) -> u64 {
        self.count.swap(0, Ordering::SeqCst)
    }
}

/// Copies the server's bytes back as they come; parses the client's
/// messages on their way up and counts the `S` (Sync) and `Q` (Query) ones.
fn relay(mut client: UnixStream, mut upstream: UnixStream, count: &AtomicU64) {
    let (Ok(mut down_from), Ok(mut down_to)) = (upstream.try_clone(), client.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut down_from, &mut down_to);
        let _ = down_to.shutdown(std::net::Shutdown::Both);
    });
    // The startup phase: untyped messages (an SSL or GSS request first, maybe).
    loop {
        let mut len = [0u8; 4];
        if client.read_exact(&mut len).is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        let mut body = vec![0u8; n.saturating_sub(4)];
        if client.read_exact(&mut body).is_err() || upstream.write_all(&len).is_err() {
            return;
        }
        if upstream.write_all(&body).is_err() {
            return;
        }
        let code = body
            .get(..4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        // 80877103: SSLRequest, 80877104: GSSENCRequest; anything else is the startup.
        if !matches!(code, Some(80_877_103 | 80_877_104)) {
            break;
        }
    }
    loop {
        let mut head = [0u8; 5];
        if client.read_exact(&mut head).is_err() {
            break;
        }
        let n = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; n.saturating_sub(4)];
        if client.read_exact(&mut body).is_err() {
            break;
        }
        if matches!(head[0], b'S' | b'Q') {
            count.fetch_add(1, Ordering::SeqCst);
        }
        if upstream.write_all(&head).is_err() || upstream.write_all(&body).is_err() {
            break;
        }
    }
    let _ = upstream.shutdown(std::net::Shutdown::Both);
}
