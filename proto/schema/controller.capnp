# The libxce controller protocol: the single source of truth for the wire format.
#
# Each message on the wire is one Cap'n Proto message in the standard stream framing
# (segment table, then segments). A client sends one Request at a time per connection and
# waits for the Reply that echoes its `seq` (unless `noReply` is set). See
# ../shared/spec/protocol.md for the meaning of each op and status.
#
# Evolution rules: never renumber or retype a field; add new fields and union members at
# the end with the next ordinal; every op carries a struct so it can grow. Enum value 0 is the
# default a missing field reads as, so it is always the safe one (never "primary").

@0xd4a1c3e5f7b90213;

const protocolVersion :UInt32 = 1;

# ---------------------------------------------------------------------------------------
# Envelopes

struct Request {
  seq @0 :UInt64;          # echoed by the reply; never 0 on a request that wants a reply
  clientId @1 :Data;       # 16 random bytes per client context (exactly-once writes, F16)
  requestId @2 :UInt64;    # per-context counter for writes, notifies and heartbeats, stable across re-sends; 0 for reads
  noReply @3 :Bool;        # no reply is sent (nop; notify and heartbeat from older clients)

  op :union {
    hello @4 :Hello;
    join @5 :Join;
    joblist @6 :JobFilter;
    jobinfo @7 :JobRef;
    jobsubmit @8 :JobSpec;
    jobdispatch @9 :JobDispatch;
    jobctrl @10 :JobCtrl;
    queuectrl @11 :QueueCtrl;
    hostctrl @12 :HostCtrl;
    reslist @13 :Void;
    workerlist @14 :Void;
    clusterconf @15 :Void;
    resval @16 :HostRef;
    updateResvals @17 :UpdateResvals;
    updateJusage @18 :UpdateJusage;
    runtask @19 :RunTask;
    setPendReason @20 :SetPendReason;
    clearReason @21 :JobRef;
    notify @22 :Notify;
    heartbeat @23 :HostRef;
    nop @24 :Void;
    waitPrimary @25 :WaitPrimary;
    joblistPage @26 :JobListPage;
    # C17 (admin only, writes): membership changes; clusterconf lists the members.
    memberAdd @28 :MemberAdd;
    memberRemove @29 :MemberRemove;
    # C19 (any identity; answered by the serving primary): compare the members' state digests
    # now, and answer with this primary's controller info (alarms, checkedIndex) after it.
    consistencyCheck @31 :Void;
    # C20 (admin only): an online, consistent snapshot of the state for `snapshot save`,
    # fetched in chunks.
    snapshotSave @32 :SnapshotSave;
    # C14 on demand (admin only; issue 26): the primary hands leadership over to a live,
    # caught-up voter (`xce-controller leader transfer`).
    leaderTransfer @33 :LeaderTransfer;
  }

  authToken @27 :Text;     # C13: a signed token naming the caller, for callers without a
                           # client certificate (empty: none; the certificate, if any, names it)

  forwardWithinMs @30 :UInt32;  # F28/C16: 0 (default, and what older clients send): serve or
                           # refuse as the node's role says. > 0: the client could not reach
                           # the primary itself; a standby that can forwards the request to the
                           # primary (over the members' raft port), waiting at most this many ms
                           # for its answer. Older controllers ignore it (answer as before).
}

struct Reply {
  seq @0 :UInt64;          # the seq of the request this answers
  status @1 :Int32;        # 0 (or a positive count) on success; negative errno or -E_XCE_*
  redirectHost @2 :Text;   # REDIRECT / STANDBY: the primary's client host, when known
  redirectPort @3 :UInt16; # ... and port (0 = none)

  data :union {
    none @4 :Void;
    ctrlInfo @5 :ControllerInfo;
    jobs @6 :List(Job);
    job @7 :Job;
    jobId @8 :UInt64;
    hosts @9 :List(Host);
    resources @10 :List(Resource);
    resvals @11 :List(ResVal);
    clusterConf @12 :ClusterConf;
    taskId @13 :UInt64;
    sessionId @14 :UInt64;
    jobPage @15 :JobPage;
    snapshotChunk @17 :SnapshotChunk;
  }

