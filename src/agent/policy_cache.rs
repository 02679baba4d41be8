//! One `ToolPolicy` for all loops with the same settings: its compiled globs and regular
//! expressions take about 90 KiB, which a hundred loops in flight would otherwise hold a
//! hundred times. The policy is immutable; what a loop's approver remembers stays its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::settings::LoopSettings;
use crate::tools::ToolPolicy;

#[derive(Default)]
pub struct PolicyCache {
    policies: Mutex<HashMap<String, Weak<ToolPolicy>>>,
}

impl PolicyCache {
    /// The policy `settings` ask for, shared while any loop still holds it.
    pub fn policy_for(&self, settings: &LoopSettings) -> Result<Arc<ToolPolicy>, String> {
        let key = serde_json::json!([
            settings.secret_patterns,
            settings.deny_commands,
            settings.command_timeout_secs,
            settings.sandbox,
        ])
        .to_string();
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(policy) = policies.get(&key).and_then(Weak::upgrade) {
            return Ok(policy);
        }
        let policy = Arc::new(settings.tool_policy()?);
        policies.retain(|_, policy| policy.strong_count() > 0);
        policies.insert(key, Arc::downgrade(&policy));
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
}
