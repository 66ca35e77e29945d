//! The app's life as the OS tells it (Android's activity callbacks), platform-neutral so the
//! desktop tests drive it with the same events the Android glue (`android/platform.rs`) sends.
//!
//! - In the background (pause, stop) work goes on: a reply being written keeps streaming and
//!   is saved, with its context snapshot, when it ends, as every reply is.
//! - Save state: the OS keeps a few bytes for the app across a process restart; the app keeps
//!   which conversation was on screen and under which feature ([`SavedState`]: ids only, the
//!   text stays in the encrypted history).
//! - Destroy: a reply being written is stopped and waited for, so what it wrote is saved with
//!   its context; then the workers are joined.
//! - Started again with saved state: the conversation is reopened from the history with its
//!   saved context, so the next reply reads only the new message.

use crate::features::Feature;

/// An event of the app's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// In front and taking input again.
    Resume,
    /// Partly hidden (a dialog, split screen).
    Pause,
    /// Not visible (home, another app, the screen off).
    Stop,
    /// The OS asks for what to keep in case it ends the process.
    SaveState,
    /// The app is closing (or the OS is ending it while it still can run code).
    Destroy,
}

/// What the app asks the OS to keep across a process restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedState {
    /// The conversation on screen, by its history id (none: an unsaved or empty chat).
    pub conversation: Option<i64>,
    pub feature: Feature,
}

const MAGIC: &[u8; 4] = b"KSS1";

impl SavedState {
    /// `KSS1`, 1 if a conversation follows, its id (i64, little-endian) if so, then the
    /// feature's id.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        match self.conversation {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.to_le_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(self.feature.id().as_bytes());
        out
    }

    /// Reads what [`SavedState::to_bytes`] wrote; anything else (another version, cut short,
    /// an unknown feature) is refused, and the app starts with a new chat.
    pub fn from_bytes(bytes: &[u8]) -> Result<SavedState, String> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or("not a saved state of this app")?;
        let (conversation, rest) = match rest.split_first() {
            Some((0, rest)) => (None, rest),
            Some((1, rest)) if rest.len() >= 8 => {
                let (id, rest) = rest.split_at(8);
                let id = i64::from_le_bytes(id.try_into().map_err(|_| "cut short")?);
                (Some(id), rest)
            }
            _ => return Err("cut short or damaged".into()),
        };
        let feature = std::str::from_utf8(rest)
            .map_err(|_| "the feature is not text".to_string())
            .and_then(Feature::parse)?;
        Ok(SavedState {
            conversation,
            feature,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_state_round_trips_and_refuses_anything_else() {
        for state in [
            SavedState {
                conversation: Some(42),
                feature: Feature::Summarize,
            },
            SavedState {
                conversation: None,
                feature: Feature::Chat,
            },
            SavedState {
                conversation: Some(-1),
                feature: Feature::Proofread,
            },
        ] {
            assert_eq!(SavedState::from_bytes(&state.to_bytes()), Ok(state));
        }
        let good = SavedState {
            conversation: Some(7),
            feature: Feature::Reply,
        }
        .to_bytes();
        for n in 0..good.len() - "reply".len() {
            assert!(SavedState::from_bytes(&good[..n]).is_err(), "cut at {n}");
        }
        let mut other = good.clone();
        other[3] = b'9';
        assert!(SavedState::from_bytes(&other).is_err());
        let mut flag = good.clone();
        flag[4] = 2;
        assert!(SavedState::from_bytes(&flag).is_err());
        let mut feature = good[..good.len() - 5].to_vec();
        feature.extend_from_slice(b"shout");
        assert!(SavedState::from_bytes(&feature)
            .unwrap_err()
            .contains("unknown feature"));
        assert!(SavedState::from_bytes(&[0xff; 40]).is_err());
    }
}