  # F29: the membership version of the serving primary that sent this successful reply (the
  # log index of its current membership entry, plus one); 0: not stamped (a non-primary's
  # answer, a waitPrimary answer, or an older controller). A client that sees it differ from the
  # version of the member list it learned asks this primary's hello again.
  membersVersion @16 :UInt64;

  # Why, in words, for an operator: set on refusals of the admin ops (memberAdd: which check
  # failed and why; leaderTransfer; snapshotSave) and on -E_XCE_NOSPACE; empty otherwise. Shown
  # with the status, never parsed.
  detail @18 :Text;
}

# ---------------------------------------------------------------------------------------
# Op parameters

struct Hello {
  clientName @0 :Text;
  protocolVersion @1 :UInt32;
}

# Value 0 is what a missing field reads as: always the least privileged / least trusted.
enum SessionRole {
  client @0;
  worker @1;
  scheduler @2;
  apiserver @3;
}

struct Join {
  role @0 :SessionRole;
  host @1 :Text;
  ncpus @2 :UInt32;
  memMb @3 :UInt64;
  attrs @4 :List(KeyValue);
}

struct JobFilter {
  user @0 :Text;           # empty: any user
  queue @1 :Text;          # empty: any queue
  stateMask @2 :UInt32;    # bit (1 << JobState ordinal); 0: any state
  limit @3 :UInt32;        # 0: no limit
}

struct JobRef {
  jobId @0 :UInt64;
}

struct JobSpec {
  jobId @0 :UInt64;        # generated by the submitting client, never reused
  name @1 :Text;
  user @2 :Text;
  queue @3 :Text;          # empty: "normal"
  command @4 :Text;
  ncpus @5 :UInt32;
  memMb @6 :UInt64;
}

struct JobDispatch {
  jobId @0 :UInt64;
  host @1 :Text;
}

enum JobAction {
  kill @0;
  suspend @1;
  resume @2;
  requeue @3;
}

struct JobCtrl {
  jobId @0 :UInt64;
  action @1 :JobAction;
}

enum QueueAction {
  open @0;
  close @1;
  activate @2;
  inactivate @3;
}

struct QueueCtrl {
  queue @0 :Text;
  action @1 :QueueAction;
}

enum HostAction {
  open @0;
  close @1;
}

struct HostCtrl {
  host @0 :Text;
  action @1 :HostAction;
}

struct HostRef {
  host @0 :Text;
}

struct UpdateResvals {
  host @0 :Text;
  resvals @1 :List(ResVal);
}

struct UpdateJusage {
  jobId @0 :UInt64;
  usage @1 :Usage;
}

struct RunTask {
  host @0 :Text;
  command @1 :Text;
}

struct SetPendReason {
  jobId @0 :UInt64;
  reason @1 :Text;
}

enum NotifyKind {
  jobStart @0;
  jobFinish @1;
  jobFail @2;
  jobStop @3;
  jobChkpt @4;
}

struct Notify {
  kind @0 :NotifyKind;
  jobId @1 :UInt64;
  exitCode @2 :Int32;
}

struct WaitPrimary {
  timeoutMs @0 :UInt32;    # answer as soon as a primary is known, or after this long
  # A primary the client just failed to reach (its client address): a standby may still
  # believe it leads until the election timeout, so "known" means known and not this one.
  # Empty host / port 0: any primary.
  excludeHost @1 :Text;
  excludePort @2 :UInt16;
}

# One page of a listing of any size. The first request (cursor 0) pins a snapshot of the job
# table on the primary and answers its first page with the snapshot's cursor; each next
# request sends that cursor back with the last job id received. All pages of one cursor come
# from the same snapshot, so the whole listing is one linearizable read. A cursor the node
# does not hold (a new primary after a failover, or one dropped after idling) is answered
# with -ESTALE: the client starts over with cursor 0. Every page fits one frame; a single
# job too large for any frame is -E_XCE_TOOBIG.
struct JobListPage {
  filter @0 :JobFilter;    # its limit: how many more jobs are wanted (0: all)
  cursor @1 :UInt64;       # 0: start a new listing
  after @2 :UInt64;        # with a cursor: resume after this job id (job ids are never 0)
  maxBytes @3 :UInt32;     # largest frame the client accepts (0: the protocol default)
}

