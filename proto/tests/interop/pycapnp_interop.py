#!/usr/bin/env python3
"""Interoperability check against an independent Cap'n Proto implementation.

pycapnp wraps the C++ reference implementation. This script knows nothing of libxce but the
schema file (protocol.md: "an independent Cap'n Proto implementation ... must be able to read
and write our messages from that schema alone").

  pycapnp_interop.py SCHEMA write-requests   > stream   # framed Requests built by C++
  pycapnp_interop.py SCHEMA check-replies    < stream   # framed Replies written by libxce

The expected values are written out here independently of the Rust fixtures; the Rust side
(tests/wire_interop.rs) holds its own copy. Exit status 0: all checks passed.
"""

import sys

import capnp  # noqa: F401  (pycapnp; the C++ library underneath)

CLIENT_ID = bytes(range(16))


def write_requests(s, out):
    msgs = []

    r = s.Request.new_message(seq=11, clientId=CLIENT_ID, requestId=7, noReply=False)
    js = r.op.init("jobsubmit")
    js.jobId = 0xDEADBEEF00000001
    js.name = "train"
    js.user = "carol"
    js.queue = "gpu"
    js.command = "python train.py --epochs 3"
    js.ncpus = 16
    js.memMb = 65536
    msgs.append(r)

    r = s.Request.new_message(seq=12, clientId=CLIENT_ID, requestId=8)
    j = r.op.init("join")
    j.role = "apiserver"
    j.host = "node001"
    j.ncpus = 64
    j.memMb = 256000
    attrs = j.init("attrs", 2)
    attrs[0].key, attrs[0].value = "arch", "x86_64"
    attrs[1].key, attrs[1].value = "gpu", ""
    msgs.append(r)

    r = s.Request.new_message(seq=13, clientId=CLIENT_ID, noReply=True)
    n = r.op.init("notify")
    n.kind = "jobChkpt"
    n.jobId = 47
    n.exitCode = -1
    msgs.append(r)

    r = s.Request.new_message(seq=14, clientId=CLIENT_ID)
    h = r.op.init("hello")
    h.clientName = "pycapnp h\u00e9llo \u2713"
    h.protocolVersion = s.protocolVersion
    msgs.append(r)

    r = s.Request.new_message(seq=15, clientId=CLIENT_ID)
    jc = r.op.init("jobctrl")
    jc.jobId = 2**64 - 1
    jc.action = "requeue"
    msgs.append(r)

    r = s.Request.new_message(seq=16, clientId=CLIENT_ID)
    wp = r.op.init("waitPrimary")
    wp.timeoutMs = 30000
    wp.excludeHost = "10.1.2.3"
    wp.excludePort = 9991
    msgs.append(r)

    r = s.Request.new_message(seq=17, clientId=CLIENT_ID)
    r.op.nop = None
    msgs.append(r)

    r = s.Request.new_message(seq=19, clientId=CLIENT_ID)
    ss = r.op.init("snapshotSave")
    ss.cursor = 2**64 - 2
    ss.offset = 1 << 40
    ss.maxBytes = 4 << 20
    msgs.append(r)

    r = s.Request.new_message(seq=20, clientId=CLIENT_ID)
    r.op.consistencyCheck = None
    msgs.append(r)

    # A tiny first segment forces a multi-segment message (far pointers, a longer table).
    r = s.Request.new_message(num_first_segment_words=4)
    r.seq = 18
    r.clientId = CLIENT_ID
    r.requestId = 9
    u = r.op.init("updateResvals")
    u.host = "node005"
    rv = u.init("resvals", 300)
    for i in range(300):
        rv[i].name = "r%d" % i
        rv[i].value = "v" * (i % 17)
    msgs.append(r)

    for m in msgs:
        out.write(m.to_bytes())
    out.flush()


class Mismatch(Exception):
    pass


def check(value, want, path):
    """Field-by-field comparison of a reader against nested dicts/lists/scalars."""
    if isinstance(want, dict):
        for k, w in want.items():
            if k == "which":
                got = value.which()
                if got != w:
                    raise Mismatch("%s.which(): got %r, want %r" % (path, got, w))
                continue
            check(getattr(value, k), w, path + "." + k)
    elif isinstance(want, list):
        if len(value) != len(want):
            raise Mismatch("%s: length %d, want %d" % (path, len(value), len(want)))
        for i, w in enumerate(want):
            check(value[i], w, "%s[%d]" % (path, i))
    else:
        got = value
        if hasattr(got, "raw"):  # enums read back as _DynamicEnum
            got = str(got)
        if got != want:
            raise Mismatch("%s: got %r, want %r" % (path, got, want))


