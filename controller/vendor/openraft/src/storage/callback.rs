//! Callbacks used by Storage API

use std::io;

use tokio::sync::oneshot;

use crate::async_runtime::AsyncOneshotSendExt;
use crate::core::notify::Notify;
use crate::raft_state::io_state::log_io_id::LogIOId;
use crate::type_config::alias::OneshotSenderOf;
use crate::LogId;
use crate::RaftTypeConfig;
use crate::StorageIOError;
use crate::Vote;

/// A oneshot callback for completion of log io operation.
pub struct LogFlushed<C>
where C: RaftTypeConfig
{
    log_io_id: LogIOId<C::NodeId>,
    to: FlushedTo<C>,
}

/// xce patch: where a flush is reported. `Oneshot`: to a caller that waits for it before doing
/// anything else (a follower's append, openraft's default). `Notify`: to `RaftCore`'s notify
/// channel, for the leader's own append, which `RaftCore` does not wait for (the leader
/// replicates while its disk flushes, and counts itself towards a quorum only when notified).
enum FlushedTo<C>
where C: RaftTypeConfig
{
    Oneshot(OneshotSenderOf<C, Result<LogIOId<C::NodeId>, io::Error>>),
    Notify {
        vote: Vote<C::NodeId>,
        tx: tokio::sync::mpsc::UnboundedSender<Notify<C>>,
    },
}

impl<C> LogFlushed<C>
where C: RaftTypeConfig
{
    pub(crate) fn new(
        log_io_id: LogIOId<C::NodeId>,
        tx: OneshotSenderOf<C, Result<LogIOId<C::NodeId>, io::Error>>,
    ) -> Self {
        Self {
            log_io_id,
            to: FlushedTo::Oneshot(tx),
        }
    }

    /// xce patch: the leader's own append, reported to `RaftCore` as
    /// [`Notify::LocalLogFlushed`].
    pub(crate) fn notify(
        log_io_id: LogIOId<C::NodeId>,
        vote: Vote<C::NodeId>,
        tx: tokio::sync::mpsc::UnboundedSender<Notify<C>>,
    ) -> Self {
        Self {
            log_io_id,
            to: FlushedTo::Notify { vote, tx },
        }
    }

    /// xce patch: whether nothing waits for this flush before going on — the leader's own
    /// append, which it replicates while the flush runs. A storage may then flush in the
    /// background (entries must be readable as soon as `append()` returns); otherwise the caller
    /// waits for this callback, and flushing inline saves a thread hand-off.
    pub fn is_pipelined(&self) -> bool {
        matches!(self.to, FlushedTo::Notify { .. })
    }

    /// Report log io completion event.
    ///
    /// It will be called when the log is successfully appended to the storage or an error occurs.
    pub fn log_io_completed(self, result: Result<(), io::Error>) {
        if let Err(e) = &result {
            tracing::error!("LogFlush error: {}, while flushing upto {}", e, self.log_io_id);
        }
        let sent = match self.to {
            FlushedTo::Oneshot(tx) => tx.send(result.map(|()| self.log_io_id)).is_ok(),
            FlushedTo::Notify { vote, tx } => tx
                .send(Notify::LocalLogFlushed {
                    vote,
                    log_id: self.log_io_id.log_id,
                    result,
                })
                .is_ok(),
        };
        if !sent {
            tracing::error!("failed to send log io completion event");
        }
    }
}

/// A oneshot callback for completion of applying logs to state machine.
pub struct LogApplied<C>
where C: RaftTypeConfig
{
    last_log_id: LogId<C::NodeId>,
    tx: oneshot::Sender<Result<(LogId<C::NodeId>, Vec<C::R>), StorageIOError<C::NodeId>>>,
}

impl<C> LogApplied<C>
where C: RaftTypeConfig
{
    #[allow(dead_code)]
    pub(crate) fn new(
        last_log_id: LogId<C::NodeId>,
        tx: oneshot::Sender<Result<(LogId<C::NodeId>, Vec<C::R>), StorageIOError<C::NodeId>>>,
    ) -> Self {
        Self { last_log_id, tx }
    }

    /// Report apply io completion event.
    ///
    /// It will be called when the log is successfully applied to the state machine or an error
    /// occurs.
    pub fn completed(self, result: Result<Vec<C::R>, StorageIOError<C::NodeId>>) {
        let res = match result {
            Ok(x) => {
                tracing::debug!("LogApplied upto {}", self.last_log_id);
                let resp = (self.last_log_id.clone(), x);
                self.tx.send(Ok(resp))
            }
            Err(e) => {
                tracing::error!("LogApplied error: {}, while applying upto {}", e, self.last_log_id);
                self.tx.send(Err(e))
            }
        };

        if let Err(_e) = res {
            tracing::error!("failed to send apply complete event, last_log_id: {}", self.last_log_id);
        }
    }
}