struct JobPage {
  jobs @0 :List(Job);      # in job id order
  cursor @1 :UInt64;       # send back for the next page; 0 when this is the last page
  more @2 :Bool;           # more jobs follow
  total @3 :UInt64;        # jobs in the pinned snapshot (all, before filtering)
}

# C17: add controller `id` (a learner until caught up, then a voter). Idempotent: the same
# id with the same addresses already a voter answers 0.
struct MemberAdd {
  id @0 :UInt32;
  clientAddr @1 :Text;     # HOST:PORT clients reach it at
  raftAddr @2 :Text;       # HOST:PORT peers reach it at
}

# C17: remove controller `id` from the membership. The primary removing itself hands over
# first and answers STANDBY with the new primary: the client retries there.
struct MemberRemove {
  id @0 :UInt32;
}

# C14 on demand (issue 26): hand leadership over to voter `to` (0: the primary's choice among
# the voters that answered it recently, the most caught up). `from`: the primary the caller saw
# (0: any); a node that is not it answers 0 at once (the transfer happened: a re-send after the
# old primary closed the connection). A target that is not a live, caught-up voter is refused
# at once (EINVAL, ENOENT, EHOSTDOWN, EAGAIN); `to` already primary answers 0; a handover
# that did not produce a new primary within 2 s is ETIMEDOUT (the old primary serves on).
struct LeaderTransfer {
  to @0 :UInt32;
  from @1 :UInt32;
}

# ---------------------------------------------------------------------------------------
# Domain model

struct KeyValue {
  key @0 :Text;
  value @1 :Text;
}

enum JobState {
  pend @0;
  run @1;
  susp @2;
  done @3;
  exit @4;
}

struct Usage {
  cpuMs @0 :UInt64;
  memKb @1 :UInt64;
}

struct Job {
  jobId @0 :UInt64;
  name @1 :Text;
  user @2 :Text;
  queue @3 :Text;
  command @4 :Text;
  ncpus @5 :UInt32;
  memMb @6 :UInt64;
  state @7 :JobState;
  pendReason @8 :Text;
  execHost @9 :Text;
  submitTime @10 :Int64;   # unix ms; 0 = not yet
  startTime @11 :Int64;
  endTime @12 :Int64;
  exitCode @13 :Int32;
  usage @14 :Usage;
}

enum HostState {
  ok @0;
  closed @1;
  unavail @2;
}

struct Host {
  name @0 :Text;
  state @1 :HostState;
  ncpus @2 :UInt32;
  memMb @3 :UInt64;
  attrs @4 :List(KeyValue);
  njobs @5 :UInt32;
  lastHeartbeat @6 :Int64; # unix ms
}

struct Queue {
  name @0 :Text;
  open @1 :Bool;           # OPEN / CLOSED: accepts submissions
  active @2 :Bool;         # ACTIVE / INACTIVE: jobs may be dispatched
  priority @3 :Int32;
}

struct Resource {
  name @0 :Text;
  type @1 :Text;           # "numeric", "string", "boolean"
  description @2 :Text;
}

struct ResVal {
  name @0 :Text;
  value @1 :Text;
}

# Value 0 is what a missing field reads as: never "primary".
enum ControllerRole {
  initializing @0;         # not yet part of an initialised cluster, or catching up
  primary @1;              # raft leader
  standby @2;              # follower
  candidate @3;            # election running
}

