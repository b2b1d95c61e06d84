//! Who holds a writer claim, as every archive records it: the machine's
//! name and the process id, and whether such a process still runs here.

/// This machine's name, as recorded in claims.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Whether a process of this host is still running (`None` if we cannot tell).
pub fn process_alive(pid: i64) -> Option<bool> {
    if !std::path::Path::new("/proc/self").exists() {
        return None;
    }
    Some(std::path::Path::new(&format!("/proc/{pid}")).exists())
}