def job(i):
    return {
        "jobId": 0x100000000000 + i,
        "name": "sim-%d" % i,
        "user": "alice",
        "queue": "normal",
        "command": "/usr/bin/simulate --case %d --steps 1000" % i,
        "ncpus": 4,
        "memMb": 8192,
        "state": "exit",
        "pendReason": "h\u00e9llo: not enough slots",
        "execHost": "node017",
        "submitTime": 1700000000000 + i,
        "startTime": 1700000001000,
        "endTime": -1,
        "exitCode": -9,
        "usage": {"cpuMs": 123456, "memKb": 7654321},
    }


EMPTY_JOB = {"jobId": 0, "name": "", "state": "pend", "usage": {"cpuMs": 0, "memKb": 0}}


def expected_replies():
    """What tests/wire_interop.rs encodes, in order."""
    def env(seq, data):
        return {
            "seq": seq,
            "status": -seq,
            "redirectHost": "ctl%d.example" % seq,
            "redirectPort": 7000 + seq,
            "data": data,
            "membersVersion": 3 * seq,
        }

    return [
        env(1, {"which": "none"}),
        env(2, {"which": "ctrlInfo", "ctrlInfo": {
            "id": 2, "role": "standby", "term": 17, "primaryId": 3,
            "primaryHost": "ctl3.example", "primaryPort": 7070,
            "version": "xce-controller 0.1.0", "protocolVersion": 1, "waiters": 12,
            "clusterId": b"cluster-id-16-by",
            "alarms": ["node 3: state digest differs at index 1234", "\u00fcn\u00efcode"],
            "checkedIndex": 1230, "dbSizeBytes": 170 << 20, "diskFreeBytes": 3 << 30,
            "quotaBytes": 8 << 30}}),
        env(3, {"which": "jobs", "jobs": [job(1), job(2), EMPTY_JOB]}),
        env(4, {"which": "job", "job": job(3)}),
        env(5, {"which": "jobId", "jobId": 0xDEADBEEF00000001}),
        env(6, {"which": "hosts", "hosts": [
            {"name": "node001", "state": "unavail", "ncpus": 32, "memMb": 128000,
             "attrs": [{"key": "arch", "value": "aarch64"}, {"key": "rack", "value": "r12"}],
             "njobs": 5, "lastHeartbeat": 1700000000123},
            {"name": "node002", "state": "closed", "ncpus": 0, "attrs": []},
        ]}),
        env(7, {"which": "resources", "resources": [
            {"name": "load", "type": "numeric", "description": "1-minute load average"}]}),
        env(8, {"which": "resvals", "resvals": [
            {"name": "load", "value": "1.5"}, {"name": "freemem", "value": "2048"}]}),
        env(9, {"which": "clusterConf", "clusterConf": {
            "clusterName": "prod",
            "controllers": [
                {"id": 1, "host": "ctl1", "port": 7001, "role": "primary"},
                {"id": 2, "host": "ctl2", "port": 7002, "role": "candidate"}],
            "primaryId": 1, "term": 9,
            "queues": [
                {"name": "normal", "open": True, "active": True, "priority": 10},
                {"name": "night", "open": False, "active": True, "priority": -5}]}}),
        env(10, {"which": "taskId", "taskId": 77}),
        env(11, {"which": "sessionId", "sessionId": 88}),
        env(12, {"which": "jobPage", "jobPage": {
            "jobs": [job(1), job(2)], "cursor": 0xFEEDF00D, "more": True, "total": 1000000}}),
        env(13, {"which": "snapshotChunk", "snapshotChunk": {
            "cursor": 9, "offset": 1 << 32, "data": bytes(range(256)),
            "totalBytes": (1 << 32) + 256, "index": 123456, "term": 7,
            "digest": b"\xab" * 32, "clusterId": b"another-cluster!",
            "agreeing": 2, "voters": 3}}),
        # A big one: 2000 jobs.
        {"seq": 12, "status": 2000, "redirectHost": "", "redirectPort": 0,
         "data": {"which": "jobs", "jobs": [job(i) for i in range(2000)]}},
    ]


def check_replies(s, data):
    want = expected_replies()
    got = list(s.Reply.read_multiple_bytes(data))
    if len(got) != len(want):
        raise Mismatch("read %d replies, want %d" % (len(got), len(want)))
    for i, (g, w) in enumerate(zip(got, want)):
        check(g, w, "reply[%d]" % i)
    print("pycapnp: %d replies (%d bytes) match field by field" % (len(got), len(data)))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    schema = capnp.load(sys.argv[1])
    if sys.argv[2] == "write-requests":
        write_requests(schema, sys.stdout.buffer)
    elif sys.argv[2] == "check-replies":
        try:
            check_replies(schema, sys.stdin.buffer.read())
        except Mismatch as e:
            sys.exit("pycapnp: MISMATCH %s" % e)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
