#!/usr/bin/python3
"""A FUSE filesystem that shows the regular files of one backing directory and fails their I/O on command.

Used by crates/test-support/src/faulty.rs: a loop device attached to the disk image *through* this mount turns every error
returned here into a block-level I/O error that ext4 and xfs see, as they would from a failing disk.

    faultyfs.py --backing DIR --mountpoint DIR --control SOCKET

Runs in the foreground until the mount point is unmounted (`fusermount -u`, `umount -l`) or it gets SIGTERM/SIGINT.
The control socket takes one command per connection, a line, and answers one line ("ok ..." or "error ..."); a
command is in force for every request the kernel sends after the answer:

    ok | fail-reads | fail-writes | fail-all | gone | flap N    [START-END]    switch mode (END exclusive, bytes)
    stats                                                                      counters since the last switch

`flap N` fails every Nth read or write (a flapping disk); `gone` fails every request, lookups included, with
ENXIO (a disk that disappeared). A byte range limits failures to reads and writes that overlap it (flushes
then succeed); `gone` ignores it.
Needs Debian's python3-fusepy, which installs the module as `fusepy` (`fuse` is python3-fuse's).
"""

import argparse
import errno
import os
import socket
import stat
import threading

from fusepy import FUSE, FuseOSError, Operations

MODES = ("ok", "fail-reads", "fail-writes", "fail-all", "gone", "flap")


class Faults:
    """The mode in force and what it did; shared by the FUSE threads and the control thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.switch("ok", 0, None)

    def switch(self, mode, every, span):
        with self.lock:
            self.mode, self.every, self.span = mode, every, span
            self.reads = self.writes = self.failed = self.seen = 0

    def check(self, kind, offset=0, size=0):
        """Raises the error the current mode gives a request of `kind` ("read", "write", "sync", "meta")."""
        with self.lock:
            if kind == "read":
                self.reads += 1
            elif kind == "write":
                self.writes += 1
            if self.mode == "gone":
                self.failed += 1
                raise FuseOSError(errno.ENXIO)
            if self.mode == "ok" or kind == "meta":
                return
            if self.span is not None:
                # A flush names no bytes: a disk with a bad region still flushes the rest.
                if kind == "sync":
                    return
                start, end = self.span
                if offset >= end or offset + size <= start:
                    return
            if self.mode == "flap":
                if kind == "sync":
                    return
                self.seen += 1
                fail = self.seen % self.every == 0
            else:
                # A disk that cannot write cannot flush its cache either: sync fails with writes.
                fail = (self.mode == "fail-all"
                        or (self.mode == "fail-reads" and kind == "read")
                        or (self.mode == "fail-writes" and kind in ("write", "sync")))
            if fail:
                self.failed += 1
                raise FuseOSError(errno.EIO)

    def stats(self):
        with self.lock:
            return "mode=%s reads=%d writes=%d failed=%d" % (self.mode, self.reads, self.writes, self.failed)


def parse(line):
    """(mode, every, span) from a control line, or ValueError saying what is wrong."""
    words = line.split()
    if not words or words[0] not in MODES:
        raise ValueError("unknown mode %r, expected one of %s" % (line, ", ".join(MODES)))
    mode, rest = words[0], words[1:]
    every = 0
    if mode == "flap":
        if not rest or not rest[0].isdigit() or int(rest[0]) < 1:
            raise ValueError("flap needs N >= 1")
        every, rest = int(rest[0]), rest[1:]
    span = None
    if rest:
        start, _, end = rest[0].partition("-")
        span = (int(start), int(end))
        if span[0] >= span[1] or len(rest) > 1:
            raise ValueError("expected one range START-END with START < END")
    return mode, every, span


def serve_control(path, faults):
    """Answers control commands on a UNIX socket, one per connection, until the process exits."""
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def loop():
        while True:
            conn, _ = server.accept()
            with conn:
                line = conn.makefile("r").readline().strip()
                try:
                    if line == "stats":
                        reply = "ok " + faults.stats()
                    else:
                        faults.switch(*parse(line))
                        reply = "ok " + line
                except ValueError as e:
                    reply = "error %s" % e
                conn.sendall((reply + "\n").encode())

    # A daemon thread: it must not keep the process alive once the mount is gone.
    threading.Thread(target=loop, name="control", daemon=True).start()


class FaultyFs(Operations):
    """The backing directory's regular files, flat, read and written with pread/pwrite on one fd per open."""

    use_ns = True

    def __init__(self, backing, faults):
        self.backing = backing
        self.faults = faults

    def _real(self, path):
        name = path.lstrip("/")
        if "/" in name:
            raise FuseOSError(errno.ENOENT)
        return os.path.join(self.backing, name)

    def getattr(self, path, fh=None):
        self.faults.check("meta")
        st = os.lstat(self.backing if path == "/" else self._real(path))
        if path != "/" and not stat.S_ISREG(st.st_mode):
            raise FuseOSError(errno.ENOENT)
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
                "st_atime_ns", "st_mtime_ns", "st_ctime_ns")
        attrs = {k: getattr(st, k) for k in keys}
        for k in ("st_atime", "st_mtime", "st_ctime"):
            attrs[k] = attrs.pop(k + "_ns")
        return attrs

    def readdir(self, path, fh):
        self.faults.check("meta")
        names = [n for n in os.listdir(self.backing)
                 if stat.S_ISREG(os.lstat(os.path.join(self.backing, n)).st_mode)]
        return [".", ".."] + names

    def open(self, path, fi):
        self.faults.check("meta")
        fi.fh = os.open(self._real(path), fi.flags & ~os.O_CREAT)
        # NB: direct_io bypasses the page cache FUSE would otherwise keep for this file, so every read the loop
        # device makes reaches us (and can fail) instead of being served from pages read while the mode was ok.
        fi.direct_io = 1
        return 0

    def read(self, path, size, offset, fi):
        self.faults.check("read", offset, size)
        return os.pread(fi.fh, size, offset)

    def write(self, path, data, offset, fi):
        self.faults.check("write", offset, len(data))
        return os.pwrite(fi.fh, data, offset)

    def fsync(self, path, datasync, fi):
        self.faults.check("sync")
        (os.fdatasync if datasync else os.fsync)(fi.fh)
        return 0

    def flush(self, path, fi):
        return 0

    def release(self, path, fi):
        os.close(fi.fh)
        return 0

    def truncate(self, path, length, fh=None):
        self.faults.check("write", length, 0)
        os.truncate(self._real(path), length)
        return 0

    def statfs(self, path):
        self.faults.check("meta")
        st = os.statvfs(self.backing)
        return {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                            "f_files", "f_ffree", "f_namemax")}


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--backing", required=True, help="directory whose regular files are shown")
    args.add_argument("--mountpoint", required=True)
    args.add_argument("--control", required=True, help="UNIX socket path for mode switches")
    opts = args.parse_args()
    faults = Faults()
    serve_control(opts.control, faults)
    # big_writes: libfuse 2 otherwise splits writes into 4 KiB requests. Returns once the mount point is
    # unmounted or on SIGTERM/SIGINT (libfuse's handlers then unmount it lazily).
    FUSE(FaultyFs(os.path.abspath(opts.backing), faults), opts.mountpoint, raw_fi=True, foreground=True,
         big_writes=True, max_read=131072, fsname="faultyfs", subtype="faultyfs")
    os.unlink(opts.control)


if __name__ == "__main__":
    main()
