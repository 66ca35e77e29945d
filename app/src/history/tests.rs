//! The history against a real SQLite file in a temporary directory and the real ring: no
//! plaintext on disk, deletes that leave no ciphertext, tamper/moved-row/wrong-key/damaged-file
//! faults, an export round trip, and a SIGKILL crash-safety loop in a child process.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use kostant_platform::keystore::FileKeyStore;
use rusqlite::Connection;

use super::crypto::Slot;
use super::store::Store;
use super::{HistoryError, Role, DB_FILE};

const SECRET: &str = "PLANTED-SECRET-7f3a9";

/// A data directory and a separate key directory, removed on drop.
struct Dirs {
    root: PathBuf,
}

impl Dirs {
    fn new(name: &str) -> Dirs {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root = std::env::temp_dir().join(format!(
            "kostant-history-{name}-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&root).unwrap();
        Dirs { root }
    }
    fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    fn db(&self) -> PathBuf {
        self.data().join(DB_FILE)
    }
    fn keys(&self) -> FileKeyStore {
        FileKeyStore::new(self.root.join("keys"))
    }
    fn open(&self) -> Store {
        Store::open(&self.db(), self.keys()).unwrap()
    }
    fn raw(&self) -> Connection {
        Connection::open(self.db()).unwrap()
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Files under `dir` (db, -journal, -wal, -shm, anything) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = fs::read(&p).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(p);
                }
            }
        }
    }
    found
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Every sealed value in the database, keyed by where it is.
fn sealed_values(dirs: &Dirs) -> Vec<Vec<u8>> {
    let c = dirs.raw();
    let mut out = Vec::new();
    for sql in [
        "SELECT body FROM messages",
        "SELECT title FROM conversations",
    ] {
        let mut s = c.prepare(sql).unwrap();
        let rows = s.query_map([], |r| r.get::<_, Vec<u8>>(0)).unwrap();
        out.extend(rows.map(Result::unwrap));
    }
    out
}

#[test]
fn planted_secret_never_reaches_the_data_directory() {
    let dirs = Dirs::new("secret");
    let mut store = dirs.open();
    let a = store
        .append_exchange(None, &format!("remember {SECRET} for me"), "ok")
        .unwrap();
    store
        .append_exchange(Some(a), "and again", &format!("you said {SECRET}"))
        .unwrap();
    let b = store
        .append_exchange(None, &format!("{SECRET} is my title"), "noted")
        .unwrap();
    let c = store.append_exchange(None, "nothing here", "fine").unwrap();
    assert_eq!(store.list().unwrap().len(), 3);
    // Control: the scan does see plain bytes that are stored (the format marker in meta), and
    // the sealed values really are in the file.
    assert_eq!(
        files_containing(&dirs.data(), b"kostant-history"),
        vec![dirs.db()]
    );
    for v in sealed_values(&dirs) {
        assert_eq!(files_containing(&dirs.data(), &v).len(), 1);
    }
    assert!(files_containing(&dirs.data(), SECRET.as_bytes()).is_empty());

    let found = store.search(&SECRET.to_lowercase()).unwrap();
    assert_eq!(found.hits.len(), 3, "{:?}", found.hits);
    assert!(found.unreadable.is_empty());
    assert!(found
        .hits
        .iter()
        .all(|m| m.text.as_ref().unwrap().contains(SECRET)));
    assert!(files_containing(&dirs.data(), SECRET.as_bytes()).is_empty());

    store.delete(b).unwrap();
    assert!(matches!(
        store.delete(b),
        Err(HistoryError::NoConversation(_))
    ));
    let ids: Vec<i64> = store.list().unwrap().iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&a) && ids.contains(&c));
    assert!(files_containing(&dirs.data(), SECRET.as_bytes()).is_empty());
    drop(store);
    // The key never sits in the data directory, and nothing but the database is left there.
    assert_eq!(file_names(&dirs.data()), vec![DB_FILE.to_string()]);
    let key = fs::read(dirs.keys().key_path()).unwrap();
    assert!(files_containing(&dirs.data(), &key).is_empty());
}

