//! The chat's worker thread: builds the responder (loading a model takes a moment; the window
//! is up meanwhile), then answers one job at a time, reporting each event over a channel and
//! calling a [`Notify`] hook so the UI thread can pump.

use std::sync::mpsc;
use std::thread::JoinHandle;

use kostant_engine::CancelHandle;

use super::responder::{ModelSummary, ReplyEvent, ReplyRequest, ResponderFactory};
use super::Notify;
use crate::error::AppError;

/// The model as the chat sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelState {
    Loading,
    Ready(ModelSummary),
    Failed(String),
}

/// What the worker reports.
pub enum WorkerMsg {
    Ready(ModelSummary),
    LoadFailed(String),
    /// An event of the reply to job `.0`.
    Reply(u64, ReplyEvent),
}

/// The chat's worker thread and the channels to it.
pub struct ChatWorker {
    jobs: Option<mpsc::Sender<(u64, ReplyRequest)>>,
    events: mpsc::Receiver<WorkerMsg>,
    handle: Option<JoinHandle<()>>,
    cancel: CancelHandle,
}

impl ChatWorker {
    /// Starts the thread, which first builds the responder with `factory`, then answers jobs.
    /// The model state is `Loading`, or `Failed` when no thread could start.
    pub fn spawn(factory: ResponderFactory, notify: Notify) -> (ChatWorker, ModelState) {
        let (job_tx, job_rx) = mpsc::channel::<(u64, ReplyRequest)>();
        let (ev_tx, ev_rx) = mpsc::channel();
        let cancel = CancelHandle::new();
        let flag = cancel.clone();
        let worker = std::thread::Builder::new()
            .name("kostant-chat".into())
            .spawn(move || {
                let send = |m: WorkerMsg| {
                    // A closed channel means the controller is gone; nothing left to tell.
                    let _ = ev_tx.send(m);
                    notify();
                };
                let mut responder = match factory() {
                    Ok((r, summary)) => {
                        send(WorkerMsg::Ready(summary));
                        r
                    }
                    Err(e) => return send(WorkerMsg::LoadFailed(e.to_string())),
                };
                for (job, req) in job_rx {
                    responder.respond(&req, &flag, &mut |ev| send(WorkerMsg::Reply(job, ev)));
                }
            });
        let (handle, model) = match worker {
            Ok(w) => (Some(w), ModelState::Loading),
            Err(e) => (
                None,
                ModelState::Failed(format!("cannot start a thread: {e}")),
            ),
        };
        let worker = ChatWorker {
            jobs: Some(job_tx),
            events: ev_rx,
            handle,
            cancel,
        };
        (worker, model)
    }

    /// Queues job `job` with a fresh cancel flag. False when the worker has stopped.
    pub fn submit(&mut self, job: u64, req: ReplyRequest) -> bool {
        self.cancel.reset();
        self.jobs
            .as_ref()
            .is_some_and(|j| j.send((job, req)).is_ok())
    }

    /// Stops the running reply at its next token.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The next report, if one is waiting.
    pub fn try_recv(&self) -> Option<WorkerMsg> {
        self.events.try_recv().ok()
    }

    /// Blocks for the next report.
    pub fn recv(&self) -> Result<WorkerMsg, AppError> {
        self.events.recv().map_err(|_| AppError::WorkerGone("chat"))
    }

    /// Cancels any reply and joins the thread.
    pub fn shutdown(&mut self) {
        self.cancel.cancel();
        self.jobs = None;
        if let Some(w) = self.handle.take() {
            // A panicked worker has nothing left to clean up; the app is closing anyway.
            let _ = w.join();
        }
    }
}
