#!/usr/bin/env python3
"""How long another writer waits while `sessiontree` migrates an archive.

Usage: migration_wait.py SESSIONTREE_BINARY OLD_ARCHIVE WORK_COPY [OTHER_SESSION_KEY]

Copies OLD_ARCHIVE (an archive at an older schema version) to WORK_COPY,
runs `SESSIONTREE_BINARY --db WORK_COPY ls` (its open migrates), and
meanwhile, every 5 ms, writes to another session the way an older build
that already had the archive open would: BEGIN IMMEDIATE, polling for the
lock every millisecond (as sessiontree's own busy handler does), an UPDATE
of that session's row, COMMIT. Prints the migration's wall time and the
writer's waits (lock taken to commit, from its first try): count, p50, p99,
max. The longest wait is about the longest time the migration held the
write lock while someone waited.
"""
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

binary, old, work = sys.argv[1:4]
other = int(sys.argv[4]) if len(sys.argv) > 4 else 2
shutil.copyfile(old, work)
for ext in ("-wal", "-shm"):
    try:
        import os
        os.remove(work + ext)
    except FileNotFoundError:
        pass

done = threading.Event()
waits = []


def writer():
    conn = sqlite3.connect(work, timeout=0, isolation_level=None)
    n = 0
    while not done.is_set():
        start = time.monotonic()
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                if done.is_set():
                    return
                time.sleep(0.001)
        n += 1
        conn.execute(
            "UPDATE sessions SET name = ? WHERE session_key = ?", (f'"w{n}"', other)
        )
        conn.execute("COMMIT")
        waits.append(time.monotonic() - start)
        time.sleep(0.005)


thread = threading.Thread(target=writer)
started = time.monotonic()
thread.start()
child = subprocess.run([binary, "--db", work, "ls"], stdout=subprocess.DEVNULL)
wall = time.monotonic() - started
done.set()
thread.join()
waits.sort()
pick = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))] * 1000
version = sqlite3.connect(work).execute("PRAGMA user_version").fetchone()[0]
print(
    f"rc {child.returncode}, version {version}: migration (ls) wall {wall:.2f} s; "
    f"other writer: {len(waits)} writes, wait p50 {pick(0.5):.1f} ms, "
    f"p99 {pick(0.99):.1f} ms, max {waits[-1] * 1000:.1f} ms"
)
