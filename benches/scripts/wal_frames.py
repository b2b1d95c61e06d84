#!/usr/bin/env python3
"""Which b-trees an import writes to the write-ahead log, and how often.

Usage: wal_frames.py SESSIONTREE_BINARY ARCHIVE SESSIONS_DIR [FIRST_DIR]

Imports FIRST_DIR (if given: a small home, so that the archive exists with
its dictionary) into ARCHIVE, then holds a read transaction open on it, so
that no checkpoint can copy a frame of what follows and the log cannot
start over, and imports SESSIONS_DIR. The log then holds every page every
commit of that import wrote. Reads each frame header's page number, maps
pages to b-trees with SQLite's `dbstat` table, and prints frames, commits,
and per b-tree: frames, share, distinct pages, and frames per page (how
often each page was written again). Needs room for a log as large as what
the import writes (about 1.6x the archive it makes).
"""
import collections
import os
import shutil
import sqlite3
import struct
import subprocess
import sys


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    binary, db, sessions = sys.argv[1:4]
    if len(sys.argv) == 5:
        subprocess.run([binary, "--db", db, "import", "--quiet", sys.argv[4]], check=True)
    pin = sqlite3.connect(db, isolation_level=None)
    pin.execute("BEGIN")
    pin.execute("SELECT count(*) FROM sessions").fetchall()
    subprocess.run([binary, "--db", db, "import", "--quiet", sessions], check=True)
    copy = db + ".wal-frames"
    shutil.copyfile(db + "-wal", copy)
    pin.execute("COMMIT")
    with open(copy, "rb") as f:
        data = f.read()
    os.unlink(copy)
    page_size = struct.unpack(">I", data[8:12])[0]
    frames, commits, at = [], 0, 32
    while at + 24 + page_size <= len(data):
        page, commit = struct.unpack(">II", data[at : at + 8])
        frames.append(page)
        commits += commit != 0
        at += 24 + page_size
    # Pages in no b-tree: the freelist and the auto-vacuum pointer maps.
    owner = dict(pin.execute("SELECT pageno, name FROM dbstat"))
    per = collections.Counter(owner.get(p, "(no b-tree)") for p in frames)
    distinct = collections.defaultdict(set)
    for p in frames:
        distinct[owner.get(p, "(no b-tree)")].add(p)
    total = len(frames)
    print(
        f"frames {total} ({total * page_size / 1e6:.1f} MB), commits {commits}, "
        f"{total / max(commits, 1):.1f} frames a commit, {len(set(frames))} distinct pages"
    )
    for name, n in per.most_common(25):
        d = len(distinct[name])
        print(f"{name:40s} {n:9d} {100 * n / total:5.1f}%  pages {d:8d}  per page {n / d:6.1f}")


if __name__ == "__main__":
    main()
