//! The work queue of the control loop, after controller-runtime's: keys
//! (workloads) wait in arrival order, a key is never queued twice, and a key
//! that is being worked on is never handed out again until it is done.
//!
//! - **Coalescing.** Adding a key that is already waiting does nothing: ten
//!   triggers make one reconcile, which reads the newest stored state.
//! - **One at a time per key.** Adding a key while a worker holds it marks it
//!   dirty; [`WorkQueue::done`] puts it back, so the change is seen by a
//!   second pass, never by a second worker beside the first.
//! - **Later.** [`WorkQueue::add_after`] adds a key once a delay has passed
//!   (back-off after a failure, a crash-looping replica's next restart); the
//!   earliest pending deadline per key wins.
//!
//! The queue's lock is a `parking_lot` mutex held only to move keys between
//! its sets; nothing awaits or calls out while holding it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug)]
struct Inner<K> {
    /// The keys waiting, each with when it was queued.
    waiting: VecDeque<(K, Instant)>,
    queued: HashSet<K>,
    active: HashSet<K>,
    /// Keys added while active, each with when it was first added.
    dirty: HashMap<K, Instant>,
    delayed: HashMap<K, Instant>,
    closed: bool,
}

/// A coalescing work queue of keys.
#[derive(Debug)]
pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    ready: Notify,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            inner: Mutex::new(Inner {
                waiting: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashMap::new(),
                delayed: HashMap::new(),
                closed: false,
            }),
            ready: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    /// Queues `key`, unless it already waits. A key being worked on is
    /// marked dirty and queued again when its worker is done.
    pub fn add(&self, key: K) {
        let mut inner = self.inner.lock();
        if inner.closed || inner.queued.contains(&key) {
            return;
        }
        if inner.active.contains(&key) {
            inner.dirty.entry(key).or_insert_with(Instant::now);
            return;
        }
        inner.queued.insert(key.clone());
        inner.waiting.push_back((key, Instant::now()));
        drop(inner);
        self.ready.notify_one();
    }

    /// Queues `key` once `delay` has passed. Of several delayed adds of one
    /// key, the earliest stands and the others are dropped.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let due = Instant::now() + delay;
        {
            let mut inner = self.inner.lock();
            if inner.closed {
                return;
            }
            match inner.delayed.get(&key) {
                Some(pending) if *pending <= due => return,
                _ => {
                    inner.delayed.insert(key.clone(), due);
                }
            }
        }
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            let still_due = {
                let mut inner = queue.inner.lock();
                if inner.delayed.get(&key) == Some(&due) {
                    inner.delayed.remove(&key);
                    true
                } else {
                    false
                }
            };
            if still_due {
                queue.add(key);
            }
        });
    }

    /// Waits for the next key and marks it active. `None` once the queue is
    /// closed.
    pub async fn next(&self) -> Option<K> {
        self.next_timed().await.map(|(key, _)| key)
    }

    /// [`WorkQueue::next`], with how long the key waited since it was
    /// added (a key added while active: since that add, so the wait for
    /// its worker counts too).
    pub async fn next_timed(&self) -> Option<(K, Duration)> {
        loop {
            let notified = self.ready.notified();
            {
                let mut inner = self.inner.lock();
                if inner.closed {
                    return None;
                }
                if let Some((key, queued_at)) = inner.waiting.pop_front() {
                    inner.queued.remove(&key);
                    inner.active.insert(key.clone());
                    let more = !inner.waiting.is_empty();
                    drop(inner);
                    if more {
                        // Wake another worker for the rest.
                        self.ready.notify_one();
                    }
                    return Some((key, queued_at.elapsed()));
                }
            }
            notified.await;
        }
    }

    /// Marks `key` done; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut inner = self.inner.lock();
        inner.active.remove(key);
        let Some(added_at) = inner.dirty.remove(key) else {
            return;
        };
        if !inner.closed && inner.queued.insert(key.clone()) {
            inner.waiting.push_back((key.clone(), added_at));
            drop(inner);
            self.ready.notify_one();
        }
    }

    /// Whether `key` waits, runs or is due again.
    pub fn is_pending(&self, key: &K) -> bool {
        let inner = self.inner.lock();
        inner.queued.contains(key) || inner.active.contains(key) || inner.delayed.contains_key(key)
    }

    /// How many keys wait (not counting active or delayed ones).
    pub fn len(&self) -> usize {
        self.inner.lock().waiting.len()
    }

    /// How many keys are being worked on.
    pub fn active(&self) -> usize {
        self.inner.lock().active.len()
    }

    /// Whether no key waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`WorkQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Stops handing out keys; every waiting [`WorkQueue::next`] returns
    /// `None`.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.ready.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ten_adds_of_one_key_make_one_item() {
        let queue = WorkQueue::<&str>::default();
        for _ in 0..10 {
            queue.add("a");
        }
        queue.add("b");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.next().await, Some("a"));
        assert_eq!(queue.next().await, Some("b"));
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn a_key_being_worked_on_is_not_handed_out_again_until_done() {
        let queue = WorkQueue::<&str>::default();
        queue.add("a");
        assert_eq!(queue.next().await, Some("a"));
        // Triggers while "a" is active: no second worker gets it...
        queue.add("a");
        queue.add("a");
        assert!(queue.is_empty());
        // ...but one more pass follows once the first is done.
        queue.done(&"a");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.next().await, Some("a"));
        queue.done(&"a");
        assert!(queue.is_empty());
        assert!(!queue.is_pending(&"a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_s_wait_counts_from_its_add_even_while_its_worker_ran() {
        let queue = WorkQueue::<&str>::default();
        queue.add("a");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            queue.next_timed().await,
            Some(("a", Duration::from_secs(2)))
        );
        // Added while its worker runs: the wait counts from this add.
        queue.add("a");
        tokio::time::advance(Duration::from_secs(3)).await;
        queue.done(&"a");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            queue.next_timed().await,
            Some(("a", Duration::from_secs(4)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_arrive_after_their_delay_and_the_earliest_wins() {
        let queue = Arc::new(WorkQueue::<&str>::default());
        queue.add_after("a", Duration::from_secs(10));
        queue.add_after("a", Duration::from_secs(2));
        queue.add_after("a", Duration::from_secs(5));
        assert!(queue.is_pending(&"a"));
        tokio::time::sleep(Duration::from_millis(1900)).await;
        assert!(queue.is_empty());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.next().await, Some("a"));
        queue.done(&"a");
        // The later deadlines were dropped.
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn closing_releases_waiting_workers() {
        let queue = Arc::new(WorkQueue::<&str>::default());
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.next().await }
        });
        tokio::task::yield_now().await;
        queue.close();
        assert_eq!(worker.await.unwrap(), None);
    }
}