struct ControllerInfo {
  id @0 :UInt32;
  role @1 :ControllerRole;
  term @2 :UInt64;
  primaryId @3 :UInt32;    # 0: none known
  primaryHost @4 :Text;
  primaryPort @5 :UInt16;
  version @6 :Text;
  protocolVersion @7 :UInt32;
  waiters @8 :UInt32;      # waitPrimary answers: clients waiting on this node right now. A
                           # crowd told of a new primary at once spreads its reconnects by it.
  # Progress, filled only in an immediate waitPrimary answer (timeoutMs 0, as `status` asks):
  lastLogIndex @9 :UInt64;   # the last entry in this node's log
  committedIndex @10 :UInt64; # the last entry it knows committed
  appliedIndex @11 :UInt64;  # the last entry applied to its job table
  lastContactMs @12 :Int64;  # ms since its leader's last append arrived (a standby) or since a
                             # quorum last answered it (the primary); -1: none or unknown
  # F29: the cluster's current members (id, client host and port, role), filled only by the
  # serving primary about itself (a hello, or a waitPrimary it answers as the primary); empty
  # from anyone else, except in an immediate waitPrimary answer (timeoutMs 0, `status`): there
  # every node lists the membership it holds (C18 amended). Clients add the ones a hello names
  # to their rotation.
  members @13 :List(ControllerEntry);
  # C20: the cluster this node belongs to: 16 bytes made when the cluster was initialised (or
  # restored from a backup: a new one); empty: none yet (a new node, or data of an earlier
  # build). Members of one cluster all report the same.
  clusterId @14 :Data;
  # C19/C21: what is wrong, one short text each (a state digest mismatch, a diverged node,
  # ...); empty: nothing. A standby reports its own; the primary also those it found.
  alarms @15 :List(Text);
  # C19: the last log index at which the primary compared its members' state digests and
  # found no disagreement (0: none yet, or not the primary).
  checkedIndex @16 :UInt64;
  # C18 (amended): ms since this node's process started (0: not said, an older controller).
  # Filled in an immediate waitPrimary answer, with members (this node's own view of the
  # membership: a standby's too, for `status`; clients learn members only from a hello).
  uptimeMs @17 :UInt64;
  # C24: this node's data directory — every file it keeps there, in bytes on disk — and the
  # free space of its filesystem, and the quota past which a primary refuses new work with
  # -E_XCE_NOSPACE (0: not said; filled in an immediate waitPrimary answer, as uptimeMs).
  dbSizeBytes @18 :UInt64;
  diskFreeBytes @19 :UInt64;
  quotaBytes @20 :UInt64;
}

# C20: one chunk of an online snapshot (`xce-controller snapshot save`). The first request
# (cursor 0) makes the primary commit a checkpoint entry, write the state as of that entry to
# a file and answer its first chunk with the file's cursor; each next request sends that cursor
# back with the offset of the next byte wanted. A cursor the node does not hold (a new primary
# after a failover, or one dropped after idling) is -ESTALE: start again with cursor 0.
struct SnapshotSave {
  cursor @0 :UInt64;       # 0: start a new snapshot
  offset @1 :UInt64;       # with a cursor: the next byte wanted
  maxBytes @2 :UInt32;     # most bytes of data wanted in one chunk (0: the controller's choice)
}

struct SnapshotChunk {
  cursor @0 :UInt64;
  offset @1 :UInt64;       # where `data` starts in the file
  data @2 :Data;
  totalBytes @3 :UInt64;   # the whole file
  index @4 :UInt64;        # the log index the state is as of
  term @5 :UInt64;         # ... and that entry's term
  digest @6 :Data;         # SHA-256 of the state at `index` (C19)
  clusterId @7 :Data;      # the cluster it was saved from
  agreeing @8 :UInt32;     # members whose digest at `index` equals `digest` (the primary too)
  voters @9 :UInt32;       # voters of the membership at that time
}

struct ControllerEntry {
  id @0 :UInt32;
  host @1 :Text;
  port @2 :UInt16;
  role @3 :ControllerRole;
}

struct ClusterConf {
  clusterName @0 :Text;
  controllers @1 :List(ControllerEntry);
  primaryId @2 :UInt32;
  term @3 :UInt64;
  queues @4 :List(Queue);
}