#[test]
fn deletes_leave_no_ciphertext_and_delete_all_vacuums() {
    let dirs = Dirs::new("delete");
    let mut store = dirs.open();
    let keep = store
        .append_exchange(None, &format!("keep {SECRET}"), "kept reply")
        .unwrap();
    let before_drop = sealed_values(&dirs);
    let gone = store
        .append_exchange(None, &format!("drop {SECRET}"), "dropped reply")
        .unwrap();
    let dropped: Vec<Vec<u8>> = sealed_values(&dirs)
        .into_iter()
        .filter(|v| !before_drop.contains(v))
        .collect();
    assert_eq!(dropped.len(), 3, "a title and two messages");
    for v in &dropped {
        assert!(!files_containing(&dirs.data(), v).is_empty());
    }
    store.delete(gone).unwrap();
    // Cascade: the messages went with the conversation, and secure_delete zeroed their bytes.
    let n: i64 = dirs
        .raw()
        .query_row(
            "SELECT count(*) FROM messages WHERE conversation_id = ?1",
            [gone],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0);
    for v in &dropped {
        assert!(files_containing(&dirs.data(), v).is_empty());
    }
    assert_eq!(store.messages(keep).unwrap().len(), 2);

    let remaining = sealed_values(&dirs);
    let wrapped_key: Vec<u8> = dirs
        .raw()
        .query_row("SELECT value FROM meta WHERE key = 'data_key'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(store.delete_all().unwrap(), 1);
    assert!(store.list().unwrap().is_empty());
    for v in remaining.iter().chain([&wrapped_key]) {
        assert!(
            files_containing(&dirs.data(), v).is_empty(),
            "ciphertext survived delete-all"
        );
    }
    let freelist: i64 = dirs
        .raw()
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .unwrap();
    assert_eq!(freelist, 0, "VACUUM left free pages");
    // The store goes on working under its new data key, and ids are not reused.
    let next = store.append_exchange(None, "after", "reset").unwrap();
    assert!(next > gone);
    drop(store);
    let store = dirs.open();
    let msgs = store.messages(next).unwrap();
    assert_eq!(msgs[0].text.as_deref().unwrap(), "after");
}

#[test]
fn a_tampered_byte_fails_only_its_message() {
    let dirs = Dirs::new("tamper");
    let mut store = dirs.open();
    let a = store.append_exchange(None, "first", "one").unwrap();
    let b = store.append_exchange(None, "second", "two").unwrap();
    drop(store);
    let raw = dirs.raw();
    let (victim, mut body): (i64, Vec<u8>) = raw
        .query_row(
            "SELECT id, body FROM messages WHERE conversation_id = ?1 AND role = 'assistant'",
            [a],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mid = body.len() / 2;
    body[mid] ^= 0x01;
    raw.execute(
        "UPDATE messages SET body = ?1 WHERE id = ?2",
        rusqlite::params![body, victim],
    )
    .unwrap();
    drop(raw);

    let store = dirs.open();
    let msgs = store.messages(a).unwrap();
    assert_eq!(msgs[0].text.as_deref().unwrap(), "first");
    let err = msgs[1].text.as_ref().unwrap_err();
    assert!(matches!(err, HistoryError::Integrity(_)));
    assert!(err
        .to_string()
        .contains(&format!("message {victim} of conversation {a}: integrity")));
    let other = store.messages(b).unwrap();
    assert!(other.iter().all(|m| m.text.is_ok()));
    assert!(store.list().unwrap().iter().all(|c| c.title.is_ok()));
    let found = store.search("o").unwrap();
    assert_eq!(found.unreadable.len(), 1);
    assert!(
        store.everything().is_err(),
        "export must not skip a bad row"
    );
}

#[test]
fn the_conversation_written_last_lists_first_even_within_a_millisecond_or_after_a_clock_step_back()
{
    let dirs = Dirs::new("order");
    let mut store = dirs.open();
    // Back-to-back saves, many inside the same millisecond: each continued one goes to the top.
    let ids: Vec<i64> = (0..6)
        .map(|i| store.append_exchange(None, &format!("q{i}"), "a").unwrap())
        .collect();
    for &id in ids.iter().chain(ids.iter().rev()) {
        store.append_exchange(Some(id), "more", "yes").unwrap();
        assert_eq!(store.list().unwrap()[0].id, id);
    }
    store.replace_last_exchange(ids[2], "again", "ok").unwrap();
    assert_eq!(store.list().unwrap()[0].id, ids[2]);
    drop(store);

    // A clock set back an hour after ids[5] was written: continuing ids[1] still ranks it first.
    let raw = dirs.raw();
    raw.execute(
        "UPDATE conversations SET updated_at = updated_at + 3600000 WHERE id = ?1",
        [ids[5]],
    )
    .unwrap();
    drop(raw);
    let mut store = dirs.open();
    assert_eq!(store.list().unwrap()[0].id, ids[5]);
    store.append_exchange(Some(ids[1]), "later", "ok").unwrap();
    let order: Vec<i64> = store.list().unwrap().iter().map(|c| c.id).collect();
    assert_eq!(order[..2], [ids[1], ids[5]]);
}

#[test]
fn a_row_moved_to_another_conversation_or_role_does_not_open() {
    let dirs = Dirs::new("moved");
    let mut store = dirs.open();
    let a = store.append_exchange(None, "from a", "reply a").unwrap();
    let b = store.append_exchange(None, "from b", "reply b").unwrap();
    drop(store);
    let raw = dirs.raw();
    let moved: i64 = raw
        .query_row(
            "SELECT id FROM messages WHERE conversation_id = ?1 AND role = 'user'",
            [a],
            |r| r.get(0),
        )
        .unwrap();
    raw.execute(
        "UPDATE messages SET conversation_id = ?1 WHERE id = ?2",
        [b, moved],
    )
    .unwrap();
    // Relabel b's reply as the user's, and give a's title to b.
    raw.execute(
        "UPDATE messages SET role = 'user' WHERE conversation_id = ?1 AND role = 'assistant'",
        [b],
    )
    .unwrap();
    raw.execute(
        "UPDATE conversations SET title = (SELECT title FROM conversations WHERE id = ?1) WHERE id = ?2",
        [a, b],
    )
    .unwrap();
    drop(raw);
    let store = dirs.open();
    let in_b = store.messages(b).unwrap();
    assert_eq!(in_b.len(), 3);
    for m in &in_b {
        let from_b_user = m.text.as_deref().ok() == Some("from b");
        assert!(from_b_user || matches!(m.text, Err(HistoryError::Integrity(_))));
    }
    assert_eq!(in_b.iter().filter(|m| m.text.is_err()).count(), 2);
    let titles: BTreeMap<i64, bool> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|c| (c.id, c.title.is_ok()))
        .collect();
    assert_eq!(titles, BTreeMap::from([(a, true), (b, false)]));
    assert!(store.messages(a).unwrap()[0].text.is_ok());
}

#[test]
fn the_wrong_key_is_a_clear_error() {
    let dirs = Dirs::new("wrongkey");
    let mut store = dirs.open();
    store.append_exchange(None, "hi", "there").unwrap();
    drop(store);
    // An empty key directory: the key is missing, and none is created in its place.
    let other = FileKeyStore::new(dirs.root.join("other-keys"));
    let err = Store::open(&dirs.db(), other.clone())
        .err()
        .expect("opened without its key");
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert!(!other.key_path().exists());
    // A different key: the data key does not unwrap.
    Store::open(&dirs.root.join("elsewhere.sqlite3"), other.clone()).unwrap();
    let err = Store::open(&dirs.db(), other)
        .err()
        .expect("opened with a foreign key");
    assert!(matches!(err, HistoryError::WrongKey { .. }), "{err}");
    assert!(err.to_string().contains("wrong key directory"), "{err}");
    // The right key still works.
    assert_eq!(dirs.open().list().unwrap().len(), 1);
}

#[test]
fn truncated_garbage_and_foreign_files_are_reported() {
    let dirs = Dirs::new("damaged");
    let mut store = dirs.open();
    for i in 0..40 {
        store
            .append_exchange(None, &format!("message {i} {}", "x".repeat(500)), "r")
            .unwrap();
    }
    drop(store);
    let full = fs::read(dirs.db()).unwrap();
    assert!(full.len() > 8 * 4096);
    let check = |bytes: &[u8], what: &str| {
        fs::write(dirs.db(), bytes).unwrap();
        match Store::open(&dirs.db(), dirs.keys()) {
            Err(e @ HistoryError::NotHistory { .. }) => {
                assert!(e.to_string().contains("not a readable"), "{what}: {e}")
            }
            Err(e) => panic!("{what}: wrong error {e}"),
            Ok(s) => {
                // Opening may succeed only if every read then fails cleanly.
                panic!(
                    "{what}: opened a damaged file ({:?})",
                    s.list().map(|l| l.len())
                )
            }
        }
    };
    check(&full[..full.len() / 2], "truncated to half");
    check(&full[..100], "truncated inside the header");
    check(&vec![0x5a; 8192], "garbage");
    // A valid SQLite file that is not ours.
    fs::remove_file(dirs.db()).unwrap();
    Connection::open(dirs.db())
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let err = Store::open(&dirs.db(), dirs.keys()).err().unwrap();
    assert!(matches!(err, HistoryError::NotHistory { .. }), "{err}");
    // The original bytes still open: nothing above was destructive.
    fs::write(dirs.db(), &full).unwrap();
    assert_eq!(dirs.open().list().unwrap().len(), 40);
}

#[test]
fn export_round_trips_under_the_passphrase_only() {
    let dirs = Dirs::new("export");
    let mut store = dirs.open();
    let a = store
        .append_exchange(None, &format!("export {SECRET}"), "sure")
        .unwrap();
    let out = dirs.root.join("export.json");
    assert!(super::export::export(&store, "short", &out).is_err());
    assert_eq!(
        super::export::export(&store, "correct horse battery", &out).unwrap(),
        1
    );
    let bytes = fs::read(&out).unwrap();
    assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));
    let header: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(header["kdf"]["iterations"], 600_000);
    let doc = super::export::open(&bytes, "correct horse battery").unwrap();
    assert_eq!(doc["conversations"][0]["id"], a);
    assert_eq!(
        doc["conversations"][0]["messages"][0]["text"],
        format!("export {SECRET}")
    );
    assert!(super::export::open(&bytes, "wrong horse battery").is_err());
    // Lowering the iteration count in the header is caught (it is associated data).
    let weakened = String::from_utf8(bytes.clone())
        .unwrap()
        .replace("\"iterations\":600000", "\"iterations\":600001");
    assert!(super::export::open(weakened.as_bytes(), "correct horse battery").is_err());
    // An existing file is never overwritten.
    assert!(super::export::export(&store, "correct horse battery", &out).is_err());
}

