//! The UI tests' wait (`ui_support::run_until`) on the Slint testing backend: a wait quits the
//! event loop once, so the quit it queued can never end the next wait. No model is loaded.

mod ui_support;

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use ui_support::*;

#[test]
fn a_wait_met_behind_a_slow_event_leaves_no_quit_for_the_next_wait() {
    init_backend();
    // The condition holds on its second look, and queues then an event that outlasts the
    // wait's 5 ms timer many times over. The loop runs that event before it reaches the quit
    // the wait asked for, so the wait's timer comes due once more before the loop ends: a
    // wait that quit again then would leave a quit behind in the queue.
    let looks = Rc::new(Cell::new(0));
    let l = looks.clone();
    run_until("the condition's second look", move || {
        l.set(l.get() + 1);
        if l.get() == 2 {
            slint::invoke_from_event_loop(|| std::thread::sleep(Duration::from_millis(60)))
                .expect("the testing backend takes events");
        }
        l.get() >= 2
    });
    assert!(looks.get() >= 2);

    // The next wait must run until its own condition holds.
    let start = Instant::now();
    run_until("30 ms to pass", move || {
        start.elapsed() >= Duration::from_millis(30)
    });
    assert!(start.elapsed() >= Duration::from_millis(30));
}
