//! The "on-device · radio off" badge, read from the real enforcement state
//! (`kostant_platform::netguard::status`), never assumed.

use kostant_platform::netguard::{self, NetguardStatus};

/// How the badge looks: its text, whether the promise is enforced, and a longer explanation
/// for the Settings screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkBadge {
    pub text: String,
    /// True only when the process is actually denied the network.
    pub enforced: bool,
    pub detail: String,
}

impl NetworkBadge {
    pub fn current() -> NetworkBadge {
        NetworkBadge::from_status(&netguard::status())
    }

    pub fn from_status(status: &NetguardStatus) -> NetworkBadge {
        let (text, enforced) = match status {
            NetguardStatus::Enforced => ("on-device · radio off", true),
            // No OS switch here; the promise rests on the app having no network code.
            NetguardStatus::NotSupported { .. } => ("on-device · no network code", false),
            NetguardStatus::NotApplied => ("network not denied", false),
            NetguardStatus::Failed { .. } => ("network guard failed", false),
        };
        NetworkBadge {
            text: text.to_string(),
            enforced,
            detail: format!("network: {status}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_enforcement_shows_radio_off() {
        let on = NetworkBadge::from_status(&NetguardStatus::Enforced);
        assert!(on.enforced);
        assert_eq!(on.text, "on-device · radio off");
        for s in [
            NetguardStatus::NotApplied,
            NetguardStatus::NotSupported { os: "macos" },
            NetguardStatus::Failed {
                reason: "EPERM".into(),
            },
        ] {
            let b = NetworkBadge::from_status(&s);
            assert!(!b.enforced, "{s:?}");
            assert!(!b.text.contains("radio off"), "{s:?}");
        }
    }
}