const CRASH_DIR_ENV: &str = "KOSTANT_TEST_CRASH_DIR";

/// The writer behind `sigkill_never_loses_an_acknowledged_message`: saves chat exchanges and
/// prints `ACK <conversation> <user text>` after each commit. Run by the parent (its environment
/// variable names the directory) it writes up to 2000 exchanges until killed; run on its own, as
/// every test is, it writes a few into its own directory and checks each acknowledged one is
/// there when the file is opened again.
#[test]
fn crash_child() {
    use std::io::Write;
    let parent_dir = std::env::var_os(CRASH_DIR_ENV);
    let (dirs, rounds) = match &parent_dir {
        Some(root) => (
            Dirs {
                root: PathBuf::from(root),
            },
            2000usize,
        ),
        None => (Dirs::new("crash-writer"), 12),
    };
    let mut store = dirs.open();
    let tag = std::process::id();
    let mut conv = None;
    let mut acked = Vec::new();
    let mut out = std::io::stdout().lock();
    for i in 0..rounds {
        // Every third exchange starts a new conversation, as after /reset.
        if i % 3 == 0 {
            conv = None;
        }
        let text = format!("p{tag} m{i} {}", "x".repeat(i * 37 % 900));
        let id = store
            .append_exchange(conv, &text, &format!("reply to {text}"))
            .unwrap();
        // The conversation's context after the exchange: a piece appended (or, on its first
        // exchange, a fresh snapshot), with the context it belongs to, in one transaction.
        store
            .save_context(
                id,
                b"header",
                &text,
                Some(format!("piece for {text}").as_bytes()),
                conv.is_none(),
            )
            .unwrap();
        conv = Some(id);
        if parent_dir.is_some() {
            writeln!(out, "ACK {id} {text}").unwrap();
            out.flush().unwrap();
        }
        acked.push((id, text));
    }
    if parent_dir.is_some() {
        // The parent owns the directory; do not remove it.
        std::mem::forget(dirs);
        return;
    }
    drop(store);
    let reopened = dirs.open();
    for (id, text) in &acked {
        let msgs = reopened.messages(*id).unwrap();
        assert!(
            msgs.iter()
                .any(|m| m.text.as_deref().ok() == Some(text.as_str())),
            "acknowledged message {text:.20} missing from conversation {id}"
        );
    }
    assert_eq!(reopened.list().unwrap().len(), rounds.div_ceil(3));
}

