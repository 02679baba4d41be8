//! One `ToolPolicy` for all loops with the same settings: its compiled globs and regular
//! expressions take about 90 KiB, which a hundred loops in flight would otherwise hold a
//! hundred times. The policy is immutable; what a loop's approver remembers stays its own.
//! The policy handed out last stays alive when no loop holds it: a loop that starts as the
//! one before it ends (the next link of a chain of dependent loops) would otherwise compile
//! it again, a millisecond or two on the way to its first request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::settings::LoopSettings;
use crate::tools::ToolPolicy;

#[derive(Default)]
pub struct PolicyCache {
    policies: Mutex<Policies>,
}

#[derive(Default)]
struct Policies {
    by_settings: HashMap<String, Weak<ToolPolicy>>,
    latest: Option<Arc<ToolPolicy>>,
}

impl PolicyCache {
    /// The policy `settings` ask for, shared while any loop still holds it or it is the one
    /// handed out last.
    pub fn policy_for(&self, settings: &LoopSettings) -> Result<Arc<ToolPolicy>, String> {
        let key = serde_json::json!([
            settings.secret_patterns,
            settings.deny_commands,
            settings.command_timeout_secs,
            settings.sandbox,
        ])
        .to_string();
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        let policy = match policies.by_settings.get(&key).and_then(Weak::upgrade) {
            Some(policy) => policy,
            None => {
                let policy = Arc::new(settings.tool_policy()?);
                policies
                    .by_settings
                    .retain(|_, policy| policy.strong_count() > 0);
                policies.by_settings.insert(key, Arc::downgrade(&policy));
                policy
            }
        };
        policies.latest = Some(policy.clone());
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_with_the_same_settings_share_one_policy_and_others_get_their_own() {
        let cache = PolicyCache::default();
        let settings = LoopSettings::default();
        let first = cache.policy_for(&settings).expect("policy");
        let second = cache.policy_for(&settings).expect("policy");
        assert!(Arc::ptr_eq(&first, &second));
        let stricter = LoopSettings {
            deny_commands: vec!["^make deploy".to_owned()],
            ..LoopSettings::default()
        };
        let other = cache.policy_for(&stricter).expect("policy");
        assert!(!Arc::ptr_eq(&first, &other));
        assert!(other.denied_by("make deploy").is_some());
        assert!(first.denied_by("make deploy").is_none());
        drop((first, second));
        let fresh = cache.policy_for(&settings).expect("policy");
        assert!(Arc::ptr_eq(
            &fresh,
            &cache.policy_for(&settings).expect("policy")
        ));
    }

    #[test]
    fn the_policy_handed_out_last_outlives_its_loops_and_serves_the_next() {
        let cache = PolicyCache::default();
        let settings = LoopSettings::default();
        let policy = cache.policy_for(&settings).expect("policy");
        let kept = Arc::downgrade(&policy);
        drop(policy);
        let still_alive = kept.upgrade().expect("kept by the cache");
        let next = cache.policy_for(&settings).expect("policy");
        assert!(Arc::ptr_eq(&next, &still_alive), "not compiled again");
        let other = LoopSettings {
            deny_commands: vec!["^make deploy".to_owned()],
            ..LoopSettings::default()
        };
        let newer = cache.policy_for(&other).expect("policy");
        drop((next, still_alive));
        assert!(kept.upgrade().is_none(), "only the latest is kept");
        drop(newer);
    }
}
