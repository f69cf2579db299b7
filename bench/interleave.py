#!/usr/bin/python3
# bench/interleave.py: N sequential streams read round-robin on ONE NBD
# connection, the access pattern of several files being copied at once
# over one block device.
#
#   /usr/bin/python3 bench/interleave.py URI [STREAMS] [BLOCK] [SECONDS] [MAX-BYTES]
#
# Stream i starts at i * (export size / STREAMS), rounded down to BLOCK;
# the reader issues one synchronous BLOCK-byte read per stream in turn
# until SECONDS have passed or MAX-BYTES have been read in all (0 = no
# byte bound), or a stream reaches the start of the next one.  Prints one
# line: "BYTES SECONDS".
#
# Needs Debian's python3 with python3-libnbd (not a pyenv/venv python).

import sys
import time

import nbd


def main():
    uri = sys.argv[1]
    streams = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    block = int(sys.argv[3]) if len(sys.argv) > 3 else 16384
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
    max_bytes = int(sys.argv[5]) if len(sys.argv) > 5 else 0

    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    span = (size // streams) // block * block
    if span < block:
        sys.exit("interleave.py: export of %d bytes is too small for %d "
                 "streams of %d-byte reads" % (size, streams, block))
    pos = [i * span for i in range(streams)]
    end = [p + span for p in pos]

    done = 0
    start = time.monotonic()
    deadline = start + seconds
    running = True
    while running:
        for i in range(streams):
            if pos[i] + block > end[i]:
                running = False
                break
            h.pread(block, pos[i])
            pos[i] += block
            done += block
        if time.monotonic() >= deadline or (max_bytes and done >= max_bytes):
            running = False
    elapsed = time.monotonic() - start
    h.shutdown()
    print("%d %.6f" % (done, elapsed))


if __name__ == "__main__":
    main()