/// SIGKILLs a writer at random moments and checks, after each kill, that the file opens and
/// every message whose commit was acknowledged is there and decrypts. SIGKILL tests SQLite's
/// atomic commit against process death (the page cache survives); power loss is not simulated.
#[test]
fn sigkill_never_loses_an_acknowledged_message() {
    use rand::{Rng, SeedableRng};
    const ROUNDS: usize = 200;
    let dirs = Dirs::new("crash");
    drop(dirs.open());
    let seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let exe = std::env::current_exe().unwrap();
    // (conversation, role, text) of every acknowledged message.
    let mut acked: BTreeSet<(i64, Role, String)> = BTreeSet::new();
    let mut killed_mid_run = 0;
    let mut hot_journals = 0;
    let mut contexts_checked = 0;
    let started = std::time::Instant::now();
    for round in 0..ROUNDS {
        let mut child = std::process::Command::new(&exe)
            .args([
                "history::tests::crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_DIR_ENV, &dirs.root)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
        let record = |line: &str, acked: &mut BTreeSet<(i64, Role, String)>| {
            // Only whole lines count: a line cut by the kill was never fully acknowledged.
            let Some(rest) = line.strip_suffix('\n').and_then(|l| l.strip_prefix("ACK ")) else {
                return false;
            };
            let (conv, text) = rest.split_once(' ').unwrap();
            let conv: i64 = conv.parse().unwrap();
            acked.insert((conv, Role::User, text.to_string()));
            acked.insert((conv, Role::Assistant, format!("reply to {text}")));
            true
        };
        let wait_for = rng.gen_range(1..=6);
        let mut seen = 0;
        let mut line = String::new();
        while seen < wait_for {
            line.clear();
            if lines.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if record(&line, &mut acked) {
                seen += 1;
            }
        }
        // Kill somewhere inside a later save: after 0 to 3 ms of further writing.
        std::thread::sleep(std::time::Duration::from_micros(rng.gen_range(0..3000)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        if !status.success() {
            killed_mid_run += 1;
        }
        // A journal left behind means the kill landed inside a transaction: the open below
        // must roll it back.
        if dirs.data().join(format!("{DB_FILE}-journal")).exists() {
            hot_journals += 1;
        }
        // Acks printed before the kill but not read yet were committed too.
        loop {
            line.clear();
            if lines.read_line(&mut line).unwrap() == 0 {
                break;
            }
            record(&line, &mut acked);
        }
        let store = Store::open(&dirs.db(), dirs.keys())
            .unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
        let mut stored = BTreeSet::new();
        for c in store.list().unwrap() {
            assert!(c.title.is_ok(), "round {round}: title of {}", c.id);
            for m in store.messages(c.id).unwrap() {
                let text = m
                    .text
                    .unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
                stored.insert((c.id, m.role.unwrap(), text));
            }
        }
        // Every saved context opens whole, and its last piece is the one saved with it (a
        // kill between an exchange and its context's save leaves the previous one, or none).
        for c in store.list().unwrap() {
            let saved = store
                .saved_context(c.id)
                .unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
            if let Some(saved) = saved {
                let last = saved.pieces.last().expect("a saved context has a piece");
                assert_eq!(
                    last,
                    format!("piece for {}", saved.context).as_bytes(),
                    "round {round} (seed {seed}): a torn context save"
                );
                contexts_checked += 1;
            }
        }
        // Every message is an exchange's half: an unpaired one would be a torn transaction.
        let users = stored.iter().filter(|(_, r, _)| *r == Role::User).count();
        assert_eq!(users * 2, stored.len(), "round {round}: a torn exchange");
        for k in &acked {
            assert!(
                stored.contains(k),
                "round {round} (seed {seed}): acknowledged message {k:?} lost"
            );
        }
    }
    eprintln!(
        "sigkill: {ROUNDS} rounds, {} acknowledged messages checked, {hot_journals} kills inside \
         a transaction, {:.1} s, seed {seed}",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(acked.len() >= ROUNDS);
    assert!(
        contexts_checked >= ROUNDS,
        "{contexts_checked} saved contexts checked"
    );
    assert_eq!(
        killed_mid_run, ROUNDS,
        "every child was killed, none finished"
    );
}

#[test]
fn eval_reports_are_sealed_tamper_evident_and_go_with_delete_all() {
    let dirs = Dirs::new("evals");
    let mut store = dirs.open();
    let report = format!("{{\"model\":\"m\",\"note\":\"{SECRET}\"}}");
    let first = store.save_eval_run(&report).unwrap();
    let second = store.save_eval_run("{\"model\":\"n\"}").unwrap();
    assert!(second > first);
    drop(store);
    assert!(
        files_containing(&dirs.data(), SECRET.as_bytes()).is_empty(),
        "an eval report reached the disk in the clear"
    );

    // Newest first, both readable after reopening.
    let store = dirs.open();
    let runs = store.eval_runs().unwrap();
    assert_eq!(
        runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        [second, first]
    );
    assert_eq!(runs[1].report.as_deref().unwrap(), report);
    drop(store);

    // One flipped byte fails that run alone; a report moved to another run does not open.
    let raw = dirs.raw();
    let mut sealed: Vec<u8> = raw
        .query_row("SELECT report FROM eval_runs WHERE id = ?1", [first], |r| {
            r.get(0)
        })
        .unwrap();
    raw.execute(
        "UPDATE eval_runs SET report = ?1 WHERE id = ?2",
        rusqlite::params![sealed, second],
    )
    .unwrap();
    let mid = sealed.len() / 2;
    sealed[mid] ^= 0x01;
    raw.execute(
        "UPDATE eval_runs SET report = ?1 WHERE id = ?2",
        rusqlite::params![sealed, first],
    )
    .unwrap();
    drop(raw);
    let mut store = dirs.open();
    let runs = store.eval_runs().unwrap();
    for r in &runs {
        let err = r.report.as_ref().unwrap_err();
        assert!(matches!(err, HistoryError::Integrity(_)), "{err}");
    }
    assert!(runs[1]
        .report
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains(&format!("report of eval run {first}")));

    store.delete_all().unwrap();
    assert!(store.eval_runs().unwrap().is_empty());
}

/// Every sealed value in the database with the slot it is bound to.
fn sealed_rows(dirs: &Dirs) -> Vec<(Slot, Vec<u8>)> {
    let c = dirs.raw();
    let mut out = Vec::new();
    let mut s = c
        .prepare("SELECT id, conversation_id, role, body FROM messages")
        .unwrap();
    let rows = s
        .query_map([], |r| {
            let role: String = r.get(2)?;
            Ok((
                Slot::Message {
                    conversation: r.get(1)?,
                    message: r.get(0)?,
                    role: Role::parse(&role).unwrap(),
                },
                r.get::<_, Vec<u8>>(3)?,
            ))
        })
        .unwrap();
    out.extend(rows.map(Result::unwrap));
    let mut s = c.prepare("SELECT id, title FROM conversations").unwrap();
    let rows = s
        .query_map([], |r| {
            Ok((
                Slot::Title {
                    conversation: r.get(0)?,
                },
                r.get(1)?,
            ))
        })
        .unwrap();
    out.extend(rows.map(Result::unwrap));
    let mut s = c.prepare("SELECT id, report FROM eval_runs").unwrap();
    let rows = s
        .query_map([], |r| Ok((Slot::EvalRun { run: r.get(0)? }, r.get(1)?)))
        .unwrap();
    out.extend(rows.map(Result::unwrap));
    out
}

fn stored_wrapped_key(dirs: &Dirs) -> Vec<u8> {
    dirs.raw()
        .query_row("SELECT value FROM meta WHERE key = 'data_key'", [], |r| {
            r.get(0)
        })
        .unwrap()
}

/// A history with five exchanges and an eval report, each holding the planted secret.
fn filled(dirs: &Dirs) -> Store {
    let mut store = dirs.open();
    for i in 0..5 {
        store
            .append_exchange(None, &format!("{SECRET} {i}"), &format!("reply {i}"))
            .unwrap();
    }
    store
        .save_eval_run(&format!("{{\"note\":\"{SECRET}\"}}"))
        .unwrap();
    store
}

/// Bytes of a wrapped data key: nonce, key, tag.
const WRAPPED_LEN: usize = 12 + 32 + 16;

#[test]
fn delete_all_replaces_the_kek_so_the_old_bytes_open_with_nothing() {
    use super::crypto::Cipher;
    use super::store::{EraseStep, DATA_KEY_CONTEXT};
    use kostant_platform::keystore::KeyStore;
    use std::sync::{Arc, Mutex};

    let dirs = Dirs::new("erase");
    let mut store = filled(&dirs);
    let old_rows = sealed_rows(&dirs);
    assert_eq!(old_rows.len(), 16, "5 titles, 10 messages, 1 report");
    let old_wrapped = stored_wrapped_key(&dirs);
    // A copy of the old KEK, as someone who had read the key file would keep it: the control
    // that the bytes caught below do hold a key and rows it opens.
    let aside = FileKeyStore::new(dirs.root.join("aside"));
    fs::create_dir_all(aside.dir()).unwrap();
    fs::copy(dirs.keys().key_path(), aside.key_path()).unwrap();
    let old_kek = fs::read(aside.key_path()).unwrap();

    // The database and its rollback journal as they are mid-delete: the journal then holds
    // the old pages, and is removed (its blocks freed, not cleared) by the commit.
    /// (file name suffix, bytes) of each file caught.
    type Caught = Vec<(String, Vec<u8>)>;
    let caught: Arc<Mutex<Caught>> = Arc::default();
    let sink = caught.clone();
    store.erase_hook = Some(Box::new(move |step, db: &Path| {
        if step == EraseStep::Deleted {
            for suffix in ["", "-journal"] {
                let p = PathBuf::from(format!("{}{suffix}", db.display()));
                let bytes = fs::read(&p).map_err(|source| HistoryError::Io { path: p, source })?;
                sink.lock().unwrap().push((suffix.to_string(), bytes));
            }
        }
        Ok(())
    }));
    assert_eq!(store.delete_all().unwrap(), 5);
    store.erase_hook = None;
    let caught = caught.lock().unwrap().clone();
    let journal = &caught.iter().find(|(s, _)| s == "-journal").unwrap().1;
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);

    // Controls: the journal held the old wrapped key and old rows, which the old KEK opens.
    assert!(
        contains(journal, &old_wrapped),
        "old wrapped key in the journal"
    );
    assert!(old_rows.iter().any(|(_, v)| contains(journal, v)));
    let old_key = aside.unwrap(&old_wrapped, DATA_KEY_CONTEXT).unwrap();
    let old_cipher = Cipher::new(&old_key);
    assert!(old_rows.iter().all(|(s, v)| old_cipher.open(*s, v).is_ok()));

    // What the store can reach now: its key directory holds the new KEK and nothing else, and
    // the data key it wraps opens no old row.
    let now = dirs.keys();
    assert_eq!(
        file_names(now.dir()),
        vec!["history.key".to_string()],
        "no staged or old key left"
    );
    assert_ne!(fs::read(now.key_path()).unwrap(), old_kek);
    let new_key = now
        .unwrap(&stored_wrapped_key(&dirs), DATA_KEY_CONTEXT)
        .unwrap();
    let new_cipher = Cipher::new(&new_key);
    assert!(old_rows
        .iter()
        .all(|(s, v)| new_cipher.open(*s, v).is_err()));
    // Every run of wrapped-key length in the old bytes, tried as a wrapped key with the key
    // store as it is now: none opens, but for the new key itself (pages SQLite may have
    // written before the commit).
    let mut tried = 0;
    for (_, bytes) in &caught {
        for w in bytes.windows(WRAPPED_LEN) {
            tried += 1;
            if let Ok(k) = now.unwrap(w, DATA_KEY_CONTEXT) {
                assert_eq!(k.0, new_key.0, "an old wrapped key opened");
            }
        }
    }
    assert!(tried > 8192, "{tried}");
    assert!(now.unwrap(&old_wrapped, DATA_KEY_CONTEXT).is_err());

    // The store goes on under the new keys.
    let next = store.append_exchange(None, "after", "reset").unwrap();
    drop(store);
    let msgs = dirs.open().messages(next).unwrap();
    assert_eq!(msgs[0].text.as_deref().unwrap(), "after");
}

const ERASE_CRASH_ENV: &str = "KOSTANT_TEST_ERASE_CRASH";

/// The eraser behind `delete_all_killed_at_any_step_leaves_a_history_that_opens`. Run by the
/// parent (`<dir>|<step>` in its environment variable) it runs delete-all on the parent's
/// history and exits abruptly (no destructor, no rollback, as a crash) at that step. Run on its
/// own, as every test is, it checks on its own history that delete-all passes the three steps
/// the parent kills at, in order, and leaves nothing behind.
#[test]
fn erase_crash_child() {
    use super::store::EraseStep;
    let Some(spec) = std::env::var_os(ERASE_CRASH_ENV) else {
        let dirs = Dirs::new("erase-steps");
        let mut store = filled(&dirs);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        store.erase_hook = Some(Box::new(move |s, _: &Path| {
            log.lock().unwrap().push(s);
            Ok(())
        }));
        store.delete_all().unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [EraseStep::Staged, EraseStep::Deleted, EraseStep::Committed]
        );
        assert!(store.list().unwrap().is_empty());
        return;
    };
    let spec = spec.to_string_lossy().into_owned();
    let (root, step) = spec.split_once('|').unwrap();
    let step = match step {
        "staged" => EraseStep::Staged,
        "deleted" => EraseStep::Deleted,
        _ => EraseStep::Committed,
    };
    let dirs = Dirs {
        root: PathBuf::from(root),
    };
    let mut store = dirs.open();
    store.erase_hook = Some(Box::new(move |s, _: &Path| {
        if s == step {
            std::process::exit(86);
        }
        Ok(())
    }));
    let _ = store.delete_all();
    std::process::exit(1);
}

#[test]
fn delete_all_killed_at_any_step_leaves_a_history_that_opens() {
    use super::store::DATA_KEY_CONTEXT;
    use kostant_platform::keystore::KeyStore;
    let exe = std::env::current_exe().unwrap();
    for step in ["staged", "deleted", "committed"] {
        let dirs = Dirs::new(&format!("erase-kill-{step}"));
        let store = filled(&dirs);
        let first = store.list().unwrap().last().unwrap().id;
        drop(store);
        let old_wrapped = stored_wrapped_key(&dirs);
        let status = std::process::Command::new(&exe)
            .args([
                "history::tests::erase_crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ERASE_CRASH_ENV, format!("{}|{step}", dirs.root.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(86), "{step}: the child stopped there");
        let journal = dirs.data().join(format!("{DB_FILE}-journal"));
        assert_eq!(
            journal.exists(),
            step == "deleted",
            "{step}: a hot journal only mid-transaction"
        );
        let keys = dirs.keys();
        assert_eq!(file_names(keys.dir()).len(), 2, "{step}: a KEK staged");

        let mut store = Store::open(&dirs.db(), dirs.keys())
            .unwrap_or_else(|e| panic!("{step}: the history does not open: {e}"));
        if step == "committed" {
            // The new, empty history, its staged KEK put in place by the open; the old
            // wrapped key opens no more.
            assert!(store.list().unwrap().is_empty());
            assert_eq!(file_names(keys.dir()), vec!["history.key".to_string()]);
            assert!(keys.unwrap(&old_wrapped, DATA_KEY_CONTEXT).is_err());
        } else {
            // The old history, whole, under the old KEK.
            assert_eq!(store.list().unwrap().len(), 5, "{step}");
            let msgs = store.messages(first).unwrap();
            assert_eq!(msgs[0].text.as_deref().unwrap(), format!("{SECRET} 0"));
            assert_eq!(stored_wrapped_key(&dirs), old_wrapped);
        }
        // A delete-all afterwards completes: one KEK left, the old wrapping dead.
        store.delete_all().unwrap();
        drop(store);
        assert_eq!(file_names(keys.dir()), vec!["history.key".to_string()]);
        assert!(dirs.open().list().unwrap().is_empty());
        assert!(keys.unwrap(&old_wrapped, DATA_KEY_CONTEXT).is_err());
        assert!(files_containing(&dirs.data(), SECRET.as_bytes()).is_empty());
    }
}

#[test]
fn saved_contexts_are_sealed_tamper_evident_and_go_with_their_conversation() {
    let dirs = Dirs::new("contexts");
    let mut store = dirs.open();
    let a = store.append_exchange(None, "hello", "hi").unwrap();
    let b = store.append_exchange(None, "other", "fine").unwrap();
    let header = b"HEADER-IN-THE-CLEAR".to_vec();
    let context = format!("[{{\"role\":\"user\",\"content\":\"{SECRET}\"}}]");
    let p0 = format!("rows of {SECRET} 0").into_bytes();
    let p1 = format!("rows of {SECRET} 1").into_bytes();
    assert_eq!(
        store
            .save_context(a, &header, &context, Some(&p0), true)
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .save_context(a, &header, &context, Some(&p1), false)
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .save_context(b, &header, "[]", Some(b"b rows"), true)
            .unwrap(),
        1
    );
    let saved = store.saved_context(a).unwrap().unwrap();
    assert_eq!(
        (
            saved.header.as_slice(),
            saved.context.as_str(),
            saved.pieces.clone()
        ),
        (
            header.as_slice(),
            context.as_str(),
            vec![p0.clone(), p1.clone()]
        )
    );
    let fresh = store.append_exchange(None, "x", "y").unwrap();
    assert!(store.saved_context(fresh).unwrap().is_none());
    // Sealed: the secret is nowhere on disk; the header (model fingerprint and cache shape,
    // nothing the user wrote) is stored in the clear, so a mismatch is told before decryption.
    drop(store);
    assert!(files_containing(&dirs.data(), SECRET.as_bytes()).is_empty());
    assert_eq!(files_containing(&dirs.data(), &header), vec![dirs.db()]);

    let c = dirs.raw();
    let store = dirs.open();
    let body = |seq: i64| -> Vec<u8> {
        c.query_row(
            "SELECT body FROM snapshot_pieces WHERE conversation_id = ?1 AND seq = ?2",
            [a, seq],
            |r| r.get(0),
        )
        .unwrap()
    };
    let set_body = |seq: i64, bytes: &[u8]| {
        c.execute(
            "UPDATE snapshot_pieces SET body = ?1 WHERE conversation_id = ?2 AND seq = ?3",
            rusqlite::params![bytes, a, seq],
        )
        .unwrap();
    };
    let fails = |store: &Store| match store.saved_context(a) {
        Err(HistoryError::Integrity(what)) => what,
        other => panic!("tampering went unnoticed: {other:?}"),
    };
    // A flipped byte in a piece.
    let original = body(1);
    let mut flipped = original.clone();
    flipped[20] ^= 1;
    set_body(1, &flipped);
    assert!(fails(&store).contains("piece 1"), "{}", fails(&store));
    set_body(1, &original);
    assert!(store.saved_context(a).is_ok());
    // Pieces swapped in place.
    let (zero, one) = (body(0), body(1));
    set_body(0, &one);
    set_body(1, &zero);
    fails(&store);
    set_body(0, &zero);
    set_body(1, &one);
    // Another header put in the clear column: the sealed values were bound to the old one.
    c.execute(
        "UPDATE snapshots SET header = x'00' WHERE conversation_id = ?1",
        [a],
    )
    .unwrap();
    assert!(fails(&store).contains("saved context of conversation"));
    c.execute(
        "UPDATE snapshots SET header = ?1 WHERE conversation_id = ?2",
        rusqlite::params![header, a],
    )
    .unwrap();
    // A piece dropped from the middle: what follows would not restore.
    c.execute(
        "DELETE FROM snapshot_pieces WHERE conversation_id = ?1 AND seq = 0",
        [a],
    )
    .unwrap();
    assert!(fails(&store).contains("piece 1"));
    drop(store);

    // A header unlike the stored one starts the snapshot over; a missing conversation is named.
    let mut store = dirs.open();
    assert_eq!(
        store
            .save_context(a, b"another model", "[]", Some(b"r"), false)
            .unwrap(),
        1
    );
    assert!(matches!(
        store.save_context(999, &header, "[]", None, true),
        Err(HistoryError::NoConversation(999))
    ));
    // Deleted with the conversation, and by delete-all.
    store.delete(a).unwrap();
    let count = |sql: &str| -> i64 { dirs.raw().query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM snapshots"), 1);
    assert_eq!(count("SELECT count(*) FROM snapshot_pieces"), 1);
    store.delete_all().unwrap();
    assert_eq!(count("SELECT count(*) FROM snapshots"), 0);
    assert_eq!(count("SELECT count(*) FROM snapshot_pieces"), 0);
}

fn passage(text: &str, page: Option<u32>, vector: f32) -> super::documents::NewPassage {
    super::documents::NewPassage {
        text: text.into(),
        place: super::documents::PassagePlace {
            page,
            heading: Some(format!("Heading of {text}")),
        },
        vector: vec![vector, -vector, 0.5],
    }
}

#[test]
fn documents_are_sealed_removed_whole_and_go_with_delete_all() {
    let dirs = Dirs::new("documents");
    let mut store = dirs.open();
    let name = format!("{SECRET}-lease.md");
    let doc = store
        .add_document(
            &name,
            1234,
            "encoder.gguf/3",
            &[
                passage(&format!("first {SECRET} passage"), Some(2), 0.25),
                passage("second passage", None, 0.75),
            ],
        )
        .unwrap();
    let other = store
        .add_document(
            "other.txt",
            10,
            "encoder.gguf/3",
            &[passage("kept", None, 1.0)],
        )
        .unwrap();
    drop(store);
    // Neither the name, nor the text, nor the heading is anywhere on disk in the clear.
    assert_eq!(
        files_containing(&dirs.root, SECRET.as_bytes()),
        Vec::<PathBuf>::new()
    );

    let mut store = dirs.open();
    let docs = store.documents().unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].name.as_deref().unwrap(), name);
    assert_eq!((docs[0].size_bytes, docs[0].passages), (1234, 2));
    let all = store.passages().unwrap();
    assert!(all.unreadable.is_empty());
    assert_eq!(all.passages.len(), 3);
    let first = &all.passages[0];
    assert_eq!(first.text, format!("first {SECRET} passage"));
    assert_eq!(first.place.page, Some(2));
    assert_eq!(first.vector, vec![0.25, -0.25, 0.5]);

    store.remove_document(doc).unwrap();
    assert!(matches!(
        store.remove_document(doc),
        Err(HistoryError::NoDocument(d)) if d == doc
    ));
    let left = store.passages().unwrap().passages;
    assert_eq!(left.len(), 1);
    assert_eq!((left[0].document, left[0].text.as_str()), (other, "kept"));
    let rows: i64 = dirs
        .raw()
        .query_row(
            "SELECT count(*) FROM document_chunks WHERE document_id = ?1",
            [doc],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);

    store.delete_all().unwrap();
    assert!(store.documents().unwrap().is_empty());
    assert!(store.passages().unwrap().passages.is_empty());
}

#[test]
fn a_passage_moved_to_another_place_does_not_open() {
    let dirs = Dirs::new("documents-tamper");
    let mut store = dirs.open();
    let doc = store
        .add_document(
            "a.md",
            5,
            "encoder.gguf/3",
            &[passage("one", None, 0.1), passage("two", None, 0.2)],
        )
        .unwrap();
    // Swap the two passages' sealed bodies: each is bound to its own number.
    let raw = dirs.raw();
    let body = |seq: i64| -> Vec<u8> {
        raw.query_row(
            "SELECT body FROM document_chunks WHERE document_id = ?1 AND seq = ?2",
            [doc, seq],
            |r| r.get(0),
        )
        .unwrap()
    };
    let (b0, b1) = (body(0), body(1));
    raw.execute(
        "UPDATE document_chunks SET body = ?1 WHERE document_id = ?2 AND seq = 0",
        rusqlite::params![b1, doc],
    )
    .unwrap();
    raw.execute(
        "UPDATE document_chunks SET body = ?1 WHERE document_id = ?2 AND seq = 1",
        rusqlite::params![b0, doc],
    )
    .unwrap();
    let all = store.passages().unwrap();
    assert!(all.passages.is_empty());
    assert_eq!(all.unreadable.len(), 2);
    assert!(
        all.unreadable[0]
            .to_string()
            .contains("passage 0 of document"),
        "{}",
        all.unreadable[0]
    );
}

/// Cheap Argon2id costs: these tests check what the lock keeps and refuses, not its cost.
const FAST_LOCK: super::LockParams = super::LockParams {
    m_kib: 64,
    t: 1,
    p: 1,
};

fn pass(s: &str) -> super::Passphrase {
    super::Passphrase::new(s).unwrap()
}

/// Opens the history through the lock layer, with `passphrase` if given.
fn open_locked(dirs: &Dirs, passphrase: Option<&str>) -> Result<Store, HistoryError> {
    let keys = kostant_platform::passphrase::LockedKeyStore::new(dirs.keys(), passphrase.map(pass));
    Store::open(&dirs.db(), keys)
}

/// Every conversation with its messages' texts, for before/after comparisons.
fn contents(store: &Store) -> Vec<(String, Vec<String>)> {
    store
        .list()
        .unwrap()
        .into_iter()
        .map(|c| {
            let texts = store
                .messages(c.id)
                .unwrap()
                .into_iter()
                .map(|m| m.text.unwrap())
                .collect();
            (c.title.unwrap(), texts)
        })
        .collect()
}

#[test]
fn a_locked_history_refuses_without_its_passphrase_and_loses_nothing() {
    let dirs = Dirs::new("lock");
    let mut store = filled(&dirs);
    let before = contents(&store);
    let rows = sealed_rows(&dirs);
    assert!(!store.is_locked().unwrap());
    store.lock(&pass("correct horse"), FAST_LOCK).unwrap();
    drop(store);

    // The key file alone no longer opens it; nor does a wrong passphrase.
    let missing = open_locked(&dirs, None).err().unwrap();
    assert!(matches!(missing, HistoryError::Locked));
    let wrong = open_locked(&dirs, Some("wrong horse")).err().unwrap();
    assert!(matches!(wrong, HistoryError::WrongPassphrase));
    assert!(matches!(
        Store::open(&dirs.db(), dirs.keys()).err().unwrap(),
        HistoryError::WrongKey { .. }
    ));

    // The right one opens everything, and the rows are the bytes they were.
    let mut store = open_locked(&dirs, Some("correct horse")).unwrap();
    assert!(store.is_locked().unwrap());
    assert_eq!(contents(&store), before);
    assert_eq!(sealed_rows(&dirs), rows);
    assert!(matches!(
        store.lock(&pass("again"), FAST_LOCK),
        Err(HistoryError::AlreadyLocked)
    ));
    // Writing while locked works, and stays locked.
    store.append_exchange(None, "locked hello", "hi").unwrap();
    drop(store);

    // Unlocking with a wrong passphrase changes nothing; with the right one the key file
    // opens it again.
    let mut store = open_locked(&dirs, Some("correct horse")).unwrap();
    assert!(matches!(
        store.unlock(&pass("nope")),
        Err(HistoryError::WrongPassphrase)
    ));
    assert!(store.is_locked().unwrap());
    store.unlock(&pass("correct horse")).unwrap();
    drop(store);
    let store = Store::open(&dirs.db(), dirs.keys()).unwrap();
    assert!(!store.is_locked().unwrap());
    assert_eq!(contents(&store).len(), before.len() + 1);
    assert!(matches!(
        open_locked(&dirs, None).unwrap().unlock(&pass("x")),
        Err(HistoryError::NotLocked)
    ));
}

#[test]
fn changing_the_passphrase_rewraps_the_key_and_leaves_every_row_byte_identical() {
    let dirs = Dirs::new("rewrap");
    let mut store = filled(&dirs);
    store.lock(&pass("old"), FAST_LOCK).unwrap();
    drop(store);
    let rows = sealed_rows(&dirs);
    let wrapped = stored_wrapped_key(&dirs);

    let mut store = open_locked(&dirs, Some("old")).unwrap();
    assert!(matches!(
        store.change_passphrase(&pass("not it"), &pass("new"), FAST_LOCK),
        Err(HistoryError::WrongPassphrase)
    ));
    store
        .change_passphrase(&pass("old"), &pass("new"), FAST_LOCK)
        .unwrap();
    drop(store);
    assert_ne!(stored_wrapped_key(&dirs), wrapped);
    assert_eq!(sealed_rows(&dirs), rows, "no row was re-encrypted");
    assert!(matches!(
        open_locked(&dirs, Some("old")).err().unwrap(),
        HistoryError::WrongPassphrase
    ));
    let store = open_locked(&dirs, Some("new")).unwrap();
    assert_eq!(store.list().unwrap().len(), 5);
}

#[test]
fn delete_all_keeps_a_locked_history_locked_and_the_old_lock_opens_nothing() {
    let dirs = Dirs::new("lock-erase");
    let mut store = filled(&dirs);
    store.lock(&pass("pw"), FAST_LOCK).unwrap();
    drop(store);
    let old = stored_wrapped_key(&dirs);
    let mut store = open_locked(&dirs, Some("pw")).unwrap();
    assert_eq!(store.delete_all().unwrap(), 5);
    drop(store);
    assert!(kostant_platform::passphrase::is_locked(
        &stored_wrapped_key(&dirs)
    ));
    assert!(matches!(
        open_locked(&dirs, None).err().unwrap(),
        HistoryError::Locked
    ));
    let store = open_locked(&dirs, Some("pw")).unwrap();
    assert!(store.list().unwrap().is_empty());
    // The old lock, with the right passphrase, holds a wrapping whose KEK is gone.
    let inner =
        kostant_platform::passphrase::unlock(&old, &pass("pw"), super::store::DATA_KEY_CONTEXT)
            .unwrap();
    use kostant_platform::keystore::KeyStore;
    assert!(dirs
        .keys()
        .unwrap(&inner, super::store::DATA_KEY_CONTEXT)
        .is_err());
}

#[test]
fn the_lock_messages_say_what_to_do_without_blame() {
    let locked = HistoryError::Locked.to_string();
    assert!(locked.contains("KOSTANT_PASSPHRASE_FILE"));
    let wrong = HistoryError::WrongPassphrase.to_string();
    assert_eq!(wrong, "that passphrase does not open the history");
    for m in [locked, wrong] {
        let lower = m.to_lowercase();
        for word in ["invalid", "illegal", "denied", "you failed", "error"] {
            assert!(!lower.contains(word), "{m:?} says {word:?}");
        }
    }
}
