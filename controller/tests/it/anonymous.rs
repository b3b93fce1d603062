//! Issue 36 (C13): what a stranger learns. On a cluster that checks callers (mutual TLS and
//! tokens), a connection without certificate or token is answered `hello` and `waitPrimary`
//! with what finding the primary needs — the node's id, role and term, the primary it follows
//! and its address, its version — and nothing of what `status` shows: no member addresses, no
//! indexes or lag, no uptime or disk, no alarms, no cluster id. An identity (any role) gets
//! all of it. Before, an anonymous immediate `waitPrimary` answered everything (every member's
//! address, role, version, indexes and lag).

use crate::common::*;
use xce_proto::wire::ReplyData;

#[test]
fn a_stranger_learns_where_the_primary_is_and_nothing_more() {
    let (certs, ctrl, p) = tls_cluster(3, 3, &[]);
    let s = (1..=3).find(|&i| i != p).unwrap();
    for id in [p, s] {
        let addr = &ctrl.addr(id);
        let mut admin = tls_client(addr, certs.path(), Some("admin"));
        let known = info(&admin.call(immediate_wait()));
        assert_eq!(known.members.len(), 3, "admin: {known:?}");
        assert!(known.last_log_index > 0 && known.uptime_ms > 0, "{known:?}");
        let mut stranger = tls_client(addr, certs.path(), None);
        for op in [immediate_wait(), hello()] {
            let r = stranger.call(op.clone());
            let ReplyData::CtrlInfo(i) = r.data else {
                panic!("{op:?}: {r:?}")
            };
            // Where the primary is: said.
            assert_eq!((i.id, i.term), (id, known.term), "{op:?}: {i:?}");
            assert_eq!(i.primary_id, p, "{op:?}: {i:?}");
            assert!(
                i.primary_port != 0 && !i.version.is_empty(),
                "{op:?}: {i:?}"
            );
            // Nothing more.
            assert!(i.members.is_empty(), "{op:?}: {i:?}");
            assert_eq!(
                (
                    i.last_log_index,
                    i.committed_index,
                    i.applied_index,
                    i.uptime_ms
                ),
                (0, 0, 0, 0),
                "{op:?}: {i:?}"
            );
            assert_eq!(i.cluster_id, [0; 16], "{op:?}: {i:?}");
            assert!(i.alarms.is_empty(), "{op:?}: {i:?}");
            assert_eq!(i.db_size_bytes, 0, "{op:?}: {i:?}");
        }
    }
}
